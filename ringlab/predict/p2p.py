"""NCCL's point-to-point calls: alltoall and sendrecv as nccl-tests runs them, priced by what each link carries.

nccl-tests runs both as one group of ``ncclSend``/``ncclRecv`` (``src/alltoall.cu``, ``src/sendrecv.cu``, as does
``ncclAllToAll`` itself in NCCL and RCCL), so no tuner picks an algorithm: NCCL's planner (``src/enqueue.cc``,
``addP2pToPlan``) sends each peer's bytes with LL where they are few, else with Simple. The prediction:

- traffic: ``alltoall`` of size S, nccl-tests' one rank's whole buffer: every rank sends S/n to every other rank
  (and S/n to itself, a local copy that takes no link); ``sendrecv`` of S: rank r sends S to r+1 and receives S
  from r-1, a ring shift. Every message follows its route on the topology (NVLink port, PCIe, host memory where
  P2P is off, NIC and fabric across nodes); each link carries the sum of what crosses it (both ways at once where
  the link is half duplex), and the call lasts as long as its busiest link: ``bytes on it / its rate``.
  On one NVSwitch node an alltoall's busbw tends to the port's rate; across nodes of G GPUs, where the rails
  bound it, to (n - 1) / (n - G) times a GPU's share of its node's NICs (it sends (n - G) / n of S through them).
- protocol: LL where a peer's bytes are at most :data:`P2P_LL_THRESHOLD` (LL carries half of what it stores,
  and over PCIe 8 bytes of a 42-byte write: ``nccl.LL_PCIE_SHARE``), else Simple.
- latency: NCCL's tuner has no model of p2p; a send is one step of the same primitives over the same
  connection as a ring step, so the prediction charges the library's ring base latency for the protocol
  and one step of the hardware crossed (the slowest: the network where a peer is on another node). With
  Simple that step is the Tree's, the "chunk latency" NCCL and RCCL both charge a broadcast or reduce step
  that is not pipelined (``tuning.cc``, ``ncclTopoTuneModel``); across nodes NCCL adds the network plugin's
  latency, twice for Simple, as for a ring.

Left out: the channels each peer gets (``ncclTopoGetNchannels``) and how many peers run at once, which bound
a call only where a channel's copy is slower than the links; PXN (a GPU's data to another node relayed over
NVLink to the GPU on the destination's rail), which moves the same bytes through the same NICs; the local copy of
an alltoall's own part (S/n at memory speed, beside the links' transfer); NCCL's channel-count rule that lets an
op of up to channels x 16 KiB stay LL on one PCIe node (it depends on the communicator's channels, not
modelled); RCCL's MSCCL alltoall kernels on MI300-class nodes.

A prediction of what NCCL would do, labelled as such: NCCL's constants, the links' published figures, never
fitted to a measured sweep.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..topology import Topology
from ..topology.clusters import LinkRuns
from . import rccl
from . import tuning as T
from .protocols import PCIE, hardware_class

P2P_COLLECTIVES = ("alltoall", "sendrecv")
PROTOCOLS = ("LL", "Simple")    # p2p never runs LL128: addP2pToPlan picks LL or Simple
# NCCL_P2P_LL_THRESHOLD's default: a send of at most this many bytes (a channel) goes with LL (NVIDIA/nccl 5067397
# src/enqueue.cc, addP2pToPlan; ROCm/rccl 0cbce2a src/enqueue.cc, per op)
P2P_LL_THRESHOLD = 16384
SOURCE = ("NCCL's p2p planner: src/enqueue.cc (addP2pToPlan, NCCL_P2P_LL_THRESHOLD), NVIDIA/nccl at 5067397; "
          "ROCm/rccl at 0cbce2a; nccl-tests src/alltoall.cu and src/sendrecv.cu")
MAX_PAIRS = 1 << 20  # past this many (src, dst) pairs an alltoall is priced from the pairs of its first node


def price(collective: str, nbytes: int, topology: Topology, nranks: int, machine, protocol: str | None,
          ll_pcie_share: float) -> tuple[str, float, float]:
    """(protocol, latency s, seconds the bytes take) of nccl-tests' ``alltoall`` or ``sendrecv`` of ``nbytes`` over
    the first ``nranks`` GPUs of ``topology`` (``machine``: what NCCL reads of it), as grouped sends and receives:
    ``protocol`` as forced, else NCCL's choice by each peer's bytes; LL over PCIe inside a node carries
    ``ll_pcie_share`` of the link's peak."""
    per_peer = nbytes / nranks if collective == "alltoall" else float(nbytes)
    proto = protocol or ("LL" if per_peer <= P2P_LL_THRESHOLD else "Simple")
    loads = _loads(topology, nranks, collective, machine.gpus_per_node)
    busiest = max(float(np.max(load / _rates(topology, kind, proto, ll_pcie_share))) for kind, load in loads.items())
    return proto, latency(proto, tuple(loads), machine), per_peer * busiest


