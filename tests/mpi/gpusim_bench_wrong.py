"""The bench's check bites on device results: an implementation whose result is off by one element
is reported with #wrong == 1 (cupy stand-in, 2 ranks)."""
import io

import cupy as cp
from mpi4py import MPI

from ringlab.measure import bench

real = bench._Implementations.ringlab


def off_by_one(self, name):
    run = real(self, name)

    def wrong():
        out = run()
        out[3:4] += 1  # one element wrong, on the device
        return out
    return wrong


bench._Implementations.ringlab = off_by_one
result = bench.run("allreduce", ["ring"], [4096], iters=1, warmup=0, gpu=True, out=io.StringIO())
if MPI.COMM_WORLD.Get_rank() == 0:
    assert [r["wrong"] for r in result["rows"]] == [2], result["rows"]  # one element on each of the 2 ranks
    assert isinstance(cp.zeros(1), cp.ndarray)
    print("ok: wrong elements counted")
