"""Emulated machines: run a schedule on the links of a :class:`~ringlab.topology.Topology`, not only predict it.

Under ``with rl.emulate(topology, scale=1.0, compute="cpu"):`` (on every rank), or with ``RINGLAB_EMULATE=SPEC``
(and ``RINGLAB_EMULATE_COMPUTE=cpu|model``) in the environment of an ``mpiexec`` job or of ``%%px`` engines,
ringlab's collectives run in **virtual time**, as SimGrid's SMPI runs MPI programs: the data really moves
and is really reduced (every result is checked against MPI's as before), but the time each rank reports is
its own virtual clock (:func:`now`), not this machine's:

- a message leaves when its sender's clock says it is sent, and arrives its link's time later: its route's
  latency, plus, for its bytes, the time its busiest link needs for everything that crosses that link in
  the same step (concurrent messages share a link as the cost model shares it); every message carries its
  sender's time to the receiver (on a communicator of its own beside ringlab's);
- a rank pays for its messages one after another, as the cost model says: each further peer it sends to or
  receives from in a step adds its route's latency;
- a receive completes at the later of the receiver's clock and the message's arrival;
- with ``compute="cpu"`` (the default) computation advances the clock by the CPU time this thread used
  (``time.thread_time``: what other processes do on the cores does not count), both the learner's code
  between calls and, inside a call, the reductions and copies that land each message; waiting for a
  message, ringlab's own bookkeeping and the argument agreement are never counted;
- with ``compute="model"`` this CPU's time never counts: a call's own work is priced as the cost model
  prices it (a reduction at the topology's ``reduce_rate``, the emulated GPU's memory bandwidth on a
  preset; copies are free), and compute between calls is what :func:`elapse` says it is, so that an
  emulated 8x H100 gives H100-like times whatever this CPU is and however busy it is.

Nobody sleeps: an emulated run takes as long as its CPU work, and 16 ranks on 2 cores report the same
times as on 16 cores. What it is not: a measurement of any network. It is real code and real data on
modelled links (:mod:`ringlab.topology`), with this CPU's work counted as CPU time, or modelled.
:func:`wall` is this machine's own clock, for what the CPU really took beside it.

This module says when each message is due (:class:`Pacing`) and keeps the clocks (:class:`Clock`, one per
thread, so that a communication thread overlaps the main thread's compute as a GPU's communication stream
would); the transport binds the due times to the call's messages and the run (:mod:`ringlab.mpi.run`)
keeps them. Pacing comes from the links, never from a prediction: the emulated run is an independent check
of the cost model.

``scale`` (or ``@SCALE`` after a SPEC) multiplies every link's time (and a modelled cost) but not this CPU's
work: a run at scale 4 is this CPU beside links 4 times slower, and its times divided by 4
(:meth:`Emulation.machine_seconds`) are the emulated machine's links beside a CPU 4 times faster than this
one. In virtual time a scale is never needed to outrun the CPU; it is kept for what it says.

SPEC is a preset name (``"hgx-h100-8"``), ``"uniform:GBPS:US"`` (every pair of ranks linked alike:
bandwidth in GB/s, latency in microseconds) or ``"nodes:RANKS:GBPS:US"`` (nodes of RANKS ranks, free
inside, GBPS per rank between them), optionally followed by ``"@SCALE"``. How a SPEC becomes a topology
is ``ringlab.topology.from_spec`` (ringlab's package wires it in: this module reads only the links it
is given). ``RINGLAB_NODE_LINK_GBPS=B`` with ``RINGLAB_RANKS_PER_NODE=L`` (slowed links between
simulated nodes, :mod:`ringlab.mpi.nodes`) is the emulated machine ``nodes:L:B:0``: messages inside a
node cost nothing, and a trace marks the others "(slowed)".
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..schedule import chunk_bounds, positive_number
from .deadlines import _RAW, raw_setting
from .run import Clock, thread_clock

SPEC_ENV = "RINGLAB_EMULATE"
COMPUTE_ENV = "RINGLAB_EMULATE_COMPUTE"
_SPEC_BYTES, _LINK_BYTES = SPEC_ENV.encode(), b"RINGLAB_NODE_LINK_GBPS"  # what current() looks at first
COMPUTES = ("cpu", "model")  # what a call's own work costs: this thread's CPU time, or the cost model's price
_CACHE_SIZE = 64      # per-call link timings kept (schedule, size, machine), oldest dropped first
SPEC_PARSER: list = []  # [ringlab.topology.from_spec], set by ringlab/__init__.py


@dataclass(frozen=True)
class Emulation:
    """A machine to run on: its ``topology`` (or a ``spec`` resolved per job size), the ``scale`` its links' times
    are multiplied by, and how a call's own work is counted (``compute``: "cpu" or "model")."""

    topology: object | None
    scale: float = 1.0
    spec: str | None = None
    compute: str = "cpu"
    name: str | None = None  # what the machine is called in messages and labels, when not its spec or topology
    mark: str = ""           # how a trace marks a message that crossed its links (16 characters hold it), when not the label

    def resolve(self, nranks: int):
        """The topology for a job of ``nranks`` ranks, or a ValueError saying why there is none."""
        topology = self.topology
        if topology is None:
            key = (self.spec, nranks)  # a SPEC is its content: parsed once per job size
            topology = _RESOLVED.get(key)
            if topology is None:
                topology, _ = _parse(self.spec, nranks)
                _RESOLVED[key] = topology
                if len(_RESOLVED) > _CACHE_SIZE:
                    _RESOLVED.popitem(last=False)
        if topology.nranks < nranks:
            raise ValueError(f"the emulated machine {topology.name} has {topology.nranks} ranks; this job has {nranks}")
        return topology

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        name = self.spec.split("@")[0] if self.spec else self.topology.name
        slower = "" if self.scale == 1 else f", {self.scale:g}x slower"
        modelled = ", modelled compute" if self.compute == "model" else ""
        return f"emulated {name}{slower}{modelled}"

    def machine_seconds(self, measured: float) -> float:
        """A time measured here in the emulated machine's units."""
        return measured / self.scale

    @property
    def key(self) -> tuple | None:
        """What this machine is, by content (its SPEC, or its topology's fingerprint, and the scale), for the
        caches of its links' times: never the identity of an object that can die and leave its id to another
        machine. None for a topology without a fingerprint, whose times are then not kept."""
        if self.topology is None:
            return ("spec", self.spec, self.scale, self.compute)
        fingerprint = getattr(self.topology, "fingerprint", None)
        return None if fingerprint is None else ("topology", fingerprint(), self.scale, self.compute)


