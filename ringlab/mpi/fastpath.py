"""The per-call path for numpy buffers, with as little Python as a schedule allows.

A call of ``rl.allreduce`` (or any collective) on numpy arrays is, after the first one with the
same arguments, three things: the argument agreement, a copy of the input into the result, and
the steps of the rank's plan. Everything else is worked out once per *signature* (collective,
algorithm, communicator, shape, dtype, in place or not, options) and kept in a :class:`Call`:

- the checks of the arguments and the resolved, checked schedule;
- the digest of the arguments that the ranks compare (:class:`Agreement`), so a call compares
  16 bytes with every other rank through persistent requests instead of hashing JSON;
- the compiled plan, and per result buffer that comes back call after call (``out=`` or
  ``in_place=True``) a :class:`BoundPlan`: every view of the buffer and of the scratch cut once,
  and MPI persistent requests (``Send_init``/``Recv_init``) started with one ``Startall`` per
  step. A fresh result array (neither ``out=`` nor ``in_place``) gets the views and requests made
  for it, since its address is new each call.

Without a ``timeout`` each request is waited for by MPI (``Wait``/``Waitall``); with one, by
polling ``Test`` against the deadline, giving the core away between polls when the node runs
more ranks than cores (:func:`ringlab.mpi.launch.oversubscribed`), so the rank being waited for
can run.

Everything here lives in ringlab's state for the communicator (:mod:`ringlab.mpi.private`), so it
is freed with it; a bound plan of a buffer the caller owns (``out=``, ``in_place=True``) sees that
memory through raw views that hold no reference to the caller's array, so a dropped array is freed.

Anything else (GPU buffers, traces, a problem with the arguments) goes the general way,
:func:`ringlab.mpi.collectives._run`, which finds and reports the problem on every rank.
"""
from __future__ import annotations

import hashlib
import sys
import time
import weakref
from collections import OrderedDict

import numpy as np

from .deadlines import StepTimeout, wait, wait_all
from .executor import AGREE_TAG, TAG_LIMIT, unfinished
from ..schedule import REDUCE
from .ops import KEEP_BYTES, reusable
from .private import OutOfStep

DIGEST_BYTES = 16
MESSAGE_BYTES = DIGEST_BYTES + 8  # the digest, then the call's number on this communicator (int64)
CALLS_KEPT = 64          # signatures remembered per communicator
BUFFERS_KEPT = 4         # result buffers bound per signature
SPARE_BYTES = 256 << 20  # fresh results kept for reuse, per communicator, at most


def digest(text: str) -> np.ndarray:
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
        if mine is not self.last:  # a call like the last one sends the same 16 bytes again
            self.mine[:DIGEST_BYTES] = mine
            self.last = mine
        self.call[0] = call
        self.everyone[self.rank] = self.mine
        self.startall(self.all)
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
    """The Agreement of a communicator's private duplicate (``private``: its :class:`~ringlab.mpi.private.Private`)."""
    found = private.cache.get("agreement")
    if found is None:
        found = private.cache["agreement"] = Agreement(private.comm("ringlab", None))
        private.on_free("agreement", found.free)
    return found


def agreed(private, mine: np.ndarray, what: str, timeout: float | None) -> bool:
    """Whether every rank's digest equals ``mine``. Ranks at different calls on this communicator all
    raise :class:`~ringlab.mpi.private.OutOfStep`, and are in step again from the next call."""
    same, calls = agreement(private).exchange(mine, private.calls, what, timeout)
    said = private.given_up()
    if said:  # the others have left this duplicate: meet them on a fresh one, where the call numbers tell
        private.set_aside(notify=False)
        private.comm(what, timeout)
        same, calls = agreement(private).exchange(mine, private.calls, what, timeout)
    if len(set(calls)) > 1 or said:
        private.calls = max(calls)
        detail = ", ".join(f"rank {r} at call {c}" for r, c in enumerate(calls))
        raise OutOfStep(f"{what}: the ranks are at different calls on this communicator ({detail}"
                        f"{'; ' + said if said else ''}): a call failed or timed out on some ranks only, or a rank "
                        "skipped one. This call is refused on every rank; the next one is in step again", calls)
    return same


