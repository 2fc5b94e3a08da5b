"""Run on every rank (mpiexec), with or without RINGLAB_RANKS_PER_NODE: rl.allreduce(x, "hierarchical")
takes its nodes from the job and equals MPI's Allreduce; in its trace, data crosses between nodes only
between ranks of the same local index. Rank 0 prints 'ok', the nodes and the transfers it saw."""
import json
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import nodes

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
ids = nodes.node_ids(comm, timeout=30)
local = nodes.ranks_per_node(comm)
rng = np.random.default_rng(1234)
for count in sorted({0, 1, n - 1, n + 1, 10007} | set(rng.integers(2, 5000, 4).tolist())):
    for dtype in (np.int64, np.float64):
        x = np.random.default_rng(count * 100 + rank).integers(-1000, 1000, count).astype(dtype)
        want = np.empty_like(x)
        comm.Allreduce(x, want)
        got = rl.allreduce(x, "hierarchical", timeout=60)
        if not np.allclose(got, want):
            raise AssertionError(f"rank {rank}: hierarchical count={count} {dtype.__name__} differs from MPI's")
got, trace = rl.allreduce(np.ones(999), "hierarchical", trace=True, timeout=60)
assert np.all(got == n)
if rank == 0:
    rows = trace.to_dicts()
    sends = [(r["rank"], r["peer"]) for r in rows if r["side"] == "send" and r["nbytes"] > 0]
    crossing = sorted({pair for pair in sends if ids[pair[0]] != ids[pair[1]]})
    print(json.dumps({"ok": True, "ids": ids, "local": local, "crossing": crossing,
                      "options": dict(trace.schedule.options), "describe": nodes.describe(comm)}))
sys.exit(0)
