"""``nvidia-smi topo -m``: its connection codes, its text, and the Topology they describe.

For every pair of GPUs the codes say how they are connected: ``NV#`` (a bonded set of # NVLinks)
or how far apart they sit in the PCIe tree (PIX: one switch; PXB: several bridges; PHB: a host
bridge; NODE: host bridges within a NUMA node; SYS: across the SMP interconnect such as QPI/UPI).
:func:`topology_from_codes` turns them into the same :class:`Topology` the presets and the cost
model use, whether they came from NVML, from ``nvidia-smi`` here, or from a published printout
shipped with ringlab (:func:`published`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .graph import Link, Topology
from .presets import LATENCY, NVLINK2, PCIE3_X16, QPI

# NVML's common-ancestor levels, which nvidia-smi prints as these codes
LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}

@dataclass
class TopoMatrix:
    """What ``nvidia-smi topo -m`` prints: device columns, a code for each (row, column), CPU and NUMA affinity."""

    devices: list[str]
    codes: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)

    def gpu_numa(self) -> list[str] | None:
        """Each GPU's NUMA node as printed ("0", "1", ...), or None when the printout has no such column."""
        found = [self.numa_affinity.get(g) for g in self.gpus]
        return found if all(v not in (None, "", "N/A") for v in found) else None

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
        extras = dict(zip((c.lower() for c in columns[len(devices):]), cells[len(devices):]))
        if "cpu affinity" in extras:
            matrix.cpu_affinity[name] = extras["cpu affinity"]
        if "numa affinity" in extras:
            matrix.numa_affinity[name] = extras["numa affinity"]
    return matrix


def _is_header(tokens: list[str]) -> bool:
    """The column line: it names GPU0, and is not GPU0's own row (which has X next to the name)."""
    return "GPU0" in tokens and not (tokens[0] == "GPU0" and len(tokens) > 1 and tokens[1] == "X")


def topology_from_codes(codes: list[list[str]], names=None, pcie: float | list[float] = PCIE3_X16,
                        nvlink_rate: float = NVLINK2, smp: float = QPI, name: str = "discovered",
                        source: str = "discovered", numa: list[str] | None = None) -> Topology:
    """A Topology from a GPU-by-GPU code matrix: NV# links directly; the PCIe tree as nested groups.

    GPUs whose code is at most PIX share a switch, at most PXB a bridge, at most PHB a host bridge,
    at most NODE a NUMA node (or, given ``numa``, each GPU's NUMA node as ``topo -m`` prints it, so
    that GPUs of one socket share a node even where their codes say SYS); NUMA nodes meet at the SMP
    interconnect. ``pcie`` is each GPU's link
    (bytes/s per direction, one figure or one per GPU), ``nvlink_rate`` one NVLink's and ``smp`` the
    link between sockets; latencies are the presets' assumed ones.
    """
    n = len(codes)
    names = list(names or (f"gpu{i}" for i in range(n)))
    per_gpu = list(pcie) if isinstance(pcie, (list, tuple, np.ndarray)) else [pcie] * n
    links = []
    for i in range(n):
        for j in range(i + 1, n):
            match = re.fullmatch(r"NV(\d+)", codes[i][j] or "")
            if match:
                links.append(Link(names[i], names[j], int(match.group(1)) * nvlink_rate, LATENCY["nvlink"], "nvlink"))

    # NVLink says nothing about PCIe distance: on NVLink-only printouts treat the PCIe tree as flat
    parent = {i: names[i] for i in range(n)}
    for level, label in ((10, "pcie-switch"), (20, "pcie-bridge"), (30, "host-bridge"), (40, "numa-node")):
        if label == "numa-node" and numa is not None:  # the printed NUMA affinity, not the codes
            nodes = sorted(set(numa), key=lambda v: (len(v), v))
            groups = [[i for i in range(n) if numa[i] == v] for v in nodes]
        else:
            groups = _components(n, lambda i, j: LEVELS.get(codes[i][j] or "SYS", 0) <= level and
                                 not (codes[i][j] or "").startswith("NV"))
        new_parent = {}
        for g, members in enumerate(groups):
            if len(members) == 1 and label != "numa-node":  # a level with one GPU alone adds only a hop
                new_parent[members[0]] = parent[members[0]]
                continue
            node = f"{label}{nodes[g]}" if label == "numa-node" and numa is not None else f"{label}{g}"
            for child in sorted({parent[m] for m in members}):
                bandwidth = min(per_gpu[m] for m in members)
                links.append(Link(child, node, bandwidth, LATENCY["pcie"], "pcie"))
            for m in members:
                new_parent[m] = node
        parent = new_parent
    tops = sorted(set(parent.values()))
    for top in tops:
        if len(tops) > 1:
            links.append(Link(top, "smp-interconnect", smp, LATENCY["qpi"], "qpi"))
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


PUBLISHED_TOPO = Path(__file__).resolve().parent.parent / "data" / "topo"

def published_topo(name: str) -> tuple[str, TopoMatrix]:
    """A published ``nvidia-smi topo -m`` output shipped with ringlab, and its parse.

    ``name`` is one of ``published_topo_names()`` (for example ``"rtx4090x8"``); each file's first line
    says where it was published. Returns (the text, the parsed matrix).
    """
    path = PUBLISHED_TOPO / f"{name}.txt"
    if not path.exists():
        raise ValueError(f"no published topology {name!r}; there are: {', '.join(published_topo_names())}")
    text = path.read_text()
    return text, parse_topo(text)


def published_topo_names() -> list[str]:
    return sorted(p.stem for p in PUBLISHED_TOPO.glob("*.txt"))


def published(name: str, pcie: float = PCIE3_X16) -> Topology:
    """A published ``nvidia-smi topo -m`` shipped with ringlab, as a Topology.

    The codes give the shape only: every GPU's PCIe link is taken to carry ``pcie`` bytes/s
    (PCIe 3.0 x16 unless told), and the SMP link and latencies are assumed; ``source`` says so.
    """
    _, matrix = published_topo(name)
    return topology_from_codes(matrix.gpu_codes(), pcie=pcie, name=f"{name} (published topo -m)",
                               source="published nvidia-smi topo -m; link rates assumed", numa=matrix.gpu_numa())
