"""The plan: a schedule and a buffer's size become each rank's compiled plan, and the buffer its result lands in.

:func:`compile_plan` turns a schedule into one rank's plan, once (cached): per step, the messages it sends
and receives, with contiguous chunks to or from one peer merged into one message, reduce messages cut into
pieces (``PIECE_BYTES``) so that reducing one piece overlaps receiving the next, and the scratch a receive
lands in first when it reduces or would clobber data the step still sends.

A call then takes one of two ways down, both ending in a transport (:mod:`ringlab.mpi.transports`), which
binds the plan to the memory and runs it (:mod:`ringlab.mpi.run`):

- :func:`run_schedule`, for any call: the result buffer (a copy of the input, ``out=``, or the input itself),
  the plan for the transport chosen, and, with ``trace=True``, every rank's messages timed;
- :class:`Call`, for numpy buffers on the host transport: everything a call needs is worked out once per
  *signature* (collective, algorithm, communicator, shape, dtype, in place or not, options) and kept: the
  checked schedule, the digest of the arguments that the ranks compare, the plan, and a transport that keeps,
  per result buffer that comes back call after call (``out=``, ``in_place=True``, or a result the caller has
  let go of), the plan bound to it with MPI persistent requests. A call is then the agreement, a copy of the
  input into the result, and the steps.

Everything kept lives in ringlab's state for the communicator (:mod:`ringlab.mpi.private`), so it is freed
with it.
"""
from __future__ import annotations

import functools
import sys
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np

from ..schedule import REDUCE, Schedule, chunk_bounds, chunk_runs
from . import emulate
from .deadlines import barrier, gather
from .devices import array_module
from .private import cache_bytes, digest
from .reduction import is_bfloat16, reduction, wire_dtype
from .run import Recorder, Trace
from .transports import Transport, make

PIECE_BYTES = 1 << 20    # reduce messages travel in pieces of this size
SOURCE_BYTES = 64 << 10  # from this size an out= call reads its input where it is, instead of copying it first
CALLS_KEPT = 64          # signatures remembered per communicator (and their bytes within cache_bytes())
MESSAGE_BYTES = 400      # a compiled plan's memory per message (383 B measured with tracemalloc, 64-rank ring)


def bounded(entries: int, weight, limit=cache_bytes):
    """Memoise a function of hashable arguments, least recently used first out, keeping at most
    ``entries`` results whose ``weight(result)`` (bytes) add up to at most ``limit()`` (the cache's
    bytes, :func:`~ringlab.mpi.private.cache_bytes`; a heavier result is returned without being kept):
    a few huge schedules or plans (a million segments, a gigabyte buffer cut into pieces) must not pile
    up for the rest of the process. Thread-safe; ``.cache_clear()`` and ``.cache_info()``."""

    def decorate(function):
        kept: OrderedDict = OrderedDict()
        lock = threading.Lock()
        total = [0]

        @functools.wraps(function)
        def cached(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items())))
            try:
                hash(key)
            except TypeError:  # a list where a number belongs, say: the function says what is wrong with it
                return function(*args, **kwargs)
            with lock:
                if key in kept:
                    kept.move_to_end(key)
                    return kept[key][0]
            result = function(*args, **kwargs)
            heft, most = weight(result), limit()
            if heft > most:
                return result
            with lock:
                if key not in kept:
                    kept[key] = (result, heft)
                    total[0] += heft
                    while len(kept) > entries or total[0] > most:
                        total[0] -= kept.popitem(last=False)[1][1]
            return result

        def cache_clear() -> None:
            with lock:
                kept.clear()
                total[0] = 0

        def cache_info() -> dict:
            return {"entries": len(kept), "weight": total[0], "max_entries": entries, "max_weight": limit()}

        cached.cache_clear, cached.cache_info = cache_clear, cache_info
        return cached

    return decorate


