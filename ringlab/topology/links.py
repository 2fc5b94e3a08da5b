"""Links as public figures give them: PCIe by generation, NVLink by version, network cards, sockets, and
the share of each peak that NCCL's topology model rates data at.

Bandwidths are per direction and are the links' signalling peaks (public specifications);
``RATINGS`` says what share of a peak NCCL's model expects data to reach. Latencies are not among
the published figures: ``LATENCY`` holds the values every preset assumes, and says so.
"""
from __future__ import annotations

from .graph import GB, Link

# the networks nodes are joined by, as cluster() and the machines of topology.meshes name them
FABRICS = {"ib": "InfiniBand", "roce": "RoCE (RDMA over Ethernet)", "efa": "AWS EFA", "slingshot": "HPE Slingshot"}

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
B200_NVLINK = 900 * GB    # B200 and GB200: NVLink 5, 18 links, 1.8 TB/s bidirectional per GPU (NVIDIA)
B200_REDUCE = 8000 * GB / 3  # B200 and GB200 HBM3e 8 TB/s per GPU (NVIDIA's public figure)
H100_PCIE_BRIDGE = 300 * GB  # H100 PCIe: NVLink bridges, 600 GB/s bidirectional between the pair
H100_PCIE_REDUCE = 2000 * GB / 3  # H100 PCIe HBM2e 2 TB/s
PCIE4_X16 = pcie_bandwidth(4, 16)  # 31.51 GB/s per direction
PCIE5_X16 = pcie_bandwidth(5, 16)  # 63.02 GB/s per direction
RTX4090_REDUCE = 1008 * GB / 3  # GDDR6X 1008 GB/s
RTX2080TI_REDUCE = 616 * GB / 3  # GDDR6 616 GB/s
EPYC_SOCKETS = 3 * 16 * 16e9 / 8  # assumed: 3 xGMI x16 links at 16 GT/s, 96 GB/s per direction
IB_200G = 25 * GB         # HDR InfiniBand, 200 Gbit/s
IB_400G = 50 * GB         # NDR InfiniBand, 400 Gbit/s
RTX3090_REDUCE = 936 * GB / 3    # RTX 3090: GDDR6X 936 GB/s (NVIDIA's public figure)
RTX5090_REDUCE = 1792 * GB / 3   # RTX 5090: GDDR7 1792 GB/s (NVIDIA's public figure)
GH200_REDUCE = 4000 * GB / 3     # GH200 480GB: its H100's HBM3, 96 GB at 4 TB/s (NVIDIA's GH200 datasheet)
GH200_C2C = 450 * GB      # NVLink-C2C between Grace and Hopper: 900 GB/s bidirectional (NVIDIA's GH200 datasheet)
GH200_NVLINK = 25 * GB    # one NVLink 4 link; a GH200's GPU has 18 of them (900 GB/s bidirectional), as an H100's

# AMD Instinct: one Infinity Fabric (xGMI) link between two GPUs, bytes/s each way, half the bidirectional peak AMD's
# data sheets give per link. A GPU's links are shared out among the other GPUs of its node.
XGMI_MI250X = 50 * GB     # MI250X: Infinity Fabric links of 100 GB/s peak each (CDNA 2 white paper, MI250X data sheet)
XGMI_MI300X = 64 * GB     # MI300X and MI325X: 7 links of 128 GB/s peak each, 896 GB/s (data sheets, CDNA 3 white paper)
XGMI_MI355X = 76.8 * GB   # MI355X: 7 links of 153.6 GB/s peak each, 1075.2 GB/s (MI355X data sheet, CDNA 4 white paper)
MI250X_REDUCE = 1638.4 * GB / 3  # one MI250X GCD: half the package's HBM2e, 3.2768 TB/s (MI250X data sheet)
MI300X_REDUCE = 5300 * GB / 3    # MI300X: HBM3 5.3 TB/s (data sheet)
MI325X_REDUCE = 6000 * GB / 3    # MI325X: HBM3E 6 TB/s (data sheet)
MI355X_REDUCE = 8000 * GB / 3    # MI355X: HBM3E 8 TB/s (data sheet)

