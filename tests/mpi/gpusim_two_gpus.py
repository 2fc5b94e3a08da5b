"""One process, two GPUs: each rank reduces on one GPU, then on another (cupy stand-in). On a box
whose GPUs cannot reach each other (rtx4090-8), a scratch buffer kept from the first GPU and used
on the second is a kernel on the wrong device, which cupy (and the stand-in) refuse.
argv[1]: transport."""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
transport = sys.argv[1]
for device in (2 * rank, 2 * rank + 1, 2 * rank):
    with cp.cuda.Device(device):
        for count in (10, 300_007):
            x = cp.arange(count, dtype=cp.float64)
            got = rl.allreduce(x, "ring", transport=transport, timeout=30)
            assert got.device.id == device, (got.device, device)
            assert np.array_equal(got.get(), np.arange(count) * n), f"rank {rank} device {device}"
if rank == 0:
    print(f"ok: {n} ranks, each on two GPUs in turn, via {transport}")
