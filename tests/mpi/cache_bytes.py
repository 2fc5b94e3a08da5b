"""What ringlab keeps between calls is bounded by bytes (RINGLAB_CACHE_BYTES, 64 MiB by default), not by
the count of calls: 70 calls on arrays of 70 sizes near 4 MiB, as fresh results, out= and in place, each
checked against MPI's own Allreduce, leave at most the budget allocated (tracemalloc), at the default and
at 16 MiB. A budget that cannot be read is the same ValueError on every rank."""
import os
import tracemalloc

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
MiB = 1 << 20
SLACK = 8 * MiB  # the loop's own objects and the compiled plans' small change


def mpi_sum(a):
    out = np.empty_like(a)
    comm.Allreduce(a, out)
    return out


def grown_by(way: str) -> int:
    """Bytes still allocated after 70 calls of ``way``, every argument and result let go."""
    rl.release_buffers()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(70):
        x = np.random.default_rng(i * 7 + rank).integers(-9, 9, (1 << 19) + i).astype(np.float64)  # 4 MiB + i
        want = mpi_sum(x)
        if way == "fresh":
            got = rl.allreduce(x)
        elif way == "out":
            got = np.full_like(x, np.nan)
            rl.allreduce(x, out=got)
        else:
            got = x
            rl.allreduce(got, in_place=True)
        assert np.array_equal(got, want), (way, i)
        del x, got, want
    return tracemalloc.get_traced_memory()[0] - before


tracemalloc.start()
for budget, setting in ((64 * MiB, None), (16 * MiB, "16M")):
    if setting is None:
        os.environ.pop("RINGLAB_CACHE_BYTES", None)
    else:
        os.environ["RINGLAB_CACHE_BYTES"] = setting
    for way in ("fresh", "out", "in place"):
        grown = grown_by(way)
        assert grown <= budget + SLACK, f"{way}, budget {budget >> 20} MiB: {grown / MiB:.0f} MiB kept"
        print(f"rank {rank}: {way}, budget {budget >> 20} MiB: {grown / MiB:.1f} MiB kept", flush=True)

# a repeated call still reuses what it kept (the budget bounds, it does not turn caching off)
os.environ.pop("RINGLAB_CACHE_BYTES", None)
from ringlab.mpi import plan, private  # noqa: E402

x = np.ones(1 << 16)
rl.allreduce(x)
rl.allreduce(x)
assert any(c.spare is not None for c in plan.calls(private.state(comm)).values())

os.environ["RINGLAB_CACHE_BYTES"] = "lots"
rl.release_buffers()
try:
    rl.allreduce(np.ones(10))
    raise SystemExit("an unreadable RINGLAB_CACHE_BYTES was taken")
except ValueError as err:
    assert "RINGLAB_CACHE_BYTES" in str(err) and "lots" in str(err), err
os.environ.pop("RINGLAB_CACHE_BYTES")
assert np.array_equal(rl.allreduce(np.ones(10)), np.full(10, comm.Get_size()))
print(f"rank {rank}: ok", flush=True)
