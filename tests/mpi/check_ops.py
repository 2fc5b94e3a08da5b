"""Run on every rank (mpiexec): every reducing algorithm with every op (sum, prod, max, min, avg) and
bfloat16, against MPI's own collective with the same op; bad ops refused alike on every rank.
Prints 'ok N' on rank 0 (N comparisons)."""
import numpy as np
from mpi4py import MPI

import ringlab as rl
from against_mpi import COUNT, data, same
from ringlab.mpi.reduction import bfloat16

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
TIMEOUT = 60
MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN, "avg": MPI.SUM}
BF16 = bfloat16()


def reference(x, op, root=None):
    """MPI's own allreduce (or reduce onto ``root``) with ``op``; avg is MPI's sum / n, integers toward zero."""
    want = np.empty_like(x)
    if root is None:
        comm.Allreduce(x, want, op=MPI_OPS[op])
    else:
        comm.Reduce(x, want, op=MPI_OPS[op], root=root)
    if op == "avg" and (root is None or rank == root):
        want = want / n if want.dtype.kind == "f" else np.trunc(want / n).astype(x.dtype)
    return want


def small(count, dtype, seed):
    """Values whose product over the ranks stays exact: 1, 2 and -1 (floats), small integers."""
    rng = np.random.default_rng(seed * 1000 + rank)
    return rng.choice(np.array([1, 2, -1, -3], dtype=dtype), count)


for name in sorted(rl.ALGORITHMS):
    kind, short = name.split(".")
    if kind not in ("allreduce", "reduce", "reduce_scatter"):
        continue
    for op in MPI_OPS:
        for dtype in (np.int32, np.int64, np.float64):
            x = small(1001, dtype, 3) if op == "prod" else data(1001, dtype, 5)
            what = f"{name} op={op} dtype={np.dtype(dtype).name}"
            if kind == "allreduce":
                want = reference(x, op)
                opts = {"servers": n} if short == "ps" else {}
                same(rl.allreduce(x, short, op=op, timeout=TIMEOUT, **opts), want, what)
                # the general path (trace) and the remembered fast path, in place and into out=
                same(rl.allreduce(x, short, op=op, trace=True, timeout=TIMEOUT, **opts)[0], want, what + " traced")
                work = x.copy()
                rl.allreduce(work, short, op=op, in_place=True, timeout=TIMEOUT, **opts)
                same(work, want, what + " in place")
                out = np.empty_like(x)
                rl.allreduce(x, short, op=op, out=out, timeout=TIMEOUT, **opts)
                same(out, want, what + " out=")
            elif kind == "reduce":
                root = n - 1
                want = reference(x, op, root)
                got = rl.reduce(x, root, short, op=op, timeout=TIMEOUT)
                if rank == root:
                    same(got, want, what)
            else:
                count = len(x) - len(x) % n
                x = x[:count]
                want = reference(x, op)
                got = rl.execute(name, x, op=op, timeout=TIMEOUT)
                block = count // n  # rank r ends with block r reduced, as MPI_Reduce_scatter_block
                lo = rank * block
                same(got[lo:lo + block], want[lo:lo + block], what)

# bfloat16: reduced in bfloat16; MPI reduces the same values in float32, so the two differ by bfloat16's rounding
if BF16 is not None:
    for op in MPI_OPS:
        for algorithm in ("ring", "naive", "rhd", "tree"):
            x = data(4099, np.float32, 11).astype(BF16)
            want = np.empty(len(x), np.float32)
            comm.Allreduce(x.astype(np.float32), want, op=MPI_OPS[op])
            want = want / n if op == "avg" else want
            for traced in (False, True):
                got = rl.allreduce(x, algorithm, op=op, trace=traced, timeout=TIMEOUT)
                got = got[0] if traced else got
                COUNT[0] += 1
                limit = 2 * n * 2.0 ** -8 * max(1.0, float(np.abs(want).max()))  # n roundings of bfloat16's 8 bits
                if got.dtype != BF16 or not np.abs(got.astype(np.float32) - want).max() <= limit:  # NaN: wrong
                    raise AssertionError(f"rank {rank}: bfloat16 {algorithm} op={op}: differs from MPI's float32 "
                                         f"result by {np.abs(got.astype(np.float32) - want).max()}")
            if op in ("max", "min"):  # no rounding at all: the largest bfloat16 is one of the inputs
                exact = np.empty(len(x), np.float32)
                comm.Allreduce(x.astype(np.float32), exact, op=MPI_OPS[op])
                same(rl.allreduce(x, "ring", op=op).astype(np.float32), exact, f"bfloat16 op={op} exact")

# mistakes: the same ValueError on every rank, and nothing waits
for args, kwargs, words in [((np.ones(4),), {"op": "xor"}, "op must be one of sum, prod, max, min, avg"),
                            ((np.ones(4, complex),), {"op": "max"}, "complex numbers have no order"),
                            ((np.ones(4),), {"op": "max" if rank == 0 else "min"}, "the ranks disagree")]:
    try:
        rl.allreduce(*args, timeout=TIMEOUT, **kwargs)
    except ValueError as err:
        if words not in str(err):
            raise AssertionError(f"rank {rank}: {kwargs}: {err}") from None
    else:
        raise AssertionError(f"rank {rank}: {kwargs} was not refused")
try:
    rl.execute("broadcast.chain", np.ones(4), op="prod", timeout=TIMEOUT)
except ValueError as err:
    assert "broadcast reduces nothing" in str(err), err
else:
    raise AssertionError("a broadcast with op=prod was not refused")

total = comm.reduce(COUNT[0], root=0)
if rank == 0:
    print(f"ok {total}")
