"""Run on every rank (mpiexec): rl.gather, rl.scatter and rl.alltoall against MPI's Gather, Scatter and
Alltoall, or (argv[1] == "failures") the same ValueError on every rank for every kind of bad argument,
or (argv[1] == "absent", argv[2] a file) a rank that never comes named in a StepTimeout."""
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1] if len(sys.argv) > 1 else "compare"
TIMEOUT = 30
BLOCKS = [(0,), (1,), (7,), (1000,), (2, 3)]  # block shapes: empty, one element, odd, large, two axes
DTYPES = [np.int32, np.float64, np.bool_]
ALGORITHMS = {kind: sorted(name.split(".")[1] for name in rl.ALGORITHMS if name.startswith(kind + "."))
              for kind in ("gather", "scatter", "alltoall")}
checked = 0


def data(shape, dtype, seed):
    """This rank's own values: a rank's blocks differ from every other rank's and from each other."""
    values = np.random.default_rng(seed * 1000 + rank).integers(0, 1 << 20, shape)
    return (values % 2).astype(dtype) if dtype == np.bool_ else values.astype(dtype)


def same(got, want, what):
    global checked
    checked += 1
    if got is None or got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"rank {rank}: {what}: got {got!r}, MPI gives {want!r}")


def unchanged(x, before, what):
    if not np.array_equal(x, before):
        raise AssertionError(f"rank {rank}: {what}: the input was modified")


def compare():
    for seed, block in enumerate(BLOCKS):
        for dtype in DTYPES:
            what = f"block {block} {np.dtype(dtype).name}"
            mine = data(block, dtype, seed)          # gather: this rank's block
            blocks = data((n, *block), dtype, seed)  # scatter and alltoall: one block per rank
            before_mine, before_blocks = mine.copy(), blocks.copy()
            for root in range(n):
                want = np.empty((n, *block), dtype) if rank == root else None
                comm.Gather(mine, want, root=root)
                for short in ALGORITHMS["gather"]:
                    got = rl.gather(mine, root, short, timeout=TIMEOUT)
                    if rank == root:
                        same(got, want, f"gather.{short} {what} root={root}")
                    elif got is not None:
                        raise AssertionError(f"rank {rank}: gather.{short}: None expected off the root")
                want = np.empty(block, dtype)
                comm.Scatter(blocks, want, root=root)
                for short in ALGORITHMS["scatter"]:
                    same(rl.scatter(blocks, root, short, timeout=TIMEOUT), want, f"scatter.{short} {what} root={root}")
            want = np.empty_like(blocks)
            comm.Alltoall(blocks, want)
            for short in ALGORITHMS["alltoall"]:
                same(rl.alltoall(blocks, short, timeout=TIMEOUT), want, f"alltoall.{short} {what}")
            unchanged(mine, before_mine, what)
            unchanged(blocks, before_blocks, what)
    # full names, Schedule objects, a trace, a non-contiguous input
    x = data((n, 5), np.int64, 99)
    want = np.empty_like(x)
    comm.Alltoall(x, want)
    same(rl.alltoall(x, "alltoall.ring"), want, "a full name")
    same(rl.alltoall(x, rl.build("alltoall.direct", n)), want, "a Schedule")
    got, trace = rl.alltoall(x, trace=True)
    same(got, want, "with a trace")
    if rank == 0 and len(trace) != 2 * n * (n - 1):  # pairwise: n(n-1) blocks, a send and a receive row each
        raise AssertionError(f"trace has {len(trace)} rows, expected {2 * n * (n - 1)}")
    root = n - 1
    strided = data((n, 10), np.float32, 5)[:, ::2]
    want = np.empty((5,), np.float32)
    comm.Scatter(np.ascontiguousarray(strided), want, root=root)
    same(rl.scatter(strided, root, rl.build("scatter.tree", n, root=root)), want, "a strided view and a Schedule")
    want = np.empty((n, 5), np.float32) if rank == root else None
    comm.Gather(np.ascontiguousarray(strided[0]), want, root=root)
    got = rl.gather(strided[0], root=root, algorithm="gather.ring")
    if rank == root:
        same(got, want, "a strided block, a full name")


def report(label: str, text: str) -> None:
    """Rank 0 prints every rank's line (output of several processes would interleave)."""
    for i, line in enumerate(comm.gather(text, root=0) or []):
        print(f"{label} rank {i}: {line}", flush=True)


def failures():
    cases = {
        "sizes": lambda: rl.gather(np.ones(11 if rank == 1 else 10), timeout=TIMEOUT),
        "dtypes": lambda: rl.alltoall(np.ones((n, 2), np.float32 if rank == 0 else np.float64), timeout=TIMEOUT),
        "axis": lambda: rl.alltoall(np.ones((n + 1, 2)), timeout=TIMEOUT),
        "axis on one rank": lambda: rl.scatter(np.ones((n + 1 if rank == n - 1 else n, 2)), timeout=TIMEOUT),
        "scalar": lambda: rl.scatter(np.float64(1.0), timeout=TIMEOUT),
        "root": lambda: rl.gather(np.ones(3), root=n, timeout=TIMEOUT),
        "root on one rank": lambda: rl.scatter(np.ones((n, 3)), root=1 if rank == 0 else 0, timeout=TIMEOUT),
        "algorithm": lambda: rl.scatter(np.ones((n, 3)), algorithm="pairwise", timeout=TIMEOUT),
        "schedule": lambda: rl.scatter(np.ones((n, 3)), algorithm=rl.build("gather.direct", n), timeout=TIMEOUT),
        "owners": lambda: rl.gather(np.ones(3), algorithm=rl.make_schedule(
            "gather", n, n, [], root=0, owners=[0] * n, name="mine"), timeout=TIMEOUT),
        "timeout": lambda: rl.alltoall(np.ones((n, 3)), timeout=-1),
    }
    for label, call in cases.items():
        try:
            call()
            text = "no error"
        except ValueError as err:
            text = str(err)
        report(label, text)


def absent():
    """Rank 2 never calls: the others' argument check times out naming it (after a first call together,
    which makes ringlab's private communicator)."""
    rl.alltoall(np.ones((n, 4)), timeout=TIMEOUT)
    if rank != 2:
        try:
            rl.alltoall(np.ones((n, 4)), timeout=1.0)
        except rl.StepTimeout as err:
            if rank == 0:  # to a file: what a rank prints just before an abort may never reach mpiexec
                with open(sys.argv[2], "w") as fh:
                    fh.write(f"{err}\n")
    if rank == 0:
        comm.Abort(3)
    time.sleep(60)


start = time.monotonic()
{"compare": compare, "failures": failures, "absent": absent}[mode]()
total = comm.allreduce(checked)
if rank == 0:
    print(f"ok {n} ranks, {total} comparisons with MPI in {time.monotonic() - start:.1f} s")
sys.exit(0)
