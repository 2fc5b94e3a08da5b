"""ringlab's own communicators: its traffic never meets the user's, nor another ringlab object's; and the
agreement of the ranks on each call.

Every collective runs on a private duplicate of the communicator it is given, made once (the first
call on that communicator) and freed with it: the duplicate, and everything ringlab keeps for that
communicator (the fast path's plans and persistent requests, scratch, transport choices, node
ids, IPC buffers), hang off the user's communicator as an MPI attribute whose delete callback
frees them when the user frees the communicator. Nothing is keyed by a handle number, which MPI
reuses after a Free. Each DistributedOptimizer and parameter server gets a duplicate of its own
(:func:`duplicate`), freed by its ``close()`` or with the user's communicator.

The state of one communicator (:class:`Private`) also counts the calls made on it, which travel
with the argument agreement: ranks that are at different calls are told so (:class:`OutOfStep`)
and are in step again from the next call. After a call that failed part-way (a timeout, an
interrupt), its duplicate is set aside with every message still in flight on it, and the next
call starts on a fresh one, so nothing is ever paired with a stale message. The rank that gives
up also leaves a notice ("gave up on call k") on the old duplicate for the others: a rank that
arrives late finds it when its arguments are compared, and joins the fresh duplicate too (where the
call numbers then say who is out of step) instead of waiting for ranks that have gone. (A rank
already past that comparison keeps to its own deadline and names what it waited for.) A rank whose
deadline passed in a step writes what it waited for to stderr, then sends those notices to every rank
but the peers it was still waiting for: those are inside the same call and cannot finish it, so a
notice would go unread, and one of them may be dead: MPICH's UCX transport (it has no fault tolerance)
ends a process that starts a send to a peer it has seen die with signal 11. A notice to a dead rank
that this rank was not waiting for may still do that, which is why the reason is written first.

The ranks compare what they were given (:func:`agree`): every rank sends a 16-byte digest of its arguments,
with the number of the call, to every other (:class:`Agreement`), so a rank that never comes is named in a
StepTimeout; the full arguments follow only when the digests differ, to say what. A first call compares before
its first message; a call made like this before sends its digests beside its first step's messages and compares
them once those are posted, before anything lands (:func:`agree_alongside`), so that the comparison costs no
round trip of its own, and a rank that receives nothing in its first step is covered all the same: it waits
for every rank's digest before its first landing. On any disagreement (other arguments, other call numbers)
every rank sees the same digests, so every rank leaves the duplicate for a fresh one (a call's first messages
may be in flight on it) and raises the same error there.

Tags on a duplicate: a step of a schedule uses its index (below :data:`TAG_LIMIT`), the agreement
:data:`AGREE_TAG`, the notices :data:`NOTICE_TAG`. A utility of every layer of :mod:`ringlab.mpi`.
"""
from __future__ import annotations

import atexit
import hashlib
import itertools
import json
import os
import sys
import threading
import time
import weakref

import numpy as np

from ..schedule import parse_size
from .deadlines import StepTimeout, allgather, deadline, seconds, wait, wait_all
from .devices import forget_job_files

TAG_LIMIT = 32766        # steps' tags are below it (32767 is the smallest tag upper bound MPI guarantees)
AGREE_TAG = TAG_LIMIT    # the argument agreement's digests
NOTICE_TAG = TAG_LIMIT + 1  # "this rank gave up on call k"


class OutOfStep(RuntimeError):
    """The ranks are at different calls on one communicator (``calls``: each rank's count)."""

    def __init__(self, text: str, calls: list[int]):
        super().__init__(text)
        self.calls = calls


_KEYS: list[int] = []        # the attribute keys: a user communicator's Private, a duplicate's owner
_LIVE: "weakref.WeakSet[Private]" = weakref.WeakSet()
_MAKING = threading.Lock()   # two threads asking for the same communicator's state make one
NOTICE_SECONDS = 1.0         # how long a rank that gives up makes progress on its notices before going on
_ORDER = itertools.count()
_MPI: list = []              # mpi4py's MPI, imported once   # states in the order they were made: the same on every rank of an SPMD program