_RESOLVED: OrderedDict = OrderedDict()  # (SPEC, ranks) -> its topology


_ACTIVE: list[Emulation] = []


def _parse(spec: str, nranks: int | None):
    if not SPEC_PARSER:
        raise RuntimeError("ringlab.topology.from_spec is not wired in: import ringlab first")
    return SPEC_PARSER[0](spec, nranks)


def emulation(machine, scale: float | None = None, compute: str | None = None) -> Emulation:
    """An :class:`Emulation` of ``machine`` (a Topology, or a SPEC string) at ``scale``, counting a call's own work
    as ``compute`` says (None: ``RINGLAB_EMULATE_COMPUTE``, else "cpu"); a ValueError for a bad SPEC, a scale
    that is not > 0 or a compute that is not "cpu" or "model"."""
    compute = _compute(compute)
    if isinstance(machine, str):
        _, spec_scale = _parse(machine, None)  # checks the spec now, on every rank, before any work
        scale = spec_scale if scale is None else scale
        return Emulation(None, _scale(scale), machine, compute)
    if not hasattr(machine, "routes") or not hasattr(machine, "channel_rate"):
        raise ValueError(f"emulate a Topology (rl.topology.preset(...), rl.topology.uniform(...)) or a SPEC "
                         f"string, not {type(machine).__name__}")
    return Emulation(machine, _scale(1.0 if scale is None else scale), compute=compute)


