"""Under the stand-in for cupy (tests/mpi/cupy), on emulated links, in both compute modes: cupy buffers by the host
(staged) transport give MPI's sum, and with compute="model" the virtual time is rl.predict's for those links.

    mpiexec -n N python -m ringlab.cluster.runner vt_gpu_emulated.py      (from tests/mpi, as run_gpusim does)

Rank 0 prints one line per case: ``MODE right|WRONG RATIO``.
"""
import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rl.bind_device(comm)
host = np.random.default_rng(rank).standard_normal(1 << 16)
want = np.empty_like(host)
comm.Allreduce(host, want)
x = cp.asarray(host)
spec = "uniform:0.5:100"
ring = rl.build("allreduce.ring", n)
for compute in ("cpu", "model"):
    with rl.emulate(spec, compute=compute) as machine:
        rl.allreduce(x, "ring", transport="host")
        rl.mpi.emulate.synchronize(comm)
        start = rl.mpi.emulate.now()
        got = rl.allreduce(x, "ring", transport="host")
        seconds = comm.allreduce(rl.mpi.emulate.now() - start, op=MPI.MAX)
        predicted = rl.predict(ring, host.nbytes, machine.resolve(n), itemsize=8).seconds
    right = comm.allreduce(int(np.allclose(cp.asnumpy(got), want)), op=MPI.MIN)
    if rank == 0:
        print(f"{compute} {'right' if right else 'WRONG'} {seconds / predicted:.4f}", flush=True)