def _keys() -> list[int]:
    if not _KEYS:
        from mpi4py import MPI

        _KEYS.append(MPI.Comm.Create_keyval(delete_fn=_freed_with_user))
        _KEYS.append(MPI.Comm.Create_keyval())
        atexit.register(_forget_all)  # before mpi4py finalizes MPI (registered earlier, runs later)
    return _KEYS


def _freed_with_user(comm, keyval, private) -> None:
    """MPI's delete callback: the user freed ``comm``, so ringlab's state for it goes too."""
    private.free()


def _forget_all() -> None:
    for private in list(_LIVE):
        private.forget()


class Private:
    """What ringlab keeps for one communicator: its private duplicate (made at first use), a lock,
    the count of calls, and ``cache``: each module's state for this communicator, with ``on_free``
    hooks that give back what it holds (persistent requests, split communicators)."""

    def __init__(self, source, what: str = "ringlab", parent: "Private | None" = None):
        self.source, self.what, self.parent = source, what, parent
        self.lock = threading.Lock()
        self.calls = 0
        self.cache: dict = {}
        self.children: list[Private] = []   # optimizers' and servers' own duplicates of this communicator
        self.freed = False
        self._dup = None
        self._pending = None                # an Idup that did not finish in time: the next call waits for it
        self._set_aside: list = []          # duplicates given up after a failed call, freed with this state
        self._notes: list = []              # the notices this rank left on them (kept until they are freed)
        self.heard: str | None = None       # the last notice found from another rank: who gave up on which call
        self._hooks: dict = {}
        self._stamps = None                 # (the duplicate it belongs to, the communicator of virtual times)
        self.order = next(_ORDER)
        _LIVE.add(self)

    def comm(self, what: str, limit: float | None):
        """The private duplicate; made now (``Idup`` of the user's communicator, within ``limit``
        seconds) if there is none. Collective over the user's communicator the first time."""
        if self._dup is not None:
            return self._dup
        if self.freed:
            raise ValueError(f"{what}: ringlab's state for this communicator was freed (the communicator, or "
                             "the optimizer or server that owned it, was closed)")
        if self._pending is None:
            self._pending = self.source.Idup()
        dup, request = self._pending
        size = self.source.Get_size()
        wait(request, deadline(limit), lambda: (
            f"rank {self.source.Get_rank()}: {what}: not every rank of the communicator ({size} ranks) arrived "
            f"within {limit:g} s to set up ringlab's private communicator, which the first ringlab call on a "
            "communicator makes (which ranks are missing cannot be told before it exists): a rank skipped this "
            "call, or is still busy elsewhere" + (f"; earlier, {self.heard}" if self.heard else "")))
        self._pending = None
        dup.Set_attr(_keys()[1], self)
        self._dup = dup
        if not _FORGOT[0] and _is_world(self.source):
            _FORGOT[0] = True  # every rank of the job made it, so has finished MPI_Init: the names of MPICH's files
            forget_job_files()  # for it go, and a job that aborts (or a killed singleton) leaves them nowhere
        return dup

    def stamps(self, what: str, limit: float | None):
        """The communicator beside the private duplicate that carries emulated messages' virtual times (a
        duplicate of it, made now within ``limit`` seconds if there is none: collective); a new one with each
        new private duplicate, so that a failed call's times in flight never meet the next call's."""
        dup = self.comm(what, limit)
        if self._stamps is not None and self._stamps[0] is dup:
            return self._stamps[1]
        if self._stamps is not None:
            self._set_aside.append(self._stamps[1])  # freed with this state, as the duplicate it belonged to
        made, request = dup.Idup()
        wait(request, deadline(limit), lambda: (
            f"rank {dup.Get_rank()}: {what}: not every rank arrived within {limit:g} s to set up the communicator "
            "that carries an emulated machine's virtual times"))
        self._stamps = (dup, made)
        return made

    def on_free(self, name: str, release) -> None:
        """Call ``release()`` when this state is forgotten (``name``: one hook per cache entry)."""
        self._hooks[name] = release

    def forget(self) -> None:
        """Drop every cache entry, giving back what they hold."""
        hooks, self._hooks = self._hooks, {}
        for release in hooks.values():
            try:
                release()
            except Exception:  # MPI already finalized, or a request that cannot be freed: nothing to do
                pass
        self.cache.clear()

    def set_aside(self, notify: bool = True, spare=()) -> None:
        """After a call that failed part-way: forget this duplicate's state and start the next call on a
        fresh duplicate. The old one is kept (messages may still be in flight on it) and freed with this
        state; with ``notify`` the other ranks find a notice on it that this rank gave up on this call,
        except the ranks in ``spare``: the peers this rank was still waiting for when its deadline passed.
        Those cannot finish the call without this rank's messages, so they give up on it by their own
        deadlines and never look for a notice; and one of them may have died, and MPICH's UCX transport
        crashes the process that starts a send to a peer it has seen die."""
        self.forget()
        dup, self._dup = self._dup, None
        if dup is None:
            return
        self._set_aside.append(dup)
        if notify:
            note = np.array([self.calls], np.int64)
            self._notes.append(note)  # kept until dup is freed
            sends = [dup.Isend(note, dest=rank, tag=NOTICE_TAG) for rank in range(dup.Get_size())
                     if rank != dup.Get_rank() and rank not in spare]
            until = time.monotonic() + NOTICE_SECONDS  # on its way now: this rank may make no MPI call for a while,
            while not all(r.Test() for r in sends) and time.monotonic() < until:  # and a send moves only when it does
                time.sleep(0)
            for r in sends:
                if not r.Test():
                    r.Free()

    def given_up(self, looks: int = 2) -> str | None:
        """Whether another rank gave up on a call of the current duplicate (a notice waits): what it said.
        ``looks``: how many times to look; each look moves MPI's queue of arrived messages along, and a notice
        queued behind others (a gave-up call's first messages) needs a look more for each."""
        if self._dup is None:
            return None
        if not _MPI:
            from mpi4py import MPI
            _MPI.append(MPI)
        MPI = _MPI[0]
        status = MPI.Status()
        # a first Iprobe may only move messages along (MPICH): a notice that has arrived is seen by the second
        for _ in range(looks):
            if self._dup.Iprobe(MPI.ANY_SOURCE, NOTICE_TAG, status):
                break
        else:
            return None
        note = np.empty(1, np.int64)
        self._dup.Recv(note, source=status.Get_source(), tag=NOTICE_TAG)
        self.heard = (f"rank {status.Get_source()} gave up on call {int(note[0])} on this communicator (its deadline "
                      "passed, or it was interrupted)")
        return f"rank {self._dup.Get_rank()}: {self.heard}"

    def free(self) -> None:
        """Give back everything: caches, the duplicates, and the states of the objects made from this one."""
        if self.freed:
            return
        self.freed = True
        self.forget()
        for child in self.children:
            child.free()
        self.children = []
        for dup in ([self._dup] if self._dup is not None else []) + self._set_aside:
            try:
                dup.Free()
            except Exception:
                pass
        if self._stamps is not None and self._stamps[1] not in self._set_aside:
            try:
                self._stamps[1].Free()
            except Exception:
                pass
        self._dup, self._set_aside, self._notes, self._stamps = None, [], [], None
        _LIVE.discard(self)