def _compute(compute) -> str:
    """``compute`` checked, or the environment's (``RINGLAB_EMULATE_COMPUTE``), or "cpu"."""
    if compute is None:
        text = os.environ.get(COMPUTE_ENV, "").strip()
        if text and text not in COMPUTES:
            raise ValueError(f"{COMPUTE_ENV}={text!r}: say cpu (a call's own work counts as the CPU time it took) or "
                             "model (priced by the cost model: a reduction at the topology's reduce_rate)")
        return text or "cpu"
    if compute not in COMPUTES:
        raise ValueError(f"compute must be 'cpu' (a call's own work counts as the CPU time it took) or 'model' "
                         f"(priced by the cost model: a reduction at the topology's reduce_rate), got {compute!r}")
    return compute


def _scale(scale) -> float:
    if not positive_number(scale):
        raise ValueError(f"the emulation's scale must be a number > 0 (how many times slower), got {scale!r}")
    return float(scale)


@contextmanager
def emulate(machine, scale: float | None = None, compute: str | None = None):
    """Run ringlab's collectives on ``machine``'s links, in virtual time, inside the block (call it on every
    rank): ``machine`` a Topology or a SPEC string, ``scale`` how many times slower its links are made (None:
    the SPEC's ``@SCALE``, else 1), ``compute`` "cpu" (a call's own work counts as the CPU time it took) or
    "model" (priced as the cost model prices it); None: the enclosing block's, else ``RINGLAB_EMULATE_COMPUTE``,
    else "cpu". Inside,
    :func:`now` reads this rank's virtual clock, which starts counting this thread's CPU at the outermost
    block (blocks nest: the innermost machine carries the calls, one clock runs through them all)."""
    if compute is None and _ACTIVE:  # a block inside another counts compute as the one around it does
        compute = _ACTIVE[-1].compute
    chosen = emulation(machine, scale, compute)
    if current() is None:  # the outermost block: what this thread did before ran on no emulated machine
        thread_clock().restart()
    _ACTIVE.append(chosen)
    try:
        yield chosen
    finally:
        _ACTIVE.remove(chosen)


_FROM_ENV: dict[str, Emulation] = {}


def possible() -> bool:
    """Whether an emulation may be in force (False: certainly not), in a tenth of a microsecond: an ``emulate``
    block, or ``RINGLAB_EMULATE`` or ``RINGLAB_NODE_LINK_GBPS`` set. :func:`current` says which, or that none is."""
    if _ACTIVE:
        return True
    return bool(raw_setting(_SPEC_BYTES) or raw_setting(_LINK_BYTES))


def plain() -> bool:
    """Whether this is certainly the raw machine, with no straggler: no emulation possible (:func:`possible`)
    and no :func:`straggling` pause; one look for the thinnest calls."""
    if _RAW is not None:  # the environment's own dict, looked at directly: two lookups, no call
        return not (_ACTIVE or _STALLS or _RAW.get(_SPEC_BYTES) or _RAW.get(_LINK_BYTES))
    return not (_ACTIVE or _STALLS or raw_setting(_SPEC_BYTES) or raw_setting(_LINK_BYTES))


