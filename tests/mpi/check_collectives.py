"""Run on every rank (mpiexec): every algorithm against MPI's own collective; prints 'ok N' on rank 0."""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from against_mpi import COUNT, data, same

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
TIMEOUT = 60
COUNTS = sorted({0, 1, max(n - 1, 0), n, n + 1, 10007})
DTYPES = [np.int32, np.int64, np.float32, np.float64]


for name in sorted(rl.ALGORITHMS):
    kind, short = name.split(".")
    if kind not in ("allreduce", "reduce", "broadcast"):
        continue
    for count in COUNTS:
        for dtype in DTYPES:
            x = data(count, dtype, count)
            before = x.copy()
            what = f"{name} count={count} dtype={np.dtype(dtype).name}"
            if kind == "allreduce":
                want = np.empty_like(x)
                comm.Allreduce(x, want)
                variants = [{}] if short != "ps" else [{"servers": m} for m in sorted({1, 2, n} & set(range(1, n + 1)))]
                for opts in variants:
                    same(rl.allreduce(x, short, timeout=TIMEOUT, **opts), want, f"{what} {opts}")
            else:
                for root in range(n):
                    if kind == "reduce":
                        want = np.empty_like(x)
                        comm.Reduce(x, want, root=root)
                        got = rl.reduce(x, root, short, timeout=TIMEOUT)
                        if (got is None) != (rank != root):
                            raise AssertionError(f"rank {rank}: {what} root={root}: None expected only off the root")
                        if rank == root:
                            same(got, want, f"{what} root={root}")
                    else:
                        want = x.copy()
                        comm.Bcast(want, root=root)
                        same(rl.broadcast(x, root, short, timeout=TIMEOUT), want, f"{what} root={root}")
            if not np.array_equal(x, before):
                raise AssertionError(f"rank {rank}: {what}: the input was modified")

# segmented messages: chunks larger than the 1 MiB segment
big = data(1_000_003, np.int64, 7)
want = np.empty_like(big)
comm.Allreduce(big, want)
for short in ("ring", "rhd", "naive", "ps", "tree"):
    same(rl.allreduce(big, short, timeout=TIMEOUT), want, f"allreduce.{short} 8 MB")
# any contiguous shape, in place, a full name, a learner's schedule
grid = data(35, np.float64, 3).reshape(5, 7)
want = np.empty_like(grid)
comm.Allreduce(grid, want)
same(rl.allreduce(grid, "allreduce.ring"), want, "5x7 grid")
mine = grid.copy()
assert rl.allreduce(mine, "rhd", in_place=True) is mine
same(mine, want, "in place")
same(rl.allreduce(grid, rl.build("allreduce.tree", n, root=n - 1)), want, "a Schedule object")
strided = data(40, np.int64, 5)[::2]
want = np.empty_like(strided)
comm.Allreduce(np.ascontiguousarray(strided), want)
same(rl.allreduce(strided), want, "a strided view")
half = np.arange(12, dtype=np.float16) + rank
same(rl.allreduce(half), (np.arange(12) * n + n * (n - 1) / 2).astype(np.float16), "float16")
total = comm.allreduce(COUNT[0])
if rank == 0:
    print(f"ok {n} ranks, {total} comparisons with MPI")
sys.exit(0)