_FORGOT = [False]  # forget_job_files has been called (a Compare with COMM_WORLD saved on every later duplicate)


def _is_world(comm) -> bool:
    """Whether ``comm`` has every rank of COMM_WORLD (it, or a duplicate of it)."""
    if not _MPI:
        from mpi4py import MPI
        _MPI.append(MPI)
    MPI = _MPI[0]
    try:
        return comm.Is_intra() and MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)
    except Exception:  # not an MPI communicator (a stand-in)
        return False


def state(comm) -> Private:
    """ringlab's state for ``comm``: the user's communicator, or one of ringlab's own duplicates (whose
    state is the one that made it)."""
    mine, owner = _keys()
    found = comm.Get_attr(mine)  # a user's communicator (most calls), else one of ringlab's duplicates
    if found is not None:
        return found
    found = comm.Get_attr(owner)  # (attributes are not copied to a duplicate: a duplicate has only this one)
    if found is not None:
        return found
    with _MAKING:
        found = comm.Get_attr(mine)
        if found is None:
            found = Private(comm)
            comm.Set_attr(mine, found)
    return found


CACHE_BYTES = 64 << 20  # host memory kept between calls, per communicator on each rank, unless RINGLAB_CACHE_BYTES says


def cache_bytes() -> int:
    """The host memory ringlab may keep between calls on one communicator, on each rank: spare results,
    scratch, compiled plans and schedules. ``RINGLAB_CACHE_BYTES`` (``256M``, ``1G``, ``0`` keeps nothing)
    raises or lowers the default of 64 MiB; what does not fit is made again when needed, never refused."""
    text = os.environ.get("RINGLAB_CACHE_BYTES", "")
    if text != _BUDGET[0]:
        try:
            _BUDGET[:] = [text, parse_size(text.strip()) if text.strip() else CACHE_BYTES]
        except ValueError as err:
            raise ValueError(f"RINGLAB_CACHE_BYTES={text!r}: {err}") from None
    return _BUDGET[1]


