"""Discovering this machine's GPU topology: NVML first, ``nvidia-smi topo -m`` text as a fallback.

Both give, for every pair of GPUs, how they are connected: ``NV#`` (a bonded set of # NVLinks)
or how far apart they sit in the PCIe tree (PIX: one switch; PXB: several bridges; PHB: a host
bridge; NODE: host bridges within a NUMA node; SYS: across the SMP interconnect such as QPI/UPI).
:func:`topology_from_codes` turns that into the same :class:`~ringlab.topology.Topology` the
presets and the cost model use.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .topology import GB, Link, Topology

# NVML's common-ancestor levels, which nvidia-smi prints as these codes
LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
NVML_LEVEL_CODES = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# Bytes/s per direction of one NVLink, by NVML's nvmlNvlinkVersion_t: 1 = NVLink 1.0 (P100), 2 = 2.0
# (V100), 3 = 2.2, 4 = 3.0 (A100), 5 = 3.1, 6 = 4.0 (H100), 7 = 5.0 (B200). Public figures.
NVLINK_PER_LINK = {1: 20 * GB, 2: 25 * GB, 3: 25 * GB, 4: 25 * GB, 5: 25 * GB, 6: 25 * GB, 7: 50 * GB}


def nvlink_per_link(version: int, hopper: bool = False) -> float:
    """One NVLink's bytes/s per direction from NVML's version number (25 GB/s when unknown).

    Some drivers report NVLink 5.0 for an H100, whose NVLink 4 links carry 25 GB/s each way: pass
    ``hopper=True`` for a Hopper GPU and that figure is used.
    """
    if hopper:
        return 25 * GB
    return NVLINK_PER_LINK.get(version, 25 * GB)
ENCODING = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130)}
SMP_LINK = 25.6 * GB / 2  # assumed when nothing better is known: a 20-bit QPI, per direction
LATENCY = 1.5e-6          # assumed per hop


def pcie_bandwidth(generation: int, lanes: int) -> float:
    """Theoretical bytes/s per direction: transfer rate x encoding efficiency x lanes / 8 bits.

    PCIe 1.x/2.x use 8b/10b (20% overhead), 3.0 and later 128b/130b: 2.0 x8 gives 4 GB/s,
    3.0 x16 gives 15.754 GB/s.
    """
    if generation not in ENCODING:
        raise ValueError(f"PCIe generation must be one of {sorted(ENCODING)}, got {generation!r}")
    if lanes not in (1, 2, 4, 8, 12, 16, 32):
        raise ValueError(f"PCIe width must be x1, x2, x4, x8, x12, x16 or x32, got x{lanes}")
    rate, efficiency = ENCODING[generation]
    return rate * 1e9 * efficiency * lanes / 8


@dataclass
class TopoMatrix:
    """What ``nvidia-smi topo -m`` prints: device columns, a code for each (row, column), CPU affinity."""

    devices: list[str]
    codes: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if re.fullmatch(r"GPU\d+", d)]

    def gpu_codes(self) -> list[list[str]]:
        """The GPU-by-GPU part, filled from either triangle (a partial printout still gives pairs)."""
        gpus = self.gpus
        out = [["X" if a == b else "" for b in gpus] for a in gpus]
        for i, a in enumerate(gpus):
            for j, b in enumerate(gpus):
                code = self.codes.get((a, b)) or self.codes.get((b, a))
                if i != j and code:
                    out[i][j] = code
        return out


def parse_topo(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (tab- or space-separated, with or without NIC rows and legend)."""
    lines = [line.rstrip("\n") for line in text.splitlines() if not line.lstrip().startswith("#")]
    try:
        head = next(i for i, line in enumerate(lines) if _is_header(line.split()))
    except StopIteration:
        raise ValueError("no 'nvidia-smi topo -m' matrix found: the header line with GPU0 ... is missing") from None
    header = lines[head].strip()
    columns = [c.strip() for c in (header.split("\t") if "\t" in header else re.split(r"\s{2,}", header)) if c.strip()]
    devices = []
    for c in columns:
        if c.lower().startswith(("cpu affinity", "numa affinity", "gpu numa")):
            break
        devices.append(c)
    matrix = TopoMatrix(devices)
    for line in lines[head + 1:]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        tokens = line.split()
        name, cells = tokens[0], tokens[1:]
        if name not in devices:
            continue
        if len(cells) < len(devices):
            raise ValueError(f"row {name} has {len(cells)} cells for {len(devices)} devices")
        for device, code in zip(devices, cells):
            if not re.fullmatch(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC", code):
                raise ValueError(f"row {name}, column {device}: unknown connection {code!r}")
            matrix.codes[(name, device)] = "NODE" if code == "SOC" else code
        if len(cells) > len(devices):
            matrix.cpu_affinity[name] = cells[len(devices)]
    return matrix


def _is_header(tokens: list[str]) -> bool:
    """The column line: it names GPU0, and is not GPU0's own row (which has X next to the name)."""
    return "GPU0" in tokens and not (tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] == "X")


