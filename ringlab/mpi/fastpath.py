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

Anything else (GPU buffers, traces, a problem with the arguments) goes the general way,
:func:`ringlab.mpi.collectives._run`, which finds and reports the problem on every rank.
"""
from __future__ import annotations

import atexit
import hashlib
import sys
import time
from collections import OrderedDict

import numpy as np

from .executor import TAG_LIMIT, wait
from ..schedule import REDUCE
from .ops import KEEP_BYTES, reusable

AGREE_TAG = TAG_LIMIT  # the executor's steps use tags below it
DIGEST_BYTES = 16
CALLS_KEPT = 64          # signatures remembered per process
BUFFERS_KEPT = 4         # result buffers bound per signature


def digest(text: str) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIGEST_BYTES], np.uint8).copy()


class Agreement:
    """Every rank sends its digest of the arguments to every other through persistent requests and
    compares what arrives: n-1 sends and n-1 receives of 16 bytes, no reduction, so a rank that never
    comes is named in the StepTimeout (a collective could only say that somebody is missing)."""

    def __init__(self, comm):
        from mpi4py import MPI

        self.comm, self.rank, self.size = comm, comm.Get_rank(), comm.Get_size()
        self.mine = np.zeros(DIGEST_BYTES, np.uint8)
        self.everyone = np.zeros((self.size, DIGEST_BYTES), np.uint8)
        self.others = [r for r in range(self.size) if r != self.rank]
        self.receives = [comm.Recv_init(self.everyone[r], source=r, tag=AGREE_TAG) for r in self.others]
        self.sends = [comm.Send_init(self.mine, dest=r, tag=AGREE_TAG) for r in self.others]
        self.all = self.receives + self.sends
        self.last, self.spent = None, False
        self.startall, self.waitall = MPI.Prequest.Startall, MPI.Request.Waitall

    def same(self, mine: np.ndarray, what: str, timeout: float | None) -> bool:
        """Whether every rank's digest equals ``mine``; a rank missing past ``timeout`` is a StepTimeout."""
        if mine is not self.last:  # a call like the last one sends the same 16 bytes again
            self.mine[:] = mine
            self.everyone[self.rank] = mine
            self.last = mine
        self.startall(self.all)
        if timeout is None:
            self.waitall(self.all)
        else:
            self._wait_until(time.monotonic() + timeout, timeout, what)
        table = self.everyone.tobytes()  # every rank sees the same table, so all take the same branch
        return table == table[:DIGEST_BYTES] * self.size

    def _wait_until(self, deadline: float, timeout: float, what: str) -> None:
        rank, others = self.rank, self.others

        def absent() -> str:
            late = [(q, r) for q, r in zip(others, self.receives) if not r.Test()]
            missing = [q for q, _ in late]
            for _, r in late:
                r.Cancel()
            _AGREEMENTS.pop(_comm_key(self.comm), None)  # its requests are spent: the next call makes new ones
            self.spent = True
            return (f"rank {rank}: {what}: rank{'s' * (len(missing) > 1)} {', '.join(map(str, missing))} "
                    f"did not call it within {timeout:g} s")

        for r in self.receives:
            wait(r, deadline, absent)
        for r in self.sends:
            wait(r, deadline, lambda: f"rank {rank}: {what}: the other ranks did not take its arguments")

    def free(self) -> None:
        for r in self.all:
            try:
                r.Free()
            except Exception:  # an active or cancelled request, or MPI already finalized
                pass


_AGREEMENTS: dict = {}


def _comm_key(comm):
    return id(comm), comm.py2f()


def agreement(comm) -> Agreement:
    key = _comm_key(comm)
    found = _AGREEMENTS.get(key)
    if found is None:
        _free_at_exit()
        found = _AGREEMENTS[key] = Agreement(comm)
    return found


def _landing(op: str, target, arrived) -> tuple:
    """How a receive lands, as (function, arguments): added into the buffer (a positional ``out``, the
    cheapest call numpy has) for a reduce, copied for a copy; the same as the transports' ``_land``."""
    return (np.add, (target, arrived, target)) if op == REDUCE else (np.copyto, (target, arrived))