@dataclass(frozen=True)
class Message:
    """One message of a step on this rank: elements ``lo:hi`` (chunks ``first..last``) to or from ``peer``."""

    peer: int
    lo: int
    hi: int
    first: int       # first chunk it carries
    last: int        # last chunk it carries
    op: str          # "reduce" or "copy", as in the schedule
    slot: int = -1   # offset in scratch where a receive lands first (-1: straight into the buffer)

    @property
    def size(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class StepPlan:
    index: int
    label: str
    sends: tuple[Message, ...]
    recvs: tuple[Message, ...]
    sends_before_landing: bool  # something lands where this step also sends from: let the sends finish first
    window: int = 0  # at most this many receives in flight, reusing their scratch (0: all at once)
    lands_apart: bool = True  # no two receives write the same elements where one of them replaces

    @property
    def lands_directly(self) -> bool:
        """Whether receives may land straight in the buffer while a peer may still be reading it (CUDA IPC)."""
        return self.lands_apart and not self.sends_before_landing


@dataclass(frozen=True)
class RankPlan:
    """What one rank does in each step, with the scratch it needs (elements)."""

    rank: int
    steps: tuple[StepPlan, ...]
    scratch_elems: int  # receive scratch, elements
    staging_elems: int  # send staging (only when every send is staged), elements


def _messages(step, rank: int, bounds, sending: bool, piece_size: int) -> list[Message]:
    """This rank's messages in ``step``: runs of consecutive chunks to (or from) one peer with one op,
    reduce messages cut into pieces."""
    me, other = (step.src, step.dst) if sending else (step.dst, step.src)
    groups: dict[tuple[int, str], list[int]] = {}
    for i in np.flatnonzero(me == rank):
        groups.setdefault((int(other[i]), str(step.op[i])), []).append(int(step.chunk[i]))
    out = []
    for (peer, op), chunks in sorted(groups.items()):  # both ends sort alike, so messages match in order
        for first, last in chunk_runs(chunks):
            lo, hi = int(bounds[first]), int(bounds[last + 1])
            piece = piece_size if op == REDUCE else max(hi - lo, 1)
            for a in range(lo, hi, piece):
                out.append(Message(peer, a, min(a + piece, hi), first, last, op))
    return out


def overlaps(a: Message, b: Message) -> bool:
    """Whether two messages touch common elements of the buffer."""
    return a.lo < b.hi and b.lo < a.hi


@bounded(256, lambda plan: MESSAGE_BYTES * sum(len(s.sends) + len(s.recvs) for s in plan.steps))
def compile_plan(schedule: Schedule, rank: int, count: int, itemsize: int, stage_all: bool = False,
                 pieces: bool = True) -> RankPlan:
    """Rank ``rank``'s plan for a buffer of ``count`` elements of ``itemsize`` bytes (kept, least recently
    used out, up to 256 plans within the cache's bytes).

    With ``stage_all`` every receive lands in scratch and every send goes through staging (the
    host transport); otherwise receives go straight into the buffer unless that would clobber
    data the same step still sends, or another receive of the step lands on the same elements.
    ``pieces=False`` keeps reduce messages whole: over CUDA IPC there is no receive to overlap
    the adding with, and each piece would cost a kernel launch.

    A step whose receives would need more scratch than one chunk (the naive root, a parameter
    server: (n-1) buffers arrive at once) gets a ``window``: its receives are taken from the peers
    in turn, at most ``window`` in flight (four pieces a peer, and no more than one chunk), each
    reusing the scratch of the one ``window`` places before it once that one has landed. (Not with
    ``stage_all`` or whole messages, where landing is asynchronous or deferred to the step's end.)
    """
    bounds = chunk_bounds(count, schedule.nchunks)
    piece = max(1, PIECE_BYTES // itemsize) if pieces else max(count, 1)
    chunk = max(int(np.diff(bounds).max()) if count else 0, piece)  # the most scratch a windowed step may use
    steps, scratch, staging = [], 0, 0
    for index, step in enumerate(schedule.steps):
        sends = _messages(step, rank, bounds, True, piece)
        recvs = _messages(step, rank, bounds, False, piece)
        placed, offset = [], 0
        for i, m in enumerate(recvs):
            clash = any(overlaps(m, s) for s in sends) or any(overlaps(m, o) for j, o in enumerate(recvs) if j != i)
            if m.op == REDUCE or clash or stage_all:
                m = replace(m, slot=offset)
                offset += m.size
            placed.append(m)
        window, placed = 0, [r for r in placed if r.size]
        landing_clash = any(overlaps(r, s) for r in placed for s in sends)
        apart = not any(overlaps(a, b) for i, a in enumerate(placed) for b in placed[i + 1:]
                        if not (a.op == REDUCE and b.op == REDUCE))
        # a step whose sends finish before anything lands needs every receive posted from the start:
        # a peer's send waits for its receive, and a full window would wait for those sends
        if pieces and not stage_all and offset > chunk and not landing_clash:
            placed, window, offset = _windowed(placed, chunk)
        if stage_all:
            offsets = np.cumsum([0] + [m.size for m in sends])
            sends = [replace(m, slot=int(o)) for m, o in zip(sends, offsets)]
            staging = max(staging, int(offsets[-1]))
        scratch = max(scratch, offset)
        steps.append(StepPlan(index, step.label, tuple(s for s in sends if s.size),
                              tuple(placed), landing_clash, window, apart))
    return RankPlan(rank, tuple(steps), scratch, staging)


@dataclass(frozen=True)
class Sources:
    """Where a rank's plan can read its input from the caller's array instead of from a copy of it in the result
    buffer (so that an out-of-place call needs no copy of its whole input first): per step, which sends read
    the input (what they send has not been landed on in an earlier step), which reducing receives add to
    the input (``result = input + arrived``: the first landing on those elements), and the element ranges
    nothing ever lands on, copied from the input at the end."""

    sends: tuple[tuple[bool, ...], ...]
    reduces: tuple[tuple[bool, ...], ...]
    untouched: tuple[tuple[int, int], ...]


def _covered(landed: list[tuple[int, int]], lo: int, hi: int) -> str:
    """How much of ``lo:hi`` the sorted disjoint ranges ``landed`` cover: "none", "all" or "part"."""
    inside = 0
    for a, b in landed:
        inside += max(0, min(b, hi) - max(a, lo))
    return "none" if inside == 0 else "all" if inside == hi - lo else "part"


def _land(landed: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    """``landed`` with ``lo:hi`` added, merged."""
    merged = []
    for a, b in sorted(landed + [(lo, hi)]):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def sources(plan: RankPlan, count: int) -> Sources | None:
    """The :class:`Sources` of ``plan`` on a buffer of ``count`` elements, or None where a message reads or
    reduces into elements of which only a part has been landed on (then the input is copied in first)."""
    landed: list[tuple[int, int]] = []
    sends, reduces = [], []
    for step in plan.steps:
        reading = []
        for m in step.sends:
            seen = _covered(landed, m.lo, m.hi)
            if seen == "part":
                return None
            reading.append(seen == "none")
        adding = []
        for m in step.recvs:  # in the order they land
            seen = _covered(landed, m.lo, m.hi)
            if m.op == REDUCE and seen == "part":
                return None
            adding.append(m.op == REDUCE and seen == "none")
            landed = _land(landed, m.lo, m.hi)
        sends.append(tuple(reading))
        reduces.append(tuple(adding))
    untouched, start = [], 0
    for a, b in landed + [(count, count)]:
        if a > start:
            untouched.append((start, a))
        start = max(start, b)
    return Sources(tuple(sends), tuple(reduces), tuple(untouched))


def _windowed(recvs: list[Message], limit: int) -> tuple[list[Message], int, int]:
    """``recvs`` reordered to take one message from each peer in turn (each peer's own order kept, as
    MPI matches messages from one source in order), with a window of as many as fit in ``limit``
    elements: the receive at position i lands in slot i mod window. Returns (receives, window, scratch)."""
    by_peer: dict[int, list[Message]] = {}
    for m in recvs:
        by_peer.setdefault(m.peer, []).append(m)
    turns = [q[k] for k in range(max(len(q) for q in by_peer.values())) for q in by_peer.values() if k < len(q)]
    size = max(m.size for m in turns)
    window = max(1, min(limit // size, 4 * len(by_peer)))  # a few messages in flight from each peer
    placed = [replace(m, slot=(i % window) * size) if m.slot >= 0 else m for i, m in enumerate(turns)]
    return placed, window, window * size


def _holds_result(schedule: Schedule, rank: int) -> bool:
    """Whether ``rank`` ends a run of ``schedule`` with the collective's result (not a reduce's partial sums)."""
    collective = schedule.collective
    return collective.kind != "reduce" or rank == collective.root


def run_schedule(schedule: Schedule, x, comm, transport: str, *, in_place: bool, trace: bool, timeout,
                 out=None, op: str = "sum"):
    """Run a checked schedule on arguments every rank agreed on, by ``transport`` (chosen already); return
    the array this rank ends with, and with ``trace`` its :class:`~ringlab.mpi.run.Trace` too."""
    xp = array_module(x)
    if out is not None:
        out[...] = x
    else:
        out = x if in_place else xp.array(x, order="C", copy=True)
    flat = out.reshape(-1)
    combine = reduction(op, flat.dtype)
    if is_bfloat16(flat.dtype):  # MPI cannot read bfloat16: its words travel as they are, reduced as bfloat16
        flat = flat.view(wire_dtype(flat.dtype))
    count, itemsize, rank = flat.size, flat.dtype.itemsize, comm.Get_rank()
    peer_memory = transport.startswith("ipc")  # ipc, or ipc inside nodes and MPI between them
    staged = peer_memory or (transport == "host" and xp is not np)
    plan = compile_plan(schedule, rank, count, itemsize, staged, pieces=not peer_memory)
    finish = op == "avg" and _holds_result(schedule, rank)
    carrier = make(transport, xp, plan, flat.dtype, comm, combine, finish=finish, schedule=schedule, count=count,
                   timeout=timeout)
    recorder = _recorder(comm, xp is not np, itemsize, chunk_bounds(count, schedule.nchunks), timeout) if trace else None
    carrier.move(flat, timeout, recorder)
    if not trace:
        return out
    rows = gather(comm, recorder.rows, 0, "the trace's rows, gathered on rank 0", timeout)
    mine = [r for part in rows for r in part] if rank == 0 else recorder.rows
    return out, Trace(mine, schedule, clock=recorder.clock_name, itemsize=itemsize)


def _recorder(comm, on_gpu: bool, itemsize: int, bounds, limit: float | None) -> Recorder:
    """A Recorder whose clock starts at a barrier (within ``limit`` seconds); on a GPU it reads the time after
    the stream drains."""
    from mpi4py import MPI

    if emulate.current() is not None:  # virtual time: every rank's clock set to the latest, then read as it moves
        emulate.synchronize(comm, limit)
        ticking = emulate.clock()
        origin = ticking.now()
        return Recorder(comm.Get_rank(), itemsize, lambda: ticking.now() - origin, bounds,
                        f"virtual ({emulate.current().label}), from the clocks set alike", origin)
    barrier(comm, "the barrier a trace's clock starts at", limit)
    start = MPI.Wtime()
    if on_gpu:
        from .devices import cupy_module

        stream = cupy_module().cuda.get_current_stream()

        def clock() -> float:
            stream.synchronize()  # so kernel time is counted
            return MPI.Wtime() - start

        return Recorder(comm.Get_rank(), itemsize, clock, bounds,
                        "host (MPI.Wtime after synchronising the GPU stream, from a barrier)")
    return Recorder(comm.Get_rank(), itemsize, lambda: MPI.Wtime() - start, bounds, "host (MPI.Wtime, from a barrier)")


class Call:
    """What one signature of call on numpy buffers compiles to on this rank (see the module's docstring)."""

    def __init__(self, private, schedule: Schedule, text: str, comm, count: int, dtype, op: str = "sum"):
        self.private, self.schedule, self.text, self.digest = private, schedule, text, digest(text)
        rank = comm.Get_rank()
        self.plan = compile_plan(schedule, rank, count, dtype.itemsize, False, pieces=True)
        self.itemsize = dtype.itemsize
        self.keep = self.plan.scratch_elems * self.itemsize <= cache_bytes()  # larger: freed when the call returns
        finish = op == "avg" and _holds_result(schedule, rank)
        self.transport: Transport = make("host", np, self.plan, dtype, comm, reduction(op, dtype), finish=finish)
        self.spare = None  # (last fresh result, its reference count when only this Call holds it)
        self.sources = False  # where the plan may read the input in place (plan.sources; False: not worked out)
        # the peers whose messages this rank may hear first: a stale call's would be queued before its notices
        self.first_sources = len({m.peer for m in self.plan.steps[0].recvs}) if self.plan.steps else 0
        self.counted = False  # whether its scratch has been fitted in the cache's bytes (after its first run)

    def run(self, x, out, in_place: bool, timeout, first=None):
        """The call on this rank's ``x``: its result in ``out``, in ``x`` itself, or in a fresh array; ``first``:
        the agreement carried alongside the first step (:func:`ringlab.mpi.private.agree_alongside`)."""
        try:
            result = self._move(x, out, in_place, timeout, first)
        except BaseException:
            self.forget()  # a step may have left requests active: nothing bound here may be started again
            raise
        if not self.counted:  # its first run took its scratch: within the cache's bytes, with the other calls
            self.counted = True
            _make_room(self.private, self, 0)
        return result

    def _move(self, x, out, in_place: bool, timeout, first=None):
        keep, move = self.keep, self.transport.move
        if out is not None and keep and x.nbytes >= SOURCE_BYTES and x.flags.c_contiguous:
            if self.sources is False:
                self.sources = sources(self.plan, x.size)
            if self.sources is not None and not np.may_share_memory(x, out):
                return move(out, timeout, None, "buffer", source=x, sources=self.sources, first=first)
        if in_place or out is not None:
            buf = x if in_place else out
            if out is not None:
                np.copyto(out, x)
            return move(buf, timeout, None, "buffer" if keep else None, first=first)
        spare = self.spare
        if keep and spare is not None and sys.getrefcount(spare[0]) == spare[1]:
            buf = spare[0]  # the caller has let go of the last result: it is ours again
            np.copyto(buf, x)
            return move(buf, timeout, None, "spare", first=first)
        if keep and spare is not None:  # the caller still holds the last result: it is the caller's now
            self._drop_spare()
        if keep and _make_room(self.private, self, x.nbytes):
            buf = x.copy()  # may come back free next time: see below
            move(buf, timeout, None, "new spare", first=first)
            # Now: this frame's name (1) and getrefcount's argument (1); the bound plan sees the memory through
            # raw views that hold no reference. Later, with nobody else holding it: the spare tuple (1) instead
            # of this name, and the argument. More than that, and the caller still holds it.
            free = sys.getrefcount(buf)  # on a line of its own: in the tuple's display, buf is on the stack too
            self.spare = (buf, free)
            return buf
        return move(x.copy(), timeout, None, None, first=first)

    def _drop_spare(self) -> None:
        if self.spare is not None:
            self.spare = None
            self.transport.drop_spare()

    def forget(self) -> None:
        self.transport.forget()
        self.spare = None
        found = calls(self.private)
        for key, call in list(found.items()):
            if call is self:
                del found[key]


def _holds(call: Call) -> list:
    """The arrays a remembered call keeps alive: its transport's scratch and its spare result."""
    found = [getattr(call.transport, "scratch", None), None if call.spare is None else call.spare[0]]
    return [a for a in found if isinstance(a, np.ndarray)]


def _held(private) -> int:
    """Bytes the remembered calls of a communicator keep alive, and its pooled host buffers (each once)."""
    arrays = {id(a): a.nbytes for call in calls(private).values() for a in _holds(call)}
    arrays.update((id(a), a.nbytes) for a in private.cache.get("pool", {}).values() if isinstance(a, np.ndarray))
    return sum(arrays.values())


def _make_room(private, call: Call, nbytes: int) -> bool:
    """Whether ``nbytes`` more fit in the cache's bytes (:func:`~ringlab.mpi.private.cache_bytes`) beside what
    the communicator's remembered calls keep; to make room, the other calls' spare results go first, then the
    other calls themselves, least recently used first (they are compiled again when they come back)."""
    budget = cache_bytes()
    if nbytes > budget:
        return False
    if _held(private) + nbytes <= budget:
        return True
    others = [c for c in calls(private).values() if c is not call]  # the least recently used first
    for drop in [c._drop_spare for c in others if c.spare is not None] + [c.forget for c in others]:
        drop()
        if _held(private) + nbytes <= budget:
            return True
    return False


def calls(private) -> OrderedDict:
    """The remembered calls of one communicator (its :class:`~ringlab.mpi.private.Private`), signature -> Call."""
    found = private.cache.get("calls")
    if found is None:
        found = private.cache["calls"] = OrderedDict()

        def forget_all():
            for call in list(found.values()):
                call.forget()
            found.clear()
        private.on_free("calls", forget_all)
    return found


def remembered(private, key) -> Call | None:
    """The Call remembered for signature ``key`` on this communicator (None: none yet)."""
    found = calls(private)
    call = found.get(key)
    if call is not None:
        found.move_to_end(key)
    return call


def remember(private, key, call: Call) -> Call:
    found = calls(private)
    if len(found) >= CALLS_KEPT:
        found.popitem(last=False)[1].forget()
    found[key] = call
    return call


__all__ = ["Call", "Message", "RankPlan", "StepPlan", "bounded", "compile_plan", "run_schedule"]
