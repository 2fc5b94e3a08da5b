"""Run on every rank: rl.alltoallv against MPI's own Alltoallv on random tables (zeros, a rank that sends nothing,
a rank that receives nothing, rows of 1 and of 3 x 2 values, float64, int32, float32), its refusals of bad input
on every rank, its virtual time on an emulated machine against the pairwise rounds' recurrence, and a rank that
never comes. Rank 0 prints one JSON line: {"same": [...], "refused": {...}, "emulated": {...}, "late": [...]}."""
import json
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import emulate

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()


def mpi_alltoallv(x, table):
    """MPI's own Alltoallv of the same rows: the reference."""
    row = int(np.prod(x.shape[1:], dtype=np.int64))
    out = np.empty((int(table[:, rank].sum()), *x.shape[1:]), x.dtype)
    send, recv = table[rank] * row, table[:, rank] * row
    kind = MPI._typedict[x.dtype.char]
    comm.Alltoallv([x, (send, np.concatenate(([0], np.cumsum(send)[:-1]))), kind],
                   [out, (recv, np.concatenate(([0], np.cumsum(recv)[:-1]))), kind])
    return out


same = []
rng = np.random.default_rng(7)  # the same tables on every rank
for case, (dtype, row) in enumerate([(np.float64, ()), (np.int32, (3, 2)), (np.float32, (5,))] * 2):
    table = rng.integers(0, 9, size=(n, n))
    if case == 1:
        table[n - 1] = 0  # the last rank sends nothing
    if case == 2:
        table[:, 0] = 0  # rank 0 receives nothing
    if case == 3:
        table[:] = 0
    x = (np.random.default_rng(100 + rank).standard_normal((int(table[rank].sum()), *row)) * 100).astype(dtype)
    mine = rl.alltoallv(x, table)
    reference = mpi_alltoallv(x, table)
    ok = mine.dtype == reference.dtype and mine.shape == reference.shape and np.array_equal(mine, reference)
    same.append(comm.allreduce(bool(ok), op=MPI.LAND))

refused = {}
table = np.ones((n, n), np.int64)
x = np.arange(n, dtype=np.float64)
differs = table.copy()
differs[0, 0] += rank == n - 1  # the last rank thinks rank 0 keeps one more row at home
for name, args in {
    "one rank's table differs": (x, differs),
    "one rank's rows do not match its counts": (x if rank else x[:-1], table),
    "not a square table": (x, np.ones((n, n + 1), np.int64)),
    "a negative count": (x, table - 2 * np.eye(n, dtype=np.int64)),
    "a torch tensor": (__import__("torch").from_numpy(x), table),
}.items():
    try:
        rl.alltoallv(*args)
        refused[name] = None
    except ValueError as err:
        refused[name] = str(err)
    said = comm.gather(refused[name], root=0)
    if rank == 0:
        refused[name] = said

# Virtual time: each rank's clock after the rounds, against the recurrence on message_times' seconds (each round's
# n messages sent at once; a rank is done with a round when its send has arrived and what it receives has, no sooner
# than that message's time after the rank's own start of the round)
spec = sys.argv[1] if len(sys.argv) > 1 else "uniform:10:5"  # a preset or uniform:GBPS:US
table = np.random.default_rng(11).integers(0, 4000, size=(n, n))
table[0] *= 4  # one busy sender
table[:, 1] *= 3  # and one busy receiver: its link takes one round's message after another
x = np.zeros((int(table[rank].sum()), 16))
with rl.emulate(spec, compute="model"):  # this CPU's time never counts: the clocks are the links' alone
    rl.alltoallv(x, table)  # warm-up
    emulate.synchronize(comm)
    start = emulate.now()
    rl.alltoallv(x, table)
    took = emulate.now() - start
    clocks = np.zeros(n)
    for k in range(1, n):  # rank r sends to r+k and receives from r-k
        times = emulate.message_times([(q, (q + k) % n, int(table[q, (q + k) % n]) * 128) for q in range(n)], comm)
        t = lambda s, d: times.get((s, d), 0.0)
        clocks = np.array([max(clocks[r] + t(r, (r + k) % n),  # its send has arrived
                               clocks[(r - k) % n] + t((r - k) % n, r),  # what it receives has arrived
                               clocks[r] + t((r - k) % n, r))  # and took its time on this rank's side
                           for r in range(n)])
took = comm.gather(took, root=0)

# Last (ringlab's communicator is left behind on the ranks that gave up): rank 0 never calls, the others agree=False
late = None
if rank != 0:
    try:
        rl.alltoallv(np.zeros(n), np.ones((n, n), np.int64), agree=False, timeout=1)
    except rl.StepTimeout as err:
        late = [str(err), list(err.peers)]
late = comm.gather(late, root=0)
if rank == 0:
    print(json.dumps({"same": same, "refused": refused,
                      "emulated": {"measured": took, "recurrence": clocks.tolist()}, "late": late}))
