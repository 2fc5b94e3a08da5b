"""A stand-in for the slice of nvidia-ml-py (``pynvml``) that ringlab uses, answering from a real
machine's tables (``machines.py``). As NVML does, it numbers GPUs in PCI order and ignores
``CUDA_VISIBLE_DEVICES``; NVLink queries on a GPU without NVLink raise NVMLError_NotSupported, and
link indices past a GPU's links raise NVMLError_InvalidArgument. Constants have nvidia-ml-py's values.
"""
from __future__ import annotations

import machines

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_P2P_CAPS_INDEX_READ = (0,)  # a tuple in nvidia-ml-py
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_DEVICE_ARCH_HOPPER = 9


class NVMLError(Exception):
    """As nvidia-ml-py's: ``NVMLError(code)`` is an instance of the subclass for that code."""

    _classes: dict[int, type] = {}

    def __new__(cls, value):
        cls = NVMLError._classes.get(value, cls) if cls is NVMLError else cls
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value):
        super().__init__(value)

    def __str__(self):
        return {1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 6: "Not Found"}.get(self.value,
                                                                                                   "Unknown Error")


class NVMLError_Uninitialized(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


NVMLError._classes.update({1: NVMLError_Uninitialized, 2: NVMLError_InvalidArgument, 3: NVMLError_NotSupported,
                           6: NVMLError_NotFound})
_STARTED = [0]


def nvmlInit():
    _STARTED[0] += 1


def nvmlShutdown():
    if not _STARTED[0]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _STARTED[0] -= 1


def _machine():
    if not _STARTED[0]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return machines.current()


class _Handle:
    def __init__(self, index: int):
        self.index = index


class _PciInfo:
    def __init__(self, bus_id: str):
        self.busId = bus_id
        self.busIdLegacy = bus_id[4:]


def _gpu(handle: _Handle):
    return _machine().gpus[handle.index]


def nvmlSystemGetDriverVersion() -> str:
    return _machine().driver


def nvmlDeviceGetCount() -> int:
    return len(_machine().gpus)


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _Handle(index)


def _bus_key(text) -> tuple[int, str]:
    text = text.decode() if isinstance(text, bytes) else text
    parts = text.strip().lower().split(":")
    domain = int(parts[0], 16) if len(parts) == 3 else 0
    return domain, ":".join(parts[-2:])


def nvmlDeviceGetHandleByPciBusId(pciBusId) -> _Handle:
    """Any of NVML's accepted forms: domain:bus:device.function with any domain width, or bus:device.function."""
    for index, gpu in enumerate(_machine().gpus):
        if _bus_key(gpu.bus_id) == _bus_key(pciBusId):
            return _Handle(index)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetPciInfo(handle: _Handle) -> _PciInfo:
    return _PciInfo(_gpu(handle).bus_id)


def nvmlDeviceGetName(handle: _Handle) -> str:
    return _gpu(handle).name


def nvmlDeviceGetArchitecture(handle: _Handle) -> int:
    return _gpu(handle).architecture


def nvmlDeviceGetCurrPcieLinkGeneration(handle):
    return _gpu(handle).pcie_current[0]


def nvmlDeviceGetCurrPcieLinkWidth(handle):
    return _gpu(handle).pcie_current[1]


def nvmlDeviceGetMaxPcieLinkGeneration(handle):
    return _gpu(handle).pcie_max[0]


def nvmlDeviceGetMaxPcieLinkWidth(handle):
    return _gpu(handle).pcie_max[1]


def _link(handle: _Handle, link: int):
    gpu = _gpu(handle)
    if not gpu.nvlinks_to_switch:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= link < gpu.nvlinks_to_switch:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu


def nvmlDeviceGetNvLinkState(handle, link: int) -> int:
    _link(handle, link)
    return NVML_FEATURE_ENABLED


def nvmlDeviceGetNvLinkVersion(handle, link: int) -> int:
    return _link(handle, link).nvlink_version


def nvmlDeviceGetNvLinkRemoteDeviceType(handle, link: int) -> int:
    _link(handle, link)
    return NVML_NVLINK_DEVICE_TYPE_SWITCH  # the tables' NVLinks all end at NVSwitches


def nvmlDeviceGetNvLinkRemotePciInfo(handle, link: int) -> _PciInfo:
    _link(handle, link)
    return _PciInfo("00000000:00:00.0")  # an NVSwitch's, not a GPU's


def nvmlDeviceGetTopologyCommonAncestor(device1: _Handle, device2: _Handle) -> int:
    return _machine().levels[device1.index][device2.index]


def nvmlDeviceGetP2PStatus(device1: _Handle, device2: _Handle, p2pIndex) -> int:
    ok = _machine().can_access_peer(device1.index, device2.index)
    return NVML_P2P_STATUS_OK if ok else NVML_P2P_STATUS_NOT_SUPPORTED
