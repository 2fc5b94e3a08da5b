"""Topology presets built from published figures, for predicting what nobody here can run.

Bandwidths are per direction and are the links' signalling peaks (public specifications). Data
reaches a share of a peak: NVLink and PCIe links carry the efficiency that NCCL's own topology
model rates them at (``RATINGS``), so that a prediction aims at what a copy can reach rather than
at the wire. Latencies are not among the published figures: every preset uses the assumed values
below, and says so in its ``notes``. Reduction rates are derived from the published memory
bandwidth where there is one (an add reads two bytes and writes one).
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
H200_REDUCE = 4800 * GB / 3  # H200 SXM HBM3e 4.8 TB/s (NVIDIA's public figure)
A100_NVLINK = 300 * GB    # A100 SXM: NVLink 3, 12 links, 600 GB/s bidirectional per GPU
A100_REDUCE = 2039 * GB / 3  # A100 SXM 80 GB HBM2e 2039 GB/s
H100_PCIE_BRIDGE = 300 * GB  # H100 PCIe: NVLink bridges, 600 GB/s bidirectional between the pair
H100_PCIE_REDUCE = 2000 * GB / 3  # H100 PCIe HBM2e 2 TB/s
PCIE4_X16 = pcie_bandwidth(4, 16)  # 31.51 GB/s per direction
PCIE5_X16 = pcie_bandwidth(5, 16)  # 63.02 GB/s per direction
RTX4090_REDUCE = 1008 * GB / 3  # GDDR6X 1008 GB/s
RTX2080TI_REDUCE = 616 * GB / 3  # GDDR6 616 GB/s
EPYC_SOCKETS = 3 * 16 * 16e9 / 8  # assumed: 3 xGMI x16 links at 16 GT/s, 96 GB/s per direction
IB_200G = 25 * GB         # HDR InfiniBand, 200 Gbit/s
IB_400G = 50 * GB         # NDR InfiniBand, 400 Gbit/s

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

LATENCY = {"nvlink": 1e-6, "nvswitch": 1e-6, "pcie": 1.5e-6, "qpi": 1e-6, "fabric": 1e-6, "host": 1.5e-6,
           "ib": 2e-6}  # assumed
ASSUMED = "latencies assumed (1-2 us a hop), not published"

# The share of a link's signalling peak that NCCL's topology model (src/graph/topo.h and topo.cc,
# NVIDIA/nccl at 5067397) rates it at: NVLink per link 18 GB/s of 20 on P100, 20 of 25 on V100 and
# A100, 20.6 of 25 on H100/H200; PCIe 6 Gbit/s a lane for every 8 GT/s (12 GB/s for 3.0 x16 against
# the 15.754 the encoding leaves). Published peer-copy matrices agree: 376 of 450 GB/s between two
# H100s (B03), 22-26 of 31.5 GB/s between two RTX 4090s with P2P on (B06).
RATINGS = {"nvlink-p100": 18 / 20, "nvlink-v100": 20 / 25, "nvlink-a100": 20 / 25, "nvlink-h100": 20.6 / 25,
           "pcie": 6.0 / (8.0 * 128 / 130), "qpi": 6.0 / 12.8}  # QPI: NCCL's Broadwell figure, 6 GB/s
RATED = "links at NCCL's ratings of them (NVLink, PCIe), not at their signalling peaks"


def _gpus(n: int) -> tuple[str, ...]:
    return tuple(f"gpu{i}" for i in range(n))


def _link(a: str, b: str, bandwidth: float, kind: str, efficiency: float | None = None, duplex: bool = True) -> Link:
    if efficiency is None:
        efficiency = RATINGS["pcie"] if kind in ("pcie", "host") else RATINGS.get(kind, 1.0)
    return Link(a, b, bandwidth, LATENCY[kind], kind, efficiency, duplex)


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


def _dgx1(name: str, pairs: dict, per_link: float, rating: float, reduce_rate: float, source: str) -> Topology:
    gpus = _gpus(8)
    links = [_link(gpus[a], gpus[b], count * per_link, "nvlink", rating) for (a, b), count in pairs.items()]
    for s in range(4):  # GPU pairs behind PCIe switches, two per CPU, CPUs over QPI
        switch = f"pcie-switch{s}"
        links += [_link(gpus[2 * s], switch, PCIE3_X16, "pcie"), _link(gpus[2 * s + 1], switch, PCIE3_X16, "pcie"),
                  _link(switch, f"cpu{s // 2}", PCIE3_X16, "pcie")]
    links.append(_link("cpu0", "cpu1", QPI, "qpi"))
    return Topology(name, gpus, tuple(links), reduce_rate, source=source,
                    notes=f"hybrid cube-mesh: two fully linked quads, GPU i linked to i+4; {RATED}. " + ASSUMED)


def dgx1_p100() -> Topology:
    quads = {(a, b): 1 for q in (0, 4) for a in range(q, q + 4) for b in range(a + 1, q + 4)}
    cross = {(i, i + 4): 1 for i in range(4)}
    return _dgx1("dgx1-p100", {**quads, **cross}, NVLINK1, RATINGS["nvlink-p100"], float("inf"),
                 "published figures: NVLink 1.0, 4 links of 40 GB/s bidirectional per P100")


def dgx1_v100() -> Topology:
    # 6 NVLinks per V100; some pairs get two (at most 2 between a pair), as in the public DGX-1V topology
    pairs = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2, (2, 3): 2, (2, 6): 1,
             (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2, (5, 7): 1, (6, 7): 2}
    return _dgx1("dgx1-v100", pairs, NVLINK2, RATINGS["nvlink-v100"], V100_REDUCE,
                 "published figures: NVLink 2.0, 6 links of 50 GB/s bidirectional per V100; HBM2 900 GB/s")


def _nvswitch(name: str, n: int, per_gpu: float, rating: float, reduce_rate: float, source: str, notes: str,
              switch_reduce: bool = False) -> Topology:
    """n GPUs whose NVLinks all go into NVSwitches, modelled as one non-blocking switch."""
    links = tuple(_link(g, "nvswitch", per_gpu, "nvswitch", rating) for g in _gpus(n))
    return SwitchTopology(name, _gpus(n), links, reduce_rate, source=source, notes=f"{notes} {RATED}. {ASSUMED}",
                          switch_reduce=switch_reduce)


def dgx2_nvswitch() -> Topology:
    return _nvswitch("dgx2-nvswitch", 16, DGX2_PER_GPU, RATINGS["nvlink-v100"], V100_REDUCE,
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
    return _nvswitch("hgx-h100-8", 8, H100_NVLINK, RATINGS["nvlink-h100"], H100_REDUCE,
                     "NVIDIA's public figures: H100 SXM NVLink 900 GB/s bidirectional per GPU, HBM3 3.35 TB/s",
                     "8 H100 on NVSwitch, modelled as one non-blocking switch that can also add (NVLS).",
                     switch_reduce=True)


def hgx_h200_8() -> Topology:
    return _nvswitch("hgx-h200-8", 8, H100_NVLINK, RATINGS["nvlink-h100"], H200_REDUCE,
                     "NVIDIA's public figures: H200 SXM NVLink 900 GB/s bidirectional per GPU, HBM3e 4.8 TB/s",
                     "8 H200 on NVSwitch, modelled as one non-blocking switch that can also add (NVLS).",
                     switch_reduce=True)


def hgx_a100_8() -> Topology:
    return _nvswitch("hgx-a100-8", 8, A100_NVLINK, RATINGS["nvlink-a100"], A100_REDUCE,
                     "NVIDIA's public figures: A100 SXM NVLink 3, 12 links, 600 GB/s bidirectional per GPU; "
                     "HBM2e 2039 GB/s (80 GB)",
                     "8 A100 on six NVSwitches, modelled as one non-blocking switch (it cannot add).")


def h100_pcie_nvlink_2() -> Topology:
    gpus = _gpus(2)
    links = (_link(gpus[0], gpus[1], H100_PCIE_BRIDGE, "nvlink", RATINGS["nvlink-h100"]),
             _link(gpus[0], "cpu", PCIE5_X16, "pcie"), _link(gpus[1], "cpu", PCIE5_X16, "pcie"))
    return Topology("h100-pcie-nvlink-2", gpus, links, H100_PCIE_REDUCE,
                    source="NVIDIA's public figures: H100 PCIe, NVLink bridge 600 GB/s bidirectional, PCIe 5.0 x16, "
                           "HBM2e 2 TB/s",
                    notes=f"two H100 PCIe cards joined by NVLink bridges, each on PCIe 5.0 to the CPU; {RATED}. "
                          + ASSUMED)


def _rtx4090_8(name: str, p2p: bool) -> Topology:
    """Eight RTX 4090s, four on each of two CPU sockets, each on its own PCIe 4.0 x16 root port
    (no switch): with P2P on they copy to each other through the root complexes; with it off every
    copy is staged through host memory, and a staged copy's two directions share the link."""
    gpus = _gpus(8)
    kind = "pcie" if p2p else "host"
    links = [_link(g, f"socket{i // 4}", PCIE4_X16, kind, duplex=p2p) for i, g in enumerate(gpus)]
    links.append(_link("socket0", "socket1", EPYC_SOCKETS, "fabric"))
    how = ("P2P on: GPU to GPU through the root complexes" if p2p else
           "P2P off: every copy staged through host memory, its two directions sharing the link (the published "
           "p2pBandwidthLatencyTest of the same box moves as much both ways at once as one way)")
    return Topology(name, gpus, tuple(links), RTX4090_REDUCE,
                    source="public figures: RTX 4090 PCIe 4.0 x16, GDDR6X 1008 GB/s; two AMD EPYC 7542 sockets "
                           "joined by Infinity Fabric (assumed 3 xGMI x16 links at 16 GT/s, 96 GB/s each way: boards "
                           "use 3 or 4, at up to 18 GT/s; a ring crosses it once each way, so it is not the bottleneck)",
                    notes=f"8 RTX 4090 on two sockets without a PCIe switch; {how}; {RATED}. " + ASSUMED)


