"""The executor: run any Schedule for real, one MPI process per rank, each on its own buffer.

Each rank compiles the schedule into its own plan once (cached): per step, the messages it sends
and receives, with contiguous chunks to or from one peer merged into one message. Then, step by
step, it posts the step's receives and sends and lands each receive as it completes: added into
its buffer in place for a reduce, copied for a copy. There is no barrier between steps: a rank
moves on as soon as its own messages of a step are done, which is exactly the lockstep semantics
of the simulator, because sends read the buffer before anything of that step lands in it.

Reduce messages are cut into pieces (``PIECE_BYTES``) so that adding one piece overlaps
receiving the next. How bytes travel (straight from numpy, staged through pinned host memory,
handed to a CUDA-aware MPI, read from a peer GPU over CUDA IPC) is the job of a transport's
``Ops``, which :func:`run_plan` drives the same way for all of them; see :mod:`ringlab.mpi.transports`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np

from ..schedule import REDUCE, Schedule, chunk_bounds, chunk_runs
from .caches import bounded
from .deadlines import StepTimeout, wait  # noqa: F401  (StepTimeout: where it was first defined)

PIECE_BYTES = 1 << 20  # reduce messages travel in pieces of this size
# compiled plans are kept (least recently used out) up to 256, or 200,000 messages in all (about 80 MB)
TAG_LIMIT = 32766        # steps' tags are below it (32767 is the smallest tag upper bound MPI guarantees)
AGREE_TAG = TAG_LIMIT    # the argument agreement's digests
NOTICE_TAG = TAG_LIMIT + 1  # "this rank gave up on call k" (see ringlab.mpi.private)


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


@bounded(256, lambda plan: sum(len(s.sends) + len(s.recvs) for s in plan.steps), 200_000)
def compile_plan(schedule: Schedule, rank: int, count: int, itemsize: int, stage_all: bool = False,
                 pieces: bool = True) -> RankPlan:
    """Rank ``rank``'s plan for a buffer of ``count`` elements of ``itemsize`` bytes.

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
                              tuple(placed), landing_clash, window))
    return RankPlan(rank, tuple(steps), scratch, staging)


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


class Recorder:
    """Collects this rank's rows of a :class:`Trace`: rank, step, peer, chunk, bytes, side (send/recv), start, end."""

    def __init__(self, rank: int, itemsize: int, clock):
        self.rank, self.itemsize, self.clock, self.rows = rank, itemsize, clock, []

    def record(self, step: int, message: Message, side: str, start: float, end: float, bounds, via: str = "") -> None:
        for chunk in range(message.first, message.last + 1):
            lo, hi = max(message.lo, bounds[chunk]), min(message.hi, bounds[chunk + 1])
            if hi > lo:
                self.rows.append((self.rank, step, message.peer, chunk, (hi - lo) * self.itemsize, side, start, end,
                                  via))


def run_plan(plan: RankPlan, flat, ops, comm, *, timeout: float | None = None, recorder: Recorder | None = None,
             bounds=None) -> None:
    """Execute ``plan`` on this rank's flat buffer through a transport's ``ops``.

    Every transport goes through the same loop: per step ``ops.post`` starts the step's receives
    and sends, each receive is waited for and landed by ``ops.land``, the sends are waited for
    (first, when something lands where the step also sends from), and ``ops.after_step`` ends
    the step. With ``timeout`` a step that does not finish in time raises StepTimeout, naming the
    step and the peer this rank still waits for (its ``peers``: every peer whose message of the step
    had not finished).
    """
    buf = ops.begin(flat)
    for step in plan.steps:
        deadline = None if timeout is None else time.monotonic() + timeout

        def wait_for(request, waiting: str, step=step, deadline=deadline) -> None:
            label = f" ({step.label})" if step.label else ""
            wait(request, deadline, lambda: f"rank {plan.rank}: step {step.index}{label} did not finish within "
                                            f"{timeout:g} s: still waiting {waiting}", ops.nap)

        def finish_sends(sends, posted, step=step) -> None:
            for m, request in zip(step.sends, sends):
                wait_for(request, f"for rank {m.peer} to take chunk {m.first}")
                if recorder:
                    recorder.record(step.index, m, "send", posted, recorder.clock(), bounds, ops.route(m))

        ops.deadline = deadline  # a transport that holds messages back (a slowed link) keeps to it too
        ops.before_step()
        posted = recorder.clock() if recorder else 0.0
        recvs, sends = ops.post(comm, buf, step)
        try:
            if step.sends_before_landing:
                finish_sends(sends, posted)
            for i, m in enumerate(step.recvs):
                ops.before_wait(step, m)
                wait_for(recvs[i], f"to receive chunk {m.first} from rank {m.peer}")
                ops.land(buf, m)
                if recorder:
                    recorder.record(step.index, m, "recv", posted, recorder.clock(), bounds, ops.route(m))
                later = i + step.window
                if step.window and later < len(step.recvs):  # its slot is free again: take the next message
                    ops.reuse()
                    recvs[later] = ops.post_recv(comm, buf, step, step.recvs[later])
            if not step.sends_before_landing:
                finish_sends(sends, posted)
            ops.after_step(comm, buf, step, wait_for)
        except StepTimeout as err:
            err.peers = err.peers or unfinished(step, recvs, sends)
            raise
    ops.end(flat, buf)


def unfinished(step, recvs, sends) -> tuple[int, ...]:
    """The peers of ``step`` whose messages (``recvs`` and ``sends``: the step's requests, in the order of
    its messages; None for a receive not yet posted) have not finished."""
    peers = {m.peer for m, r in zip(step.recvs, recvs) if r is not None and not r.Test()}
    peers.update(m.peer for m, r in zip(step.sends, sends) if r is not None and not r.Test())
    return tuple(sorted(peers))


TRACE_DTYPE = np.dtype([("rank", "i4"), ("step", "i4"), ("peer", "i4"), ("chunk", "i4"), ("nbytes", "i8"),
                        ("side", "U4"), ("start", "f8"), ("end", "f8"), ("via", "U16")])


class Trace:
    """Every transfer of one run as a table: one row per side (send or recv) of each transfer.

    Times are seconds from a common start (a barrier just before the run). ``records`` is a numpy
    structured array with columns rank, step, peer, chunk, nbytes, side, start, end, and via: the
    path the transfer took (``host``, ``cuda-aware`` or ``ipc``; empty for a modelled trace).
    """

    def __init__(self, rows, schedule: Schedule, clock: str, itemsize: int = 1):
        rows = [tuple(r) if len(r) == len(TRACE_DTYPE) else (*r, "") for r in rows]
        self.records = np.array(sorted(rows, key=lambda r: (r[1], r[0], r[6])), dtype=TRACE_DTYPE)
        self.schedule, self.clock, self.itemsize = schedule, clock, itemsize

    def __len__(self) -> int:
        return len(self.records)

    def to_dicts(self) -> list[dict]:
        """The rows as plain dicts (for JSON, pandas.DataFrame, plotting)."""
        return [dict(zip(TRACE_DTYPE.names, row.tolist())) for row in self.records]

    def step_times(self) -> np.ndarray:
        """When each step ended on its slowest rank (seconds from the start)."""
        ends = np.zeros(len(self.schedule.steps))
        np.maximum.at(ends, self.records["step"], self.records["end"])
        return ends

    def __repr__(self) -> str:
        return f"Trace({self.schedule.name!r}: {len(self)} rows, {self.clock} clock)"