_BUDGET: list = ["", CACHE_BYTES]  # the variable's text last read, and what it said


def live() -> list[Private]:
    """Every state that has not been freed, oldest first (for ``rl.release_buffers()`` without a communicator)."""
    return sorted(_LIVE, key=lambda private: private.order)


class entered:
    """``with entered(comm, what, timeout) as private:`` runs one ringlab call on ``comm``'s private
    duplicate, with the call counted and the duplicate made (within the deadline). One thread at a time
    per communicator; a call that fails part-way (anything but a ValueError or OutOfStep, which every
    rank raises alike after a completed agreement) sets the duplicate aside, so the next call starts clean."""

    __slots__ = ("private", "what", "timeout")

    def __init__(self, comm, what: str, timeout):
        self.private, self.what, self.timeout = state(comm), what, timeout

    @classmethod
    def on(cls, private: "Private", what: str, timeout) -> "entered":
        """The same, for a communicator whose state the caller has already looked up."""
        made = cls.__new__(cls)
        made.private, made.what, made.timeout = private, what, timeout
        return made

    def __enter__(self) -> Private:
        private = self.private
        if not private.lock.acquire(blocking=False):
            raise RuntimeError(
                f"{self.what}: another thread of this process is in a ringlab call on this communicator; MPI pairs "
                "calls by their order, so two threads on one communicator could pair the wrong calls: give each "
                "thread its own communicator (comm.Dup())")
        try:
            private.calls += 1
            if private._dup is None:
                private.comm(self.what, seconds(self.timeout))
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return private

    def __exit__(self, kind, error, traceback) -> None:
        try:
            if kind is not None:
                failed(self.private, kind, error)
        finally:
            self.private.lock.release()


def failed(private: Private, kind, error) -> None:
    """After a call on ``private`` raised ``error`` (of class ``kind``): anything but a ValueError or OutOfStep,
    which every rank raises alike after a completed agreement, sets the duplicate aside (see :class:`entered`)."""
    if not issubclass(kind, (ValueError, OutOfStep)):
        spare = ()
        if issubclass(kind, StepTimeout):  # said before the notices, which a dead peer's transport may crash
            print(f"ringlab: {error}", file=sys.stderr, flush=True)
            spare = error.peers
        private.set_aside(spare=spare)


def duplicate(comm, what: str, timeout):
    """A communicator of ringlab's own for one object (an optimizer, a server) on ``comm``'s ranks, made
    now (collective, within the deadline) and freed by :func:`release` or with ``comm``."""
    parent = state(comm)
    private = Private(comm, what, parent)
    dup = private.comm(what, seconds(timeout))
    parent.children.append(private)
    return dup


def release(comm) -> None:
    """Free an object's own communicator made by :func:`duplicate` (and ringlab's state for it)."""
    private = state(comm)
    private.free()
    if private.parent is not None and private in private.parent.children:
        private.parent.children.remove(private)


# The agreement of the ranks on a call

DIGEST_BYTES = 16
MESSAGE_BYTES = DIGEST_BYTES + 8  # the digest, then the call's number on this communicator (int64)


def digest(text: str) -> np.ndarray:
    """The 16 bytes of ``text`` (its SHA-256, cut) that the ranks compare."""
    return np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIGEST_BYTES], np.uint8).copy()


