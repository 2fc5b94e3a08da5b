"""Out-of-place calls of at least plan.SOURCE_BYTES read their input where it is (no copy into the result first):
every algorithm of allreduce, reduce and broadcast, with out=, against MPI's own collectives, calls repeated with
the same and with other arrays (the bound plans kept per result and input). Run under mpiexec."""
import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.algorithms import ALGORITHMS
from ringlab.mpi.plan import SOURCE_BYTES

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(rank)
checked = 0
for name in sorted(ALGORITHMS):
    kind, algorithm = name.split(".", 1)
    if kind not in ("allreduce", "reduce", "broadcast") or algorithm in ("hierarchical",):
        continue
    for count in (SOURCE_BYTES // 8, SOURCE_BYTES // 8 * 5 + 3, 300_007):
        for dtype, op in ((np.float64, "sum"), (np.int64, "max"), (np.float64, "avg")):
            if kind == "broadcast" and op != "sum":
                continue
            out = np.full(count, -7, dtype)
            for again in range(3):  # the same arrays twice, then a new input
                x = (rng.standard_normal(count) * 100).astype(dtype) if again != 1 else x
                kept = x.copy()
                options = {"op": op} if kind != "broadcast" else {}
                if kind == "allreduce":
                    got = rl.allreduce(x, algorithm, out=out, **options)
                elif kind == "reduce":
                    got = rl.reduce(x, 0, algorithm, out=out, **options)
                else:
                    got = rl.broadcast(x, 0, algorithm, out=out)
                assert np.array_equal(x, kept), f"{name}: the input changed"
                want = np.empty_like(x)
                if kind == "broadcast":
                    want = comm.bcast(x if rank == 0 else None, root=0)
                else:
                    comm.Allreduce(x, want, op={"sum": MPI.SUM, "max": MPI.MAX, "avg": MPI.SUM}[op])
                    if op == "avg":
                        want = want / n
                if kind == "reduce" and rank != 0:
                    assert got is None
                    continue
                assert got is out, name
                assert np.allclose(out, want, rtol=1e-12, atol=1e-9), (name, count, dtype, op, again)
                checked += 1
for i, count in enumerate(comm.gather(checked, root=0) or []):  # rank 0 prints them all: lines of several
    print(f"rank {i}: ok {count}", flush=True)                     # processes would interleave
