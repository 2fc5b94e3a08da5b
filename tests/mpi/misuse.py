"""Misuse that must raise the same clear error on every rank (never a wrong number, never a hang).

Run under mpiexec: ``python -m mpi4py misuse.py MODE``. Rank 0 prints one line per rank and per
case, ``rank R: CASE: what it saw``, so that the test reads every rank's outcome.
"""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def outcome(call) -> str:
    """What a call did on this rank: its error, or 'ok' and a digest of its result."""
    try:
        result = call()
    except (ValueError, rl.StepTimeout) as err:
        return f"{type(err).__name__}: {err}"
    return "ok" if result is None else f"ok {np.asarray(result).tolist()}"


def report(case: str, text: str) -> None:
    for i, line in enumerate(comm.gather(text, root=0) or []):
        print(f"rank {i}: {case}: {line}", flush=True)


def allreduce_still_right(case: str) -> None:
    """After a refused call, the next collective is right on every rank (nothing was left in flight)."""
    x = np.arange(6.0) * (rank + 1)
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    report(case + " then allreduce", "right" if np.array_equal(rl.allreduce(x, "ring", timeout=30), want) else "WRONG")


x = np.arange(6.0) + rank
mode = sys.argv[1]
if mode == "kinds":  # rank 0 broadcasts while the others reduce, with the same algorithm name
    if rank == 0:
        seen = outcome(lambda: rl.broadcast(x, 0, "direct", timeout=30))
    else:
        seen = outcome(lambda: rl.reduce(x, 0, "direct", timeout=30))
    report("kinds", seen)
    allreduce_still_right("kinds")
elif mode == "schedules":
    # a schedule that counts rank 0's data twice, passed to rl.allreduce and rl.execute
    bad = rl.make_schedule("allreduce", size, 1, [[(r, 0, 0, "reduce") for r in range(1, size)],
                                                  [(0, r, 0, "copy") for r in range(1, size)],
                                                  [(1, 0, 0, "reduce")]], name="mine")
    report("wrong schedule, allreduce", outcome(lambda: rl.allreduce(x, bad, timeout=30)))
    report("wrong schedule, execute", outcome(lambda: rl.execute(bad, x, timeout=30)))
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    got = rl.execute("allreduce.ring", x, timeout=30)
    report("execute by name", "right" if np.array_equal(got, want) else "WRONG")
    report("execute unknown name", outcome(lambda: rl.execute("allreduce.rign", x, timeout=30)))
    # two different correct schedules under one name and length: the ranks must notice
    naive = rl.build("allreduce.naive", size, root=rank % size if rank == 1 else 0)
    mine = rl.make_schedule("allreduce", size, 1, list(naive.steps), name="mine")
    report("different schedules", outcome(lambda: rl.allreduce(x, mine, timeout=30)))
    allreduce_still_right("schedules")
elif mode == "in-place":
    y = x.copy()
    if rank == 1:
        y.flags.writeable = False
    report("read-only on rank 1", outcome(lambda: rl.allreduce(y, "ring", in_place=True, timeout=30)))
    z = np.arange(12.0)[::2] if rank == 1 else x.copy()
    report("strided on rank 1", outcome(lambda: rl.allreduce(z, "ring", in_place=True, timeout=30)))
    ro = x.copy()
    ro.flags.writeable = False
    report("read-only everywhere", outcome(lambda: rl.allreduce(ro, "ring", in_place=True, timeout=30)))
    allreduce_still_right("in-place")
elif mode == "timeouts":
    for bad in (0, -1, float("nan"), float("inf"), True):
        report(f"timeout={bad!r}", outcome(lambda: rl.allreduce(x, "ring", timeout=bad)))
    report("timeout=0 on rank 1 only", outcome(lambda: rl.allreduce(x, "ring", timeout=0 if rank == 1 else 30)))
    allreduce_still_right("timeouts")
elif mode == "booleans":
    flags = np.array([rank == 0, True, False])
    report("allreduce of booleans", outcome(lambda: rl.allreduce(flags, "ring", timeout=30)))
    report("broadcast of booleans", outcome(lambda: rl.broadcast(flags, 0, "tree", timeout=30)))
    allreduce_still_right("booleans")
else:
    raise SystemExit(f"unknown mode {mode!r}")