# Published figures for one direction of one GPU's connection: (what, bytes/s, note), the note saying where each comes
# from and shown beside its bar. First spec arithmetic and vendor figures; then measurements of real machines that
# ringlab ships (ringlab/data/published, from ../shared/published), each one number as its source printed it, in GB/s
# of 1e9 bytes, one direction (p2pBandwidthLatencyTest's unidirectional matrix, bandwidthTest's and nvbandwidth's
# host -> device copy), the GPU pair named where the matrix has several (tests/test_published.py reads them back).
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
    ("host -> RTX 2080 Ti, pinned", 12.2 * GB,
     "published measurement: bandwidthTest, 32 MB, PCIe 3.0 x16 behind a switch, AutoDL (C01)"),
    ("host -> H100 SXM, pinned", 55.37 * GB, "published measurement: nvbandwidth, host -> GPU 0, HGX H100 (C05)"),
    ("RTX 2080 Ti -> 2080 Ti, no P2P", 5.71 * GB,
     "published measurement: p2pBandwidthLatencyTest GPU 0 -> 1, one PCIe 3.0 switch, AutoDL (B07)"),
    ("RTX 4090 -> 4090, no P2P", 18.77 * GB,
     "published measurement: p2pBandwidthLatencyTest GPU 0 -> 1, stock driver, blog.chlc.cc (B05)"),
    ("RTX 4090 -> 4090, P2P, across sockets", 21.36 * GB,
     "published measurement: p2pBandwidthLatencyTest GPU 0 -> 4, tinygrad driver, blog.chlc.cc (B06)"),
    ("RTX 4090 -> 4090, P2P, one socket", 25.6 * GB,
     "published measurement: p2pBandwidthLatencyTest GPU 0 -> 1, tinygrad driver, blog.chlc.cc (B06)"),
    ("H100 SXM -> H100, NVSwitch, P2P", 365.3 * GB,
     "published measurement: p2pBandwidthLatencyTest GPU 0 -> 1 (56 pairs: 365.3 to 393.78), HGX H100 (B03)"),
]

LATENCY = {"nvlink": 1e-6, "nvswitch": 1e-6, "xgmi": 1e-6, "pcie": 1.5e-6, "qpi": 1e-6, "fabric": 1e-6,
           "host": 1.5e-6, "ib": 2e-6, "roce": 2e-6, "efa": 2e-6, "slingshot": 2e-6}  # assumed
ASSUMED = "latencies assumed (1-2 us a hop), not published"

# The share of a link's signalling peak that NCCL's topology model (src/graph/topo.h and topo.cc,
# NVIDIA/nccl at 5067397) rates it at: NVLink per link 18 GB/s of 20 on P100, 20 of 25 on V100 and
# A100, 20.6 of 25 on H100/H200, 40.1 of 50 on B200/GB200 (NVLink 5); PCIe 6 Gbit/s a lane for every
# 8 GT/s (12 GB/s for 3.0 x16 against the 15.754 the encoding leaves). Published peer-copy matrices
# agree: 365.3 to 393.78 of 450 GB/s between two H100s (B03), 20.57 to 26.01 of 31.5 GB/s between two
# RTX 4090s with P2P on (B06), one direction.
RATINGS = {"nvlink-p100": 18 / 20, "nvlink-v100": 20 / 25, "nvlink-a100": 20 / 25, "nvlink-h100": 20.6 / 25,
           "nvlink-b200": 40.1 / 50, "pcie": 6.0 / (8.0 * 128 / 130), "qpi": 6.0 / 12.8,  # QPI: Broadwell's 6 GB/s
           # RCCL's ratings of one xGMI link (src/graph/topo.h, ncclTopoXGMISpeed: MI200_XGMI_WIDTH 36,
           # GFX94X_XGMI_WIDTH 48 at ROCm/rccl 0cbce2a; GFX95X_XGMI_WIDTH 48 at ROCm/rocm-systems 03a8914)
           "xgmi-mi250x": 36 / 50, "xgmi-mi300x": 48 / 64, "xgmi-mi355x": 48 / 76.8}
RATED = "links at NCCL's ratings of them (NVLink, PCIe), not at their signalling peaks"


def gpu_names(n: int) -> tuple[str, ...]:
    """gpu0, gpu1, ...: the rank names of presets."""
    return tuple(f"gpu{i}" for i in range(n))


def rated_link(a: str, b: str, bandwidth: float, kind: str, efficiency: float | None = None,
               duplex: bool = True) -> Link:
    """A link of ``kind`` at its rating (``RATINGS``; PCIe's for pcie and host links) and assumed latency."""
    if efficiency is None:
        efficiency = RATINGS["pcie"] if kind in ("pcie", "host") else RATINGS.get(kind, 1.0)
    return Link(a, b, bandwidth, LATENCY[kind], kind, efficiency, duplex)
