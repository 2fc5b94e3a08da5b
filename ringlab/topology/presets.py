"""Topology presets built from published figures, for predicting what nobody here can run.

Bandwidths are per direction and are the links' signalling peaks (public specifications). Data
reaches a share of a peak: NVLink and PCIe links carry the efficiency that NCCL's own topology
model rates them at (``RATINGS``), so that a prediction aims at what a copy can reach rather than
at the wire. Latencies are not among the published figures: every preset uses the assumed values
below, and says so in its ``notes``. Reduction rates are derived from the published memory
bandwidth where there is one (an add reads two bytes and writes one). The NVSwitch boards and the
multi-node machines are built by :func:`ringlab.topology.machines.cluster` from their GPUs' figures.
"""
from __future__ import annotations

from .machines import Machine, cluster
from .graph import SwitchTopology, Topology
from .links import (ASSUMED, DGX2_PER_GPU, ENCODING, EPYC_SOCKETS, H100_NVLINK, H100_PCIE_BRIDGE,  # noqa: F401
                    H100_PCIE_REDUCE, IB_100G, IB_200G, IB_400G, LATENCY, NVLINK1, NVLINK2, NVLINK_PER_LINK, PCIE3_X16,
                    PCIE4_X16, PCIE5_X16, PUBLISHED_LINKS, QPI, RATED, RATINGS, RTX2080TI_REDUCE, RTX4090_REDUCE,
                    V100_REDUCE, gpu_names, nvlink_per_link, pcie_bandwidth, rated_link)


def _on_one_node(gpu: str, arch: str, n: int, intra: str = "nvlink", cpu: str = "intel") -> Machine:
    """What NCCL's tuner reads of a one-node preset: the GPU's generation (compute capability 6.x and 7.x: NCCL's
    Volta figures; 8.x, the RTX 4090's 8.9 included: Ampere's), its GPUs, NVLink or PCIe inside, the CPU vendor."""
    return Machine(gpu, arch, 1, n, intra=intra, cpu=cpu)


def pcie3_switch_4() -> Topology:
    gpus = gpu_names(4)
    links = tuple(rated_link(g, "pcie-switch", PCIE3_X16, "pcie") for g in gpus) + (rated_link("pcie-switch", "cpu", PCIE3_X16, "pcie"),)
    return Topology("pcie3-switch-4", gpus, links, source="published figures: PCIe 3.0 x16 = 15.754 GB/s per direction",
                    notes="4 GPUs under one PCIe 3.0 switch; peer-to-peer through the switch. " + ASSUMED,
                    machine=_on_one_node("pcie3", "volta", 4, "pcie"))


def dual_socket_qpi_8() -> Topology:
    gpus = gpu_names(8)
    links = []
    for s in range(4):  # four switches, two GPUs each; switches 0,1 on cpu0, 2,3 on cpu1
        switch = f"pcie-switch{s}"
        links += [rated_link(gpus[2 * s], switch, PCIE3_X16, "pcie"),
                  rated_link(gpus[2 * s + 1], switch, PCIE3_X16, "pcie"),
                  rated_link(switch, f"cpu{s // 2}", PCIE3_X16, "pcie")]
    links.append(rated_link("cpu0", "cpu1", QPI, "qpi"))
    return Topology("dual-socket-qpi-8", gpus, tuple(links),
                    source="published figures: PCIe 3.0 x16 15.754 GB/s, QPI 25.6 GB/s both directions",
                    notes="8 GPUs in two groups of four under two CPUs joined by QPI. " + ASSUMED,
                    machine=_on_one_node("pcie3", "volta", 8, "pcie"))


