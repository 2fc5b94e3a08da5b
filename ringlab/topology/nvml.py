"""This machine's GPU topology: NVML (nvidia-ml-py) first, ``nvidia-smi topo -m`` as a fallback.

:func:`discover` returns the same :class:`Topology` the presets and the cost model use, with what
it learnt on the way (driver, GPUs, PCIe generation and width, NVLink version, P2P support), and
the nodes and network between hosts (``network``).
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np

from .codes import parse_topo, topology_from_codes
from .graph import Topology
from .network import node_facts, read_network
from .presets import ENCODING, nvlink_per_link, pcie_bandwidth

NVML_LEVEL_CODES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

def _bus_key(bus: str) -> tuple[int, str]:
    """A PCI bus id in a form that compares equal however it was printed: NVML writes an 8-digit
    domain ('00000000:19:00.0'), CUDA a 4-digit one ('0000:19:00.0'), in either case."""
    domain, rest = bus.strip().lower().split(":", 1)
    return int(domain, 16), rest


def cuda_order(nvml_buses: list[str]) -> tuple[list[int], str]:
    """The NVML index of each CUDA device, in CUDA's order (which CUDA_VISIBLE_DEVICES chooses and
    reorders, and NVML ignores), matched by PCI bus id; and how the order was found."""
    from ..mpi.devices import cupy_module

    cp = cupy_module()
    if cp is None:
        return list(range(len(nvml_buses))), "NVML's (PCI bus) order: CUDA could not be asked"
    keys = [_bus_key(b) for b in nvml_buses]
    order = []
    for ordinal in range(cp.cuda.runtime.getDeviceCount()):
        key = _bus_key(cp.cuda.runtime.deviceGetPCIBusId(ordinal))
        if key in keys:
            order.append(keys.index(key))
    return order, "CUDA's device order, matched to NVML by PCI bus id"


def read_nvml():
    """(Topology, facts) from NVML, or raise when there is no driver (nvmlInit raises then).

    GPU i of the result is CUDA device i (``cupy.cuda.Device(i)``), the one a rank binds to:
    NVML numbers every GPU of the machine in PCI order, so each CUDA device is found in NVML by
    its PCI bus id. ``facts["cuda_to_nvml"]`` keeps the mapping.
    """
    import pynvml

    pynvml.nvmlInit()
    try:
        every = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        every_bus = [_text(pynvml.nvmlDeviceGetPciInfo(h).busId) for h in every]
        # NVSwitch links are a property of each GPU, whether or not CUDA shows it here
        to_switch = np.array([sum(_switch_link(pynvml, h, link) for link in range(_max_links(pynvml)))
                              for h in every], dtype=int)
        order, how = cuda_order(every_bus)
        handles, buses = [every[i] for i in order], [every_bus[i] for i in order]
        count = len(handles)
        facts = {"driver": _text(pynvml.nvmlSystemGetDriverVersion()), "gpus": [], "cuda_to_nvml": order,
                 "order": how}
        pcie, codes = [], [["X"] * count for _ in range(count)]
        nvlinks = np.zeros((count, count), dtype=int)
        version = 0
        for i, h in enumerate(handles):
            gen, width = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h), pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
            max_gen, max_width = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h), pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
            # the most this GPU and its slot can do: an idle GPU may have dropped to a slower generation
            pcie.append(pcie_bandwidth(min(max_gen, max(ENCODING)), max_width))
            facts["gpus"].append({"name": _text(pynvml.nvmlDeviceGetName(h)), "bus": buses[i],
                                  "pcie_current": [gen, width], "pcie_max": [max_gen, max_width],
                                  "pcie_peak_Bps": pcie[-1]})
            for link in range(_max_links(pynvml)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    version = max(version, pynvml.nvmlDeviceGetNvLinkVersion(h, link))
                    if _remote_is_switch(pynvml, h, link):
                        continue
                    remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except pynvml.NVMLError:  # no such link on this GPU, or no NVLink at all
                    continue
                if remote in buses:
                    nvlinks[i, buses.index(remote)] += 1
        nvlinks += switch_links(to_switch[order])
        for i in range(count):
            for j in range(count):
                if i != j:
                    level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                    codes[i][j] = f"NV{nvlinks[i, j]}" if nvlinks[i, j] else NVML_LEVEL_CODES.get(level, "SYS")
        facts["p2p_read"] = [[_p2p(pynvml, handles[i], handles[j]) if i != j else "X" for j in range(count)]
                             for i in range(count)]
        facts["nvlink_version"] = version
        try:
            hopper = pynvml.nvmlDeviceGetArchitecture(handles[0]) == getattr(pynvml, "NVML_DEVICE_ARCH_HOPPER", -1)
        except (pynvml.NVMLError, IndexError):
            hopper = False
        per_link = nvlink_per_link(version, hopper)
        topology = topology_from_codes(codes, pcie=pcie, nvlink_rate=per_link, name="discovered (NVML)",
                                       source=f"NVML: driver {facts['driver']}; PCIe and NVLink peaks from link counts")
        facts["codes"] = codes
        return topology, facts
    finally:
        pynvml.nvmlShutdown()


def _max_links(pynvml) -> int:
    return getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)


def _switch_link(pynvml, handle, link: int) -> bool:
    """Whether NVLink ``link`` of this GPU is up and ends at an NVSwitch."""
    try:
        return (pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
                and _remote_is_switch(pynvml, handle, link))
    except pynvml.NVMLError:  # no such link, or no NVLink at all
        return False


def _remote_is_switch(pynvml, handle, link: int) -> bool:
    """Whether an NVLink ends at an NVSwitch (DGX/HGX) rather than at another GPU."""
    try:
        kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
    except (AttributeError, pynvml.NVMLError):  # older nvidia-ml-py or driver: assume a GPU
        return False
    return kind == getattr(pynvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)


def switch_links(to_switch) -> np.ndarray:
    """NVLinks between each pair of GPUs that reach each other through NVSwitches: a GPU with k links
    into the switches talks to any other at min(k, its k) links, as ``nvidia-smi topo -m`` shows
    (NV18 for every pair of an HGX H100)."""
    to_switch = np.asarray(to_switch, dtype=int)
    pairs = np.minimum.outer(to_switch, to_switch)
    np.fill_diagonal(pairs, 0)
    return pairs


def _p2p(pynvml, a, b) -> str:
    index = pynvml.NVML_P2P_CAPS_INDEX_READ
    index = index[0] if isinstance(index, tuple) else index  # a tuple in nvidia-ml-py
    status = pynvml.nvmlDeviceGetP2PStatus(a, b, index)
    return "OK" if status == pynvml.NVML_P2P_STATUS_OK else f"no ({status})"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def discover(comm=None, timeout: float | None = None, root: str = "/") -> tuple[Topology | None, dict]:
    """This machine's GPU topology and what was learnt on the way; (None, {"reason": ...}) without GPUs.

    Whatever the GPUs, ``facts["nodes"]`` says which nodes the job is on (:func:`.network.node_facts`:
    asked of every rank of ``comm``, a collective call then, or this host alone without one) and
    ``facts["network"]`` lists this host's network cards and their speeds (:func:`.network.read_network`,
    under ``root``): the link between nodes.
    """
    between_hosts = {"nodes": node_facts(comm, timeout), "network": read_network(root).as_dict()}
    topology, facts = _gpus()
    return topology, {**facts, **between_hosts}


def _gpus() -> tuple[Topology | None, dict]:
    """The GPU topology through NVML, else ``nvidia-smi topo -m``, else (None, {"reason": ...})."""
    try:
        topology, facts = read_nvml()
        facts["method"] = "NVML"
        return topology, facts
    except Exception as err:  # no nvidia-ml-py, no driver (nvmlInit raises), no GPU
        reason = f"NVML: {type(err).__name__}: {err}"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            text = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=30, check=True).stdout
            matrix = parse_topo(text)
            topology = topology_from_codes(matrix.gpu_codes(), name="discovered (nvidia-smi topo -m)",
                                           source="nvidia-smi topo -m; link rates assumed")
            return topology, {"method": "nvidia-smi topo -m", "codes": matrix.gpu_codes(), "nvml_error": reason}
        except Exception as err:
            reason += f"; nvidia-smi: {err}"
    return None, {"method": None, "reason": reason + ("" if smi else "; no nvidia-smi on PATH")}