def current() -> Emulation | None:
    """The emulation in force: the innermost ``emulate`` block, else ``RINGLAB_EMULATE``, else the slowed link
    between simulated nodes that ``RINGLAB_NODE_LINK_GBPS`` asks for (``nodes:RANKS:GBPS:0``), else None.
    Asking for both a machine and a slowed link between simulated nodes is a ValueError."""
    if not possible():
        return None  # the raw machine (most calls): two looks at the environment, nothing parsed
    from . import nodes

    rate = nodes.simulated_link()  # a bad value is a ValueError here
    if rate is not None and (_ACTIVE or os.environ.get(SPEC_ENV, "").strip()):
        raise ValueError(f"{nodes.LINK} slows the links between simulated nodes of this machine, and an emulated "
                         f"machine ({SPEC_ENV} or rl.emulate) has links of its own: use one of them (the emulated "
                         "machine nodes:RANKS:GBPS:US is what the first one is)")
    if _ACTIVE:
        return _ACTIVE[-1]
    spec = os.environ.get(SPEC_ENV, "").strip()
    if rate is not None:
        spec = f"nodes:{nodes.simulated()}:{rate / 1e9!r}:0"
        if spec not in _FROM_ENV:
            _FROM_ENV[spec] = Emulation(None, 1.0, spec, name=f"simulated nodes joined by slowed links "
                                                              f"({nodes.LINK}={rate / 1e9:g})", mark="slowed")
        return _FROM_ENV[spec]
    if not spec:
        return None
    compute = os.environ.get(COMPUTE_ENV, "").strip()
    if (spec, compute) not in _FROM_ENV:
        try:
            _FROM_ENV[(spec, compute)] = emulation(spec)
        except ValueError as err:
            raise ValueError(f"{SPEC_ENV}={spec!r}: {err}" if not str(err).startswith(COMPUTE_ENV) else str(err)) from None
    return _FROM_ENV[(spec, compute)]


def describe() -> str | None:
    """What every rank must agree on about the emulation (None: the raw machine)."""
    now = current()
    if now is None or now.spec:
        return None if now is None else now.label
    key = now.key
    if key is None:  # a topology of one's own without a fingerprint: its links, digested here
        links = tuple((link.a, link.b, link.bandwidth, link.latency) for link in now.topology.links)
        digest = hashlib.sha256(repr(links).encode()).hexdigest()
    else:
        digest = key[1]
    return f"{now.label} ({len(now.topology.links)} links, digest {digest[:8]})"  # the same on every rank


_TIMINGS: OrderedDict = OrderedDict()


def link_timings(schedule, count: int, itemsize: int, topology, scale: float) -> list[dict]:
    """Per step, ``{(src, dst): (latency, busy)}`` in seconds here: a message's route latency, and how long
    the busiest link on its route needs for all the bytes that cross it in that step, both times ``scale``.
    Kept by content (the schedule's and the topology's fingerprints), so another machine never gets them."""
    key = None
    if hasattr(schedule, "fingerprint") and hasattr(topology, "fingerprint"):
        key = (schedule.fingerprint(), count, itemsize, topology.fingerprint(), scale)
        if key in _TIMINGS:
            _TIMINGS.move_to_end(key)
            return _TIMINGS[key]
    chunk_bytes = np.diff(chunk_bounds(count, schedule.nchunks)) * itemsize
    out = [_concurrent(step.src, step.dst, chunk_bytes[step.chunk], topology, scale) for step in schedule.steps]
    if key is not None:
        _TIMINGS[key] = out
        if len(_TIMINGS) > _CACHE_SIZE:
            _TIMINGS.popitem(last=False)
    return out


