"""Timing collectives the way nccl-tests reports them: median time, algbw and busbw."""
from __future__ import annotations

import time

import numpy as np

from ..mpi.devices import wait_for_gpu
from ..schedule import bus_factor


def bandwidths(kind: str, nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second for one ``kind`` collective of ``nbytes`` per rank."""
    factor = bus_factor(kind, nranks)
    algbw = nbytes / seconds if seconds > 0 else float("inf")
    return algbw, algbw * factor


def time_collective(run, comm, *, warmup: int = 3, iters: int = 10, buffer=None) -> float:
    """Median over ``iters`` of the slowest rank's time for ``run()``, after ``warmup`` calls.

    Every iteration starts at a barrier; ``buffer`` (a cupy array) is synchronised before the
    clock stops so GPU work is counted. Call on every rank; all get the same number.
    """
    from mpi4py import MPI

    for _ in range(warmup):
        run()
    times = np.empty(iters)
    for i in range(iters):
        comm.Barrier()
        start = time.perf_counter()
        run()
        if buffer is not None:
            wait_for_gpu(buffer)
        times[i] = time.perf_counter() - start
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return float(np.median(slowest))
