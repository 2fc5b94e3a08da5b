"""The bench's check bites on device results, and every ringlab row times the same work (cupy
stand-in, 2 ranks).

- An implementation whose result is off by one element is reported with #wrong == 1 per rank.
- ringlab's timed calls work out of place into one output allocated before them: every call
  returns that same device buffer, never the input, and leaves the input as it was.
"""
import io

import cupy as cp
import numpy as np
from mpi4py import MPI

from ringlab.measure import bench
from ringlab.mpi.devices import bind_device

comm = MPI.COMM_WORLD
bind_device(comm)
rank = comm.Get_rank()

# out of place into a preallocated output, call after call
for collective, name in (("allreduce", "ring"), ("reduce", "tree"), ("broadcast", "chain"),
                         ("reduce_scatter", "ring"), ("allgather", "ring")):
    pristine = np.arange(12, dtype=np.float32) + rank
    x = cp.asarray(pristine)
    run = bench._Implementations(collective, comm, x, 1, "auto").make(name)
    first, second = run(), run()
    assert first is second, (collective, "a new output per call")
    assert isinstance(first, cp.ndarray) and first.data.ptr != x.data.ptr, (collective, "not out of place")
    assert np.array_equal(x.get(), pristine), (collective, "the input was changed")
    if collective == "allreduce":
        assert np.array_equal(first.get(), sum(np.arange(12, dtype=np.float32) + r for r in range(comm.Get_size())))
# under --gpu, MPI's own collective runs on a host copy (its row says "host")
mpi_result = bench._Implementations("allreduce", comm, cp.ones(8), 0, "auto").make("mpi")()
assert isinstance(mpi_result, np.ndarray) and (mpi_result == comm.Get_size()).all()

real = bench._Implementations.ringlab


def off_by_one(self, name, **options):
    run = real(self, name, **options)

    def wrong():
        out = run()
        out[3:4] += 1  # one element wrong, on the device
        return out
    return wrong


def wrong_once_reused(self, name, **options):
    """Right on its first call, wrong on every later one: only the check after the timed loop sees it."""
    run, calls = real(self, name, **options), [0]

    def reused():
        out = run()
        calls[0] += 1
        if calls[0] > 1:
            out[5:8] -= 1
        return out
    return reused


bench._Implementations.ringlab = off_by_one
result = bench.run("allreduce", ["ring", "mpi"], [4096], iters=1, warmup=0, gpu=True, out=io.StringIO())
bench._Implementations.ringlab = wrong_once_reused
after = bench.run("allreduce", ["ring", "mpi"], [4096], iters=3, warmup=1, gpu=True, out=io.StringIO())
if rank == 0:
    wrong = {r["algorithm"]: r["wrong"] for r in result["rows"]}
    assert wrong == {"ring": 2, "mpi": 0}, result["rows"]  # one element on each of the 2 ranks
    assert {r["algorithm"]: r["memory"] for r in result["rows"]} == {"ring": "device", "mpi": "host"}
    assert {r["algorithm"]: r["wrong"] for r in after["rows"]} == {"ring": 6, "mpi": 0}, after["rows"]
    print("ok: wrong elements counted; ringlab out of place into one output")
