"""CUDA IPC buffers grow without freeing device memory (cupy stand-in): allreduce through ipc on arrays
that grow, each call equal to MPI's Allreduce; no cudaFree (which waits for the whole device) happens
during the calls; the buffer grows to powers of two, the outgrown ones unmapped by their peers and kept,
and rl.release_buffers() frees them all. Prints one JSON line on rank 0."""
import json

import cupy as cp
import numpy as np
from cupy import _sim  # the stand-in's own record of each cudaFree (FREES) and of what is mapped (_OPENED)
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import ipc, private

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
COUNTS = [1000, 1500, 3000, 3001, 7000, 20_000, 20_000, 10]
dup = private.state(comm).comm("test", None)
freed = len(_sim.FREES)
for seed, count in enumerate(COUNTS):
    x = np.random.default_rng(seed * 131 + rank).integers(-1000, 1000, count).astype(np.float64)
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    got = rl.allreduce(cp.asarray(x), transport="ipc", timeout=60)
    assert np.array_equal(got.get(), want), f"rank {rank}: {count} elements differ from MPI's Allreduce"
(buffer,) = ipc.ipc_buffers(dup).values()
retired = ipc.retired_ipc_memory(dup)
held = [memory.ptr for memory in retired] + [buffer.memory.ptr]
row = {"rank": rank, "frees": len(_sim.FREES) - freed, "capacity": buffer.count,
       "retired": [memory.size // 8 for memory in retired], "mapped": len(_sim._OPENED), "opened": len(buffer.opened)}
del buffer, retired
rl.release_buffers()
row["held_after_release"] = sum(ptr in _sim._OWNED for ptr in held)
row["mapped_after_release"] = len(_sim._OPENED)
rows = comm.gather(row)
if rank == 0:
    print(json.dumps(rows))
