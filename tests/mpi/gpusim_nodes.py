"""Device arrays on simulated nodes (RINGLAB_RANKS_PER_NODE set by the test), on the cupy stand-in:
which path each transfer takes. Every transfer between ranks of one node goes by ipc, every one
between nodes by the network transport; only the peers of this node have their memory mapped; and
the sum equals MPI's Allreduce. Prints one JSON line on rank 0."""
import json
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import ipc, nodes, private

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rl.mpi.devices.bind_device(comm)
ids = nodes.node_ids(comm, timeout=30)
x = np.random.default_rng(rank).integers(-1000, 1000, 10_001).astype(np.float64)
want = np.empty_like(x)
comm.Allreduce(x, want)
seen = {}
for algorithm in ("ring", "hierarchical", "rhd"):
    got, trace = rl.allreduce(cp.asarray(x), algorithm, transport=sys.argv[1], trace=True, timeout=60)
    assert np.array_equal(got.get(), want), f"rank {rank}: {algorithm} differs from MPI's Allreduce"
    rows = trace.to_dicts()
    seen[algorithm] = sorted({(r["rank"], r["peer"], r["via"]) for r in rows if r["nbytes"] > 0})
mapped = sorted(int(peer) for buffer in ipc.ipc_buffers(private.state(comm).comm("test", None)).values()
                for peer in buffer.peers)
everyone_mapped = comm.gather(mapped, root=0)
if rank == 0:
    print(json.dumps({"ids": ids, "used": rl.which_transport(cp.ones(1), transport=sys.argv[1]),
                      "pairs": seen, "mapped": everyone_mapped}))
