"""Topology presets built from published figures, for predicting what nobody here can run.

Bandwidths are per direction. Latencies are not among the published figures: every preset uses
the assumed values below, and says so in its ``notes``. Reduction rates are derived from the
published memory bandwidth where there is one (an add reads two bytes and writes one).
"""
from __future__ import annotations

from .graph import GB, Link, SwitchTopology, Topology

# PCIe: (transfer rate in GT/s per lane, encoding efficiency) by generation (public spec figures)
ENCODING = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130)}


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


# Bytes/s per direction of one NVLink, by NVML's nvmlNvlinkVersion_t: 1 = NVLink 1.0 (P100), 2 = 2.0
# (V100), 3 = 2.2, 4 = 3.0 (A100), 5 = 3.1, 6 = 4.0 (H100), 7 = 5.0 (B200). Public figures.
NVLINK_PER_LINK = {1: 20 * GB, 2: 25 * GB, 3: 25 * GB, 4: 25 * GB, 5: 25 * GB, 6: 25 * GB, 7: 50 * GB}


def nvlink_per_link(version: int, hopper: bool = False) -> float:
    """One NVLink's bytes/s per direction from NVML's version number (25 GB/s when unknown).

    Some drivers report NVLink 5.0 for an H100, whose NVLink 4 links carry 25 GB/s each way: pass
    ``hopper=True`` for a Hopper GPU and that figure is used.
    """
    if hopper:
        return NVLINK_PER_LINK[6]
    return NVLINK_PER_LINK.get(version, NVLINK_PER_LINK[2])


PCIE3_X16 = pcie_bandwidth(3, 16)  # 15.754 GB/s per direction
NVLINK1 = NVLINK_PER_LINK[1]  # NVLink 1.0 (P100): 40 GB/s bidirectional per link
NVLINK2 = NVLINK_PER_LINK[2]  # NVLink 2.0 (V100): 50 GB/s bidirectional per link
QPI = 12.8 * GB           # 20-bit QPI: 25.6 GB/s both directions
IB_100G = 12.5 * GB       # 100 Gbit/s InfiniBand
DGX2_PER_GPU = 150 * GB   # DGX-2: every GPU pair at 300 GB/s bidirectional through NVSwitch
H100_NVLINK = 450 * GB    # H100 SXM: NVLink 4, 900 GB/s bidirectional per GPU (NVIDIA's public figure)
V100_REDUCE = 900 * GB / 3   # V100 HBM2 900 GB/s
H100_REDUCE = 3350 * GB / 3  # H100 SXM HBM3 3.35 TB/s (NVIDIA's public figure)

# Published figures for one direction of one GPU's connection (spec arithmetic and vendor figures,
# then measurements published for a K40 server): (what, bytes/s, "spec" or "published measurement").
PUBLISHED_LINKS = [
    ("PCIe 2.0 x16", 16 * 0.5 * GB, "spec: 5 GT/s, 8b/10b"),
    ("PCIe 3.0 x16", PCIE3_X16, "spec: 8 GT/s, 128b/130b"),
    ("QPI (20-bit)", QPI, "spec: 25.6 GB/s both directions"),
    ("100 Gbit/s InfiniBand", IB_100G, "spec"),
    ("NVLink 1.0, one link", NVLINK1, "spec: 40 GB/s bidirectional"),
    ("NVLink 2.0, DGX-1 pair (2 links)", 2 * NVLINK2, "spec: 100 GB/s bidirectional"),
    ("NVLink 1.0, P100 (4 links)", 4 * NVLINK1, "spec: 160 GB/s bidirectional"),
    ("NVLink 2.0, V100 (6 links)", 6 * NVLINK2, "spec: 300 GB/s bidirectional"),
    ("NVSwitch, DGX-2 any pair", DGX2_PER_GPU, "spec: 300 GB/s bidirectional"),
    ("NVLink 4, H100 SXM", H100_NVLINK, "NVIDIA: 900 GB/s bidirectional"),
    ("K40: GPU-GPU, one PCIe switch", 10.59 * GB, "published measurement"),
    ("K40: GPU-GPU across QPI", 9.15 * GB, "published measurement"),
    ("GPU-GPU over NVLink", 35 * GB, "published measurement"),
]

LATENCY = {"nvlink": 1e-6, "nvswitch": 1e-6, "pcie": 1.5e-6, "qpi": 1e-6, "ib": 2e-6}  # assumed
ASSUMED = "latencies assumed (1-2 us a hop), not published"


def _gpus(n: int) -> tuple[str, ...]:
    return tuple(f"gpu{i}" for i in range(n))


def _link(a: str, b: str, bandwidth: float, kind: str) -> Link:
    return Link(a, b, bandwidth, LATENCY[kind], kind)


def pcie3_switch_4() -> Topology:
    gpus = _gpus(4)
    links = tuple(_link(g, "pcie-switch", PCIE3_X16, "pcie") for g in gpus) + (_link("pcie-switch", "cpu", PCIE3_X16, "pcie"),)
    return Topology("pcie3-switch-4", gpus, links, source="published figures: PCIe 3.0 x16 = 15.754 GB/s per direction",
                    notes="4 GPUs under one PCIe 3.0 switch; peer-to-peer through the switch. " + ASSUMED)