def _landing(op: str, target, arrived, ufunc=np.add) -> tuple:
    """How a receive lands, as (function, arguments): combined into the buffer by ``ufunc`` (np.add
    unless the call asked for another op; a positional ``out``, the cheapest call numpy has) for a
    reduce, copied for a copy; the same as the transports' ``_land``."""
    return (ufunc, (target, arrived, target)) if op == REDUCE else (np.copyto, (target, arrived))


class BoundPlan:
    """A rank's plan bound to one flat numpy buffer and its scratch: per step, the views that the
    step's messages send from, receive into and land, cut once; with ``persistent``, MPI persistent
    requests on them, made once and started each call."""

    def __init__(self, plan, flat, scratch, comm, persistent: bool, ufunc=np.add):
        from mpi4py import MPI

        self.plan, self.flat, self.comm, self.persistent = plan, flat, comm, persistent
        self.startall, self.waitall = MPI.Prequest.Startall, MPI.Request.Waitall
        self.steps = []
        for step in plan.steps:
            tag = step.index % TAG_LIMIT
            into = [flat[m.lo:m.hi] if m.slot < 0 else scratch[m.slot:m.slot + m.size] for m in step.recvs]
            # (function, arguments), called in place: np.add(target, arrived, target) or np.copyto(target, arrived)
            lands = [_landing(m.op, flat[m.lo:m.hi], scratch[m.slot:m.slot + m.size], ufunc) if m.slot >= 0 else None
                     for m in step.recvs]
            froms = [flat[m.lo:m.hi] for m in step.sends]
            recv_args = [(v, m.peer, tag) for v, m in zip(into, step.recvs)]
            send_args = [(v, m.peer, tag) for v, m in zip(froms, step.sends)]
            requests = None
            if persistent:
                requests = ([comm.Recv_init(v, source=p, tag=t) for v, p, t in recv_args]
                            + [comm.Send_init(v, dest=p, tag=t) for v, p, t in send_args])
            # one receive: wait for everything, then land it (nothing to overlap the landing with)
            whole = len(step.recvs) <= 1 and not step.sends_before_landing and not step.window
            first = None
            if requests is not None and step.window:  # the sends and the first window of receives
                first = requests[:step.window] + requests[len(recv_args):]
            self.steps.append((step, recv_args, send_args, lands, requests, any(lands) and not whole, first))

    def run(self, timeout: float | None = None) -> None:
        comm, nrecv = self.comm, 0
        for step, recv_args, send_args, lands, requests, landing, first in self.steps:
            nrecv, window = len(recv_args), step.window
            if requests is not None:
                self.startall(first if window else requests)
            else:
                requests = ([comm.Irecv(v, source=p, tag=t) if i < (window or nrecv) else None
                             for i, (v, p, t) in enumerate(recv_args)]
                            + [comm.Isend(v, dest=p, tag=t) for v, p, t in send_args])
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                if not landing:  # nothing to land, or one receive to land when all is done
                    if timeout is None:
                        self.waitall(requests)
                    else:
                        wait_all(requests, deadline, lambda: self._late(step, timeout, self._still(step, requests)))
                    for land in lands:
                        if land is not None:
                            land[0](*land[1])
                    continue
                sends = requests[nrecv:]
                if step.sends_before_landing:
                    self._finish_sends(step, sends, deadline, timeout)
                for i, (m, land) in enumerate(zip(step.recvs, lands)):
                    if deadline is None:
                        requests[i].Wait()
                    else:
                        wait(requests[i], deadline, lambda m=m: self._late(step, timeout, f"to receive chunk {m.first} "
                                                                                          f"from rank {m.peer}"))
                    if land is not None:
                        land[0](*land[1])
                    if window and i + window < nrecv:  # its slot is free again: take the next message
                        later = i + window
                        if self.persistent:
                            requests[later].Start()
                        else:
                            v, p, t = recv_args[later]
                            requests[later] = comm.Irecv(v, source=p, tag=t)
                if not step.sends_before_landing:
                    self._finish_sends(step, sends, deadline, timeout)
            except StepTimeout as err:  # which peers it still waited for: set_aside tells them nothing
                err.peers = err.peers or unfinished(step, requests[:nrecv], requests[nrecv:])
                raise

    def _finish_sends(self, step, sends, deadline, timeout) -> None:
        if deadline is None:
            self.waitall(sends)
            return
        for m, request in zip(step.sends, sends):
            wait(request, deadline, lambda m=m: self._late(step, timeout, f"for rank {m.peer} to take chunk {m.first}"))

    @staticmethod
    def _still(step, requests) -> str:
        """What a step whose requests did not all finish still waits for (the first unfinished one)."""
        for i, m in enumerate(step.recvs):
            if requests[i] is not None and not requests[i].Test():
                return f"to receive chunk {m.first} from rank {m.peer}"
        for m, request in zip(step.sends, requests[len(step.recvs):]):
            if not request.Test():
                return f"for rank {m.peer} to take chunk {m.first}"
        return "for a message of this step"

    def _late(self, step, timeout, waiting: str) -> str:
        label = f" ({step.label})" if step.label else ""
        return (f"rank {self.plan.rank}: step {step.index}{label} did not finish within {timeout:g} s: "
                f"still waiting {waiting}")

    def free(self) -> None:
        for *_, requests, _landing, _first in self.steps:
            for r in requests or ():
                try:
                    r.Free()
                except Exception:
                    pass


