"""The executor: run any Schedule for real, one MPI process per rank, each on its own buffer.

Each rank compiles the schedule into its own plan once (cached): per step, the messages it sends
and receives, with contiguous chunks to or from one peer merged into one message. Then, step by
step, it posts non-blocking receives and sends (matched by peer and tag = step) and lands each
receive as it completes: added into its buffer in place for a reduce, copied for a copy. There
is no barrier between steps: a rank moves on as soon as its own messages of a step are done,
which is exactly the lockstep semantics of the simulator, because sends read the buffer before
anything of that step lands in it.

Reduce messages are cut into segments (``SEGMENT_BYTES``) so that adding one segment overlaps
receiving the next. Scratch space is allocated once per (size, dtype, device) and reused.
How bytes travel (straight from numpy, staged through pinned host memory, handed to a
CUDA-aware MPI) is the job of a transport's ``Ops``; see :mod:`ringlab.mpi.transports`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ..schedule import Schedule, chunk_bounds

SEGMENT_BYTES = 1 << 20  # reduce messages travel in pieces of this size
TAG_LIMIT = 32767        # the smallest tag upper bound MPI guarantees


class StepTimeout(TimeoutError):
    """A step did not finish within ``timeout``: names the step and the peer this rank waits for."""


@dataclass(frozen=True)
class Message:
    """One message of a step on this rank: elements ``lo:hi`` (chunks ``first..last``) to or from ``peer``."""

    peer: int
    lo: int
    hi: int
    first: int       # first chunk it carries
    last: int        # last chunk it carries
    reduce: bool
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


@dataclass(frozen=True)
class RankPlan:
    """What one rank does in each step, with the scratch it needs (elements)."""

    rank: int
    steps: tuple[StepPlan, ...]
    scratch: int        # receive scratch, elements
    send_staging: int   # send staging (only when every send is staged), elements


def _messages(step, rank: int, bounds, sending: bool, segment: int) -> list[Message]:
    """This rank's messages in ``step``: contiguous chunks to (or from) one peer, with one op, merged and then cut into segments."""
    me = step.src if sending else step.dst
    other = step.dst if sending else step.src
    mine = np.flatnonzero(me == rank)
    groups: dict[tuple[int, bool], list[int]] = {}
    for i in mine:
        groups.setdefault((int(other[i]), bool(step.reduce[i])), []).append(int(step.chunk[i]))
    out = []
    for (peer, reduce), chunks in sorted(groups.items()):  # both ends sort alike, so messages match in order
        chunks.sort()
        start = 0
        for i in range(1, len(chunks) + 1):
            if i == len(chunks) or chunks[i] != chunks[i - 1] + 1:
                first, last = chunks[start], chunks[i - 1]
                lo, hi = int(bounds[first]), int(bounds[last + 1])
                piece = segment if reduce else max(hi - lo, 1)
                for a in range(lo, hi, piece):
                    out.append(Message(peer, a, min(a + piece, hi), first, last, reduce))
                start = i
    return out


def _overlaps(a: Message, b: Message) -> bool:
    return a.lo < b.hi and b.lo < a.hi


