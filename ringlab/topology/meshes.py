"""Nodes without a switch, laid out link by link: GPUs joined pairwise (AMD's Infinity Fabric, GH200's NVLink),
and consumer cards each on a PCIe root port of one or two CPU sockets.

:func:`ringlab.topology.machines.cluster` builds these for the GPUs whose ``layout`` is ``mesh`` or ``sockets``:

- ``mesh``: every pair of a node's GPUs has its own links, a GPU's ``links`` shared out evenly among its peers
  (an MI300X's 7 xGMI links: one to each of 7 peers; a GH200's 18 NVLinks: 6 to each of 3), or as the GPU's
  ``matrix`` counts them (MI250X: RCCL's model of a node of 8 GCDs). Each link is rated as the library rates it
  (``RATINGS``: RCCL's 48 GB/s for an MI300X's 64). A ring over them uses one link a GPU; NCCL and RCCL run many
  rings at once, one a channel, so that together they use every link (``ringlab.predict.rings.mesh_ring_rates``).
- ``sockets``: each GPU on a PCIe root port of its own (no switch), half the GPUs on each of two sockets past
  four (the published 8x RTX 4090 box: two AMD EPYC 7542), one socket up to four. With P2P on, peers copy
  through the root complexes; with it off, every copy is staged through host memory and its two directions
  share the GPU's link (``Link.duplex``).

Across nodes, every NIC has its own PCIe link (of the GPU's generation) from each GPU it serves (mesh) or from its
socket (sockets), and a port into one non-blocking fabric. The topologies are plain :class:`Topology` objects
(routes by search), which suits nodes of a few GPUs and clusters of hundreds of nodes.
"""
from __future__ import annotations

from .graph import GB, Topology
from .links import FABRICS, ASSUMED, EPYC_SOCKETS, RATED, RATINGS, gpu_names, pcie_bandwidth, rated_link

SOCKETS_HOST = ("two AMD EPYC sockets past 4 GPUs (the published 8x RTX 4090 box's: EPYC 7542), one up to 4, "
                "joined by Infinity Fabric (assumed 3 xGMI x16 links at 16 GT/s, 96 GB/s each way: boards use 3 or 4, "
                "at up to 18 GT/s; a ring crosses it once each way, so it is not the bottleneck)")


def pair_links(spec, gpus_per_node: int) -> dict[tuple[int, int], int]:
    """{(i, j): links between GPUs i < j of one node} for a ``mesh`` GPU: its ``matrix``, or its links shared out."""
    if spec.matrix:
        return {(i, j): spec.matrix[i][j] for i in range(gpus_per_node) for j in range(i + 1, gpus_per_node)
                if spec.matrix[i][j]}
    share = spec.links // max(gpus_per_node - 1, 1)
    return {(i, j): share for i in range(gpus_per_node) for j in range(i + 1, gpus_per_node)}


def sockets_of(gpus_per_node: int) -> int:
    """CPU sockets of a PCIe box: two past four GPUs (each needs x16 lanes of its own), else one."""
    return 2 if gpus_per_node > 4 else 1


def node_cluster(spec, machine, name: str) -> Topology:
    """``machine.nodes`` nodes of ``spec`` GPUs as their ``layout`` joins them, NICs into one fabric."""
    nodes, per_node, nics = machine.nodes, machine.gpus_per_node, machine.nics_per_node
    many = nodes > 1
    pcie_gen = machine.pcie or spec.pcie
    gpus, links = gpu_names(nodes * per_node), []
    for m in range(nodes):
        first = m * per_node
        if spec.layout == "mesh":
            rating = RATINGS[spec.rating]
            links += [rated_link(gpus[first + i], gpus[first + j], count * spec.link, spec.kind, rating)
                      for (i, j), count in pair_links(spec, per_node).items()]
        else:
            sockets = sockets_of(per_node)
            socket = [f"node{m}-socket{s}" if many else f"socket{s}" for s in range(sockets)]
            kind = "pcie" if machine.p2p else "host"
            links += [rated_link(gpus[first + i], socket[i * sockets // per_node], pcie_bandwidth(pcie_gen, 16),
                                 kind, duplex=machine.p2p) for i in range(per_node)]
            if sockets == 2:
                links.append(rated_link(socket[0], socket[1], EPYC_SOCKETS, "fabric"))
        if many:
            for k in range(nics):
                nic = f"nic{m * nics + k}"
                if spec.layout == "mesh":  # from each GPU it serves, over that GPU's PCIe (GH200: Grace's)
                    links += [rated_link(gpus[first + i], nic, pcie_bandwidth(spec.pcie, 16), "pcie")
                              for i in range(per_node) if i * nics // per_node == k]
                else:
                    links.append(rated_link(socket[k * sockets // nics], nic, pcie_bandwidth(spec.pcie, 16), "pcie"))
                links.append(rated_link(nic, f"{machine.fabric}-fabric", machine.nic_bandwidth, machine.fabric))
    return Topology(name, gpus, tuple(links), spec.reduce_rate, source=_source(spec, machine),
                    notes=_notes(spec, machine), machine=machine)


def _source(spec, machine) -> str:
    source = f"public figures: {spec.source}"
    if spec.layout == "sockets":
        source += f"; {SOCKETS_HOST}"
    if machine.nodes > 1:
        source += (f"; {machine.nics_per_node} x {machine.nic_bandwidth * 8 / GB:g} Gbit/s "
                   f"{FABRICS[machine.fabric]} per node")
    return source


def _notes(spec, machine) -> str:
    nodes, per_node = machine.nodes, machine.gpus_per_node
    if spec.layout == "mesh":
        how = "Infinity Fabric (xGMI)" if spec.kind == "xgmi" else "NVLink"
        inside = (f"{nodes} x {per_node} {spec.name}, each node's GPUs joined pairwise by {how} with no switch"
                  + (" (RCCL's model of the node's links)" if spec.matrix else
                     f", {pair_links(spec, per_node).get((0, 1), 0)} link(s) a pair" if per_node > 1 else ""))
        library = "RCCL" if machine.library == "rccl" else "NCCL"
        inside += f"; links at {library}'s rating of them"
    else:
        gen = machine.pcie or spec.pcie
        how = ("P2P on: GPU to GPU through the root complexes" if machine.p2p else
               "P2P off: every copy staged through host memory, its two directions sharing the link (the published "
               "p2pBandwidthLatencyTest of the 8x RTX 4090 box moves as much both ways at once as one way)")
        inside = (f"{nodes} x {per_node} {spec.name} on {sockets_of(per_node)} socket(s) without a PCIe switch, "
                  f"PCIe {gen}.0 x16 each; {how}; {RATED}")
    across = (f"; {machine.nics_per_node} NICs per node on PCIe {spec.pcie}.0 x16, one fabric"
              f"{' that reduces (SHARP)' if machine.sharp else ''}" if nodes > 1 else "")
    return f"{inside}{across}. {ASSUMED}"


__all__ = ["node_cluster", "pair_links", "sockets_of", "SOCKETS_HOST"]
