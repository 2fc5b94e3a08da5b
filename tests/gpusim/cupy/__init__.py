"""A CPU stand-in for the slice of cupy that ringlab uses, for tests on machines without a GPU.

Test processes import it instead of cupy by putting ``tests/gpusim`` first on their Python path
(``RINGLAB_GPUSIM_MACHINE`` picks the machine it pretends to be, see ``machines.py``). The
package ringlab never knows about it. How it behaves, and what it cannot do, is in ``_sim.py``:
in short, device arrays live in shared memory, work queued on a stream lands only when the
stream is synchronised, so a missing synchronisation reads stale data and a test fails.

Arrays hand their memory to MPI through ``__cuda_array_interface__``, as cupy's do: with
``RINGLAB_CUDA_AWARE=force`` the mpich wheel, which is not CUDA-aware (and says so, so ``=1`` is
refused), then reads them as host memory, which is what they are here. There is no buffer
protocol and no implicit conversion to numpy, as in cupy: ``.get()`` it is.
"""
from __future__ import annotations

import numpy as np

from . import _sim, cuda

__version__ = "14.0.0+gpusim"

# the dtypes, as cupy re-exports numpy's
from numpy import (bool_, float16, float32, float64, int8, int16, int32, int64, uint8,  # noqa: E402,F401
                   uint16, uint32, uint64)


class _Flags:
    def __init__(self, array):
        self.c_contiguous = array._host_layout().flags.c_contiguous
        self.f_contiguous = array._host_layout().flags.f_contiguous
        self.owndata = array.data.ptr == array.data.mem.ptr and isinstance(array.data.mem, (cuda.Memory,
                                                                                           cuda._PooledMemory))