@lru_cache(maxsize=256)
def compile_plan(schedule: Schedule, rank: int, count: int, itemsize: int, stage_all: bool = False) -> RankPlan:
    """Rank ``rank``'s plan for a buffer of ``count`` elements of ``itemsize`` bytes.

    With ``stage_all`` every receive lands in scratch and every send goes through staging (the
    host transport); otherwise receives go straight into the buffer unless that would clobber
    data the same step still sends, or another receive of the step lands on the same elements.
    """
    bounds = chunk_bounds(count, schedule.nchunks)
    segment = max(1, SEGMENT_BYTES // itemsize)
    steps, scratch, staging = [], 0, 0
    for index, step in enumerate(schedule.steps):
        sends = _messages(step, rank, bounds, True, segment)
        recvs = _messages(step, rank, bounds, False, segment)
        placed, offset = [], 0
        for i, m in enumerate(recvs):
            clash = any(_overlaps(m, s) for s in sends) or any(_overlaps(m, o) for j, o in enumerate(recvs) if j != i)
            if m.reduce or clash or stage_all:
                m = replace(m, slot=offset)
                offset += m.size
            placed.append(m)
        if stage_all:
            offsets = np.cumsum([0] + [m.size for m in sends])
            sends = [replace(m, slot=int(o)) for m, o in zip(sends, offsets)]
            staging = max(staging, int(offsets[-1]))
        scratch = max(scratch, offset)
        landing_clash = any(_overlaps(r, s) for r in placed for s in sends)
        steps.append(StepPlan(index, step.label, tuple(s for s in sends if s.size),
                              tuple(r for r in placed if r.size), landing_clash))
    return RankPlan(rank, tuple(steps), scratch, staging)


class Tracer:
    """Collects one row per transfer side: rank, step, peer, chunk, bytes, kind (send/recv), start, end."""

    def __init__(self, rank: int, itemsize: int, clock):
        self.rank, self.itemsize, self.clock, self.rows = rank, itemsize, clock, []

    def record(self, step: int, message: Message, kind: str, start: float, end: float, bounds) -> None:
        for chunk in range(message.first, message.last + 1):
            lo, hi = max(message.lo, bounds[chunk]), min(message.hi, bounds[chunk + 1])
            if hi > lo:
                self.rows.append((self.rank, step, message.peer, chunk, (hi - lo) * self.itemsize, kind, start, end))


def _wait(request, deadline: float | None, describe) -> None:
    """Wait for one request; past ``deadline`` raise StepTimeout with ``describe()``."""
    if deadline is None:
        request.Wait()
        return
    while not request.Test():
        if time.monotonic() > deadline:
            raise StepTimeout(describe())


def _stuck(rank: int, step: StepPlan, m: Message, kind: str, timeout: float) -> str:
    label = f" ({step.label})" if step.label else ""
    what = (f"to receive chunk {m.first} from rank {m.peer}" if kind == "recv"
            else f"for rank {m.peer} to take chunk {m.first}")
    return f"rank {rank}: step {step.index}{label} did not finish within {timeout:g} s: still waiting {what}"


def run_plan(plan: RankPlan, buf, ops, comm, *, timeout: float | None = None, tracer: Tracer | None = None,
             bounds=None) -> None:
    """Execute ``plan`` on this rank's flat ``buf`` through a transport's ``ops``."""
    for step in plan.steps:
        tag = step.index % TAG_LIMIT
        deadline = None if timeout is None else time.monotonic() + timeout
        ops.before_step()
        posted = tracer.clock() if tracer else 0.0
        recvs = [comm.Irecv(ops.incoming(buf, m), source=m.peer, tag=tag) for m in step.recvs]
        sends = [comm.Isend(ops.outgoing(buf, m), dest=m.peer, tag=tag) for m in step.sends]

        def finish_sends():
            for m, request in zip(step.sends, sends):
                _wait(request, deadline, lambda m=m: _stuck(plan.rank, step, m, "send", timeout))
                if tracer:
                    tracer.record(step.index, m, "send", posted, tracer.clock(), bounds)

        if step.sends_before_landing:
            finish_sends()
        for m, request in zip(step.recvs, recvs):
            _wait(request, deadline, lambda m=m: _stuck(plan.rank, step, m, "recv", timeout))
            ops.land(buf, m)
            if tracer:
                tracer.record(step.index, m, "recv", posted, tracer.clock(), bounds)
        if not step.sends_before_landing:
            finish_sends()
    ops.after_run(buf)


TRACE_DTYPE = np.dtype([("rank", "i4"), ("step", "i4"), ("peer", "i4"), ("chunk", "i4"), ("nbytes", "i8"),
                        ("kind", "U4"), ("start", "f8"), ("end", "f8")])


class Trace:
    """Every transfer of one run as a table: one row per side (send or recv) of each transfer.

    Times are seconds from a common start (a barrier just before the run). ``records`` is a numpy
    structured array with columns rank, step, peer, chunk, nbytes, kind, start, end.
    """

    def __init__(self, rows, schedule: Schedule, clock: str, itemsize: int = 1):
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
