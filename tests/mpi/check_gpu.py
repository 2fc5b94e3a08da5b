"""On a GPU machine: every allreduce/reduce/broadcast algorithm on cupy buffers, through one
transport (argv[1]), against MPI's own result on host copies. Several ranks may share one GPU."""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi.devices import bind_device, cupy_module

cp = cupy_module()
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
transport = sys.argv[1]
bind_device(comm)
used = rl.which_transport(cp.ones(1), comm, transport)
checked = 0
for name in sorted(rl.ALGORITHMS):
    kind, short = name.split(".")
    if kind not in ("allreduce", "reduce", "broadcast"):
        continue
    for count in (0, 1, n + 1, 10007, 1_000_003):
        host = np.random.default_rng(count + rank).integers(-1000, 1000, count).astype(np.float64)
        x = cp.asarray(host)
        roots = range(n) if kind != "allreduce" else [None]
        for root in roots:
            want = np.empty_like(host)
            if kind == "allreduce":
                comm.Allreduce(host, want)
                got = rl.allreduce(x, short, transport=transport, timeout=60)
            elif kind == "reduce":
                comm.Reduce(host, want, root=root)
                got = rl.reduce(x, root, short, transport=transport, timeout=60)
                if rank != root:
                    assert got is None
                    continue
            else:
                want = host.copy()
                comm.Bcast(want, root=root)
                got = rl.broadcast(x, root, short, transport=transport, timeout=60)
            assert isinstance(got, cp.ndarray), type(got)
            assert np.array_equal(got.get(), want), f"rank {rank}: {name} count={count} root={root} via {used}"
            checked += 1
# NCCL's other ops, against MPI's own (avg: MPI's sum / n); bfloat16 (cupy 14 with ml_dtypes) in sums bfloat16 holds exactly
MPI_OPS = {"prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "avg": MPI.SUM}
for op, mpi_op in MPI_OPS.items():
    rng = np.random.default_rng(17 + rank)
    host = (rng.integers(-3, 4, 100_003) if op == "prod" else rng.integers(-1000, 1000, 100_003)).astype(np.float64)
    want = np.empty_like(host)
    comm.Allreduce(host, want, op=mpi_op)
    want = want / n if op == "avg" else want
    for algorithm in ("ring", "rhd", "naive"):
        got = rl.allreduce(cp.asarray(host), algorithm, op=op, transport=transport, timeout=60)
        assert np.array_equal(got.get(), want), f"rank {rank}: {algorithm} op={op} via {used}"
        checked += 1
bf16 = rl.mpi.reduction.bfloat16()
host = np.random.default_rng(23 + rank).integers(-30, 31, 100_003).astype(bf16)
want = np.empty(host.size, np.float32)
comm.Allreduce(host.astype(np.float32), want)
got = rl.allreduce(cp.asarray(host), "ring", transport=transport, timeout=60)
assert got.dtype == bf16 and np.array_equal(got.get().astype(np.float32), want), f"rank {rank}: bfloat16 via {used}"
checked += 1
out, trace = rl.allreduce(cp.ones(1000), "ring", transport=transport, trace=True, timeout=60)
assert float(out[0].get()) == n
if rank == 0:
    assert len(trace) == 2 * rl.build("allreduce.ring", n).num_transfers, len(trace)
    assert all(row["start"] <= row["end"] for row in trace.to_dicts())
total = comm.allreduce(checked)
if rank == 0:
    print(f"ok {n} ranks via {used} ({transport} asked), {total} comparisons on {cp.cuda.runtime.getDeviceCount()} GPU(s)")
