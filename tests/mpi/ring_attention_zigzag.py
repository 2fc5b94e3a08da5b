"""Ring attention in both layouts against full attention on one rank, float64: every rank's tokens of the output,
causal or not, and the scores each rank computed. Rank 0 prints one JSON line per case.

    mpiexec -n N python -m mpi4py tests/mpi/ring_attention_zigzag.py
"""
import json

import numpy as np
from mpi4py import MPI

from ringlab.train.attention import LAYOUTS, RingAttention, attention, shard

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
ring = RingAttention(comm)
rng = np.random.default_rng(7)
chunk, d = 3, 4  # 2n chunks of 3 tokens
q, k, v = (rng.standard_normal((2, 2 * size * chunk, d)) for _ in range(3))  # 2 heads, the whole sequence
for layout in LAYOUTS:
    for causal in (False, True):
        full = shard(attention(q, k, v, causal=causal), size, rank, layout)
        out = ring(*(shard(x, size, rank, layout) for x in (q, k, v)), causal=causal, layout=layout)
        worst = comm.allreduce(float(np.abs(out - full).max() / np.abs(full).max()), op=MPI.MAX)
        work = comm.gather(ring.work, root=0)
        if rank == 0:
            print(json.dumps({"layout": layout, "causal": causal, "ranks": size, "difference": worst,
                              "work": work, "chunk": chunk, "sent": ring.sent}), flush=True)
ring.close()
