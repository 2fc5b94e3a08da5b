"""Ring attention against full attention on one rank, float64: every rank's block of the output, causal or not,
overlapped or not, with several heads. Rank 0 prints one JSON line per case.

    mpiexec -n N python -m mpi4py tests/mpi/ring_attention.py
"""
import json

import numpy as np
from mpi4py import MPI

from ringlab.train.attention import RingAttention, attention

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
ring = RingAttention(comm)
rng = np.random.default_rng(4)
tokens, d = 5, 3  # a block of 5 tokens a rank
q, k, v = (rng.standard_normal((2, tokens * size, d)) for _ in range(3))  # 2 heads, the whole sequence
mine = slice(rank * tokens, (rank + 1) * tokens)
for causal in (False, True):
    full = attention(q, k, v, causal=causal)[:, mine]
    for overlap in (True, False):
        out = ring(q[:, mine], k[:, mine], v[:, mine], causal=causal, overlap=overlap)
        worst = comm.allreduce(float(np.abs(out - full).max() / np.abs(full).max()), op=MPI.MAX)
        if rank == 0:
            print(json.dumps({"causal": causal, "overlap": overlap, "ranks": size, "difference": worst,
                              "sent": ring.sent}), flush=True)
ring.close()
