"""What a transport is: :class:`Ops`, the hooks the executor's step loop calls, and the two that
move bytes through MPI (:class:`DirectOps`: MPI reads and writes the buffers; :class:`StagedOps`: a
cupy buffer staged through pinned host memory), with the reusable buffers they share.

``ringlab.mpi.transports`` chooses among these and the peer-memory ones of ``ringlab.mpi.ipc``;
``ipc`` and ``fastpath`` build on this module and never import ``transports`` back.
"""
from __future__ import annotations

import numpy as np

from ..schedule import REDUCE
from .devices import pinned_empty
from .executor import TAG_LIMIT, RankPlan
from .reduction import SUM, Reduction

KEEP_BYTES = 64 << 20  # numpy scratch up to this size is kept between calls; larger is allocated per call


def _device_id(xp) -> int | None:
    """The current GPU for cupy, None for numpy: caches are per device, so two GPUs never share a buffer."""
    return None if xp is np else xp.cuda.Device().id


def _allocate(xp, nelems: int, dtype, purpose: str):
    if purpose.startswith("pinned"):
        return pinned_empty(max(nelems, 1), dtype)
    return xp.empty(max(nelems, 1), dtype=dtype)


def reusable(xp, nelems: int, dtype, purpose: str = "scratch", pool: dict | None = None):
    """A reusable flat buffer of at least ``nelems`` elements, one per (purpose, library, device, dtype)
    in ``pool`` (a communicator's: two communicators, or two threads on them, never share one); numpy
    scratch over :data:`KEEP_BYTES`, or any without a pool, is not kept (``rl.release_buffers()``
    frees what is)."""
    if pool is None or (xp is np and purpose == "scratch" and nelems * np.dtype(dtype).itemsize > KEEP_BYTES):
        return _allocate(xp, nelems, dtype, purpose)  # freed after the call
    key = (purpose, xp.__name__, _device_id(xp), np.dtype(dtype).str)
    have = pool.get(key)
    if have is None or have.size < nelems:
        have = pool[key] = _allocate(xp, nelems, dtype, purpose)
    return have


def _land(xp, target, arrived, op: str, reduction: Reduction = SUM) -> None:
    """Combine ``arrived`` into ``target`` in place by ``reduction`` (``"reduce"``: a sum unless the call
    asked for another op), or replace ``target`` with it (``"copy"``)."""
    if op == REDUCE:
        if reduction is SUM:
            xp.add(target, arrived, out=target)
        else:
            reduction.land(xp, target, arrived)
    else:
        target[...] = arrived


class Ops:
    """How a step's bytes travel. :func:`~ringlab.mpi.executor.run_plan` calls, on every rank:
    ``begin`` once, then per step ``before_step``, ``post`` (start the step's receives and sends),
    ``land`` for each receive as it completes, ``after_step``; and ``end`` once.

    The defaults are MPI messages between the buffers (or their staging areas) that ``incoming``
    and ``outgoing`` name.
    """

    name = "host"
    nap = 0.0  # seconds a waiting rank sleeps between looks at a request (0: MPI's own waiting)
    deadline = None  # time.monotonic() by which the current step must be done (set by the executor)
    reduction = SUM  # how a receive that reduces lands (set by make_ops for another op or for bfloat16)

    def begin(self, flat):
        """The buffer the steps work on (the caller's, unless the transport keeps its own)."""
        return flat

    def route(self, m) -> str:
        """The path message ``m`` takes (the transport's name; per peer for :class:`NodeOps`)."""
        return self.name

    def before_step(self) -> None:
        pass

    def post(self, comm, buf, step):
        """Start the step's messages; return (receive requests, send requests), in plan order. A
        windowed step starts only its first ``step.window`` receives (None stands for the others):
        the executor starts each of the rest with :meth:`post_recv` once a slot is free."""
        tag = step.index % TAG_LIMIT
        first = step.window or len(step.recvs)
        recvs = [self.post_recv(comm, buf, step, m) if i < first else None for i, m in enumerate(step.recvs)]
        sends = [comm.Isend(self.outgoing(buf, m), dest=m.peer, tag=tag) for m in step.sends]
        return recvs, sends

    def post_recv(self, comm, buf, step, m):
        return comm.Irecv(self.incoming(buf, m), source=m.peer, tag=step.index % TAG_LIMIT)

    def before_wait(self, step, m) -> None:
        """About to wait for receive ``m`` of ``step`` (emulated links sleep here until it is due)."""

    def reuse(self) -> None:
        """A landed receive's scratch is about to take the next message: whatever reads it must be done."""

    def incoming(self, buf, m):
        return buf[m.lo:m.hi]

    def outgoing(self, buf, m):
        return buf[m.lo:m.hi]

    def land(self, buf, m) -> None:
        pass

    def after_step(self, comm, buf, step, wait_for) -> None:
        pass

    def end(self, flat, buf) -> None:
        pass


class DirectOps(Ops):
    """MPI reads and writes the buffers themselves: numpy, or cupy with a CUDA-aware MPI."""

    def __init__(self, xp, plan: RankPlan, dtype, pool: dict | None = None):
        self.xp = xp
        self.scratch = reusable(xp, plan.scratch_elems, dtype, pool=pool)
        self.device = xp is not np

    def before_step(self):
        if self.device:  # kernels that landed the previous step must finish before MPI touches memory
            self.xp.cuda.get_current_stream().synchronize()

    def reuse(self):
        self.before_step()  # the kernel that landed a slot reads it asynchronously

    def incoming(self, buf, m):
        return buf[m.lo:m.hi] if m.slot < 0 else self.scratch[m.slot:m.slot + m.size]

    def land(self, buf, m):
        if m.slot >= 0:
            _land(self.xp, buf[m.lo:m.hi], self.scratch[m.slot:m.slot + m.size], m.op, self.reduction)

    def end(self, flat, buf):
        self.before_step()


class StagedOps(Ops):
    """cupy buffers through pinned host memory; MPI only ever sees host memory (plan compiled with stage_all)."""

    def __init__(self, cp, plan: RankPlan, dtype, pool: dict | None = None):
        self.cp = cp
        self.recv_host = reusable(np, plan.scratch_elems, dtype, "pinned", pool)
        self.send_host = reusable(np, plan.staging_elems, dtype, "pinned-send", pool) if plan.staging_elems else None
        self.arrived = reusable(cp, plan.scratch_elems, dtype, pool=pool)

    def before_step(self):
        # the previous step's host->device copies (ndarray.set is asynchronous) must finish before
        # MPI receives the next step's data into the same pinned slots
        self.cp.cuda.get_current_stream().synchronize()

    def outgoing(self, buf, m):
        host = self.send_host[m.slot:m.slot + m.size]
        buf[m.lo:m.hi].get(out=host)  # blocking: the bytes are in host memory when MPI takes them
        return host

    def incoming(self, buf, m):
        return self.recv_host[m.slot:m.slot + m.size]

    def land(self, buf, m):
        arrived = self.arrived[m.slot:m.slot + m.size]
        arrived.set(self.recv_host[m.slot:m.slot + m.size])
        _land(self.cp, buf[m.lo:m.hi], arrived, m.op, self.reduction)

    def end(self, flat, buf):
        self.before_step()