def dual_socket_qpi_8() -> Topology:
    gpus = _gpus(8)
    links = []
    for s in range(4):  # four switches, two GPUs each; switches 0,1 on cpu0, 2,3 on cpu1
        switch = f"pcie-switch{s}"
        links += [_link(gpus[2 * s], switch, PCIE3_X16, "pcie"), _link(gpus[2 * s + 1], switch, PCIE3_X16, "pcie"),
                  _link(switch, f"cpu{s // 2}", PCIE3_X16, "pcie")]
    links.append(_link("cpu0", "cpu1", QPI, "qpi"))
    return Topology("dual-socket-qpi-8", gpus, tuple(links),
                    source="published figures: PCIe 3.0 x16 15.754 GB/s, QPI 25.6 GB/s both directions",
                    notes="8 GPUs in two groups of four under two CPUs joined by QPI. " + ASSUMED)


def _dgx1(name: str, pairs: dict, per_link: float, reduce_rate: float, source: str) -> Topology:
    gpus = _gpus(8)
    links = [_link(gpus[a], gpus[b], count * per_link, "nvlink") for (a, b), count in pairs.items()]
    for s in range(4):  # GPU pairs behind PCIe switches, two per CPU, CPUs over QPI
        switch = f"pcie-switch{s}"
        links += [_link(gpus[2 * s], switch, PCIE3_X16, "pcie"), _link(gpus[2 * s + 1], switch, PCIE3_X16, "pcie"),
                  _link(switch, f"cpu{s // 2}", PCIE3_X16, "pcie")]
    links.append(_link("cpu0", "cpu1", QPI, "qpi"))
    return Topology(name, gpus, tuple(links), reduce_rate, source=source,
                    notes="hybrid cube-mesh: two fully linked quads, GPU i linked to i+4. " + ASSUMED)


def dgx1_p100() -> Topology:
    quads = {(a, b): 1 for q in (0, 4) for a in range(q, q + 4) for b in range(a + 1, q + 4)}
    cross = {(i, i + 4): 1 for i in range(4)}
    return _dgx1("dgx1-p100", {**quads, **cross}, NVLINK1, float("inf"),
                 "published figures: NVLink 1.0, 4 links of 40 GB/s bidirectional per P100")


def dgx1_v100() -> Topology:
    # 6 NVLinks per V100; some pairs get two (at most 2 between a pair), as in the public DGX-1V topology
    pairs = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
             (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
    return _dgx1("dgx1-v100", pairs, NVLINK2, V100_REDUCE,
                 "published figures: NVLink 2.0, 6 links of 50 GB/s bidirectional per V100; HBM2 900 GB/s")


def _nvswitch(name: str, n: int, per_gpu: float, reduce_rate: float, source: str, notes: str) -> Topology:
    """n GPUs whose NVLinks all go into NVSwitches, modelled as one non-blocking switch."""
    links = tuple(_link(g, "nvswitch", per_gpu, "nvswitch") for g in _gpus(n))
    return SwitchTopology(name, _gpus(n), links, reduce_rate, source=source, notes=notes + " " + ASSUMED)


def dgx2_nvswitch() -> Topology:
    return _nvswitch("dgx2-nvswitch", 16, DGX2_PER_GPU, V100_REDUCE,
                     "published figures: every GPU pair at 300 GB/s bidirectional; 2400 GB/s bisection",
                     "16 V100 on 6 NVSwitches per baseboard, modelled as one non-blocking switch.")


def ib_2x4() -> Topology:
    gpus = _gpus(8)
    links = []
    for node in range(2):
        switch = f"node{node}-pcie-switch"
        links += [_link(gpus[4 * node + i], switch, PCIE3_X16, "pcie") for i in range(4)]
        links += [_link(switch, f"node{node}-nic", PCIE3_X16, "pcie"), _link(f"node{node}-nic", "ib-switch", IB_100G, "ib")]
    return Topology("ib-2x4", gpus, tuple(links),
                    source="published figures: PCIe 3.0 x16 15.754 GB/s; 100 Gbit/s InfiniBand = 12.5 GB/s",
                    notes="2 nodes x 4 GPUs under a PCIe 3.0 switch with one 100 Gbit/s NIC each. " + ASSUMED)


def hgx_h100_8() -> Topology:
    return _nvswitch("hgx-h100-8", 8, H100_NVLINK, H100_REDUCE,
                     "NVIDIA's public figures: H100 SXM NVLink 900 GB/s bidirectional per GPU, HBM3 3.35 TB/s",
                     "8 H100 on NVSwitch, modelled as one non-blocking switch.")


PRESETS = {
    "pcie3-switch-4": pcie3_switch_4,
    "dual-socket-qpi-8": dual_socket_qpi_8,
    "dgx1-p100": dgx1_p100,
    "dgx1-v100": dgx1_v100,
    "dgx2-nvswitch": dgx2_nvswitch,
    "ib-2x4": ib_2x4,
    "hgx-h100-8": hgx_h100_8,
}


def preset(name: str) -> Topology:
    """A topology from published figures: ``pcie3-switch-4``, ``dual-socket-qpi-8``, ``dgx1-p100``,
    ``dgx1-v100``, ``dgx2-nvswitch``, ``ib-2x4``, ``hgx-h100-8``."""
    if name not in PRESETS:
        raise ValueError(f"unknown topology preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]()


def preset_names() -> list[str]:
    return list(PRESETS)
