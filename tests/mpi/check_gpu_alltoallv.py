"""On a GPU machine: rl.alltoallv on cupy arrays against the same call on numpy rows (which the numpy tests hold
to MPI's Alltoallv), for several dtypes and a rank that sends nothing, with the input still being written by a
kernel on the current stream when the call starts. The result must be a cupy array on the rank's own GPU.
Several ranks may share one GPU. Prints 'ok N ranks' on rank 0."""
import ml_dtypes
import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi.devices import bind_device, cupy_module

cp = cupy_module()
comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
bind_device(comm)
for trial, (dtype, width, most) in enumerate([(np.float32, 3, 7), (np.int64, 1, 5), (ml_dtypes.bfloat16, 64, 9),
                                              (np.float64, 4096, 300)]):
    table = np.random.default_rng(trial).integers(0, most, size=(n, n))
    table[n - 1] = 0  # a rank that sends nothing
    rows = np.random.default_rng(100 * trial + rank).integers(-100, 100, (int(table[rank].sum()), width)).astype(dtype)
    expected = rl.alltoallv(rows, table, timeout=60)
    device = cp.zeros(rows.shape, rows.dtype)
    device += cp.asarray(rows)  # a kernel on the current stream, not yet finished when the call takes the rows
    got = rl.alltoallv(device, table, timeout=60)
    assert isinstance(got, cp.ndarray), type(got)
    assert got.device.id == cp.cuda.Device().id, (got.device.id, cp.cuda.Device().id)
    assert got.dtype == rows.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.shape)
    assert np.array_equal(cp.asnumpy(got), expected), f"rank {rank}, {np.dtype(dtype).name}: rows differ"
assert comm.allreduce(1) == n
if rank == 0:
    print(f"ok {n} ranks", flush=True)