class BoundPlan:
    """A rank's plan bound to one flat numpy buffer and its scratch: per step, the views that the
    step's messages send from, receive into and land, cut once; with ``persistent``, MPI persistent
    requests on them, made once and started each call."""

    def __init__(self, plan, flat, scratch, comm, persistent: bool):
        from mpi4py import MPI

        self.plan, self.flat, self.comm, self.persistent = plan, flat, comm, persistent
        self.startall, self.waitall = MPI.Prequest.Startall, MPI.Request.Waitall
        self.steps = []
        for step in plan.steps:
            tag = step.index % TAG_LIMIT
            into = [flat[m.lo:m.hi] if m.slot < 0 else scratch[m.slot:m.slot + m.size] for m in step.recvs]
            # (function, arguments), called in place: np.add(target, arrived, target) or np.copyto(target, arrived)
            lands = [_landing(m.op, flat[m.lo:m.hi], scratch[m.slot:m.slot + m.size]) if m.slot >= 0 else None
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
            if timeout is None and not landing:
                self.waitall(requests)  # nothing to land, or one receive to land when all is done
                for land in lands:
                    if land is not None:
                        land[0](*land[1])
                continue
            deadline = None if timeout is None else time.monotonic() + timeout
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

    def _finish_sends(self, step, sends, deadline, timeout) -> None:
        if deadline is None:
            self.waitall(sends)
            return
        for m, request in zip(step.sends, sends):
            wait(request, deadline, lambda m=m: self._late(step, timeout, f"for rank {m.peer} to take chunk {m.first}"))

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


class Call:
    """What one signature of call compiles to on this rank (see the module's docstring)."""

    def __init__(self, schedule, plan, text: str, comm, itemsize: int):
        self.schedule, self.plan, self.text, self.digest, self.comm = schedule, plan, text, digest(text), comm
        self._agreement = agreement(comm)
        self.itemsize = itemsize
        self.bound: OrderedDict[int, tuple] = OrderedDict()  # id(buffer) -> (buffer, BoundPlan)
        self.spare = None  # (last fresh result, its BoundPlan, its reference count when only we hold it)

    def agrees(self, what: str, timeout) -> bool:
        """Whether every rank called with the same arguments (see :class:`Agreement`)."""
        if self._agreement.spent:
            self._agreement = agreement(self.comm)
        return self._agreement.same(self.digest, what, timeout)

    def run(self, x, out, in_place: bool, timeout):
        scratch_bytes = self.plan.scratch_elems * self.itemsize
        keep = scratch_bytes <= KEEP_BYTES  # more than this: freed when the call returns
        if in_place:
            buf = x
        elif out is not None:
            np.copyto(out, x)
            buf = out
        elif keep and self.spare is not None and sys.getrefcount(self.spare[0]) == self.spare[2]:
            buf, bound, _ = self.spare  # the caller has let go of the last result: it is ours again
            np.copyto(buf, x)
            return self._run(bound, buf, timeout)
        elif keep:  # the result this call returns may come back free next time (see _spare_result)
            buf, bound = self._spare_result(x)
            return self._run(bound, buf, timeout)
        else:
            buf = x.copy()
        if keep:
            found = self.bound.get(id(buf))
            if found is None or found[0] is not buf:
                if len(self.bound) >= BUFFERS_KEPT:
                    self.bound.popitem(last=False)[1][1].free()
                found = (buf, BoundPlan(self.plan, buf.reshape(-1), self._scratch(buf.dtype), self.comm,
                                        persistent=True))
                self.bound[id(buf)] = found
            bound = found[1]
        else:
            bound = BoundPlan(self.plan, buf.reshape(-1), self._scratch(buf.dtype, keep=False), self.comm,
                              persistent=False)
        return self._run(bound, buf, timeout)

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
        if self.spare is not None:
            self.spare[1].free()
            self.spare = None
        buf = x.copy()
        bound = BoundPlan(self.plan, buf.reshape(-1), self._scratch(buf.dtype), self.comm, persistent=True)
        # Now: this frame's name (1), the views' bases, getrefcount's argument (1). Later, with nobody
        # else holding it: the spare tuple (1) instead of this frame's name, the same views, the argument.
        free = sys.getrefcount(buf)  # on a line of its own: inside the tuple's display, buf is on the stack too
        self.spare = (buf, bound, free)
        return buf, bound

    def _scratch(self, dtype, keep: bool = True):
        if self.plan.scratch_elems == 0:
            return np.empty(0, dtype)
        if keep:
            return reusable(np, self.plan.scratch_elems, dtype)
        return np.empty(self.plan.scratch_elems, dtype)

    def forget(self) -> None:
        for _, bound in self.bound.values():
            bound.free()
        self.bound.clear()
        if self.spare is not None:
            self.spare[1].free()
            self.spare = None
        for key, call in list(CALLS.items()):
            if call is self:
                del CALLS[key]


CALLS: OrderedDict = OrderedDict()


_AT_EXIT: list[bool] = []


def _free_at_exit() -> None:
    """Free the persistent requests before MPI finalizes (atexit runs this before mpi4py's own
    finalizing, which was registered earlier, when mpi4py.MPI was imported)."""
    if not _AT_EXIT:
        _AT_EXIT.append(True)
        atexit.register(release)


def remember(key, call: Call) -> Call:
    _free_at_exit()
    if len(CALLS) >= CALLS_KEPT:
        CALLS.popitem(last=False)[1].forget()
    CALLS[key] = call
    return call


def release() -> None:
    """Forget every remembered call (their persistent requests freed) and agreement."""
    for call in list(CALLS.values()):
        call.forget()
    CALLS.clear()
    for found in _AGREEMENTS.values():
        found.free()
    _AGREEMENTS.clear()
