"""Symmetric memory on one node: one-shot and two-shot allreduce through a shared window.

NCCL 2.27 added kernels for buffers registered in every rank's address space alike ("symmetric memory"):
a rank reads its peers' buffers directly, so a small allreduce needs one synchronisation instead of a ring's
2(n-1) steps. PyTorch's ``SymmetricMemory`` gives the same one-shot and two-shot allreduce. This module is
their CPU analogue. Ranks of one node map one shared window (``MPI.Win.Allocate_shared``); each rank owns a
segment of it:

    flags (64 B): posted, reduced, done     (int64 each: call numbers; only the owner writes them)
    region 0, region 1: header (64 B: call, bytes, digest of the arguments) then data (``capacity`` bytes)

A call numbered c on this communicator uses region c mod 2; a call bigger than a region goes in rounds, each
in the other region from the round before (its tick: the call's number times :data:`ROUNDS`, plus the round's).
**One-shot**: copy the input into the region, write the header, set ``posted`` = c, wait until every rank's
``posted`` >= c, then add up every rank's region (in rank order, so every rank gets the same bits).
**Two-shot**: the same first half, then rank r adds up chunk r of every region only, leaves the sum in its own
region's chunk r (no one else reads that chunk), sets ``reduced`` = c, waits for every rank's ``reduced`` >= c
and copies the other ranks' finished chunks. Then ``done`` = c. A region is written again only once every rank
that took part in its last use has set ``done`` past it, so no one still reads it.

**The argument agreement rides in the header**: every rank reads every rank's header anyway, so every rank
sees the same digests and raises the same ValueError when they differ, at no extra round trip (every rank then
leaves the duplicate for a fresh one, as on any disagreement). A rank whose peers are at another call, or on
the message path (a call that is not one of these), meets them in the message agreement
(:func:`ringlab.mpi.private.agree`), which names what differs or which ranks are out of step. Waiting spins
on the flags, gives the core away at each look (``sched_yield``) when the node runs more ranks than cores and
every 1024 looks otherwise; past the call's deadline it is a StepTimeout naming the ranks it waited for.

The window is made collectively by the first such call on a communicator (after that call's message
agreement, and only when every rank is on one node: simulated nodes and several real ones run the
schedules as messages), and freed by ``rl.release_buffers()`` (collective) or when MPI finalizes; a
call that fails part-way leaves its window to MPI_Finalize with the duplicate it belonged to.
"""
from __future__ import annotations

import os
import platform
import time

import numpy as np

from ..schedule import chunk_bounds
from . import private
from .deadlines import StepTimeout, seconds

NAMES = {"oneshot": "oneshot", "twoshot": "twoshot", "allreduce.oneshot": "oneshot",
         "allreduce.twoshot": "twoshot"}
CAPACITY = 1 << 20  # bytes of data a rank's region holds, unless RINGLAB_SYMMETRIC_BYTES says otherwise
LINE = 64           # a cache line: the flags, and each region's header
POSTED, REDUCED, DONE = 0, 1, 2
_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum, "avg": np.add}
_MPI: list = []


def capacity() -> int:
    """The bytes of data the window holds per rank and region (``RINGLAB_SYMMETRIC_BYTES``, default 1 MiB): a
    bigger call goes through it in rounds of this size."""
    text = os.environ.get("RINGLAB_SYMMETRIC_BYTES", "").strip()
    if not text:
        return CAPACITY
    from ..schedule import parse_size
    try:
        return max(parse_size(text), 0)
    except ValueError as err:
        raise ValueError(f"RINGLAB_SYMMETRIC_BYTES={text!r}: {err}") from None


def _nothing() -> None:
    pass