class Agreement:
    """Every rank sends its digest of the arguments, and the number of the call, to every other through
    persistent requests and compares what arrives: n-1 sends and n-1 receives of 24 bytes, no
    reduction, so a rank that never comes is named in the StepTimeout (a collective could only say
    that somebody is missing)."""

    def __init__(self, comm):
        from mpi4py import MPI

        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self.mine = np.zeros(MESSAGE_BYTES, np.uint8)
        self.call = self.mine[DIGEST_BYTES:].view(np.int64)  # the call's number, within the message
        self.everyone = np.zeros((self.size, MESSAGE_BYTES), np.uint8)
        self.others = [r for r in range(self.size) if r != self.rank]
        self.receives = [comm.Recv_init(self.everyone[r], source=r, tag=AGREE_TAG) for r in self.others]
        self.sends = [comm.Send_init(self.mine, dest=r, tag=AGREE_TAG) for r in self.others]
        self.all = self.receives + self.sends
        self.last, self.spent = None, False
        self.startall, self.waitall = MPI.Prequest.Startall, MPI.Request.Waitall

    def exchange(self, mine: np.ndarray, call: int, what: str, timeout: float | None) -> tuple[bool, list[int]]:
        """Whether every rank's digest equals ``mine``, and every rank's call number (this one's: ``call``);
        a rank missing past ``timeout`` is a StepTimeout."""
        self.start(mine, call)
        return self.finish(what, timeout)

    def start(self, mine: np.ndarray, call: int) -> None:
        """Send this rank's digest and call number to every other rank, and post the receives of theirs."""
        if mine is not self.last:  # a call like the last one sends the same 16 bytes again
            self.mine[:DIGEST_BYTES] = mine
            self.last = mine
        self.call[0] = call
        self.everyone[self.rank] = self.mine
        self.startall(self.all)

    def finish(self, what: str, timeout: float | None) -> tuple[bool, list[int]]:
        """After :meth:`start`: wait for every rank's digest (a rank missing past ``timeout`` is a StepTimeout),
        then whether they all equal this one's, and every rank's call number."""
        call = int(self.call[0])
        if timeout is None:
            self.waitall(self.all)
        else:
            self._wait_until(time.monotonic() + timeout, timeout, what)
        # every rank sees the same table, so all take the same branch
        table = self.everyone.tobytes()
        if table == table[:MESSAGE_BYTES] * self.size:  # the same arguments, at the same call: the usual case
            return True, [call] * self.size
        digests = self.everyone[:, :DIGEST_BYTES]
        calls = self.everyone[:, DIGEST_BYTES:].copy().view(np.int64).ravel().tolist()
        return bool((digests == digests[0]).all()), calls

    def _wait_until(self, deadline: float, timeout: float, what: str) -> None:
        rank, others = self.rank, self.others

        def absent() -> str:
            late = [(q, r) for q, r in zip(others, self.receives) if not r.Test()]
            missing = [q for q, _ in late]
            for _, r in late:
                r.Cancel()
            self.spent = True  # its requests are spent: the call's duplicate is set aside
            if not missing:
                return f"rank {rank}: {what}: the other ranks did not take its arguments within {timeout:g} s"
            return (f"rank {rank}: {what}: rank{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} "
                    f"did not call it within {timeout:g} s")

        wait_all(self.all, deadline, absent)

    def free(self) -> None:
        for r in self.all:
            try:
                r.Free()
            except Exception:  # an active or cancelled request, or MPI already finalized
                pass


def agreement(private) -> Agreement:
    """The Agreement of a communicator's private duplicate (``private``: its :class:`Private`)."""
    found = private.cache.get("agreement")
    if found is None:
        found = private.cache["agreement"] = Agreement(private.comm("ringlab", None))
        private.on_free("agreement", found.free)
    return found