def _raw(buf: np.ndarray) -> np.ndarray:
    """A flat array over ``buf``'s memory that holds no reference to ``buf``: a bound plan of a caller's
    buffer must not keep it alive. It is used only by a call whose buffer has that very address and
    size, so the memory it reads then belongs to that call's buffer."""
    from mpi4py import MPI

    if buf.nbytes == 0:
        return np.empty(0, buf.dtype)
    return np.frombuffer(MPI.buffer.fromaddress(buf.ctypes.data, buf.nbytes), dtype=buf.dtype)


class Call:
    """What one signature of call compiles to on this rank (see the module's docstring)."""

    def __init__(self, private, schedule, plan, text: str, comm, itemsize: int, ufunc=np.add):
        self.private, self.schedule, self.plan, self.text, self.comm = private, schedule, plan, text, comm
        self.ufunc = ufunc  # how receives that reduce land (np.add, np.multiply, np.maximum, np.minimum)
        self.digest, self.itemsize = digest(text), itemsize
        self.bound: OrderedDict[tuple, BoundPlan] = OrderedDict()  # (address, bytes) of a caller's buffer -> plan
        self.last = None  # (weak reference to the caller's buffer of the last call, its plan)
        self.spare = None  # (last fresh result, its BoundPlan, its reference count when only we hold it)

    def agrees(self, what: str, timeout) -> bool:
        """Whether every rank called with the same arguments (see :func:`agreed`)."""
        return agreed(self.private, self.digest, what, timeout)

    def bound_for(self, buf) -> "BoundPlan | None":
        """The bound plan kept for the caller's buffer ``buf`` (None: none yet)."""
        return self.bound.get((buf.__array_interface__["data"][0], buf.nbytes))

    def run(self, x, out, in_place: bool, timeout):
        keep = self.plan.scratch_elems * self.itemsize <= KEEP_BYTES  # more than this: freed when the call returns
        if in_place or out is not None:
            buf = x if in_place else out
            if out is not None:
                np.copyto(out, x)
            if not keep:
                return self._run(self._once(buf), buf, timeout)
            last = self.last
            if last is not None and last[0]() is buf:  # the same array as last time: the same memory
                return self._run(last[1], buf, timeout)
            key = (buf.__array_interface__["data"][0], buf.nbytes)
            bound = self.bound.get(key)
            if bound is None:
                if len(self.bound) >= BUFFERS_KEPT:
                    dropped = self.bound.popitem(last=False)[1]
                    dropped.free()
                    if self.last is not None and self.last[1] is dropped:
                        self.last = None
                bound = self.bound[key] = BoundPlan(self.plan, _raw(buf.reshape(-1)), self._scratch(buf.dtype),
                                                    self.comm, persistent=True, ufunc=self.ufunc)
            else:
                self.bound.move_to_end(key)
            self.last = (weakref.ref(buf), bound)  # a weak reference: the caller's array may still go
            return self._run(bound, buf, timeout)
        if keep and self.spare is not None and sys.getrefcount(self.spare[0]) == self.spare[2]:
            buf, bound, _ = self.spare  # the caller has let go of the last result: it is ours again
            np.copyto(buf, x)
            return self._run(bound, buf, timeout)
        if keep and x.nbytes <= _room_for_spare(self.private, self, x.nbytes):
            buf, bound = self._spare_result(x)  # may come back free next time (see _spare_result)
            return self._run(bound, buf, timeout)
        buf = x.copy()
        return self._run(self._once(buf), buf, timeout)

    def _once(self, buf) -> "BoundPlan":
        """A plan bound to ``buf`` for this call only, on scratch that is not kept."""
        return BoundPlan(self.plan, buf.reshape(-1), self._scratch(buf.dtype, keep=False), self.comm, persistent=False,
                         ufunc=self.ufunc)

    def _run(self, bound, buf, timeout):
        try:
            bound.run(timeout)
        except BaseException:
            self.forget()  # a step left requests active: nothing bound here may be started again
            raise
        return buf

    def _spare_result(self, x):
        """A fresh result array holding ``x``, bound with persistent requests, and remembered with the
        number of references it has when nobody but this Call holds it: when the count is back there
        at a later call, the caller has let go of it, and that call reuses it instead of allocating."""
        self._drop_spare()
        buf = x.copy()
        bound = BoundPlan(self.plan, buf.reshape(-1), self._scratch(buf.dtype), self.comm, persistent=True,
                          ufunc=self.ufunc)
        # Now: this frame's name (1), the views' bases, getrefcount's argument (1). Later, with nobody
        # else holding it: the spare tuple (1) instead of this frame's name, the same views, the argument.
        free = sys.getrefcount(buf)  # on a line of its own: inside the tuple's display, buf is on the stack too
        self.spare = (buf, bound, free)
        return buf, bound

    def _drop_spare(self) -> None:
        if self.spare is not None:
            self.spare[1].free()
            self.spare = None

    def _scratch(self, dtype, keep: bool = True):
        if self.plan.scratch_elems == 0:
            return np.empty(0, dtype)
        if keep:
            return reusable(np, self.plan.scratch_elems, dtype, pool=self.private.cache.setdefault("pool", {}))
        return np.empty(self.plan.scratch_elems, dtype)

    def forget(self) -> None:
        for bound in self.bound.values():
            bound.free()
        self.bound.clear()
        self.last = None
        self._drop_spare()
        found = calls(self.private)
        for key, call in list(found.items()):
            if call is self:
                del found[key]


def _room_for_spare(private, call: Call, nbytes: int) -> int:
    """Bytes a new spare result of ``call`` may take: the other calls' spares are dropped, least
    recently used first, until this one fits in :data:`SPARE_BYTES` (0 when it cannot)."""
    if nbytes > SPARE_BYTES:
        return 0
    others = [c for c in calls(private).values() if c is not call and c.spare is not None]
    held = sum(c.spare[0].nbytes for c in others)
    for c in others:  # in the order they were remembered: the oldest first
        if held + nbytes <= SPARE_BYTES:
            break
        held -= c.spare[0].nbytes
        c._drop_spare()
    return nbytes


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


def remember(private, key, call: Call) -> Call:
    found = calls(private)
    if len(found) >= CALLS_KEPT:
        found.popitem(last=False)[1].forget()
    found[key] = call
    return call
