"""One-shot and two-shot allreduce through the shared window, one mode per run (argv[1]); rank 0 prints every
rank's line. Run under mpiexec."""
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import private

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]
MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD, "avg": MPI.SUM}


def report(text: str) -> None:
    for i, line in enumerate(comm.gather(text, root=0) or []):
        print(f"rank {i}: {line}", flush=True)


def expected(x, op):
    want = np.empty_like(x)
    comm.Allreduce(x, want, op=MPI_OPS[op])
    if op == "avg":
        want = want / n if x.dtype.kind in "fc" else np.trunc(want / n).astype(x.dtype)
    return want


def where() -> str:
    found = private.state(comm).cache.get("symmetric")
    return "window" if found else "messages" if found is False else "none"


if mode == "match":  # every size (several rounds too), dtype, op and way of passing the result, against MPI's
    rng = np.random.default_rng(rank)
    checked = 0
    for algorithm in ("oneshot", "twoshot", "allreduce.oneshot"):
        for size in (0, 1, 2, n - 1, 7, 1000, 40_000, 300_001):
            for dtype in (np.float32, np.float64, np.int64, np.complex64):
                for op in ("sum", "max", "avg", "prod"):
                    if op == "max" and dtype == np.complex64:
                        continue
                    x = (rng.standard_normal(size) * 8).astype(dtype)
                    for how in ("new", "out", "in_place", "strided"):
                        work = x.copy()
                        if how == "new":
                            got = rl.allreduce(work, algorithm, op=op)
                        elif how == "out":
                            got = np.empty_like(work)
                            assert rl.allreduce(work, algorithm, op=op, out=got) is got
                        elif how == "in_place":
                            got = rl.allreduce(work, algorithm, op=op, in_place=True)
                            assert got is work
                        else:  # a view that is not contiguous: copied in, a fresh result out
                            wide = np.repeat(work, 2)
                            got = rl.allreduce(wide[::2], algorithm, op=op)
                        want = expected(x, op)
                        if how != "in_place" and how != "strided":
                            assert np.array_equal(work, x), "the input changed"
                        if dtype in (np.float32, np.complex64):
                            assert np.allclose(got, want, rtol=1e-4, atol=1e-3), (algorithm, size, dtype, op, how)
                        else:
                            assert np.allclose(got, want), (algorithm, size, dtype, op, how)
                        bits = comm.allgather(got.tobytes())
                        assert all(b == bits[0] for b in bits), ("not the same bits on every rank", algorithm, size)
                        checked += 1
    report(f"ok {checked} {where()}")
elif mode == "sizes":  # rank 1 brings another size on the window: the same error everywhere, then in step again
    rl.allreduce(np.ones(4), "oneshot", timeout=30)
    try:
        rl.allreduce(np.ones(10 if rank != 1 else 11), "oneshot", timeout=30)
        said = "no error"
    except ValueError as err:
        said = str(err)
    after = rl.allreduce(np.ones(3), "oneshot", timeout=30)
    report(f"{said} | then {after.tolist()} {where()}")
elif mode == "algorithms":  # one-shot against two-shot, then one-shot against ring (the message path)
    rl.allreduce(np.ones(4), "oneshot", timeout=30)
    seen = []
    for other in ("twoshot", "ring"):
        try:
            rl.allreduce(np.ones(8), other if rank == 1 else "oneshot", timeout=30)
            seen.append("no error")
        except ValueError as err:
            seen.append(str(err))
    after = rl.allreduce(np.ones(3), "twoshot", timeout=30)
    report(" | ".join(seen) + f" | then {after.tolist()}")
elif mode == "big":  # one rank too big for one round: rounds on every rank alike; a mismatch still refused
    rl.allreduce(np.ones(4), "oneshot", timeout=30)
    x = np.arange(5000, dtype=np.float64) + rank
    got = rl.allreduce(x, "twoshot", timeout=30)
    assert np.array_equal(got, expected(x, "sum"))
    report(f"ok {where()}")
elif mode == "absent":  # the last rank never comes: the others name it within the deadline
    rl.allreduce(np.ones(4), "oneshot", timeout=30)
    if rank != n - 1:
        start = time.monotonic()
        try:
            rl.allreduce(np.ones(4), "oneshot", timeout=1.0)
            said = "no error"
        except rl.StepTimeout as err:
            said = f"{err} [peers {list(err.peers)}] after {time.monotonic() - start:.1f} s"
        print(f"rank {rank}: {said}", flush=True)
    else:
        time.sleep(4)
    comm.Barrier()
elif mode == "nodes":  # simulated nodes: the same answers, as messages
    x = np.arange(10, dtype=np.float64) * (rank + 1)
    got = rl.allreduce(x, "oneshot", timeout=30)
    assert np.array_equal(got, expected(x, "sum"))
    got = rl.allreduce(x, "twoshot", timeout=30)
    assert np.array_equal(got, expected(x, "sum"))
    report(f"ok {where()}")
elif mode == "release":  # the window is given back, and made again by the next call
    rl.allreduce(np.ones(4), "oneshot", timeout=30)
    first = where()
    rl.release_buffers(comm)
    middle = where()
    got = rl.allreduce(np.ones(4), "oneshot", timeout=30)
    report(f"{first} {middle} {where()} {got.tolist()}")