def _verdict(private, what: str, text: str, mine: np.ndarray, timeout: float | None, same: bool,
             calls: list[int], said: str | None = None, looks: int = 2) -> None:
    """After an exchange of digests: nothing when every rank agrees, else the same error on every rank.

    Every rank of the exchange saw the same table, so all take the same way: on a disagreement (other
    arguments, other call numbers) all leave this duplicate for a fresh one (a call's first messages may be
    in flight on it: :func:`agree_alongside`) and raise there, ranks at different calls :class:`OutOfStep`,
    in step again from the next call. A rank that finds another's notice that it gave up on this duplicate
    meets the others on a fresh one, where the call numbers say who is where."""
    said = said or private.given_up(looks)
    if same and len(set(calls)) == 1 and not said:
        return
    if said:  # the others have left this duplicate: meet them on a fresh one, where the call numbers tell
        _move_on(private, what, timeout)
        same, calls = agreement(private).exchange(mine, private.calls, what, timeout)
        if len(set(calls)) > 1:  # the others in that exchange saw it too: they leave it with this rank
            _move_on(private, what, timeout)
        _out_of_step(private, what, calls, said)
    _move_on(private, what, timeout)
    if len(set(calls)) > 1:
        _out_of_step(private, what, calls, None)
    disagreement(private.comm(what, None), what, text, timeout)


def _move_on(private, what: str, timeout: float | None) -> None:
    """Every rank, having seen the same disagreement, leaves this duplicate for a fresh one (collective)."""
    private.set_aside(notify=False)
    private.comm(what, timeout)


def _out_of_step(private, what: str, calls: list[int], said: str | None) -> None:
    private.calls = max(calls)
    detail = ", ".join(f"rank {r} at call {c}" for r, c in enumerate(calls))
    raise OutOfStep(f"{what}: the ranks are at different calls on this communicator ({detail}"
                    f"{'; ' + said if said else ''}): a call failed or timed out on some ranks only, or a rank "
                    "skipped one. This call is refused on every rank; the next one is in step again", calls)


def agree_alongside(private, what: str, text: str, mine: np.ndarray, timeout: float | None, sources: int = 1):
    """The agreement carried alongside a call's first messages: the digests leave now, with no wait; the
    function returned waits for the others' (they travel beside the first step's data, so they are there, or
    nearly, when that step's messages are) and compares them (:func:`_verdict`). The call's run calls it once
    the first step's messages are posted and before anything lands, so that on a disagreement no buffer of the
    caller's has changed."""
    agreement(private).start(mine, private.calls)

    def finish() -> None:
        same, calls = agreement(private).finish(what, timeout)
        # a notice of a rank that gave up on this very call waits behind that call's first messages to this
        # rank (one from each peer it hears from first, at most): a look more for each
        _verdict(private, what, text, mine, timeout, same, calls, looks=2 + sources)
    return finish


def agree(private, what: str, text: str, mine: np.ndarray, timeout: float | None) -> None:
    """Inside a call that has entered ``private``: every rank compares ``mine`` (the digest of ``text``, its
    arguments as JSON) before the call's first message; every rank raises the same ValueError, saying what
    differs (or :class:`OutOfStep`), when they disagree (:func:`_verdict`)."""
    same, calls = agreement(private).exchange(mine, private.calls, what, timeout)
    _verdict(private, what, text, mine, timeout, same, calls)


def disagreement(comm, what: str, text: str, limit: float | None) -> None:
    """The ValueError saying what differs, raised on every rank once the digests differ (the texts gathered
    within ``limit`` seconds: a rank that dies here is a StepTimeout on the others, not a hang)."""
    seen = [json.loads(t) for t in allgather(comm, text, f"{what}: comparing the arguments", limit)]
    for other, theirs in enumerate(seen):
        if theirs != seen[0]:
            detail = "; ".join(f"{k}: rank 0 has {seen[0].get(k)}, rank {other} has {theirs.get(k)}"
                               for k in sorted(set(seen[0]) | set(theirs)) if seen[0].get(k) != theirs.get(k))
            raise ValueError(f"{what}: the ranks disagree ({detail})")


def as_text(fields: dict) -> str:
    """The arguments ``fields`` as the text the ranks compare (JSON, keys sorted)."""
    return json.dumps(fields, sort_keys=True, default=str)


def check_agreement(comm, what: str, fields: dict, timeout="default") -> None:
    """All ranks of ``comm`` compare ``fields``; every rank raises the same ValueError on a mismatch (for
    trainers and servers, whose options every rank must share), or a StepTimeout naming a rank that never came."""
    with entered(comm, what, timeout) as private:
        text = as_text(fields)
        agree(private, what, text, digest(text), seconds(timeout))


__all__ = ["OutOfStep", "Private", "StepTimeout", "agree", "check_agreement", "duplicate", "entered", "live",
           "release", "state"]
