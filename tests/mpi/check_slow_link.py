"""Run under mpiexec with RINGLAB_RANKS_PER_NODE and RINGLAB_NODE_LINK_GBPS set: the ring and the
hierarchical allreduce still equal MPI's Allreduce; transfers between nodes are marked slowed in the
trace and nothing else is; and each run takes, on the virtual clocks, at least as long as its busiest
rank's bytes across the link take at the link's rate (a lower bound the links guarantee).
Rank 0 prints one JSON line."""
import json

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import nodes

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
ids = nodes.node_ids(comm, timeout=30)
rate = nodes.simulated_link()
x = np.random.default_rng(rank).standard_normal(40_000)
want = np.empty_like(x)
comm.Allreduce(x, want)
report = {"ids": ids}
for algorithm in ("ring", "hierarchical"):
    for _ in range(2):  # the second call reuses what the first one set up
        assert np.allclose(rl.allreduce(x, algorithm, timeout=60), want), f"rank {rank}: {algorithm}"
    rl.mpi.emulate.synchronize(comm)  # the ranks' virtual clocks set alike
    start = rl.mpi.emulate.now()
    got, trace = rl.allreduce(x, algorithm, trace=True, timeout=60)
    elapsed = comm.allreduce(rl.mpi.emulate.now() - start, op=MPI.MAX)
    assert np.allclose(got, want), f"rank {rank}: {algorithm} traced"
    if rank == 0:
        sends = [r for r in trace.to_dicts() if r["side"] == "send" and r["nbytes"] > 0]
        crossing = [r for r in sends if ids[r["rank"]] != ids[r["peer"]]]
        per_rank = {}
        for r in crossing:
            per_rank[r["rank"]] = per_rank.get(r["rank"], 0) + r["nbytes"]
        report[algorithm] = {"elapsed": elapsed, "link_s": max(per_rank.values()) / rate,
                             "crossing_slowed": all(r["via"].endswith("(slowed)") for r in crossing),
                             "inside_not_slowed": not any("slowed" in r["via"] for r in sends if r not in crossing)}
if rank == 0:
    print(json.dumps(report))