def latency(protocol: str, crossed: tuple[str, ...], machine) -> float:
    """Seconds a group of sends pays besides its bytes: the library's ring base latency for ``protocol`` and one
    step of the slowest hardware ``crossed`` ("intra": inside a node, "net": to another node)."""
    if machine.library == "rccl":
        base, steps = rccl.BASE_LATENCY["ring"], rccl.TUNING[rccl.tuning_index(machine)].hw_latency
        intra = "nvlink" if machine.intra in ("xgmi", "nvlink") else "pcie"
    else:
        base, steps = T.BASE_LATENCY["ring"], T.HW_LATENCY
        intra = "nvlink" if machine.intra == "nvlink" else "pcie"
    step = "tree" if protocol == "Simple" else "ring"  # Simple: the chunk latency of a step not pipelined
    hops = []
    for kind in crossed:
        hop = steps["net" if kind == "net" else intra][step][protocol]
        if kind == "net" and machine.library == "nccl":  # the network plugin's latency, twice for Simple's flush
            hop += T.NET_LATENCY.get(machine.fabric, 0.0) * (2 if protocol == "Simple" else 1)
        hops.append(hop)
    return base[protocol] + max(hops)


def pairs(collective: str, nranks: int, per_node: int) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every message a call sends between two ranks: the ring shift of sendrecv, or alltoall's
    every ordered pair; past :data:`MAX_PAIRS`, where the nodes are alike, only the pairs that touch the first node
    (every node's links carry what the first node's do)."""
    ranks = np.arange(nranks)
    if collective == "sendrecv":
        src, dst = ranks, (ranks + 1) % nranks
    elif nranks * (nranks - 1) > MAX_PAIRS and nranks % per_node == 0 and nranks > per_node:
        first, rest = np.arange(per_node), np.arange(per_node, nranks)
        src = np.concatenate([np.repeat(first, nranks), np.tile(rest, per_node)])
        dst = np.concatenate([np.tile(ranks, per_node), np.repeat(first, len(rest))])
    else:
        src, dst = np.repeat(ranks, nranks), np.tile(ranks, nranks)
    keep = src != dst
    return src[keep], dst[keep]


@lru_cache(maxsize=64)
def _loads(topology: Topology, nranks: int, collective: str, per_node: int) -> dict[str, np.ndarray]:
    """Messages crossing each directed channel (both ways summed on a half-duplex link), one array for the messages
    between ranks of one node ("intra") and one for those between nodes ("net"), where there are any."""
    src, dst = pairs(collective, nranks, per_node)
    across = src // per_node != dst // per_node
    out = {}
    for kind, chosen in (("intra", ~across), ("net", across)):
        if chosen.any():
            _, channels = topology.routes(src[chosen], dst[chosen])
            counts = np.bincount(channels, minlength=len(topology.channel_rate)).astype(float)
            out[kind] = topology.channel_load(counts)
    return out


def _rates(topology: Topology, kind: str, protocol: str, ll_pcie_share: float) -> np.ndarray:
    """Bytes/s of data each directed channel carries for messages of ``kind`` with ``protocol``: the link's rate
    with Simple; with LL half of it, or over PCIe inside a node ``ll_pcie_share`` of the peak."""
    if protocol == "Simple":
        return topology.channel_rate
    pcie = np.repeat([hardware_class(k) == PCIE for k in _kinds(topology)], 2)
    ll = topology.channel_rate * T.LL_SHARE
    return np.where(pcie, topology.channel_bandwidth * ll_pcie_share, ll) if kind == "intra" else ll


def _kinds(topology: Topology):
    """Each link's kind (nvswitch, pcie, host, ib, ...), in link order."""
    links = topology.links
    return links.kind if isinstance(links, LinkRuns) else [link.kind for link in links]


__all__ = ["price", "latency", "pairs", "P2P_COLLECTIVES", "PROTOCOLS", "P2P_LL_THRESHOLD", "MAX_PAIRS", "SOURCE"]