def _dgx1(name: str, pairs: dict, per_link: float, rating: float, reduce_rate: float, source: str) -> Topology:
    gpus = gpu_names(8)
    links = [rated_link(gpus[a], gpus[b], count * per_link, "nvlink", rating) for (a, b), count in pairs.items()]
    for s in range(4):  # GPU pairs behind PCIe switches, two per CPU, CPUs over QPI
        switch = f"pcie-switch{s}"
        links += [rated_link(gpus[2 * s], switch, PCIE3_X16, "pcie"),
                  rated_link(gpus[2 * s + 1], switch, PCIE3_X16, "pcie"),
                  rated_link(switch, f"cpu{s // 2}", PCIE3_X16, "pcie")]
    links.append(rated_link("cpu0", "cpu1", QPI, "qpi"))
    return Topology(name, gpus, tuple(links), reduce_rate, source=source,
                    notes=f"hybrid cube-mesh: two fully linked quads, GPU i linked to i+4; {RATED}. " + ASSUMED,
                    machine=_on_one_node(name.split("-")[1], "volta", 8))


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


def dgx2_nvswitch() -> Topology:
    links = tuple(rated_link(g, "nvswitch", DGX2_PER_GPU, "nvswitch", RATINGS["nvlink-v100"]) for g in gpu_names(16))
    return SwitchTopology("dgx2-nvswitch", gpu_names(16), links, V100_REDUCE,
                          source="published figures: every GPU pair at 300 GB/s bidirectional; 2400 GB/s bisection",
                          notes=f"16 V100 on 6 NVSwitches per baseboard, modelled as one non-blocking switch. {RATED}. "
                                f"{ASSUMED}", machine=_on_one_node("v100", "volta", 16))


def h100_pcie_nvlink_2() -> Topology:
    gpus = gpu_names(2)
    links = (rated_link(gpus[0], gpus[1], H100_PCIE_BRIDGE, "nvlink", RATINGS["nvlink-h100"]),
             rated_link(gpus[0], "cpu", PCIE5_X16, "pcie"), rated_link(gpus[1], "cpu", PCIE5_X16, "pcie"))
    return Topology("h100-pcie-nvlink-2", gpus, links, H100_PCIE_REDUCE,
                    source="NVIDIA's public figures: H100 PCIe, NVLink bridge 600 GB/s bidirectional, PCIe 5.0 x16, "
                           "HBM2e 2 TB/s",
                    notes=f"two H100 PCIe cards joined by NVLink bridges, each on PCIe 5.0 to the CPU; {RATED}. "
                          + ASSUMED, machine=_on_one_node("h100-pcie", "hopper", 2))


def rtx4090_8(p2p: bool = True, pcie: int = 4) -> Topology:
    """Eight RTX 4090s, four on each of two CPU sockets, each on its own PCIe x16 root port (4.0, the card's;
    ``pcie=3`` for one that trained at a lower generation) with no switch: with P2P on they copy to each other
    through the root complexes; with it off every copy is staged through host memory, and a staged copy's two
    directions share the link. The same as ``cluster("rtx4090", 1, 8, p2p=p2p, pcie=pcie)``."""
    return cluster("rtx4090", 1, 8, p2p=p2p, pcie=None if pcie == 4 else pcie)


def pcie3_switch_2(p2p: bool = True) -> Topology:
    """Two GPUs behind one PCIe 3.0 switch. Without P2P every copy is staged through host memory:
    up the switch's one link to the CPU and back down it, both directions sharing that link."""
    gpus = gpu_names(2)
    kind = "pcie" if p2p else "host"
    links = (rated_link(gpus[0], "pcie-switch", PCIE3_X16, kind, duplex=p2p),
             rated_link(gpus[1], "pcie-switch", PCIE3_X16, kind, duplex=p2p),
             rated_link("pcie-switch", "host-memory", PCIE3_X16, kind, duplex=p2p))
    how = "peer copies through the switch" if p2p else "no P2P: copies staged through host memory over the uplink"
    return Topology("pcie3-switch-2" + ("" if p2p else "-p2p-off"), gpus, links, RTX2080TI_REDUCE,
                    source="published figures: PCIe 3.0 x16 15.754 GB/s per direction; RTX 2080 Ti GDDR6 616 GB/s",
                    notes=f"2 GPUs under one PCIe 3.0 switch; {how}; {RATED}. " + ASSUMED,
                    via=None if p2p else "host-memory", machine=_on_one_node("rtx2080ti", "volta", 2, "pcie"))


