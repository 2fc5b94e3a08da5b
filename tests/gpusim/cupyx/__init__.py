"""cupyx for the stand-in: pinned host arrays (see cupy/_sim.py)."""
from __future__ import annotations

import numpy as np

import cupy


def empty_pinned(shape, dtype=float, order="C"):
    """A numpy array in page-locked host memory."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return np.ndarray(shape, dtype, buffer=cupy.cuda.alloc_pinned_memory(nbytes), order=order)


def zeros_pinned(shape, dtype=float, order="C"):
    out = empty_pinned(shape, dtype, order)
    out[...] = 0
    return out