def rtx4090_8_p2p_on() -> Topology:
    return _rtx4090_8("rtx4090-8-p2p-on", True)


def rtx4090_8_p2p_off() -> Topology:
    return _rtx4090_8("rtx4090-8-p2p-off", False)


def pcie3_switch_2(p2p: bool = True) -> Topology:
    """Two GPUs behind one PCIe 3.0 switch. Without P2P every copy is staged through host memory:
    up the switch's one link to the CPU and back down it, both directions sharing that link."""
    gpus = _gpus(2)
    kind = "pcie" if p2p else "host"
    links = (_link(gpus[0], "pcie-switch", PCIE3_X16, kind, duplex=p2p),
             _link(gpus[1], "pcie-switch", PCIE3_X16, kind, duplex=p2p),
             _link("pcie-switch", "host-memory", PCIE3_X16, kind, duplex=p2p))
    how = "peer copies through the switch" if p2p else "no P2P: copies staged through host memory over the uplink"
    return Topology("pcie3-switch-2" + ("" if p2p else "-p2p-off"), gpus, links, RTX2080TI_REDUCE,
                    source="published figures: PCIe 3.0 x16 15.754 GB/s per direction; RTX 2080 Ti GDDR6 616 GB/s",
                    notes=f"2 GPUs under one PCIe 3.0 switch; {how}; {RATED}. " + ASSUMED,
                    via=None if p2p else "host-memory")


