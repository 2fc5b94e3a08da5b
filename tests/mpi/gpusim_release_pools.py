"""rl.release_buffers() hands cupy's pools back (cupy stand-in): after calls through host (staged through
pinned memory) and ipc, the device memory pool holds ringlab's scratch and the pinned pool its staging
buffers; once released, the device pool holds only the user's live array, which is intact, and the pinned
pool no free block. Prints one JSON line on rank 0."""
import json

import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
pool, pinned = cp.get_default_memory_pool(), cp.get_default_pinned_memory_pool()
mine = np.arange(3000.0) + rank
keep = cp.asarray(mine)  # the user's live array
for transport in ("host", "ipc"):
    for count in (1000, 40_003):
        x = np.random.default_rng(count + rank).integers(-1000, 1000, count).astype(np.float64)
        want = np.empty_like(x)
        comm.Allreduce(x, want)
        got = rl.allreduce(cp.asarray(x), transport=transport, timeout=60)
        assert np.array_equal(got.get(), want), f"rank {rank}: {transport}, {count} elements: not MPI's Allreduce"
del got
before = {"used": pool.used_bytes(), "total": pool.total_bytes()}
rl.release_buffers()
row = {"rank": rank, "before": before, "used": pool.used_bytes(), "total": pool.total_bytes(),
       "pinned_free_blocks": pinned.n_free_blocks(), "keep_bytes": keep.nbytes,
       "keep_intact": bool(np.array_equal(keep.get(), mine))}
rows = comm.gather(row)
if rank == 0:
    print(json.dumps(rows))