PRESETS = {
    "pcie3-switch-2": pcie3_switch_2,
    "pcie3-switch-2-p2p-off": lambda: pcie3_switch_2(p2p=False),
    "pcie3-switch-4": pcie3_switch_4,
    "dual-socket-qpi-8": dual_socket_qpi_8,
    "rtx4090-8-p2p-off": lambda: rtx4090_8(p2p=False),
    "rtx4090-8-p2p-on": rtx4090_8,
    "h100-pcie-nvlink-2": h100_pcie_nvlink_2,
    "dgx1-p100": dgx1_p100,
    "dgx1-v100": dgx1_v100,
    "dgx2-nvswitch": dgx2_nvswitch,
    "hgx-a100-8": lambda: cluster("a100", 1),
    "hgx-h100-8": lambda: cluster("h100", 1),
    "hgx-h200-8": lambda: cluster("h200", 1),
    "hgx-b200-8": lambda: cluster("b200", 1),
    "gb200-nvl72": lambda: cluster("gb200", 1, gpus_per_node=72),
    "ib-2x4": lambda: cluster("pcie3", 2, gpus_per_node=4, nics_per_node=1, nic_gbps=100, name="ib-2x4"),
    "ib-2x8-h100": lambda: cluster("h100", 2),
    "ib-16x8-h100": lambda: cluster("h100", 16),
    # the published 16-node A100 sweep does not state its NICs: HDR 200 Gbit/s per GPU, as in the DGX A100
    # SuperPOD design its source names
    "ib-16x8-a100": lambda: cluster("a100", 16, nic_gbps=200, name="ib-16x8-a100"),
    # two A100 hosts (the published health check A23 does not state its network): HDR 200 Gbit/s per GPU as on a
    # DGX A100; behind PCIe 4.0 a rail carries 24 GB/s whatever its NIC
    "ib-2x8-a100": lambda: cluster("a100", 2, nic_gbps=200, name="ib-2x8-a100"),
    # one node of 8 AMD Instinct MI300X (A43, A44) or MI325X (A45): 8 GPUs joined pairwise by xGMI, run by RCCL
    "mi300x-8": lambda: cluster("mi300x", 1),
    "mi325x-8": lambda: cluster("mi325x", 1),
    "mi355x-8": lambda: cluster("mi355x", 1),
    # one node of 4 MI250X: 8 GCDs, linked as RCCL models the node (HPE Cray EX235a, as on Frontier and Alps)
    "mi250x-8": lambda: cluster("mi250x", 1),
    # a Quad GH200 node (HPE Cray EX254n, as on Alps): 4 Grace Hopper superchips, their GPUs joined pairwise by NVLink
    "gh200-4": lambda: cluster("gh200", 1, gpus_per_node=4),
    # one AWS P6-B200 node (p6-b200.48xlarge): 8 B200 on NVLink 5, where NCCL runs with AWS's EFA plugin loaded
    "efa-1x8-b200": lambda: cluster("b200", 1, fabric="efa"),
    # four AWS P6-B200 nodes: 8 B200 on NVLink 5 each, an EFA v4 of 400 Gbit/s per GPU
    "efa-4x8-b200": lambda: cluster("b200", 4, fabric="efa"),
    # two GB200 NVL72 racks as one 128-rank job: 64 GPUs of each NVLink domain (the source does not say how the
    # 128 are split), a 400G NIC per GPU into InfiniBand (GB200 NVL72's ConnectX-7)
    "ib-2x64-gb200": lambda: cluster("gb200", 2, gpus_per_node=64),
}


def preset(name: str) -> Topology:
    """A topology from published figures; :func:`preset_names` lists them."""
    if name not in PRESETS:
        raise ValueError(f"unknown topology preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]()


def preset_names() -> list[str]:
    return list(PRESETS)