def _ib_cluster(name: str, nodes: int, per_gpu: float, rating: float, reduce_rate: float, nic: float,
                source: str, notes: str) -> Topology:
    """Nodes of 8 GPUs on NVSwitch; every GPU has its own NIC (PCIe 5.0 x16) into one non-blocking
    network (a rail-optimised fat tree)."""
    gpus = _gpus(8 * nodes)
    links = []
    for i, g in enumerate(gpus):
        node = i // 8
        links += [_link(g, f"node{node}-nvswitch", per_gpu, "nvswitch", rating),
                  _link(g, f"nic{i}", PCIE5_X16, "pcie"), _link(f"nic{i}", "ib-fabric", nic, "ib")]
    return Topology(name, gpus, tuple(links), reduce_rate, source=source,
                    notes=f"{nodes} nodes x 8 GPUs, one NIC per GPU; {notes}; {RATED}. " + ASSUMED)


def ib_2x8_h100() -> Topology:
    return _ib_cluster("ib-2x8-h100", 2, H100_NVLINK, RATINGS["nvlink-h100"], H100_REDUCE, IB_400G,
                       "public figures: H100 SXM NVLink 900 GB/s bidirectional; ConnectX-7 NDR 400 Gbit/s per GPU",
                       "8 H100 HGX nodes with 8 NDR NICs each")


def ib_16x8_h100() -> Topology:
    return _ib_cluster("ib-16x8-h100", 16, H100_NVLINK, RATINGS["nvlink-h100"], H100_REDUCE, IB_400G,
                       "public figures: H100 SXM NVLink 900 GB/s bidirectional; ConnectX-7 NDR 400 Gbit/s per GPU",
                       "8 H100 HGX nodes with 8 NDR NICs each")


def ib_16x8_a100() -> Topology:
    return _ib_cluster("ib-16x8-a100", 16, A100_NVLINK, RATINGS["nvlink-a100"], A100_REDUCE, IB_200G,
                       "public figures: A100 SXM NVLink 600 GB/s bidirectional; HDR 200 Gbit/s per GPU, as in "
                       "NVIDIA's DGX A100 SuperPOD design",
                       "8 A100 HGX nodes with 8 HDR NICs each (the published 16-node sweep does not state its NICs: "
                       "assumed from the SuperPOD design its source names)")


PRESETS = {
    "pcie3-switch-2": pcie3_switch_2,
    "pcie3-switch-2-p2p-off": lambda: pcie3_switch_2(p2p=False),
    "pcie3-switch-4": pcie3_switch_4,
    "dual-socket-qpi-8": dual_socket_qpi_8,
    "rtx4090-8-p2p-off": rtx4090_8_p2p_off,
    "rtx4090-8-p2p-on": rtx4090_8_p2p_on,
    "h100-pcie-nvlink-2": h100_pcie_nvlink_2,
    "dgx1-p100": dgx1_p100,
    "dgx1-v100": dgx1_v100,
    "dgx2-nvswitch": dgx2_nvswitch,
    "hgx-a100-8": hgx_a100_8,
    "hgx-h100-8": hgx_h100_8,
    "hgx-h200-8": hgx_h200_8,
    "ib-2x4": ib_2x4,
    "ib-2x8-h100": ib_2x8_h100,
    "ib-16x8-h100": ib_16x8_h100,
    "ib-16x8-a100": ib_16x8_a100,
}


def preset(name: str) -> Topology:
    """A topology from published figures; :func:`preset_names` lists them."""
    if name not in PRESETS:
        raise ValueError(f"unknown topology preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]()


def preset_names() -> list[str]:
    return list(PRESETS)