class ndarray:
    """An n-dimensional array in (stand-in) device memory."""

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        self.shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
        self.dtype = np.dtype(dtype)
        if memptr is None:
            memptr = cuda.alloc(self.nbytes)  # from the default memory pool, as cupy's arrays
        self.data = memptr
        self.strides = tuple(strides) if strides is not None else tuple(
            np.empty(0, self.dtype).itemsize * int(np.prod(self.shape[i + 1:], dtype=np.int64))
            for i in range(len(self.shape)))

    # --- what it is ---------------------------------------------------------------------------
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    ndim = property(lambda self: len(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    nbytes = property(lambda self: self.size * self.dtype.itemsize)
    flags = property(lambda self: _Flags(self))

    @property
    def device(self):
        return cuda.Device(self.data.device_id)

    def __len__(self):
        return self.shape[0]

    @property
    def __cuda_array_interface__(self) -> dict:
        contiguous = self._host_layout().flags.c_contiguous
        return {"shape": self.shape, "typestr": self.dtype.str, "descr": [("", self.dtype.str)],
                "data": (self.data.ptr if self.size else 0, False), "strides": None if contiguous else self.strides,
                "version": 3, "stream": _sim.current_stream().ptr or 1}

    def _span(self) -> int:
        if self.size == 0:
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + self.itemsize

    def _host_layout(self) -> np.ndarray:
        """The memory as numpy sees it right now: what MPI, a DMA engine or an IPC peer would read."""
        raw = _sim.host_view(self.data.ptr, self._span()) if self.size else np.empty(0, np.uint8)
        return np.ndarray(self.shape, self.dtype, buffer=raw, strides=self.strides if self.size else None)

    # --- views ----------------------------------------------------------------------------------
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        if not all(k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in key):
            raise NotImplementedError("the stand-in takes basic indexing only (ints, slices, ...)")
        if Ellipsis not in key:
            key = key + (Ellipsis,)
        whole = self._host_layout()
        part = whole[key]
        offset = part.__array_interface__["data"][0] - whole.__array_interface__["data"][0] if part.size else 0
        return ndarray(part.shape, self.dtype, cuda.MemoryPointer(self.data.mem, self.data.ptr - self.data.mem.ptr
                                                                  + offset), strides=part.strides)

    def reshape(self, *shape, order="C"):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if not self.flags.c_contiguous:
            return self.copy().reshape(shape)
        layout = np.empty(self.shape, dtype=np.uint8).reshape(shape)  # resolves -1 and checks the size
        return ndarray(layout.shape, self.dtype, self.data)

    def ravel(self, order="C"):
        return self.reshape(-1)

    def view(self, dtype=None):
        if dtype is None or np.dtype(dtype) == self.dtype:
            return ndarray(self.shape, self.dtype, self.data, self.strides)
        if np.dtype(dtype).itemsize == self.itemsize:  # the same bytes, read as another type of that size
            return ndarray(self.shape, dtype, self.data, self.strides)
        raise NotImplementedError("the stand-in views arrays as a dtype of the same size only")

    # --- host <-> device: queued on a stream ------------------------------------------------------
    def set(self, arr, stream=None):
        """Copy host ``arr`` in. Pinned memory is read when the copy runs; pageable memory now."""
        arr = np.asarray(arr)
        if arr.size != self.size or arr.dtype != self.dtype and arr.size:
            raise ValueError(f"Shape mismatch or dtype mismatch: {arr.shape} {arr.dtype} into "
                             f"{self.shape} {self.dtype}")
        pinned = _sim.is_pinned(arr)
        source = arr if pinned else arr.copy()
        if not pinned:
            _sim.hold_for_pageable("host->device", arr.nbytes)
        stream = _sim.current_stream() if stream is None else stream
        written = _sim.find_region(self.data.ptr, _sim._OWNED)
        if written is not None:
            written.queue_write(self.data.ptr, self._span())
        pause = _sim.work_delay()

        def copy():
            pause()
            if written is not None:
                written.start_write(self.data.ptr, self._span())
            np.copyto(self._host_layout(), source.reshape(self.shape))
        stream.enqueue(copy)

    def get(self, stream=None, order="C", out=None, blocking=True):
        """Copy out to host memory (``out``, or a new array); waits for it unless ``blocking=False``."""
        if out is None:
            out = np.empty(self.shape, self.dtype)
        elif out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(f"Shape mismatch or dtype mismatch: {self.shape} {self.dtype} into "
                             f"{out.shape} {out.dtype}")
        stream = _sim.current_stream() if stream is None else stream
        pause = _sim.work_delay()

        def copy():
            pause()
            np.copyto(out, self._host_layout())
        stream.enqueue(copy)
        if not _sim.is_pinned(out):
            _sim.hold_for_pageable("device->host", out.nbytes)
        if blocking:
            stream.synchronize()
        return out

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a "
                        "NumPy array explicitly.")

    def item(self):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().reshape(-1)[0].item()

    __float__ = lambda self: float(self.item())  # noqa: E731
    __int__ = lambda self: int(self.item())  # noqa: E731

    def tolist(self):
        return self.get().tolist()

    def __repr__(self):
        return f"array({self.get()!r} on device {self.data.device_id})"

    # --- kernels: queued on the current stream ----------------------------------------------------
    def __setitem__(self, key, value):
        target = self[key]
        if isinstance(value, ndarray):
            _launch(lambda t, v: np.copyto(t, np.broadcast_to(v, t.shape), casting="unsafe"), target, value)
        else:
            value = np.array(value, dtype=self.dtype)  # a host value travels with the launch
            _launch(lambda t: np.copyto(t, np.broadcast_to(value, t.shape), casting="unsafe"), target)

    def fill(self, value):
        self[...] = value

    def copy(self, order="C"):
        out = ndarray(self.shape, self.dtype)
        out[...] = self
        return out

    def astype(self, dtype, copy=True):
        if np.dtype(dtype) == self.dtype and not copy:
            return self
        out = ndarray(self.shape, dtype)
        out[...] = self
        return out

    def sum(self, dtype=None):
        out = ndarray((), dtype or self.dtype)
        _launch(lambda o, a: np.copyto(o, a.sum(dtype=o.dtype)), out, self)
        return out

    def __neg__(self):
        return multiply(self, -1)

    __add__ = lambda self, other: add(self, other)  # noqa: E731
    __radd__ = lambda self, other: add(other, self)  # noqa: E731
    __sub__ = lambda self, other: subtract(self, other)  # noqa: E731
    __rsub__ = lambda self, other: subtract(other, self)  # noqa: E731
    __mul__ = lambda self, other: multiply(self, other)  # noqa: E731
    __rmul__ = lambda self, other: multiply(other, self)  # noqa: E731
    __truediv__ = lambda self, other: true_divide(self, other)  # noqa: E731
    __eq__ = lambda self, other: equal(self, other)  # noqa: E731

    def __iadd__(self, other):
        return add(self, other, out=self)

    def __isub__(self, other):
        return subtract(self, other, out=self)

    def __imul__(self, other):
        return multiply(self, other, out=self)

    def __itruediv__(self, other):
        return true_divide(self, other, out=self)

    __hash__ = None


def _launch(kernel, *arrays) -> None:
    """Queue ``kernel(*numpy views)`` on the current stream, after cupy's device check. The kernel
    writes ``arrays[0]`` and reads the others; writes to memory peers have mapped, and reads of a
    peer's memory, are counted so that a race between processes is an error (see _sim.Region);
    the time it takes when it runs is RINGLAB_GPUSIM_WORK_SECONDS (see _sim.work_delay)."""
    here = _sim.current_device()
    for a in arrays:
        if a.data.device_id != here and not _sim.can_access_peer(here, a.data.device_id):
            raise ValueError(f"The device where the array resides ({a.data.device_id}) is different from the "
                             f"current device ({here}). Peer access is unavailable between these devices.")
    target = arrays[0]
    written = _sim.find_region(target.data.ptr, _sim._OWNED)
    read = [(region, a) for region, a in ((_sim.find_region(a.data.ptr, _sim._OPENED), a) for a in arrays[1:])
            if region is not None]
    if written is not None:
        written.queue_write(target.data.ptr, target._span())
    for region, a in read:
        region.queue_read(a.data.ptr, a._span())
    pause = _sim.work_delay()

    def run():
        pause()
        if written is not None:
            written.start_write(target.data.ptr, target._span())
        for region, a in read:
            region.start_read(a.data.ptr, a._span())
        kernel(*(a._host_layout() for a in arrays))
    _sim.current_stream().enqueue(run)


def _ufunc(name):
    function = getattr(np, name)

    def run(x, y, out=None, dtype=None):
        arrays = [v for v in (x, y) if isinstance(v, ndarray)]
        shapes = [getattr(v, "shape", ()) for v in (x, y)]
        kinds = [v.dtype if isinstance(v, ndarray) else v for v in (x, y)]
        if out is None:
            out = ndarray(np.broadcast_shapes(*shapes), dtype or np.result_type(*kinds))
        args = [(v, isinstance(v, ndarray)) for v in (x, y)]
        values = [v for v, on_device in args if on_device]

        def kernel(o, *device_views):
            views = iter(device_views)
            operands = [next(views) if on_device else v for v, on_device in args]
            function(*operands, out=o, casting="unsafe")
        _launch(kernel, out, *values)
        return out

    run.__name__ = name
    return run


add, subtract, multiply, true_divide, equal = (_ufunc(n) for n in ("add", "subtract", "multiply", "true_divide",
                                                                       "equal"))
# the reductions NCCL offers (prod, max, min) and what avg's integer division toward zero needs
maximum, minimum, floor_divide, not_equal, less, logical_and = (
    _ufunc(n) for n in ("maximum", "minimum", "floor_divide", "not_equal", "less", "logical_and"))
divide = true_divide


def empty(shape, dtype=float, order="C"):
    return ndarray(shape, dtype)


def zeros(shape, dtype=float, order="C"):
    out = ndarray(shape, dtype)
    out.fill(0)
    return out


def ones(shape, dtype=float, order="C"):
    out = ndarray(shape, dtype)
    out.fill(1)
    return out


def full(shape, fill_value, dtype=None, order="C"):
    out = ndarray(shape, dtype or np.array(fill_value).dtype)
    out.fill(fill_value)
    return out


def empty_like(a, dtype=None, order="K", subok=None, shape=None):
    return ndarray(a.shape if shape is None else shape, dtype or a.dtype)


def zeros_like(a, dtype=None, order="K", subok=None, shape=None):
    return zeros(a.shape if shape is None else shape, dtype or a.dtype)


def arange(start, stop=None, step=1, dtype=None):
    return asarray(np.arange(start, stop, step, dtype=dtype))


def asarray(a, dtype=None, order=None, blocking=False):
    """A device array of ``a``: the same one if it already is, else a copy queued on the current stream."""
    if isinstance(a, ndarray):
        return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
    host = np.ascontiguousarray(a, dtype=dtype)
    out = ndarray(host.shape, host.dtype)
    out.set(host)
    return out


def array(obj, dtype=None, copy=True, order="K", subok=False, ndmin=0, blocking=False):
    if isinstance(obj, ndarray):
        return obj.astype(dtype or obj.dtype, copy=True) if copy else asarray(obj, dtype)
    return asarray(obj, dtype)


def get_default_memory_pool():
    """The memory pool every new device array takes its block from."""
    return cuda._default_memory_pool


def get_default_pinned_memory_pool():
    """The pool pinned host memory (``cupyx.empty_pinned``) comes from."""
    return cuda._default_pinned_memory_pool


def get_array_module(*args):
    return __import__(__name__) if any(isinstance(a, ndarray) for a in args) else np


def asnumpy(a, stream=None, order="C", out=None, blocking=True):
    return a.get(stream=stream, out=out, blocking=blocking) if isinstance(a, ndarray) else np.asarray(a)
