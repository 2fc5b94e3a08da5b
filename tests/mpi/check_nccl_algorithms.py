"""Run on every rank (mpiexec): dbtree, rings and hierarchical allreduce against MPI's own Allreduce,
then bad options, which every rank must refuse with the same ValueError. Rank 0 prints one JSON line
of what each rank said for each bad option, then 'ok N ranks, C comparisons with MPI'."""
import json
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from against_mpi import COUNT, data, same

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
TIMEOUT = 60
COUNTS = sorted({0, 1, n - 1, n + 1, 10007})
DTYPES = [np.int32, np.int64, np.float32, np.float64]
evens_then_odds = tuple(range(0, n, 2)) + tuple(range(1, n, 2))
uneven = [size for size in range(2, n) if n % size][:1]  # a last node smaller than the others
VARIANTS = ([("dbtree", {"segments": s}) for s in (None, 1, 3)]
            + [("rings", {"rings": k}) for k in (None, 1, 3)]
            + [("rings", {"orders": [list(evens_then_odds), list(evens_then_odds[::-1])]})]
            + [("hierarchical", {"local": size}) for size in (None, *sorted({1, min(2, n), n, *uneven}))])


for count in COUNTS:
    for dtype in DTYPES:
        x = data(count, dtype, count)
        want = np.empty_like(x)
        comm.Allreduce(x, want)
        for short, options in VARIANTS:
            what = f"allreduce.{short} {options} count={count} dtype={np.dtype(dtype).name}"
            same(rl.allreduce(x, short, timeout=TIMEOUT, **options), want, what)

BAD = {  # each rank's options; every rank must raise the same ValueError
    "rings=0": ("rings", {"rings": 0}),
    "local=0": ("hierarchical", {"local": 0}),
    "local=n+1": ("hierarchical", {"local": n + 1}),
    "segments=0": ("dbtree", {"segments": 0}),
    "orders not a permutation": ("rings", {"orders": [[0] * n, list(range(n))]}),
    "orders and rings differ": ("rings", {"rings": 3, "orders": [list(range(n))]}),
    "local differs on rank 1": ("hierarchical", {"local": 2 if rank == 1 else 1}),
}
said = {}
for case, (short, options) in BAD.items():
    try:
        rl.allreduce(np.ones(10), short, timeout=TIMEOUT, **options)
        said[case] = "no error"
    except ValueError as err:
        said[case] = str(err)
everyone = comm.gather(said, root=0)
total = comm.allreduce(COUNT[0])
if rank == 0:
    print(json.dumps({case: [s[case] for s in everyone] for case in BAD}))
    print(f"ok {n} ranks, {total} comparisons with MPI")
sys.exit(0)