def topology_from_codes(codes: list[list[str]], names=None, pcie: float | list[float] = 15.754 * GB,
                        nvlink_per_link: float = 25 * GB, smp: float = SMP_LINK, name: str = "discovered",
                        source: str = "discovered") -> Topology:
    """A Topology from a GPU-by-GPU code matrix: NV# links directly; the PCIe tree as nested groups.

    GPUs whose code is at most PIX share a switch, at most PXB a bridge, at most PHB a host bridge,
    at most NODE a NUMA node; NUMA nodes meet at the SMP interconnect. ``pcie`` is each GPU's link
    (bytes/s per direction, one figure or one per GPU).
    """
    n = len(codes)
    names = list(names or (f"gpu{i}" for i in range(n)))
    per_gpu = list(pcie) if isinstance(pcie, (list, tuple, np.ndarray)) else [pcie] * n
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            match = re.fullmatch(r"NV(\d+)", codes[i][j] or "")
            if match:
                links.append(Link(names[i], names[j], int(match.group(1)) * nvlink_per_link, LATENCY, "nvlink"))

    # NVLink says nothing about PCIe distance: on NVLink-only printouts treat the PCIe tree as flat
    parent = {i: names[i] for i in range(n)}
    for level, label in ((10, "pcie-switch"), (20, "pcie-bridge"), (30, "host-bridge"), (40, "numa-node")):
        groups = _components(n, lambda i, j: LEVELS.get(codes[i][j] or "SYS", 0) <= level and
                             not (codes[i][j] or "").startswith("NV"))
        new_parent = {}
        for g, members in enumerate(groups):
            if len(members) == 1 and label != "numa-node":  # a level with one GPU alone adds only a hop
                new_parent[members[0]] = parent[members[0]]
                continue
            node = f"{label}{g}"
            for child in sorted({parent[m] for m in members}):
                bandwidth = min(per_gpu[m] for m in members)
                links.append(Link(child, node, bandwidth, LATENCY, "pcie"))
            for m in members:
                new_parent[m] = node
        parent = new_parent
    tops = sorted(set(parent.values()))
    for top in tops:
        if len(tops) > 1:
            links.append(Link(top, "smp-interconnect", smp, LATENCY, "qpi"))
    return Topology(name, tuple(names), tuple(links), source=source,
                    notes="PCIe tree from topology codes; NVLink per-link rate, SMP link and latencies as given or assumed")


def _components(n: int, joined) -> list[list[int]]:
    seen, out = set(), []
    for start in range(n):
        if start in seen:
            continue
        group, stack = [], [start]
        seen.add(start)
        while stack:
            i = stack.pop()
            group.append(i)
            for j in range(n):
                if j not in seen and joined(i, j):
                    seen.add(j)
                    stack.append(j)
        out.append(sorted(group))
    return out


def discover_nvml():
    """(Topology, facts) from NVML, or raise when there is no driver (nvmlInit raises then)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        buses = [pynvml.nvmlDeviceGetPciInfo(h).busId for h in handles]
        buses = [b.decode() if isinstance(b, bytes) else b for b in buses]
        facts = {"driver": _text(pynvml.nvmlSystemGetDriverVersion()), "gpus": []}
        pcie, codes = [], [["X"] * count for _ in range(count)]
        nvlinks = np.zeros((count, count), dtype=int)
        to_switch = np.zeros(count, dtype=int)
        version = 0
        for i, h in enumerate(handles):
            gen, width = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h), pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
            max_gen, max_width = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h), pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
            pcie.append(pcie_bandwidth(min(max_gen, max(ENCODING)), max_width))
            facts["gpus"].append({"name": _text(pynvml.nvmlDeviceGetName(h)), "bus": buses[i],
                                  "pcie_current": [gen, width], "pcie_max": [max_gen, max_width]})
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                        continue
                    version = max(version, pynvml.nvmlDeviceGetNvLinkVersion(h, link))
                    if _remote_is_switch(pynvml, h, link):
                        to_switch[i] += 1
                        continue
                    remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except pynvml.NVMLError:  # no such link on this GPU
                    continue
                if remote in buses:
                    nvlinks[i, buses.index(remote)] += 1
        nvlinks += switch_links(to_switch)
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
        topology = topology_from_codes(codes, pcie=pcie, nvlink_per_link=per_link, name="discovered (NVML)",
                                       source=f"NVML: driver {facts['driver']}; PCIe and NVLink peaks from link counts")
        facts["codes"] = codes
        return topology, facts
    finally:
        pynvml.nvmlShutdown()


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


def discover() -> tuple[Topology | None, dict]:
    """This machine's GPU topology and what was learnt on the way; (None, {"reason": ...}) without GPUs."""
    try:
        topology, facts = discover_nvml()
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


RECORDED_TOPO = Path(__file__).resolve().parent / "data" / "topo"


def recorded_topo(name: str) -> tuple[str, TopoMatrix]:
    """A published ``nvidia-smi topo -m`` output shipped with ringlab, and its parse.

    ``name`` is one of ``recorded_topo_names()`` (for example ``"rtx4090x8"``); each file's first line
    says where it was published. Returns (the text, the parsed matrix).
    """
    path = RECORDED_TOPO / f"{name}.txt"
    if not path.exists():
        raise ValueError(f"no recorded topology {name!r}; there are: {', '.join(recorded_topo_names())}")
    text = path.read_text()
    return text, parse_topo(text)


def recorded_topo_names() -> list[str]:
    return sorted(p.stem for p in RECORDED_TOPO.glob("*.txt"))
