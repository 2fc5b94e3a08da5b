"""Machines by description: ``cluster("h100", nodes=2)`` builds the topology from public figures.

A node is one NVLink domain: 8 GPUs on an HGX board's NVSwitches, or up to 72 in a GB200 NVL72
rack (or, for ``"pcie3"``, GPUs without NVLink under one PCIe 3.0 switch). Its GPUs reach the
network through NICs, one per GPU unless told otherwise, each NIC on a PCIe link of the GPU's
generation (behind the node's switch for PCIe nodes), into one non-blocking fabric (a
rail-optimised fat tree).
The :class:`Machine` it carries says what NCCL's tuner reads beyond the links: the GPU
generation, nodes and NICs, the host's CPU vendor, and whether the fabric can reduce (SHARP).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import MAX_RANKS, check_count, positive_number
from .clusters import ClusterTopology, LinkRuns, Run, lowest_by_name
from .graph import GB, SwitchTopology, Topology
from .links import (A100_NVLINK, A100_REDUCE, ASSUMED, B200_NVLINK, B200_REDUCE, H100_NVLINK, H100_REDUCE,
                    H200_REDUCE, RATED, RATINGS, gpu_names, pcie_bandwidth, rated_link)

FABRICS = {"ib": "InfiniBand", "roce": "RoCE (RDMA over Ethernet)", "efa": "AWS EFA"}


@dataclass(frozen=True)
class GPU:
    """One GPU model's public figures: its NVLink port (bytes/s each way, the rating NCCL gives it; 0: no
    NVLink, the GPUs share a PCIe switch), memory rate, PCIe generation, NCCL's generation index, whether its
    switch adds (NVLS), its hosts' CPU."""

    name: str
    arch: str
    nvlink: float
    rating: str
    reduce_rate: float
    pcie: int
    nvls: bool
    cpu: str
    source: str
    gpus_per_host: int = 0  # 0: one host holds the whole NVLink domain


GPUS = {
    "a100": GPU("A100 SXM", "ampere", A100_NVLINK, "nvlink-a100", A100_REDUCE, 4, False, "amd",
                "A100 SXM: NVLink 3, 600 GB/s bidirectional, HBM2e 2039 GB/s, PCIe 4.0; DGX A100: AMD EPYC hosts"),
    "h100": GPU("H100 SXM", "hopper", H100_NVLINK, "nvlink-h100", H100_REDUCE, 5, True, "intel",
                "H100 SXM: NVLink 4, 900 GB/s bidirectional, HBM3 3.35 TB/s, PCIe 5.0; DGX H100: Intel Xeon hosts"),
    "h200": GPU("H200 SXM", "hopper", H100_NVLINK, "nvlink-h100", H200_REDUCE, 5, True, "intel",
                "H200 SXM: NVLink 4, 900 GB/s bidirectional, HBM3e 4.8 TB/s, PCIe 5.0; DGX H200: Intel Xeon hosts"),
    "b200": GPU("B200", "blackwell", B200_NVLINK, "nvlink-b200", B200_REDUCE, 5, True, "intel",
                "B200: NVLink 5, 1.8 TB/s bidirectional, HBM3e 8 TB/s, PCIe 5.0; DGX B200: Intel Xeon hosts"),
    "gb200": GPU("GB200", "blackwell", B200_NVLINK, "nvlink-b200", B200_REDUCE, 5, True, "arm",
                 "GB200 NVL72: 72 GPUs on NVLink 5 (1.8 TB/s bidirectional each), HBM3e 8 TB/s, Grace (Arm) hosts, "
                 "a 400G ConnectX-7 per GPU; 4 GPUs a compute tray (host)", gpus_per_host=4),
    "pcie3": GPU("PCIe 3.0 GPU", "volta", 0.0, "pcie", float("inf"), 3, False, "intel",
                 "PCIe 3.0 x16 = 15.754 GB/s per direction, GPUs and NICs under one switch per node"),
}


