"""What the MPI check scripts share: each rank's reproducible data, and a comparison with MPI's own result
that counts itself (``COUNT[0]``), allowing float rounding since the summation order differs from MPI's."""
import numpy as np
from mpi4py import MPI

RANK, SIZE = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
COUNT = [0]  # comparisons made on this rank


def data(count, dtype, seed):
    """This rank's values for a check: integers in [-1000, 1000) or floats in [-1, 1)."""
    rng = np.random.default_rng(seed * 1000 + RANK)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, count).astype(dtype)
    return rng.uniform(-1, 1, count).astype(dtype)


def same(got, want, what):
    """Raise naming this rank and ``what`` unless ``got`` is MPI's ``want`` (to float rounding)."""
    COUNT[0] += 1
    if np.issubdtype(want.dtype, np.integer):
        ok = np.array_equal(got, want)
    else:
        tol = SIZE * np.finfo(want.dtype).eps * 4
        ok = np.allclose(got, want, rtol=tol, atol=tol)
    if not ok or got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"rank {RANK}: {what}: differs from MPI's result")