def _concurrent(src, dst, sizes, topology, scale: float) -> dict:
    """``{(src, dst): (latency, busy)}`` for messages sent at once (``sizes`` bytes each): the route's latency,
    and the time the busiest link on the route needs for everything that crosses it, both times ``scale``."""
    src, dst, sizes = np.asarray(src), np.asarray(dst), np.asarray(sizes, dtype=float)
    moving = sizes > 0
    if not moving.any():
        return {}
    n = topology.nranks
    pair, which = np.unique(src[moving] * n + dst[moving], return_inverse=True)
    pair_bytes = np.bincount(which, weights=sizes[moving])
    hops, channels = topology.routes(pair // n, pair % n)
    load = topology.channel_load(np.bincount(channels, weights=pair_bytes[hops], minlength=len(topology.channel_rate)))
    busy = np.zeros(len(pair))
    np.maximum.at(busy, hops, load[channels] / topology.channel_rate[channels])
    latency = np.bincount(hops, weights=topology.channel_latency[channels], minlength=len(pair))
    return {(int(p // n), int(p % n)): (float(latency[i]) * scale, float(busy[i]) * scale) for i, p in enumerate(pair)}


def message_times(messages, comm) -> dict | None:
    """For point-to-point messages sent at once on ``comm``, ``messages`` ``[(src, dst, nbytes), ...]`` in its
    ranks: ``{(src, dst): seconds}``, each one's route latency plus its busiest link's time for all that
    crosses that link (messages that share a link share its rate), in this machine's seconds (times the
    scale); None when no emulation is in force. For code that sends its own messages (a parameter server):
    each message arrives that long after its sender's clock when it was posted, as in ringlab's collectives."""
    now = current()
    if now is None:
        return None
    wanted = tuple(tuple(int(v) for v in m) for m in messages)
    key = None if now.key is None else (now.key, comm.Get_size(), wanted)
    if key is not None and key in _MESSAGES:
        _MESSAGES.move_to_end(key)
        return _MESSAGES[key]
    topology = now.resolve(comm.Get_size())
    src, dst, sizes = (np.array([m[i] for m in wanted]) for i in range(3))
    found = {pair: latency + busy for pair, (latency, busy) in _concurrent(src, dst, sizes, topology, now.scale).items()}
    if key is not None:
        _MESSAGES[key] = found
        if len(_MESSAGES) > _CACHE_SIZE:
            _MESSAGES.popitem(last=False)
    return found


_MESSAGES: OrderedDict = OrderedDict()


@dataclass(frozen=True)
class Pacing:
    """How an emulated machine times one call's messages: ``timings`` (per step, ``{(src, dst): (latency, busy)}``
    in seconds here, from :func:`link_timings`), the peers this rank reaches over ``free`` links (inside a node
    of ``joined_nodes``: they cost nothing, and are not marked), the ``machine``'s name, the ``mark`` a trace
    gives a message that crossed a link, and for ``compute="model"`` the seconds a reduced byte costs
    (``per_byte``: scale over the topology's reduce_rate; None: a call's own work counts as its CPU time)."""

    timings: list
    rank: int
    free: frozenset
    machine: str
    mark: str
    per_byte: float | None = None
    itemsize: int = 1

    def dues(self, step) -> tuple[list[float], list[float]]:
        """When each receive and each send of a plan's ``step`` is due, in seconds from the step's start on this
        rank's clock. A rank pays for its messages one after another, as the cost model says: each send arrives
        after the latency of this rank's sends so far in the step (each peer's paid once, in the plan's order)
        plus its busiest link's busy time; each receive is done no sooner than the latency of this rank's
        receives so far plus its own busy time (and never before the message's own arrival, which its sender
        says)."""
        links = self.timings[step.index]
        out = []
        for messages, pair in ((step.recvs, lambda peer: (peer, self.rank)), (step.sends, lambda peer: (self.rank, peer))):
            due, spent = {}, 0.0
            for m in messages:
                if m.peer not in due:
                    latency, busy = links[pair(m.peer)]
                    spent += latency
                    due[m.peer] = spent + busy
            out.append([due[m.peer] for m in messages])
        return out[0], out[1]

    def land_costs(self, step) -> list[float] | None:
        """Per receive of ``step``, the modelled seconds its landing takes (a reduction's bytes at the reduce rate,
        a copy nothing); None when a call's own work counts as its CPU time."""
        if self.per_byte is None:
            return None
        return [(m.hi - m.lo) * self.itemsize * self.per_byte if m.op == "reduce" else 0.0 for m in step.recvs]

    def via(self, peer: int, route: str) -> str:
        """How a trace names the path of a message to or from ``peer`` that took ``route``."""
        return route if peer in self.free else f"{route} ({self.mark})"


def pacing(schedule, count: int, itemsize: int, comm, transport: str) -> Pacing | None:
    """The :class:`Pacing` of a call of ``schedule`` on ``count`` elements of ``itemsize`` bytes on ``comm``'s
    ranks under the emulation in force (None: none is); a ValueError for a transport that MPI does not carry."""
    now = current()
    if now is None:
        return None
    if transport.startswith("ipc"):
        raise ValueError("emulated links carry MPI messages: use transport='host' or 'cuda-aware', not "
                         f"{transport!r} (CUDA IPC reads peer memory directly)")
    rank, size = comm.Get_rank(), comm.Get_size()
    topology = now.resolve(size)
    per_byte = None
    if now.compute == "model":
        rate = float(getattr(topology, "reduce_rate", np.inf))
        per_byte = now.scale / rate if np.isfinite(rate) else 0.0
    return Pacing(link_timings(schedule, count, itemsize, topology, now.scale), rank, _free(topology, rank, size),
                  now.label, now.mark or now.label, per_byte, itemsize)


def _free(topology, rank: int, size: int) -> frozenset:
    """The ranks ``rank`` reaches over links that cost nothing (inside a node of ``joined_nodes``)."""
    return frozenset(peer for peer in range(size) if peer != rank and all(
        topology.channel_rate[c] == np.inf and topology.channel_latency[c] == 0 for c in topology.route(rank, peer)))


_STALLS: list[float] = []


@contextmanager
def straggling(seconds: float):
    """Within the block, this rank pauses ``seconds`` before each step of ringlab's collectives, as a rank on a
    slower link or a busier GPU is late at every step (lab 07's straggler: the delay is injected, everything
    else is measured). On an emulated machine the pause is on its virtual clock (nobody sleeps); on this
    machine the rank sleeps. Calls inside take the general way, where each step is timed and can be paused."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 10:
        raise ValueError(f"a pause of 0 to 10 s per step, got {seconds!r}")
    _STALLS.append(float(seconds))
    try:
        yield
    finally:
        _STALLS.pop()


def stall() -> float:
    """The pause before each step that :func:`straggling` asks for here (0: none)."""
    return _STALLS[-1] if _STALLS else 0.0


def clock() -> Clock:
    """This thread's virtual clock, counting this thread's CPU time or not as the emulation in force says."""
    ticking = thread_clock()
    emulation_ = current()
    if emulation_ is not None:
        ticking.cpu = emulation_.compute == "cpu"
    return ticking


def elapse(seconds: float) -> None:
    """``seconds`` of work pass on this rank's virtual clock (compute one models oneself, as with
    ``compute="model"``, where this CPU's own time never counts); nothing on this machine's own clock."""
    if not positive_number(seconds) and seconds != 0:
        raise ValueError(f"elapse takes a number of seconds >= 0, got {seconds!r}")
    if current() is not None:
        clock().add(float(seconds))


def now() -> float:
    """The time for a timer to read, in seconds: this thread's virtual clock on an emulated machine (inside
    ``rl.emulate``, or under ``RINGLAB_EMULATE``), this machine's ``time.perf_counter`` otherwise. Differences
    are durations; the two clocks' origins mean nothing."""
    return clock().now() if current() is not None else time.perf_counter()


def wall() -> float:
    """This machine's own clock (``time.perf_counter``), for what the CPU really took beside virtual time."""
    return time.perf_counter()


def clock_name() -> str:
    """What :func:`now` reads, in words (for a timer's label)."""
    now_ = current()
    return "host (time.perf_counter)" if now_ is None else f"virtual ({now_.label})"


@contextmanager
def inside():
    """A ringlab call on an emulated machine: its own bookkeeping is not counted on the clock (nothing to do
    on this machine's own)."""
    cpu = time.thread_time()  # the learner's compute ends here: finding the emulation is the call's own work
    if current() is None:
        yield
        return
    ticking = clock()
    ticking.enter(cpu)
    try:
        yield
    finally:
        ticking.leave()


def synchronize(comm, limit: float | None = None) -> None:
    """Set every rank's virtual clock to the latest of them (collective on ``comm``, within ``limit`` seconds):
    a barrier that costs no emulated time, where a timer starts. On this machine's own clock, a barrier."""
    from .deadlines import allgather, barrier

    if current() is None:
        barrier(comm, "the barrier a timer starts at", limit)
        return
    ticking = clock()
    ticking.settle()
    latest = max(allgather(comm, ticking.t, "the virtual clocks, to start a timer together", limit))
    ticking.t = max(ticking.t, latest)
    ticking.mark = time.thread_time()  # waiting for the others is not compute