@dataclass(frozen=True)
class Machine:
    """What NCCL's tuner reads beyond the links (``Topology.machine``): GPU generation (``arch``: volta, ampere,
    hopper, blackwell), nodes, GPUs and NICs per node, each NIC's bytes/s each way, fabric, CPU vendor (intel,
    amd, arm), whether the fabric reduces (``sharp``), what the interconnect inside a node is, and how many of a
    node's GPUs one host holds (``gpus_per_host``; 0: all of them, as on an HGX board)."""

    gpu: str
    arch: str
    nodes: int = 1
    gpus_per_node: int = 1
    nics_per_node: int = 0
    nic_bandwidth: float = 0.0
    fabric: str | None = None
    cpu: str = "intel"
    sharp: bool = False
    intra: str = "nvlink"
    gpus_per_host: int = 0

    @property
    def one_host_per_node(self) -> bool:
        """Whether each NVLink domain is one host (NCCL then runs its one-node kernels inside it)."""
        return self.gpus_per_host in (0, self.gpus_per_node)


def cluster(gpu: str, nodes: int, gpus_per_node: int = 8, nics_per_node: int | None = None, nic_gbps: float = 400,
            fabric: str = "ib", sharp: bool = False, nvls: bool | None = None, name: str | None = None) -> Topology:
    """``nodes`` NVLink domains of ``gpus_per_node`` GPUs (``gpu``: a100, h100, h200, b200, gb200; or pcie3,
    GPUs without NVLink under one PCIe 3.0 switch), joined by
    ``nics_per_node`` NICs each (default one per GPU) of ``nic_gbps`` Gbit/s into one fabric (ib, roce, efa).
    ``sharp``: the fabric reduces (InfiniBand SHARP, for NCCL's CollNet); ``nvls=False``: the switch does
    not add (NCCL_NVLS_ENABLE=0). ``fabric="efa"`` says the nodes are AWS's, one node too: NCCL then loads
    AWS's EFA plugin, which sets some of NCCL's parameters (the NVLS chunk: see ``tuning.NVLS_CHUNK_BY_FABRIC``)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown gpu {gpu!r}; known: {', '.join(GPUS)}")
    if fabric not in FABRICS:
        raise ValueError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")
    for key, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        check_count(key, value, maximum=MAX_RANKS)
    if nodes * gpus_per_node > MAX_RANKS:
        raise ValueError(f"nodes x gpus_per_node must be at most {MAX_RANKS:,} GPUs, got {nodes} x {gpus_per_node}")
    spec = GPUS[gpu]
    nics = gpus_per_node if nics_per_node is None else nics_per_node
    if isinstance(nics, bool) or not isinstance(nics, (int, np.integer)) or not 1 <= nics <= gpus_per_node:
        raise ValueError(f"nics_per_node must be from 1 to the {gpus_per_node} GPUs of a node, got {nics_per_node!r}")
    if not positive_number(nic_gbps):
        raise ValueError(f"nic_gbps must be a finite number > 0, got {nic_gbps!r}")
    switch_reduce = spec.nvls if nvls is None else bool(nvls and spec.nvls)
    machine = Machine(gpu, spec.arch, nodes, gpus_per_node, nics, nic_gbps / 8 * GB, fabric, spec.cpu, sharp,
                      "nvlink" if spec.nvlink else "pcie", min(spec.gpus_per_host, gpus_per_node))
    name = name or _name(gpu, nodes, gpus_per_node, nics, nic_gbps, fabric, sharp, switch_reduce != spec.nvls)
    source = f"public figures: {spec.source}" + (f"; {nics} x {nic_gbps:g} Gbit/s {FABRICS[fabric]} per node"
                                                  if nodes > 1 or fabric == "efa" else "")
    if fabric == "efa":
        source += "; NCCL with AWS's EFA plugin (aws-ofi-nccl), which sets NCCL_NVLS_CHUNKSIZE=512 KiB"
    adds = "that can also add (NVLS)" if switch_reduce else "that cannot add"
    notes = (f"{nodes} x {gpus_per_node} {spec.name}, each node one NVLink domain, modelled as one non-blocking "
             f"switch {adds}" if spec.nvlink else f"{nodes} x {gpus_per_node} GPUs under a PCIe {spec.pcie}.0 switch")
    if nodes == 1:
        links = tuple(rated_link(g, "nvswitch", spec.nvlink, "nvswitch", RATINGS[spec.rating])
                      for g in gpu_names(gpus_per_node))
        return SwitchTopology(name, gpu_names(gpus_per_node), links, spec.reduce_rate, source=source,
                              notes=f"{notes}; {RATED}. {ASSUMED}", switch_reduce=switch_reduce, machine=machine)
    gpus, fabric_link = nodes * gpus_per_node, rated_link("", "", nic_gbps / 8 * GB, fabric)
    pcie = rated_link("", "", pcie_bandwidth(spec.pcie, 16), "pcie")
    to_fabric = Run(2 * gpus if spec.nvlink else gpus + nodes * nics, 1, nodes * nics, "nic{i}", f"{fabric}-fabric",
                    fabric_link)
    if spec.nvlink:  # link 2g: GPU g - its node's NVSwitch; 2g+1: GPU g - its NIC; then the NICs - the fabric
        runs = [Run(0, 2, gpus, "gpu{i}", "node{node}-nvswitch",
                    rated_link("", "", spec.nvlink, "nvswitch", RATINGS[spec.rating]), gpus_per_node),
                Run(1, 2, gpus, "gpu{i}", "nic{nic}", pcie, gpus_per_node, nics), to_fabric]
    else:  # GPUs and NICs under the node's PCIe switch
        runs = [Run(0, 1, gpus, "gpu{i}", "node{node}-pcie-switch", pcie, gpus_per_node),
                Run(gpus, 1, nodes * nics, "node{node}-pcie-switch", "nic{i}", pcie, nics), to_fabric]
    g = np.arange(gpus)
    return ClusterTopology(name, gpu_names(gpus), LinkRuns(runs), spec.reduce_rate, source=source,
                           switch_reduce=switch_reduce,
                           notes=f"{notes}; {nics} NICs per node on PCIe {spec.pcie}.0 x16, one fabric"
                                 f"{' that reduces (SHARP)' if sharp else ''}; {RATED}. {ASSUMED}", machine=machine,
                           per_node=gpus_per_node, nic_count=nodes * nics,
                           nic=g // gpus_per_node * nics + g % gpus_per_node * nics // gpus_per_node,
                           switched=not spec.nvlink, node_nic=lowest_by_name(np.arange(nodes) * nics, nics))


def _name(gpu, nodes, gpus_per_node, nics, nic_gbps, fabric, sharp, nvls_off) -> str:
    """hgx-h100-8, gb200-nvl72, ib-2x8-h100, with what differs from the defaults after it."""
    if nodes == 1 and fabric != "efa":
        base = f"{gpu}-nvl{gpus_per_node}" if gpu == "gb200" else f"hgx-{gpu}-{gpus_per_node}"
    else:  # one AWS node is named as AWS's clusters are: efa-1x8-b200
        base = f"{fabric}-{nodes}x{gpus_per_node}-{gpu}"
        base += "" if nics == gpus_per_node else f"-{nics}nic"
        base += "" if nic_gbps == 400 else f"-{nic_gbps:g}g"
        base += "-sharp" if sharp else ""
    return base + ("-nvls-off" if nvls_off else "")


def variant(topology: Topology, **changes) -> Topology:
    """The same cluster with some of :func:`cluster`'s arguments changed (nics_per_node, nic_gbps, nvls, ...)."""
    m = topology.machine
    if m is None or m.gpu not in GPUS:
        raise ValueError(f"{topology.name} was not built by cluster(); its variants cannot be derived")
    given = dict(gpu=m.gpu, nodes=m.nodes, gpus_per_node=m.gpus_per_node, nics_per_node=m.nics_per_node,
                 nic_gbps=m.nic_bandwidth * 8 / GB, fabric=m.fabric or "ib", sharp=m.sharp, nvls=topology.switch_reduce)
    return cluster(**{**given, **changes})


__all__ = ["GPUS", "FABRICS", "GPU", "Machine", "cluster", "variant"]
