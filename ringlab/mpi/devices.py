"""Devices: numpy or cupy, which GPU a rank uses, and where its bytes live.

On a machine without a GPU (or without cupy) everything is numpy, silently: that is the default
every lab must work on. With GPUs, each rank binds to one by its node-local rank, so ranks on
one node spread over the GPUs it can see (``CUDA_VISIBLE_DEVICES`` masks and renumbers them) and
several ranks may share one GPU.
"""
from __future__ import annotations

import functools

import numpy as np


@functools.lru_cache(maxsize=None)
def cupy_module():
    """The cupy module when it imports and sees at least one GPU, else None."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # not installed, no driver, no device: all mean "no GPU here"
        return None


def gpu_count() -> int:
    """GPUs this process can see (after CUDA_VISIBLE_DEVICES)."""
    cp = cupy_module()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


def is_device_array(x) -> bool:
    """True for a cupy array (or anything else exposing __cuda_array_interface__)."""
    return hasattr(x, "__cuda_array_interface__")


def array_module(x):
    """numpy or cupy, whichever ``x`` belongs to."""
    if is_device_array(x):
        cp = cupy_module()
        if cp is None:
            raise ValueError("got a GPU array, but cupy cannot see a GPU in this process")
        return cp
    return np


def local_comm(comm):
    """The ranks of ``comm`` that share this node (MPI's shared-memory split), made once per communicator
    and freed with it (kept in ringlab's state for ``comm``)."""
    from mpi4py import MPI

    from . import private

    state = private.state(comm)
    found = state.cache.get("local")
    if found is None:
        found = state.cache["local"] = comm.Split_type(MPI.COMM_TYPE_SHARED)
        state.on_free("local", found.Free)
    return found


def bind_device(comm=None) -> int | None:
    """Make this rank use GPU ``local_rank % gpu_count()``; return its index, or None without GPUs."""
    cp = cupy_module()
    if cp is None:
        return None
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    device = local_comm(comm).Get_rank() % gpu_count()
    cp.cuda.Device(device).use()
    return device


def wait_for_gpu(x) -> None:
    """Wait for the GPU work on ``x``'s device, so MPI sees finished data (no-op for numpy)."""
    if is_device_array(x):
        cupy_module().cuda.get_current_stream().synchronize()


def pinned_empty(nelems: int, dtype) -> np.ndarray:
    """A numpy array in page-locked host memory (``cupyx.empty_pinned``; plain memory without a GPU)."""
    if cupy_module() is None:
        return np.empty(nelems, dtype)
    import cupyx

    return cupyx.empty_pinned(nelems, dtype)


def mps_pipe() -> str:
    """The folder where CUDA's Multi-Process Service keeps its control pipe (``CUDA_MPS_PIPE_DIRECTORY``,
    else ``/tmp/nvidia-mps``)."""
    import os

    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"


def mps_running() -> bool:
    """Whether an MPS control daemon listens in :func:`mps_pipe` (its ``control`` pipe or socket exists),
    so CUDA processes started now share each GPU through MPS instead of taking turns in time slices."""
    import os
    import stat

    try:
        mode = os.stat(os.path.join(mps_pipe(), "control")).st_mode
        return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
    except OSError:
        return False


def sharing(ranks_per_gpu: int) -> str | None:
    """What it means for timings when ``ranks_per_gpu`` MPI ranks share one GPU (None for one rank a GPU)."""
    if ranks_per_gpu <= 1:
        return None
    if mps_running():
        return (f"{ranks_per_gpu} ranks share each GPU through MPS (control pipe in {mps_pipe()}): their kernels "
                "run side by side, as on one GPU they would; a collective still moves its bytes inside one GPU's "
                "memory, not over a link")
    return (f"{ranks_per_gpu} ranks share each GPU without MPS: CUDA gives the processes the GPU in turns "
            "(time slices), so each hand-off between ranks waits for the other's slice and small calls take "
            "about a millisecond; start MPS (nvidia-cuda-mps-control -d) to let them share it, and remember the "
            "bytes never cross a link")
