"""rl.alltoallv on device arrays (the cupy stand-in first on the Python path: tests/gpusim_support.py), staged
through host memory: the same rows as the numpy call, in device memory when the call returns (read as another
stream would), a device array on the rank's own GPU, with the input's pending writes landed first. Prints 'ok N ranks' on rank 0."""
import ctypes

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
face = got.__cuda_array_interface__  # device memory as it is now, read without synchronising (as a CUDA-aware MPI
raw = (np.ctypeslib.as_array((ctypes.c_uint8 * got.nbytes).from_address(face["data"][0])) if got.nbytes  # or another
       else np.empty(0, np.uint8))  # stream would): a call that returns before its copy has landed shows stale bytes
assert np.array_equal(raw.view(got.dtype).reshape(got.shape), expected), (raw, expected)
assert comm.allreduce(1) == n
if rank == 0:
    print(f"ok {n} ranks", flush=True)
