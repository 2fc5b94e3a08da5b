"""rl.alltoallv on device arrays (the cupy stand-in first on the Python path: tests/gpusim_support.py), staged
through host memory: the same rows as the numpy call, a device array on the rank's own GPU, with the input's
pending writes landed first. Prints 'ok N ranks' on rank 0."""
import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
rl.mpi.devices.bind_device(comm)
table = np.random.default_rng(3).integers(0, 7, size=(n, n))
table[n - 1] = 0  # a rank that sends nothing
rows = np.random.default_rng(10 + rank).integers(-1000, 1000, (int(table[rank].sum()), 3)).astype(np.float32)
expected = rl.alltoallv(rows, table)

device = cp.empty(rows.shape, rows.dtype)
device.set(rows)  # asynchronous on the stand-in: lands only when its stream is synchronised
got = rl.alltoallv(device, table)
assert isinstance(got, cp.ndarray), type(got)
assert got.device.id == cp.cuda.Device().id, (got.device.id, cp.cuda.Device().id)
assert np.array_equal(cp.asnumpy(got), expected), (cp.asnumpy(got), expected)
assert comm.allreduce(1) == n
if rank == 0:
    print(f"ok {n} ranks", flush=True)
