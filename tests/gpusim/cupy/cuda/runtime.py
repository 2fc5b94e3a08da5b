"""cupy.cuda.runtime for the stand-in: devices, peer access, IPC handles, synchronisation."""
from __future__ import annotations

import ctypes

from .. import _sim
from .._sim import CUDARuntimeError  # noqa: F401

cudaIpcMemLazyEnablePeerAccess = 1
cudaMemcpyDefault = 4


def runtimeGetVersion() -> int:
    return _sim.CUDA_VERSION


def driverGetVersion() -> int:
    return _sim.CUDA_VERSION


def getDeviceCount() -> int:
    return _sim.device_count()


def getDevice() -> int:
    return _sim.current_device()


def setDevice(device: int) -> None:
    _sim.set_current_device(device)


def _gpu(device: int):
    return _sim.machines.current().gpus[_sim.visible()[_sim.check_device(device)]]


def _bus(text: str) -> str:
    """A PCI bus id without its domain's width or letter case: 'bus:device.function' plus the domain as a number."""
    domain, rest = text.strip().lower().split(":", 1)
    return f"{int(domain, 16)}:{rest}"


def deviceGetPCIBusId(device: int) -> str:
    """As CUDA prints it: a 4-digit domain, upper case ('0000:19:00.0')."""
    domain, rest = _gpu(device).bus_id.split(":", 1)
    return f"{int(domain, 16):04x}:{rest}".upper()


def deviceGetByPCIBusId(pciBusId: str) -> int:
    for ordinal in range(getDeviceCount()):
        if _bus(deviceGetPCIBusId(ordinal)) == _bus(pciBusId):
            return ordinal
    raise CUDARuntimeError(_sim.cudaErrorInvalidDevice, f"no visible device at {pciBusId}")


def getDeviceProperties(device: int) -> dict:
    gpu = _gpu(device)
    bus = deviceGetPCIBusId(device).split(":")
    return {"name": gpu.name.encode(), "pciDomainID": int(bus[0], 16), "pciBusID": int(bus[1], 16),
            "pciDeviceID": int(bus[2].split(".")[0], 16), "computeMode": _sim.compute_mode()}


def deviceCanAccessPeer(device: int, peerDevice: int) -> int:
    return int(device != peerDevice and _sim.can_access_peer(device, peerDevice))


def deviceEnablePeerAccess(peerDevice: int, flags: int = 0) -> None:
    here = _sim.current_device()
    if not deviceCanAccessPeer(here, peerDevice):
        raise CUDARuntimeError(_sim.cudaErrorPeerAccessUnsupported, f"device {here} cannot reach {peerDevice}")
    if (here, peerDevice) in _sim._PEERS:
        raise CUDARuntimeError(_sim.cudaErrorPeerAccessAlreadyEnabled, f"{here} -> {peerDevice}")
    _sim._PEERS.add((here, peerDevice))


def deviceDisablePeerAccess(peerDevice: int) -> None:
    here = _sim.current_device()
    if (here, peerDevice) not in _sim._PEERS:
        raise CUDARuntimeError(_sim.cudaErrorPeerAccessNotEnabled, f"{here} -> {peerDevice}")
    _sim._PEERS.discard((here, peerDevice))


def deviceSynchronize() -> None:
    _sim.synchronize_device(_sim.current_device())


def memcpyPeer(dst: int, dstDevice: int, src: int, srcDevice: int, size: int) -> None:
    """After all work queued on both devices, and before any queued later (as cudaMemcpyPeer); the
    host waits for none of it: the copy, and the work it comes after, land when either device is
    synchronised."""
    devices = {_sim.check_device(srcDevice), _sim.check_device(dstDevice)}
    with _sim._LOCK:
        before = [(stream, stream.ops[-1]) for stream in list(_sim._STREAMS)
                  if stream.device_id in devices and stream.ops]
    pause = _sim.work_delay()

    def copy():
        for stream, last in before:
            stream.drain(last)
        pause()
        ctypes.memmove(dst, src, size)
    copy_op = _sim.null_stream(dstDevice).enqueue(copy)
    _sim.null_stream(srcDevice).enqueue(lambda: _sim.null_stream(dstDevice).drain(copy_op))


def ipcGetMemHandle(devPtr: int) -> bytes:
    """A handle for the whole allocation holding ``devPtr`` (64 bytes, as cudaIpcMemHandle_t): the
    memory's file and the machine's index of the GPU it lives on."""
    region = _sim.region_of(devPtr)
    gpu = _sim.visible()[region.device_id]
    return f"{region.path}|{gpu}".encode().ljust(64, b"\0")


def ipcOpenMemHandle(handle: bytes, flags: int = cudaIpcMemLazyEnablePeerAccess) -> int:
    """Map another process's allocation here; returns its base address in this process. As CUDA,
    it opens handles of GPUs this process cannot see, and refuses GPUs that cannot reach this one."""
    path, gpu = bytes(handle).rstrip(b"\0").decode().rsplit("|", 1)
    if any(region.path == path for region in _sim._OWNED.values()):
        raise CUDARuntimeError(_sim.cudaErrorInvalidContext, "a process cannot open its own IPC handle")
    here = _sim.visible()[_sim.current_device()]
    if int(gpu) != here and not _sim.machines.current().can_access_peer(here, int(gpu)):
        raise CUDARuntimeError(_sim.cudaErrorPeerAccessUnsupported, f"GPU {gpu} cannot be reached from GPU {here}")
    try:
        region = _sim.Region(0, path)
    except FileNotFoundError:
        raise CUDARuntimeError(_sim.cudaErrorInvalidResourceHandle, "that allocation has been freed") from None
    _sim._OPENED[region.ptr] = region
    return region.ptr


def ipcCloseMemHandle(devPtr: int) -> None:
    """Unmap an opened handle. (The stand-in keeps the mapping readable; CUDA would fault.)"""
    if _sim._OPENED.pop(devPtr, None) is None:
        raise CUDARuntimeError(_sim.cudaErrorInvalidValue, f"{devPtr:#x} is not an opened IPC handle")
