"""Timing collectives the way nccl-tests reports them: median time, algbw and busbw.

Three clocks, one per kind of work:

- numpy buffers: the host clock around each call, from a barrier;
- GPU buffers moved by host-driven code (ringlab's executor, which waits on MPI itself): CUDA
  events recorded on the stream before and after each call, from a barrier, so the time is the
  stream's, kernels included;
- back to back (``ringlab bench --gpu`` times every implementation so, NCCL included): as nccl-tests
  times NCCL, ``iters`` calls launched in a row after a barrier, CUDA events recorded before the
  first and after the last (the host clock for host buffers), the mean per call.

Warm-up work is never counted: the device is synchronised after it, before the first barrier
(and events are recorded on the stream after it).

On an emulated machine (``rl.emulate``, ``RINGLAB_EMULATE``) ringlab's collectives are timed on the ranks'
virtual clocks (:mod:`ringlab.mpi.emulate`), each call from a zero-cost barrier that sets them alike; MPI's
own collectives, which do not cross the emulated links, keep this machine's clock (``virtual=False``).
"""
from __future__ import annotations

import time

import numpy as np

from ..mpi import emulate
from ..mpi.devices import cupy_module, is_device_array
from ..schedule import bus_factor


def bandwidths(kind: str, nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """(algbw, busbw) in bytes per second for one ``kind`` collective of ``nbytes`` per rank."""
    factor = bus_factor(kind, nranks)
    algbw = nbytes / seconds if seconds > 0 else float("inf")
    return algbw, algbw * factor


def time_collective(run, comm, *, warmup: int = 3, iters: int = 10, buffer=None, back_to_back: bool = False,
                    virtual: bool | None = None, walls: list | None = None) -> float:
    """Seconds per call of ``run()`` on the slowest rank: the median over ``iters`` calls, each from
    a barrier (or, with ``back_to_back``, the mean of ``iters`` calls launched in a row, as
    nccl-tests does for asynchronous GPU collectives).

    ``buffer`` is a GPU array the calls work on: the device is synchronised after the warm-up, and
    each call is timed by CUDA events on the current stream (recorded before and after it, the end
    one waited for) or, back to back, by events before the first call and after the last. Call on
    every rank; all get the same number.

    On an emulated machine (``virtual``: None says whether one is in force; False times on this machine's
    clock whatever is) each call is timed on the virtual clocks, from a barrier that sets them alike, and
    ``walls`` (a list), when given, gets the median of this machine's own seconds per call appended: what this
    CPU took beside the emulated time.
    """
    from mpi4py import MPI

    cp = cupy_module() if is_device_array(buffer) else None
    for _ in range(warmup):
        run()
    if cp is not None:
        cp.cuda.Device().synchronize()  # the warm-up's work is done before the first timed call starts
    if virtual is None:
        virtual = emulate.current() is not None
    if virtual:
        return _virtual_seconds(run, comm, iters, walls)
    if back_to_back:
        comm.Barrier()
        if cp is not None:  # the stream's time from before the first call to after the last
            stream = cp.cuda.get_current_stream()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            for _ in range(iters):
                run()
            end.record(stream)
            end.synchronize()
            mine = np.array([cp.cuda.get_elapsed_time(start, end) / 1e3 / iters])
        else:
            start = time.perf_counter()
            for _ in range(iters):
                run()
            mine = np.array([(time.perf_counter() - start) / iters])
        slowest = np.empty_like(mine)
        comm.Allreduce(mine, slowest, op=MPI.MAX)
        return float(slowest[0])
    times = np.empty(iters)
    for i in range(iters):
        comm.Barrier()
        times[i] = _event_seconds(cp, run) if cp is not None else _host_seconds(run)
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    return float(np.median(slowest))


def per_call_seconds(fn, comm, calls: int = 3000, batches: int = 9, warmup: int = 300) -> float:
    """Seconds per call of ``fn()`` called back to back on every rank of ``comm``: the median over ``batches``
    batches of ``calls`` calls (each batch from a barrier, after ``warmup`` untimed calls), the slowest rank's.
    For calls of microseconds, where one call's own clock reading would weigh as much as the call."""
    from mpi4py import MPI

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(batches):
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
    return comm.allreduce(float(np.median(times)), op=MPI.MAX)


def _virtual_seconds(run, comm, iters: int, walls: list | None) -> float:
    """The median over ``iters`` calls of the slowest rank's virtual seconds, each call from a barrier that sets
    the clocks alike; this machine's median per call appended to ``walls``."""
    from mpi4py import MPI

    times, wall = np.empty(iters), np.empty(iters)
    for i in range(iters):
        emulate.synchronize(comm)
        start, began = emulate.now(), time.perf_counter()
        run()  # ringlab's calls return with their GPU work done
        times[i], wall[i] = emulate.now() - start, time.perf_counter() - began
    both = np.concatenate([times, wall])
    slowest = np.empty_like(both)
    comm.Allreduce(both, slowest, op=MPI.MAX)
    if walls is not None:
        walls.append(float(np.median(slowest[iters:])))
    return float(np.median(slowest[:iters]))


def _host_seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _event_seconds(cp, run) -> float:
    """The current stream's time for ``run()``: CUDA events before and after, waited for."""
    stream = cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    run()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3
