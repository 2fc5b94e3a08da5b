"""NCCL's own choice: its tuner's model of every algorithm and protocol, on a ringlab topology.

NCCL costs each (algorithm, protocol) pair as ``latency + bytes / bandwidth`` and runs the fastest.
:func:`predict_nccl` does the same with NCCL's constants (``ringlab.predict.tuning``) and bandwidths
from the topology's links, as they are rated (``Link.rate``), so that a prediction says what healthy
hardware of that description gives:

- ``ring``: one ring per channel; across nodes each channel leaves a node through one NIC (channel c
  starts at NIC c mod NICs, ``search.cc``), so the rails add up: bus bandwidth ``min(NICs x NIC, port
  x G/(G-1))`` with G GPUs a node (each GPU sends one channel out over its NIC and the rest over
  NVLink). Latency is paid per step inside a node and per inter-node step, 2(nodes-1) of them, at
  the network's (a pipelined ring).
- ``tree``: NCCL's double binary tree across nodes, chains inside; each node moves 2S each way (S
  with two nodes), at log-depth latency.
- ``nvls``: the switch adds (NVLink SHARP): ``ringlab.predict.nvls``'s closed form, each GPU moving
  K(n+1)/n each way, at NCCL's NVLS efficiency for its generation (Hopper 0.85, Blackwell 0.74).
  All-gather and reduce-scatter by NVLS (one node): the switch copies a stored shard to every GPU, or adds a
  shard it loads from every GPU, so each GPU's port carries the whole size K one way, where a ring's carries
  K(n-1)/n: ``nvls_gather_algbw``, busbw (n-1)/n of the port at the same efficiency, as NCCL's tuner prices it
  (``intraBw *= (ppn-1)/ppn``). NCCL's tuner then takes that bus bandwidth for the call's rate (its conversion
  skips non-ring all-gathers), n/(n-1) slower again; the prediction keeps the count of bytes, the faster of the
  two, and the ring still wins at every size on the presets, so the pick is NCCL's either way. Not over more than
  32 GPUs of a node (``NCCL_MAX_NVLS_ARITY``: GB200 NVL72), nor across nodes without a CollNet plugin.
- ``nvlstree``: NVLS inside each node, a tree of nodes across: each NIC carries its GPU's shard,
  K/G each way (twice that past two nodes).
- ``collnet``: the fabric adds (InfiniBand SHARP): each NIC sends its shard up once and gets the sum.
- ``pat``: all-gather and reduce-scatter with one GPU per node, log-depth.

What NCCL's tuner leaves out, and the prediction adds: an NVLS allreduce inside one host runs as a pipeline
of three stages (scatter to the heads, reduce and store through the switch, gather; ``all_reduce.h``), a loop
of one chunk per head on every channel at a time, and NCCL shrinks its chunks below 1 GiB, 64 MiB and 8 MiB
on 8 Hopper GPUs (``calcCollChunking``). Filling that pipeline costs two loops, ``2 x min(size, loop) /
algbw``; and each loop synchronises its stages as a Simple step over NVLink does (NCCL's 3.4 us), which
NCCL's NVLS efficiency holds for loops of its default 128 KiB chunks, so the further loops of smaller chunks
pay it (:attr:`NcclPrediction.fill`, the two together). At 8 MiB on 8 H100s the two take a little longer
than the call's own transfer; the step every published Hopper NVLS sweep shows at 1 GiB, where the chunk
doubles, is the second. NCCL still picks by its tuner's model (:attr:`NcclPrediction.tuner_seconds`), and so does the
prediction. Neither is added where an NVLink domain spans hosts (GB200 NVL72): how NCCL lays out NVLS across
the hosts of one domain is not modelled here.

Protocols: LL carries half of what it stores and NCCL caps it (``llMaxBws``); over PCIe each LL store
(16 bytes, 8 of data) is a PCIe write of its own, so data is 8 of every 42 bytes on the wire
(:data:`LL_PCIE_SHARE`); LL128 carries 120 of 128 bytes, only where every path inside a node is
NVLink, and across the network on Hopper and later; Simple carries everything. A GPU reduces while
it copies, so reduction bounds the rate only where memory is slower than the links. NCCL's per-channel
caps of ring LL128 and of trees (``perChMax*Bws``) count where the channels are derived (one NVSwitch
host, ``ringlab.predict.channels``: they bind only on B200's LL128 ring, by 4%). Left out: those caps
elsewhere, and NCCL's NVLSTree correction on Blackwell x86 hosts.

Channels: a ring or tree call smaller than NCCL's per-thread threshold runs on fewer of the communicator's
channels, at that share of the links' rate (``ringlab.predict.channels``, ``topoGetAlgoInfo``); NCCL picks the
algorithm by its full-channel model first, and so does the prediction.

Alltoall and sendrecv have no tuner and no algorithm: NCCL runs them (nccl-tests does, and ``ncclAllToAll``) as a
group of sends and receives, LL for a peer's bytes up to ``NCCL_P2P_LL_THRESHOLD`` (16 KiB) and Simple above
(``src/enqueue.cc``, ``addP2pToPlan``). :func:`predict_nccl` prices them in ``ringlab.predict.p2p``: every
message along its route, each link carrying the sum of what crosses it, the call as long as its busiest link
(alltoall on one NVSwitch node: busbw the port's rate; across nodes, bounded by a GPU's share of its node's NICs),
plus the ring's base latency and one step of the hardware crossed, NCCL's (or RCCL's) constants; algorithm
``"p2p"``.

Everything here is a prediction of what NCCL would do, labelled as such, never a measurement.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..schedule import MAX_BYTES, bus_factor, check_count
from ..topology import Topology
from ..topology.clusters import ClusterTopology
from ..topology.machines import Machine
from . import p2p, rccl
from . import tuning as T
from .channels import Channels, call_channels, communicator_channels, graph_channels
from .nvls import nvls_algbw, nvls_gather_algbw, port_rate
from .protocols import hardware_class, NET
from .p2p import P2P_COLLECTIVES
from .rings import mesh_ring_rates

COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce")
# bytes a PCIe 3.0+ write adds to its payload: 4 framing, 2 sequence number, 16 header (64-bit address), 4 LCRC
# (the spec's figures, as UCX counts them: openucx/ucx#6416)
PCIE_TLP_OVERHEAD = 4 + 2 + 16 + 4
LL_STORE = 16           # bytes of one LL store, 8 of them data (NCCL's prims_ll.h: st.volatile.global.v4.u32)
LL_PCIE_SHARE = (LL_STORE / 2) / (LL_STORE + PCIE_TLP_OVERHEAD)  # 0.19 of a PCIe link's peak carries LL's data


@dataclass(frozen=True)
class NcclPrediction:
    """What NCCL's model predicts for one call: ``algorithm`` and ``protocol``, ``latency`` (s per call),
    ``algbw`` (bytes/s on all the communicator's channels) and ``fill`` (s: NVLS's pipeline start-up and loop
    synchronisation inside one host, which NCCL's tuner does not count); ``channels`` of ``channels_total``
    (``ringlab.predict.channels``: fewer for a small ring or tree call, which then moves at ``channel_algbw``, its
    share of the links under the same caps; 0 where NCCL's channel count is not derived here) with ``threads``
    each; ``seconds`` and ``busbw`` (nccl-tests' bus bandwidth) follow, and ``tuner_seconds`` is NCCL's own
    estimate, on all channels, by which it picks."""

    collective: str
    nbytes: int
    nranks: int
    algorithm: str
    protocol: str
    latency: float
    algbw: float
    topology: str
    fill: float = 0.0
    channels: int = 0
    channels_total: int = 0
    threads: int = 0
    channel_algbw: float = 0.0

    @property
    def rate(self) -> float:
        """Bytes/s the call moves at: ``algbw`` on all channels, or ``channel_algbw`` on the fewer it runs on."""
        return self.channel_algbw or self.algbw

    @property
    def seconds(self) -> float:
        return self.latency + self.fill + self.nbytes / self.rate

    @property
    def tuner_seconds(self) -> float:
        return self.latency + self.nbytes / self.algbw

    @property
    def busbw(self) -> float:
        return self.nbytes / self.seconds * bus_factor(self.collective, self.nranks)

    def __repr__(self) -> str:
        fewer = f" on {self.channels} of {self.channels_total} channels" if self.channels < self.channels_total else ""
        return (f"NcclPrediction({self.collective} of {self.nbytes} B on {self.topology}, {self.nranks} ranks: "
                f"{self.algorithm}/{self.protocol}{fewer}, {self.seconds * 1e6:.1f} us, "
                f"busbw {self.busbw / 1e9:.1f} GB/s)")


@dataclass(frozen=True)
class Facts:
    """The machine as NCCL's tuner sees it for one call: nodes, GPUs a node, and the rates that bound each
    algorithm (bytes/s each way: a GPU's NVLink port, one node's ring, one node's NICs together)."""

    machine: Machine
    nranks: int
    nodes: int
    per_node: float
    port: float | None
    ring: float
    ring_peak: float
    net: float
    nics: int
    nvls: bool
    reduce_rate: float

    @property
    def arch(self) -> str:
        return self.machine.arch


def predict_nccl(collective: str, nbytes: int, topology: Topology, algorithm: str | None = None,
                 protocol: str | None = None, nranks: int | None = None) -> NcclPrediction:
    """NCCL's predicted time for ``collective`` of ``nbytes`` (nccl-tests' size) on ``topology`` (all its
    GPUs, or the first ``nranks``): with ``algorithm=None`` the (algorithm, protocol) NCCL's tuner would
    pick, else the one forced (ring, tree, nvls, nvlstree, collnet, pat; protocol LL, LL128, Simple).

    Modelled: allreduce, allgather, reduce_scatter, broadcast and reduce by NCCL's tuner (``src/graph/tuning.cc``
    at 5067397, ``ringlab.predict.tuning``; RCCL's at 0cbce2a on AMD GPUs, ``ringlab.predict.rccl``); alltoall and
    sendrecv as the grouped sends and receives NCCL runs them as (``ringlab.predict.p2p``: algorithm ``"p2p"``,
    protocol LL up to 16 KiB a peer, else Simple; ``protocol`` forces one). Bandwidths are the topology's links at
    their rated share of the published peaks; nothing is fitted to a measurement."""
    if collective in P2P_COLLECTIVES:
        return _predict_p2p(collective, nbytes, topology, algorithm, protocol, nranks)
    if collective not in COLLECTIVES:
        raise ValueError(f"NCCL's model here covers {', '.join(COLLECTIVES + P2P_COLLECTIVES)}; not {collective!r}")
    nbytes = check_count("nbytes", nbytes, minimum=1, maximum=MAX_BYTES)
    facts = machine_facts(topology, nranks)
    if algorithm is not None and algorithm not in T.ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; NCCL's are: {', '.join(T.ALGORITHMS)}")
    if protocol is not None and protocol not in T.PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; NCCL's are: {', '.join(T.PROTOCOLS)}")
    options = []
    for name in ([algorithm] if algorithm else T.ALGORITHMS):
        why = unusable(name, collective, facts)
        if why:
            if algorithm:
                raise ValueError(f"{name} cannot run {collective} on {topology.name}: {why}")
            continue
        for proto in ([protocol] if protocol else T.PROTOCOLS):
            why_not = _protocol_unusable(name, proto, facts)
            if why_not:
                if algorithm and protocol:
                    raise ValueError(f"{facts.machine.library.upper()} does not run {name} with {proto} on "
                                     f"{topology.name}" + (f": {why_not}" if why_not is not True else ""))
                continue
            options.append(_predict(collective, nbytes, name, proto, facts, topology.name))
    if not options:
        raise ValueError(f"no algorithm of NCCL's runs {collective} with {protocol} on {topology.name}")
    return min(options, key=lambda p: p.tuner_seconds)  # NCCL picks by its own model


def _predict_p2p(collective: str, nbytes: int, topology: Topology, algorithm: str | None, protocol: str | None,
                 nranks: int | None) -> NcclPrediction:
    """Alltoall or sendrecv as NCCL runs them, grouped sends and receives (``ringlab.predict.p2p``)."""
    if algorithm not in (None, "p2p"):
        raise ValueError(f"NCCL runs {collective} as grouped send/recv (algorithm 'p2p'), not {algorithm!r}")
    if protocol not in (None, *p2p.PROTOCOLS):
        raise ValueError(f"NCCL's send/recv runs LL or Simple, not {protocol!r}")
    nbytes = check_count("nbytes", nbytes, minimum=1, maximum=MAX_BYTES)
    n = ranks_of(topology, nranks)
    proto, latency, seconds = p2p.price(collective, nbytes, topology, n, machine_of(topology), protocol,
                                        LL_PCIE_SHARE)
    return NcclPrediction(collective, nbytes, n, "p2p", proto, latency, nbytes / seconds, topology.name)


def ranks_of(topology: Topology, nranks: int | None = None) -> int:
    """The ranks a call runs on: all of ``topology``'s GPUs, or its first ``nranks`` (at least 2)."""
    n = topology.nranks if nranks is None else check_count("nranks", nranks, minimum=2)
    if n > topology.nranks:
        raise ValueError(f"{n} ranks: topology {topology.name} has {topology.nranks}")
    return n


def machine_of(topology: Topology) -> Machine:
    """What NCCL reads of ``topology`` beyond its links; where it does not say, one node of Volta GPUs, NVLink or
    PCIe inside as its links are."""
    return topology.machine or Machine("unknown", "volta", 1, topology.nranks, intra=_intra_of(topology))


def machine_facts(topology: Topology, nranks: int | None = None) -> Facts:
    """What NCCL's tuner reads of ``topology`` for a call over its first ``nranks`` GPUs (all by default)."""
    n = ranks_of(topology, nranks)
    machine = machine_of(topology)
    gpus = machine.gpus_per_node
    nodes = max(1, -(-n // gpus))
    port = _port(topology)
    if port:
        ring, peak = port, _port(topology, peak=True)
    elif min(n, gpus) < 2:  # one GPU a node: no link inside a node carries the ring (the network sets its pace, as
        ring = peak = np.inf  # _across has it)
    else:  # GPUs joined pairwise (xGMI, GH200's NVLink): many rings over every link; else the best ring's rate
        ring, peak = (machine.mesh and _mesh_rates(topology, min(n, gpus))) or _ring_rates(topology, min(n, gpus))
    nvls = bool(topology.switch_reduce and machine.arch in T.NVLS_EFFICIENCY)
    return Facts(machine, n, nodes, n / nodes, port, ring, peak, _net_per_node(topology, machine) if nodes > 1 else 0.0,
                 machine.nics_per_node, nvls, topology.reduce_rate)


def unusable(algorithm: str, collective: str, facts: Facts) -> str | None:
    """Why NCCL (RCCL on AMD GPUs) would not run ``algorithm`` for ``collective`` here, or None where it would."""
    if facts.machine.library == "rccl":
        return rccl.unusable(algorithm, collective, facts)
    reducing_all = collective == "allreduce"
    if algorithm == "ring":
        return None
    if algorithm == "pat":
        if collective not in ("allgather", "reduce_scatter"):
            return "PAT is for all-gather and reduce-scatter"
        return None if facts.per_node == 1 and facts.nodes > 1 else "PAT needs one GPU per node"
    if not reducing_all and algorithm == "nvls" and collective in ("allgather", "reduce_scatter"):
        if not facts.nvls:
            return "its switches cannot add (NVLS needs NVSwitch of the Hopper generation or later, and NVLS on)"
        if facts.per_node > T.NVLS_MAX_ARITY:
            return (f"NCCL runs NVLS all-gather and reduce-scatter over at most {T.NVLS_MAX_ARITY} GPUs of a node "
                    "(NCCL_MAX_NVLS_ARITY)")
        # NCCL's tuner turns them off across nodes unless a CollNet plugin gathers and scatters for every GPU
        # (tuning.cc: busBw = 0 without ncclCollNet->iallgather / ireducescatter and a head per local rank)
        return None if facts.nodes == 1 else ("NVLS all-gather and reduce-scatter across nodes need a CollNet "
                                              "plugin that gathers and scatters, one head a GPU (not modelled)")
    if not reducing_all:
        return f"{algorithm} runs allreduce only here"
    if algorithm == "tree":
        return None
    if algorithm in ("nvls", "nvlstree") and not facts.nvls:
        return "its switches cannot add (NVLS needs NVSwitch of the Hopper generation or later, and NVLS on)"
    if algorithm == "nvls" and facts.nodes > 1 and not facts.machine.sharp:
        return "NVLS across nodes needs a fabric that reduces (CollNet, SHARP)"
    if algorithm == "nvlstree" and facts.nodes == 1:
        return "NVLSTree needs two nodes or more"
    if algorithm == "collnet" and (facts.nodes == 1 or not facts.machine.sharp or not facts.port):
        return "CollNet needs NVSwitch nodes on a fabric that reduces (SHARP: cluster(..., sharp=True))"
    return None


def ll128_allowed(facts: Facts) -> bool:
    """NCCL enables LL128 where the paths inside a node are NVLink, and across nodes on Hopper and later."""
    return facts.machine.intra == "nvlink" and (facts.nodes == 1 or facts.arch in ("hopper", "blackwell"))


def _protocol_unusable(algorithm: str, protocol: str, f: Facts) -> str | bool | None:
    """Why the library would not run ``algorithm`` with ``protocol`` here (True: it has no such pair), or None."""
    if f.machine.library == "rccl":
        return rccl.protocol_unusable(algorithm, protocol, f)
    if protocol not in T.BASE_LATENCY[algorithm]:
        return True
    if protocol == "LL128" and not ll128_allowed(f):
        return "LL128 needs NVLink inside the node (and Hopper or later across nodes)"
    return None


def _predict(collective: str, nbytes: int, algorithm: str, protocol: str, f: Facts, name: str) -> NcclPrediction:
    if f.machine.library == "rccl":
        return NcclPrediction(collective, nbytes, f.nranks, algorithm, protocol,
                              rccl.latency(collective, algorithm, protocol, f),
                              rccl.algbw(collective, algorithm, protocol, f, _across(f), nbytes), name)
    algbw = _algbw(collective, algorithm, protocol, f)
    used = call_channels_of(nbytes, algorithm, protocol, f)
    narrow = _algbw(collective, algorithm, protocol, f, used.share) if used and used.share < 1 else 0.0
    if algorithm == "tree":
        algbw *= T.tree_correction(protocol, nbytes)
        narrow *= T.tree_correction(protocol, nbytes)
    latency = _latency(collective, algorithm, protocol, f)
    if (algorithm, protocol, collective) == ("ring", "Simple", "allreduce") and f.nodes > 1 and \
            nbytes / (T.CHANNELS_PER_NIC * f.nics * f.nranks) >= 64:
        latency *= T.RING_PLATEAU["ampere+" if f.arch in ("ampere", "hopper", "blackwell") else "pre-ampere"]
    return NcclPrediction(collective, nbytes, f.nranks, algorithm, protocol, latency, algbw, name,
                          nvls_fill(collective, nbytes, algbw, f) if algorithm == "nvls" else 0.0,
                          *((used.used, used.total, used.threads, narrow) if used else ()))


def call_channels_of(nbytes: int, algorithm: str, protocol: str, f: Facts) -> Channels | None:
    """The channels NCCL runs a ring or tree call on (``ringlab.predict.channels``), on one host of NVIDIA GPUs on
    NVSwitch, where its channel count follows from the links; None elsewhere, and for other algorithms."""
    if algorithm not in ("ring", "tree") or not _graph_channels(f):
        return None
    return call_channels(nbytes, algorithm, protocol, f.nranks, communicator_channels(f.arch, f.port / T.GB))


def _graph_channels(f: Facts) -> int:
    """The ring graph's channels NCCL's tuner prices (``ringlab.predict.channels``), where they are derived here;
    else 0."""
    if f.nodes != 1 or not f.port or not f.machine.one_host_per_node or f.machine.library != "nccl" or \
            f.machine.intra != "nvlink" or f.arch not in T.PER_CHANNEL_RING_LL128:
        return 0
    return graph_channels(f.arch, f.port / T.GB)


def nvls_fill(collective: str, nbytes: int, algbw: float, f: Facts) -> float:
    """Seconds an NVLS allreduce inside one host spends beyond NCCL's model: filling its pipeline,
    NVLS_STAGES - 1 loops (a loop is a chunk for every head on every channel; the whole call that many times
    over where it is less than a loop), and one NVLink Simple step's synchronisation for each loop beyond those
    of NCCL's default chunk (a platform's larger chunk, fewer loops: fewer of them). 0 where NCCL does not run its
    one-node NVLS kernel: across hosts, or for other collectives."""
    if collective != "allreduce" or f.nodes != 1 or not f.machine.one_host_per_node or f.arch not in T.NVLS_CHANNELS:
        return 0.0
    concurrent = T.NVLS_CHANNELS[f.arch] * int(f.per_node)
    chunk = T.nvls_chunk(nbytes, concurrent, T.NVLS_CHUNK_BY_FABRIC.get(f.machine.fabric, T.NVLS_CHUNK))
    loop = concurrent * chunk
    extra_loops = nbytes / loop * (1 - chunk / T.NVLS_CHUNK)
    return (T.NVLS_STAGES - 1) * min(nbytes, loop) / algbw + extra_loops * T.NVLS_LOOP_SYNC


def _algbw(collective: str, algorithm: str, protocol: str, f: Facts, share: float = 1.0) -> float:
    """Bytes/s of the call's size: the rate the algorithm's busiest link allows, by NCCL's protocol shares; on
    ``share`` of the channels (ring and tree), that share of the links under the same whole-GPU caps (LL's, the
    reduction's), as NCCL's tuner prices ``nChannels x`` a channel's bandwidth and then caps it."""
    n, per_node = f.nranks, f.per_node
    if algorithm == "ring":
        bus = share * (f.ring if f.nodes == 1 else min(_across(f), f.net))
        if protocol == "LL":
            over_pcie = f.machine.intra == "pcie" and f.nodes == 1
            wire = share * f.ring_peak * LL_PCIE_SHARE if over_pcie else bus * T.LL_SHARE
            bus = min(T.ll_max_bw(f.arch, f.nodes, f.machine.cpu), wire)
        elif protocol == "LL128":
            bus *= T.LL128_SHARE
            if _graph_channels(f):  # perChMaxRingLL128Bws: a channel carries so much LL128 at most
                bus = min(bus, share * _graph_channels(f) * T.PER_CHANNEL_RING_LL128[f.arch])
        steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reduce_scatter": n - 1}.get(collective, n)
        algbw = bus * n / steps
        if collective in ("allreduce", "reduce_scatter", "reduce"):
            algbw = min(algbw, f.reduce_rate * n / (n - 1))  # reduction overlapped with the transfer
        return algbw
    if algorithm == "tree":
        chain = f.port or f.ring
        bus = share * T.TREE_SHARE * (chain if f.nodes == 1 else min(chain, f.net * (2 if f.nodes == 2 else 1)))
        cap = share * _graph_channels(f)  # perChMaxTree(LL128)Bws x channels, where they are derived here
        if protocol == "LL":
            bus = min(bus * T.TREE_LL_SHARE, T.ll_max_bw(f.arch, f.nodes, f.machine.cpu))
        elif protocol == "LL128":
            bus *= T.TREE_LL128_SHARE["one node" if f.nodes == 1 else "across nodes"]
            bus = min(bus, cap * T.PER_CHANNEL_TREE_LL128[f.arch]) if cap else bus
        elif cap:
            bus = min(bus, cap * T.PER_CHANNEL_TREE[f.arch])
        return T.TREE_ALGBW * bus
    if algorithm == "nvls" and collective in ("allgather", "reduce_scatter"):
        return nvls_gather_algbw(f.port, T.NVLS_EFFICIENCY[f.arch])
    inside = nvls_algbw(f.port, T.NVLS_EFFICIENCY[f.arch], per_node) if f.nvls else 0.0
    if algorithm == "nvls":
        return inside if f.nodes == 1 else min(inside, f.net)
    if algorithm == "nvlstree":
        return min(inside, f.net / (1 if f.nodes == 2 else 2))
    if algorithm == "collnet":
        direct = f.port * per_node / (2 * (per_node - 1)) * (T.COLLNET_HOPPER_SHARE if f.arch in
                                                               ("hopper", "blackwell") else 1.0)
        return min(inside or direct, f.net)
    return T.PAT_SHARE * f.net  # pat: one GPU per node, its NICs


def _latency(collective: str, algorithm: str, protocol: str, f: Facts) -> float:
    """NCCL's latency per call: base, then per step or per level by the hardware crossed."""
    intra_hw = "nvlink" if f.machine.intra == "nvlink" else "pcie"
    base = T.BASE_LATENCY[algorithm][protocol]
    intra = T.HW_LATENCY[intra_hw][algorithm][protocol]
    inter = T.HW_LATENCY["net"]["tree" if f.per_node == 1 else algorithm][protocol]  # one GPU a node: fully exposed
    inter += T.NET_LATENCY.get(f.machine.fabric, 0.0) * (2 if protocol == "Simple" else 1)
    n, nodes, per_node = f.nranks, f.nodes, int(f.nranks // f.nodes)
    if algorithm == "ring":
        steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reduce_scatter": n - 1}.get(collective, n)
        if collective in ("broadcast", "reduce"):
            return base + steps * T.HW_LATENCY["net" if nodes > 1 else intra_hw]["ring"][protocol]
        if nodes > 1:
            overhead = T.NET_OVERHEAD[f.machine.cpu] * (T.NET_OVERHEAD_SIMPLE if protocol == "Simple" else 1)
            intra = max(intra, overhead)
        crossing = 0 if nodes == 1 else 2 * (nodes - 1) if collective == "allreduce" else nodes - 1
        return base + (steps - crossing) * intra + crossing * inter
    if algorithm == "tree":
        return base + 2 * ((per_node - 1) * intra + T.log2i(nodes) * inter)
    if algorithm == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    if algorithm == "nvlstree":
        return intra + 2 * T.log2i(nodes) * inter
    if algorithm == "collnet":
        return 2 * (min(1, per_node - 1) * intra + (per_node - 1) * T.COLLNET_ARITY_LATENCY) + inter
    return base + T.log2i(nodes) * inter / T.PAT_NET_DIVISOR + n * T.PAT_LATENCY_PER_RANK


def _across(f: Facts) -> float:
    """A node's share of a multi-node ring inside it: each GPU sends one channel in G out over its NIC
    and the rest over its NVLink port (port x G/(G-1)); without NVSwitch, the node's own ring."""
    per_node = int(f.per_node)
    return f.port * per_node / (per_node - 1) if f.port and per_node > 1 else f.ring if per_node > 1 else np.inf


def _intra_of(topology: Topology) -> str:
    """nvlink where every link between GPUs and switches is NVLink, else pcie (what NCCL's typeIntra says)."""
    kinds = {link.kind for link, joins_rank in topology.link_classes() if joins_rank}
    return "nvlink" if kinds and kinds <= {"nvlink", "nvswitch"} else "pcie"


def _port(topology: Topology, peak: bool = False) -> float | None:
    """The slowest GPU's NVSwitch port (rated, or its peak), or None without NVSwitch."""
    try:
        rate = port_rate(topology)
    except ValueError:
        return None
    if not peak:
        return rate
    return min(link.bandwidth for link, _ in topology.link_classes() if link.kind == "nvswitch" and link.rate == rate)


@lru_cache(maxsize=64)
def _mesh_rates(topology: Topology, n: int) -> tuple[float, float] | None:
    """(rated, peak) bus bytes/s of the rings over the first ``n`` GPUs of a node whose GPUs are joined pairwise."""
    return mesh_ring_rates(topology, n, topology.machine.rings)


@lru_cache(maxsize=64)
def _ring_rates(topology: Topology, n: int) -> tuple[float, float]:
    """(rated, peak) bytes/s of the best ring over the first ``n`` ranks: the busiest channel's share."""
    from .rings import best_ring

    order, _ = best_ring(topology, n)
    src = np.array(order)
    pairs, channels = topology.routes(src, np.roll(src, -1))
    load = topology.channel_load(np.bincount(channels, minlength=len(topology.channel_rate)).astype(float))
    used = load > 0
    return (float((topology.channel_rate[used] / load[used]).min()),
            float((topology.channel_bandwidth[used] / load[used]).min()))


def _net_per_node(topology: Topology, machine: Machine) -> float:
    """Bytes/s one node's NICs carry each way: each NIC at the slower of its port and its PCIe path from a GPU."""
    if isinstance(topology, ClusterTopology):  # every NIC alike: its port, fed over PCIe
        (port,) = [r for r in topology.links.runs if hardware_class(r.link.kind) == NET]
        feed = max(r.link.rate for r in topology.links.runs if "nic{" in r.a + r.b and r is not port)
        return port.count * min(port.link.rate, feed) / machine.nodes
    net = [link for link in topology.links if hardware_class(link.kind) == NET]
    ends = Counter(end for link in net for end in (link.a, link.b))
    nics = {end: link.rate for link in net for end in (link.a, link.b) if ends[end] == 1}  # the fabric: many
    if not nics:
        raise ValueError(f"{topology.name}: {machine.nodes} nodes but no network cards to cross between them")
    feeds: dict[str, float] = {}
    for link in topology.links:
        for end, other in ((link.a, link.b), (link.b, link.a)):
            if end in nics and hardware_class(link.kind) != NET:
                feeds[end] = max(feeds.get(end, 0.0), link.rate)
    return sum(min(rate, feeds.get(nic, rate)) for nic, rate in nics.items()) / machine.nodes


__all__ = ["predict_nccl", "NcclPrediction", "machine_facts", "machine_of", "ranks_of", "Facts", "unusable",
           "ll128_allowed", "nvls_fill", "call_channels_of", "LL_PCIE_SHARE", "COLLECTIVES", "P2P_COLLECTIVES"]