class Window:
    """The shared window of one communicator's private duplicate (made collectively: every rank at once)."""

    def __init__(self, comm, capacity_bytes: int):
        if not _MPI:
            from mpi4py import MPI
            _MPI.append(MPI)
        MPI = _MPI[0]
        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self.capacity = -(-capacity_bytes // LINE) * LINE
        self.region = LINE + self.capacity
        segment = LINE + 2 * self.region
        self.win = MPI.Win.Allocate_shared(segment, 1, comm=comm)
        self.memory = []
        for q in range(self.size):
            buffer, _ = self.win.Shared_query(q)
            self.memory.append(np.frombuffer(buffer, np.uint8, count=segment))
        self.memory[self.rank][:LINE] = 0
        # memoryviews of int64: a flag read or written through one takes half the time numpy's indexing takes
        self.flags = [memoryview(m[:LINE]).cast("q") for m in self.memory]
        self.headers = [[m[LINE + p * self.region:LINE + p * self.region + LINE] for m in self.memory] for p in (0, 1)]
        self.win.Lock_all()  # a passive epoch, so that Sync orders this rank's loads and stores with the others'
        # x86 keeps stores in order and loads in order, and no store before an earlier load, which is all this
        # protocol asks (data, then the flag; the flag, then the data; reads, then "done"): there a fence only
        # costs time. Elsewhere (Arm: Grace, Graviton) MPI_Win_sync is the memory barrier between them.
        self.fence = self.win.Sync if platform.machine().lower() not in ("x86_64", "amd64", "i686") else None
        self.sync = self.fence or _nothing
        self.last = [0, 0]  # the call that last used each region
        self.stamped = [None, None]  # whose header each region holds (a Signature's views), besides the call
        self.others = [q for q in range(self.size) if q != self.rank]
        from .devices import gives_way
        self.give_way = gives_way()
        comm.Barrier()  # every rank's flags are zero before anyone looks at them

    def data(self, p: int, q: int, nbytes: int) -> np.ndarray:
        start = LINE + p * self.region + LINE
        return self.memory[q][start:start + nbytes]

    def free(self) -> None:
        """Give the window back (collective: every rank of the duplicate)."""
        try:
            self.win.Unlock_all()
            self.win.Free()
        except Exception:  # MPI already finalized
            pass

    def wait(self, flag: int, least: int, what: str, state, limit: float | None) -> str | None:
        """Until every other rank's ``flag`` is at least ``least``. Returns None, or "message" when a peer is in
        the message agreement instead (it is on the message path, or out of step), so that this rank meets it
        there (looked for while waiting for ``POSTED`` only: a rank that left this call's data in the window is
        on the window for this call); past ``limit`` seconds a StepTimeout naming the ranks still behind."""
        flags, polls, give_way, deadline = self.flags, 0, self.give_way, None
        limit = seconds(limit)  # (a call's timeout as given: worked out only when a rank has to wait)
        for q in self.others:
            f = flags[q]
            while f[flag] < least and (flag != DONE or f[POSTED] >= least):  # (DONE: only those who took part)
                polls += 1
                if give_way:
                    os.sched_yield()
                if polls & 1023 == 0 or (give_way and polls & 63 == 0):
                    if not give_way:  # a peer kept from its core by other work gets it now and then (as MPICH
                        os.sched_yield()  # yields every 1000 polls)
                    if flag == POSTED and _in_agreement(state, [r for r in self.others if flags[r][POSTED] < least]):
                        return "message"
                    if deadline is None and limit is not None:
                        deadline = time.monotonic() + limit
                    elif deadline is not None and time.monotonic() > deadline:
                        behind = [r for r in self.others if flags[r][flag] < least
                                  and (flag != DONE or flags[r][POSTED] >= least)]
                        stage = {POSTED: "to leave its data in the shared window",
                                 REDUCED: "to finish its chunk", DONE: "to finish reading"}[flag]
                        raise StepTimeout(f"rank {self.rank}: {what} did not finish within {limit:g} s: still waiting "
                                          f"for rank{'s' * (len(behind) > 1)} {', '.join(map(str, behind))} {stage} "
                                          f"(call {least // ROUNDS} on this communicator)", peers=behind)
        self.sync()
        return None


def _in_agreement(state, behind: list[int]) -> bool:
    """Whether a rank of ``behind`` (those that have not left this call's data in the window) has sent its
    digest for the message agreement instead: it took the message path for this call. (Digests of earlier calls
    were all taken by their own agreements; a rank ahead, already at its next call, is never asked: its flag
    says it has left this call's data.)"""
    dup = state.comm("ringlab", None)
    return any(dup.Iprobe(q, private.AGREE_TAG) or dup.Iprobe(q, private.AGREE_TAG) for q in behind)


class Signature:
    """What one repeated call needs on the window: its digest and text, its sizes, its reduction, and its
    rounds: the pieces of the buffer that fit the window one after another (each with its chunk bounds for
    two-shot)."""

    __slots__ = ("text", "digest", "nbytes", "count", "dtype", "shape", "ufunc", "avg", "twoshot", "n", "room",
                 "rounds", "cache", "window")

    def __init__(self, text: str, x, op: str, twoshot: bool, n: int):
        self.text, self.digest = text, private.digest(text)
        self.nbytes, self.count, self.dtype, self.shape = x.nbytes, x.size, x.dtype, x.shape
        self.ufunc, self.avg, self.twoshot, self.n = _UFUNCS[op], op == "avg", twoshot, n
        self.room, self.rounds, self.cache, self.window = -1, [], {}, None

    def views(self, w: "Window", p: int, count: int) -> tuple:
        """For a round of ``count`` elements in region ``p`` of window ``w``: this rank's header as four int64
        (call, bytes, digest: all but the call written here), its data, every rank's data, the other ranks'
        headers (int64 too), and whose they are (this signature, ``count``); made once per window, region and
        size."""
        if self.window is not w:
            self.cache, self.window = {}, w
        cache = self.cache
        found = cache.get((p, count))
        if found is None:
            nbytes = count * self.dtype.itemsize
            stamp = memoryview(w.headers[p][w.rank][:32]).cast("q")
            found = cache[(p, count)] = (stamp, w.data(p, w.rank, nbytes).view(self.dtype),
                                         [w.data(p, q, nbytes).view(self.dtype) for q in range(w.size)],
                                         [memoryview(w.headers[p][q][:32]).cast("q") for q in w.others],
                                         self, count)
        if w.stamped[p] is not found:  # what the region's header says besides the call, unless it says it already
            stamp = found[0]
            stamp[1] = count * self.dtype.itemsize
            stamp[2], stamp[3] = (int(v) for v in self.digest.view(np.int64))
            w.stamped[p] = found
        return found

    def cut(self, room: int) -> list:
        """The rounds for a window of ``room`` bytes a rank: (first, end, two-shot's chunk bounds) each."""
        if room != self.room:
            per = max(room // max(self.dtype.itemsize, 1), 1)  # elements a round carries
            self.rounds = [(a, min(a + per, self.count),
                            chunk_bounds(min(a + per, self.count) - a, self.n).tolist() if self.twoshot else None)
                           for a in range(0, max(self.count, 1), per)]
            self.room = room
        return self.rounds


def open_window(state, what: str, limit) -> "Window | bool":
    """Make the window (collective, after a message agreement every rank passed): False when the ranks are
    on several nodes, real or simulated, where these algorithms run as messages."""
    from .nodes import node_ids

    dup = state.comm(what, limit)
    made: Window | bool = False
    if max(node_ids(dup, limit)) == 0:
        made = Window(dup, capacity())
    state.cache["symmetric"] = made
    if made:
        state.on_free("symmetric", lambda: state.cache.pop("symmetric", None))  # left to MPI_Finalize (see above)
    return made


def release(state) -> None:
    """Free the window of ``state`` (collective: ``rl.release_buffers``)."""
    found = state.cache.pop("symmetric", None)
    if found:
        found.free()


ROUNDS = 1 << 24  # a call's rounds are numbered within its tick: call c, round i is tick c * ROUNDS + i


def run(state, window_: Window, sig: Signature, x, out, in_place: bool, what: str, limit):
    """The call on the window, a round at a time, each wait within ``limit`` (a timeout as calls take it).
    Returns the result, or None when a peer is on the message path: then the caller meets it in the message
    agreement."""
    w = window_
    result = x if in_place else (out if out is not None else np.empty(sig.shape, sig.dtype))
    flat = result if result.ndim == 1 else result.reshape(-1)
    source = x if x.ndim == 1 else x.reshape(-1)  # x's copy, if it is not contiguous, is made once
    rounds, calls = sig.rounds if sig.room == w.capacity else sig.cut(w.capacity), state.calls
    tick = calls * ROUNDS
    if len(rounds) == 1:
        if not _round(state, w, sig, tick, calls & 1, source, flat, rounds[0][2], what, limit):
            return None
    else:  # regions alternate, call after call, round after round
        for i, (a, b, bounds) in enumerate(rounds):
            if not _round(state, w, sig, tick + i, (calls + i) & 1, source[a:b], flat[a:b], bounds, what, limit):
                return None
    if sig.avg:
        from .reduction import Reduction
        Reduction("avg").finish(np, flat, w.size)
    return result


def _round(state, w: Window, sig: Signature, tick: int, p: int, source, flat, bounds, what: str, limit) -> bool:
    """One round, numbered ``tick``, in region ``p``: ``source`` (this rank's piece) in, the piece's reduction out in
    ``flat``. False when a peer is on the message path."""
    flags, others = w.flags, w.others
    last = w.last[p]
    if last:
        for q in others:  # someone who took part in the round that last used this region still reads it
            f = flags[q]
            if f[DONE] < last <= f[POSTED]:
                if w.wait(DONE, last, what, state, limit):
                    return False
                break
    found = w.stamped[p]  # this signature's views of this window, when it was the last to write the region's header
    if found is None or found[4] is not sig or found[5] != source.size:
        found = sig.views(w, p, source.size)
    stamp, mine, regions, heads, _, _ = found
    stamp[0] = tick
    mine[...] = source
    fence = w.fence  # (None on x86: see Window)
    if fence is not None:
        fence()
    mine_flags = flags[w.rank]
    mine_flags[POSTED] = w.last[p] = tick
    try:
        for q in others:
            if flags[q][POSTED] < tick:
                if w.wait(POSTED, tick, what, state, limit):
                    return False
                break
        else:
            if fence is not None:
                fence()
        for head in heads:  # every rank's header: the same call, bytes and digest (checked whatever agree says:
            if head != stamp:  # the headers are read anyway)
                _disagree(state, w, p, sig, what, limit)
        ufunc = sig.ufunc
        if bounds is None:  # one-shot: every region, added up in rank order (the same bits on every rank)
            if len(regions) == 2:
                ufunc(regions[0], regions[1], flat)
            elif len(regions) == 1:
                flat[...] = regions[0]
            else:
                ufunc(regions[0], regions[1], flat)
                for q in range(2, len(regions)):
                    ufunc(flat, regions[q], flat)
            return True
        n, me = w.size, w.rank
        lo, hi = bounds[me], bounds[me + 1]  # two-shot: this rank's chunk of every region
        piece = flat[lo:hi]
        ufunc(regions[0][lo:hi], regions[1][lo:hi], out=piece) if n > 1 else np.copyto(piece, regions[0][lo:hi])
        for q in range(2, n):
            ufunc(piece, regions[q][lo:hi], out=piece)
        mine[lo:hi] = piece  # only this rank reads its own chunk: the sum may take its place
        if fence is not None:
            fence()
        mine_flags[REDUCED] = tick
        for q in others:
            if flags[q][REDUCED] < tick:
                if w.wait(REDUCED, tick, what, state, limit):
                    raise StepTimeout(f"rank {me}: {what}: a peer left the shared window part-way through a call")
                break
        else:
            if fence is not None:
                fence()
        for q in others:
            a, b = bounds[q], bounds[q + 1]
            flat[a:b] = regions[q][a:b]
        return True
    finally:
        if fence is not None:
            fence()
        mine_flags[DONE] = tick


def _disagree(state, w: Window, p: int, sig: Signature, what: str, limit) -> None:
    """The headers differ: every rank read the same ones, so every rank is here, and raises the same error."""
    limit = seconds(limit)
    calls = [int(w.headers[p][q][:8].view(np.int64)[0]) // ROUNDS for q in range(w.size)]
    if len(set(calls)) > 1:  # out of step: the message agreement says so on every rank
        private.agree(state, what, sig.text, sig.digest, limit)
    private._move_on(state, what, limit)  # as every rank does on a disagreement (see private.agree_alongside)
    private.disagreement(state.comm(what, limit), what, sig.text, limit)
    raise ValueError(f"{what}: the ranks disagree on their arguments")  # (disagreement raises first)
