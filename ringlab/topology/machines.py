"""Machines by description: ``cluster("h100", nodes=2)`` builds the topology from public figures.

A node is what one set of GPUs shares inside: 8 GPUs on an HGX board's NVSwitches, or up to 72 in a GB200
NVL72 rack (or, for ``"pcie3"``, GPUs without NVLink under one PCIe 3.0 switch); 8 AMD Instinct GPUs joined
pairwise by Infinity Fabric (xGMI), or 1 to 4 GH200 superchips joined pairwise by NVLink, with no switch
(``ringlab.topology.meshes``); consumer GeForce cards each on a PCIe root port of one or two CPU sockets, with
P2P on or off. Its GPUs reach the network through NICs, one per GPU unless told otherwise, each NIC on a PCIe
link of the GPU's generation, into one non-blocking fabric (a rail-optimised fat tree).
The :class:`Machine` it carries says what NCCL's (or, on AMD GPUs, RCCL's) tuner reads beyond the links: the
GPU generation, nodes and NICs, the host's CPU vendor, and whether the fabric can reduce (SHARP).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import MAX_RANKS, check_count, positive_number
from .clusters import ClusterTopology, LinkRuns, Run, lowest_by_name
from .graph import GB, SwitchTopology, Topology
from .links import FABRICS  # noqa: F401 (re-exported: ringlab.topology.machines.FABRICS)
from .links import (A100_NVLINK, A100_REDUCE, ASSUMED, B200_NVLINK, B200_REDUCE, GH200_NVLINK, GH200_REDUCE,
                    H100_NVLINK, H100_REDUCE, H200_REDUCE, MI250X_REDUCE, MI300X_REDUCE, MI325X_REDUCE, MI355X_REDUCE,
                    RATED, RATINGS, RTX3090_REDUCE, RTX4090_REDUCE, RTX5090_REDUCE, XGMI_MI250X, XGMI_MI300X,
                    XGMI_MI355X, gpu_names, pcie_bandwidth, rated_link)

AMD_ARCHS = ("cdna2", "cdna3", "cdna4")  # MI200 (gfx90a), MI300 (gfx942), MI350 (gfx950): RCCL's GPUs


@dataclass(frozen=True)
class GPU:
    """One GPU model's public figures: its NVLink port (bytes/s each way, the rating NCCL gives it; 0: no
    NVLink, the GPUs share a PCIe switch), memory rate, PCIe generation, NCCL's generation index (RCCL's GPUs:
    cdna2, cdna3, cdna4), whether its switch adds (NVLS), its hosts' CPU.

    ``layout`` says how a node's GPUs are joined: ``switch`` (an NVSwitch, or a PCIe switch where ``nvlink`` is
    0), ``mesh`` (every pair directly, by ``links`` links of ``link`` bytes/s each way shared out among a GPU's
    peers, or as ``matrix`` counts them; the links ``kind`` xgmi or nvlink) or ``sockets`` (each GPU on a PCIe
    root port of one or two CPU sockets). ``rings`` are the rings the library builds over a whole node where its
    source fixes them; ``most`` the most GPUs a node holds, ``gpus_per_nic`` how many share a NIC by default."""

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
    layout: str = "switch"
    link: float = 0.0
    links: int = 0
    kind: str = ""
    matrix: tuple = ()
    rings: tuple = ()
    most: int = MAX_RANKS
    gpus_per_nic: int = 1
    family: str = "NVIDIA HGX"


# A node of four MI250X (eight GCDs) as RCCL models it (ROCm/rccl 0cbce2a, src/graph/rome_models.cc, rome_model_73):
# xGMI links between GCDs (4: the two GCDs of one package), and the four rings RCCL runs over them
MI250X_LINKS = ((0, 4, 1, 0, 0, 0, 2, 0), (4, 0, 0, 1, 0, 1, 0, 0), (1, 0, 0, 4, 2, 0, 0, 0), (0, 1, 4, 0, 0, 0, 0, 1),
                (0, 0, 2, 0, 0, 4, 1, 0), (0, 1, 0, 0, 4, 0, 0, 1), (2, 0, 0, 0, 1, 0, 0, 4), (0, 0, 0, 1, 0, 1, 4, 0))
MI250X_RINGS = ((0, 1, 3, 2, 4, 5, 7, 6), (6, 7, 5, 4, 2, 3, 1, 0), (0, 1, 5, 4, 6, 7, 3, 2), (2, 3, 7, 6, 4, 5, 1, 0))
_MI300 = ("7 Infinity Fabric (xGMI) links of 128 GB/s bidirectional peak each, 896 GB/s, one to each other GPU of "
          "an 8-GPU platform; PCIe 5.0 x16; gfx942, which RCCL rates at 48 GB/s a link; AMD EPYC hosts (assumed: "
          "AMD's own platforms; OEM servers also ship with Intel Xeon), a 400G NIC per GPU")


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
                 "a 400G ConnectX-7 per GPU; 4 GPUs a compute tray (host)", gpus_per_host=4, family="Grace"),
    "pcie3": GPU("PCIe 3.0 GPU", "volta", 0.0, "pcie", float("inf"), 3, False, "intel",
                 "PCIe 3.0 x16 = 15.754 GB/s per direction, GPUs and NICs under one switch per node", family="PCIe"),
    "gh200": GPU("GH200", "hopper", 0.0, "nvlink-h100", GH200_REDUCE, 5, False, "arm",
                 "GH200 480GB: one Hopper GPU (96 GB HBM3 at 4 TB/s; NVLink 4, 18 links, 900 GB/s bidirectional) "
                 "joined to its Grace CPU (Arm) by NVLink-C2C, 900 GB/s bidirectional (NVIDIA's GH200 datasheet and "
                 "Grace Hopper Superchip Architecture whitepaper); nodes of 1 to 4 superchips, a GPU's 18 NVLinks "
                 "shared out among the others of its node (4: 6 links, 150 GB/s each way a pair, the Quad GH200 node "
                 "of HPE Cray EX254n: Fusco et al., arXiv:2408.11556); a NIC per superchip on Grace's PCIe 5.0 "
                 "(HPE Slingshot 200G on Alps, CSCS's docs; InfiniBand NDR 400G elsewhere)",
                 layout="mesh", link=GH200_NVLINK, links=18, kind="nvlink", most=4, family="Grace"),
    "mi250x": GPU("MI250X GCD", "cdna2", 0.0, "xgmi-mi250x", MI250X_REDUCE, 4, False, "amd",
                  "AMD Instinct MI250X: two GCDs a package, each one GPU to ROCm and RCCL; 4 Infinity Fabric links "
                  "between the two (400 GB/s bidirectional), links of 100 GB/s bidirectional peak between packages "
                  "(CDNA 2 white paper, MI250X data sheet); HBM2e 3.2768 TB/s a package; PCIe 4.0; gfx90a, which RCCL "
                  "rates at 36 GB/s a link; a node of 4 packages (8 GCDs) linked as RCCL's rome_model_73 has it, on "
                  "one AMD EPYC host with a NIC per package (HPE Cray EX235a: CSCS's Alps docs)",
                  layout="mesh", link=XGMI_MI250X, kind="xgmi", matrix=MI250X_LINKS, rings=MI250X_RINGS, most=8,
                  gpus_per_nic=2, family="AMD Instinct"),
    "mi300x": GPU("MI300X", "cdna3", 0.0, "xgmi-mi300x", MI300X_REDUCE, 5, False, "amd",
                  f"AMD Instinct MI300X (data sheet, CDNA 3 white paper): HBM3 5.3 TB/s; {_MI300}",
                  layout="mesh", link=XGMI_MI300X, links=7, kind="xgmi", most=8, family="AMD Instinct"),
    "mi325x": GPU("MI325X", "cdna3", 0.0, "xgmi-mi300x", MI325X_REDUCE, 5, False, "amd",
                  f"AMD Instinct MI325X (data sheet): HBM3E 6 TB/s; {_MI300}",
                  layout="mesh", link=XGMI_MI300X, links=7, kind="xgmi", most=8, family="AMD Instinct"),
    "mi355x": GPU("MI355X", "cdna4", 0.0, "xgmi-mi355x", MI355X_REDUCE, 5, False, "amd",
                  "AMD Instinct MI355X (data sheet, CDNA 4 white paper): HBM3E 8 TB/s; 7 Infinity Fabric links of "
                  "153.6 GB/s bidirectional peak each, 1075.2 GB/s, one to each other GPU of an 8-GPU platform; PCIe "
                  "5.0 x16; gfx950, which RCCL rates at 48 GB/s a link (GFX95X_XGMI_WIDTH); AMD EPYC hosts "
                  "(assumed), a 400G NIC per GPU",
                  layout="mesh", link=XGMI_MI355X, links=7, kind="xgmi", most=8, family="AMD Instinct"),
    "rtx3090": GPU("RTX 3090", "ampere", 0.0, "pcie", RTX3090_REDUCE, 4, False, "amd",
                   "GeForce RTX 3090 (NVIDIA's specifications): PCIe 4.0 x16, GDDR6X 936 GB/s, compute capability "
                   "8.6; its NVLink bridge (two cards a pair) is not modelled: PCIe only",
                   layout="sockets", most=8, family="GeForce"),
    "rtx4090": GPU("RTX 4090", "ampere", 0.0, "pcie", RTX4090_REDUCE, 4, False, "amd",
                   "RTX 4090 PCIe 4.0 x16, GDDR6X 1008 GB/s, compute capability 8.9 (NCCL's Ampere figures); no "
                   "NVLink; NVIDIA's stock driver leaves P2P off (tinygrad's patched open kernel module, A14's "
                   "source, turns it on)", layout="sockets", most=8, family="GeForce"),
    "rtx5090": GPU("RTX 5090", "blackwell", 0.0, "pcie", RTX5090_REDUCE, 5, False, "amd",
                   "GeForce RTX 5090 (NVIDIA's specifications): PCIe 5.0 x16, GDDR7 1792 GB/s, compute capability "
                   "12.0 (NCCL's Blackwell figures); no NVLink", layout="sockets", most=8, family="GeForce"),
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
    mesh: bool = False     # a node's GPUs joined pairwise by direct links (xGMI, NVLink), no switch: many rings
    rings: tuple = ()      # the rings the library builds over a whole node, where its source fixes them
    p2p: bool = True       # GPUs copy to each other directly (False: staged through host memory)
    pcie: int = 0          # the PCIe generation the GPUs run at, where lower than theirs (0: theirs)

    @property
    def one_host_per_node(self) -> bool:
        """Whether each NVLink domain is one host (NCCL then runs its one-node kernels inside it)."""
        return self.gpus_per_host in (0, self.gpus_per_node)

    @property
    def library(self) -> str:
        """The collective library a job runs here: RCCL on AMD Instinct GPUs, NCCL elsewhere."""
        return "rccl" if self.arch in AMD_ARCHS else "nccl"


def cluster(gpu: str, nodes: int, gpus_per_node: int = 8, nics_per_node: int | None = None, nic_gbps: float = 400,
            fabric: str = "ib", sharp: bool = False, nvls: bool | None = None, name: str | None = None,
            p2p: bool = True, pcie: int | None = None) -> Topology:
    """``nodes`` nodes of ``gpus_per_node`` GPUs of the kind ``gpu`` names (:data:`GPUS`), joined by
    ``nics_per_node`` NICs each (default one per GPU; one per MI250X package) of ``nic_gbps`` Gbit/s into one
    fabric (ib, roce, efa, slingshot). The GPUs:

    - NVIDIA HGX and NVL72: a100, h100, h200, b200 (8 a node on NVSwitch), gb200 (up to 72 a node); pcie3, GPUs
      without NVLink under one PCIe 3.0 switch;
    - AMD Instinct, 8 GPUs a node joined pairwise by Infinity Fabric (xGMI), no switch, run by RCCL: mi300x,
      mi325x, mi355x; mi250x, whose 8 GPUs a node are the GCDs of 4 packages, linked as RCCL models the node;
    - gh200: 1 to 4 Grace Hopper superchips a node, their GPUs joined pairwise by NVLink;
    - consumer GeForce cards on PCIe, each on a root port of its host (two sockets, half on each, past 4 GPUs):
      rtx3090, rtx4090, rtx5090. ``p2p=False``: no peer access between them, every copy staged through host
      memory (what NVIDIA's stock driver gives an RTX 4090); ``pcie``: the PCIe generation they run at, where a
      slot or riser holds them below theirs.

    ``sharp``: the fabric reduces (InfiniBand SHARP, for NCCL's CollNet); ``nvls=False``: the switch does
    not add (NCCL_NVLS_ENABLE=0). ``fabric="efa"`` says the nodes are AWS's, one node too: NCCL then loads
    AWS's EFA plugin, which sets some of NCCL's parameters (the NVLS chunk: see ``tuning.NVLS_CHUNK_BY_FABRIC``).
    Every figure is public (``GPUS[gpu].source``) or said to be assumed (latencies)."""
    if gpu not in GPUS:
        raise ValueError(f"unknown gpu {gpu!r}; known: {', '.join(GPUS)}")
    if fabric not in FABRICS:
        raise ValueError(f"unknown fabric {fabric!r}; known: {', '.join(FABRICS)}")
    for key, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        check_count(key, value, maximum=MAX_RANKS)
    if nodes * gpus_per_node > MAX_RANKS:
        raise ValueError(f"nodes x gpus_per_node must be at most {MAX_RANKS:,} GPUs, got {nodes} x {gpus_per_node}")
    spec = GPUS[gpu]
    if gpus_per_node > spec.most:
        raise ValueError(f"a node of {spec.name} GPUs holds at most {spec.most}, got gpus_per_node={gpus_per_node}")
    nics = -(-gpus_per_node // spec.gpus_per_nic) if nics_per_node is None else nics_per_node
    if isinstance(nics, bool) or not isinstance(nics, (int, np.integer)) or not 1 <= nics <= gpus_per_node:
        raise ValueError(f"nics_per_node must be from 1 to the {gpus_per_node} GPUs of a node, got {nics_per_node!r}")
    if not positive_number(nic_gbps):
        raise ValueError(f"nic_gbps must be a finite number > 0, got {nic_gbps!r}")
    if spec.layout != "sockets" and (not p2p or pcie is not None):
        raise ValueError(f"p2p and pcie are for PCIe boxes of consumer GPUs ({', '.join(_BOXES)}), not {gpu}")
    if pcie is not None and (isinstance(pcie, bool) or pcie not in range(3, spec.pcie + 1)):
        raise ValueError(f"pcie must be a PCIe generation from 3 to the {spec.name}'s {spec.pcie}, got {pcie!r}")
    if spec.layout != "switch":
        from .meshes import node_cluster

        lowered = 0 if pcie in (None, spec.pcie) else pcie
        machine = Machine(gpu, spec.arch, nodes, gpus_per_node, nics, nic_gbps / 8 * GB, fabric, spec.cpu, sharp,
                          spec.kind if spec.layout == "mesh" else "pcie", mesh=spec.layout == "mesh",
                          rings=spec.rings if gpus_per_node == len(spec.matrix) else (), p2p=bool(p2p), pcie=lowered)
        name = name or _name(gpu, nodes, gpus_per_node, nics, nic_gbps, fabric, sharp, False, machine)
        return node_cluster(spec, machine, name)
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
        links = tuple(rated_link(g, "nvswitch", spec.nvlink, "nvswitch", RATINGS[spec.rating]) if spec.nvlink else
                      rated_link(g, "pcie-switch", pcie_bandwidth(spec.pcie, 16), "pcie")
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


def _name(gpu, nodes, gpus_per_node, nics, nic_gbps, fabric, sharp, nvls_off, machine: Machine | None = None) -> str:
    """hgx-h100-8, gb200-nvl72, mi300x-8, gh200-4, rtx4090-8-p2p-on, ib-2x8-h100, with what differs from the
    defaults after it."""
    layout = GPUS[gpu].layout
    boxed = "" if machine is None or layout != "sockets" else (
        f"-p2p-{'on' if machine.p2p else 'off'}" + (f"-pcie{machine.pcie}" if machine.pcie else ""))
    if nodes == 1 and fabric != "efa":
        base = (f"{gpu}-nvl{gpus_per_node}" if gpu == "gb200" else f"hgx-{gpu}-{gpus_per_node}"
                if GPUS[gpu].nvlink else f"{gpu}-{gpus_per_node}")
        return base + boxed + ("-nvls-off" if nvls_off else "")
    # one AWS node is named as AWS's clusters are: efa-1x8-b200
    base = f"{fabric}-{nodes}x{gpus_per_node}-{gpu}"
    base += "" if nics == -(-gpus_per_node // GPUS[gpu].gpus_per_nic) else f"-{nics}nic"
    base += "" if nic_gbps == 400 else f"-{nic_gbps:g}g"
    base += "-sharp" if sharp else ""
    return base + boxed + ("-nvls-off" if nvls_off else "")


def variant(topology: Topology, **changes) -> Topology:
    """The same cluster with some of :func:`cluster`'s arguments changed (nics_per_node, nic_gbps, nvls, p2p, ...)."""
    m = topology.machine
    if m is None or m.gpu not in GPUS:
        raise ValueError(f"{topology.name} was not built by cluster(); its variants cannot be derived")
    given = dict(gpu=m.gpu, nodes=m.nodes, gpus_per_node=m.gpus_per_node, nics_per_node=m.nics_per_node,
                 nic_gbps=m.nic_bandwidth * 8 / GB, fabric=m.fabric or "ib", sharp=m.sharp, nvls=topology.switch_reduce)
    if GPUS[m.gpu].layout == "sockets":
        given.update(p2p=m.p2p, pcie=m.pcie or None)
    return cluster(**{**given, **changes})


_BOXES = [key for key, spec in GPUS.items() if spec.layout == "sockets"]

__all__ = ["GPUS", "FABRICS", "GPU", "Machine", "cluster", "variant"]
