"""The machinery of the CPU stand-in for cupy: device memory, devices, streams, events, IPC.

What it emulates, and how:

- **Device memory** is a file in ``/dev/shm`` mapped into the process, so that a CUDA IPC handle
  (the file's name) opened by another process maps the same bytes. Fresh allocations hold
  garbage (every bit set: NaN for floats, -1 for integers), and freed ones are overwritten with
  it, so reading memory nobody wrote, or memory its owner has freed, gives a wrong answer.
- **Streams** queue work (copies, fills, element-wise kernels) instead of doing it: it lands
  in memory only when the stream is synchronised (``Stream.synchronize``, an ``Event`` recorded
  after it, ``Device.synchronize``, ``runtime.deviceSynchronize``, a blocking ``get``). Anything
  that reads device memory from the host in between (MPI through ``__cuda_array_interface__``,
  an IPC peer) reads what was there before: a missing synchronisation is a wrong answer.
  Streams are independent: work on one is ordered after work on another only through an event
  (``wait_event``) or a synchronisation, as with non-blocking streams; the legacy default
  stream's implicit ordering with blocking streams is not modelled (which is stricter).
- **Pinned host memory** is read when a queued copy runs, not when it is queued (as a DMA
  engine does), so reusing a pinned buffer before the copy has run is caught; pageable memory is
  copied at the call, as CUDA stages it. With ``RINGLAB_GPUSIM_PAGEABLE_BPS`` set, a copy to or
  from pageable memory also holds the thread that asks for it for its bytes over that rate, as
  CUDA's staging does, sleeping, so that other threads run meanwhile (cupy releases the GIL around
  cudaMemcpyAsync): two such copies overlap only when two threads ask (``HOLDS`` records each).
- **Memory pools**, as cupy's: every new array takes a block of the default device memory pool,
  and pinned memory comes from the default pinned pool; a dropped block goes back to its pool,
  not to CUDA, until the pool's ``free_all_blocks``. Only a ``cupy.cuda.Memory`` of its own (and
  ``free_all_blocks``) calls cudaFree, which on a real GPU waits for all the device's work, every
  stream's: each one is recorded in :data:`FREES`, so a test can say a path never synchronises
  the device that way (the stand-in records it and does not wait: it is stricter).
- **Devices** come from a table of a real machine (``machines.py``: GPUs, PCI bus ids, which
  pairs can reach each other) and ``CUDA_VISIBLE_DEVICES`` masks and renumbers them. Each thread
  starts on device 0, as CUDA's runtime does. A kernel on an array of another device is a
  ValueError unless that device can be reached peer to peer (cupy's check).
- **Events** record when their stream reaches them; elapsed time is the host time between the
  moments the queued work around them ran. ``RINGLAB_GPUSIM_WORK_SECONDS`` makes every piece of
  queued work take that long, so a test can check that a clock counts the work it should.

What it cannot emulate: the speed of kernels and links (every figure measured on it is CPU
time and never a GPU measurement), real concurrency between streams and the host, driver errors
other than the few raised here, the memory model of a real GPU (caches, weak ordering), NCCL.
"""
from __future__ import annotations

import atexit
import ctypes
import fcntl
import itertools
import mmap
import os
import tempfile
import threading
import time
import weakref
from collections import deque

import numpy as np

import machines

_LOCK = threading.RLock()
_COUNTER = itertools.count(1)
GARBAGE = 0xFF
CUDA_VERSION = 12080  # what the stand-in says its runtime and driver are (CUDA writes 12.8 as 12080)

# CUDA runtime error codes used here (cudaError_t)
cudaSuccess = 0
cudaErrorInvalidValue = 1
cudaErrorInvalidDevice = 101
cudaErrorInvalidContext = 201
cudaErrorPeerAccessUnsupported = 217
cudaErrorInvalidResourceHandle = 400
cudaErrorNotReady = 600
cudaErrorPeerAccessAlreadyEnabled = 704
cudaErrorPeerAccessNotEnabled = 705
_ERROR_NAMES = {v: k for k, v in dict(globals()).items() if k.startswith("cuda") and isinstance(v, int)}


class CUDARuntimeError(RuntimeError):
    """As cupy's: ``status`` is the cudaError_t; the message starts with the error's name."""

    def __init__(self, status: int, detail: str = ""):
        self.status = status
        super().__init__(f"{_ERROR_NAMES.get(status, 'cudaError')}: {detail}")


# --- devices --------------------------------------------------------------------------------

_THREAD = threading.local()


def visible() -> list[int]:
    """The machine's GPUs (its table's indices) that CUDA shows this process, in ordinal order."""
    return machines.visible()


def device_count() -> int:
    return len(visible())


def check_device(device_id: int) -> int:
    if not 0 <= device_id < device_count():
        raise CUDARuntimeError(cudaErrorInvalidDevice, f"invalid device ordinal {device_id} "
                                                       f"({device_count()} visible)")
    return device_id


def compute_mode() -> int:
    """Every GPU's cudaComputeMode: RINGLAB_GPUSIM_COMPUTE_MODE (0 DEFAULT, 2 PROHIBITED, 3 EXCLUSIVE_PROCESS),
    as ``nvidia-smi -c`` sets it on a real machine; default 0."""
    return int(os.environ.get("RINGLAB_GPUSIM_COMPUTE_MODE", "0"))


def current_device() -> int:
    return getattr(_THREAD, "device", 0)


def set_current_device(device_id: int) -> None:
    _THREAD.device = check_device(device_id)


def can_access_peer(a: int, b: int) -> bool:
    shown = visible()
    return machines.current().can_access_peer(shown[check_device(a)], shown[check_device(b)])


_PEERS: set[tuple[int, int]] = set()  # (device, peer) pairs with peer access enabled in this process


# --- memory -----------------------------------------------------------------------------------

_SHM = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_PREFIX = "ringlab-gpusim-"


def _sweep_dead_files() -> None:
    """Remove the memory files of stand-in processes that died without cleaning up."""
    for name in os.listdir(_SHM):
        if not name.startswith(_PREFIX):
            continue
        try:
            pid = int(name[len(_PREFIX):].split("-")[0])
            os.kill(pid, 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(_SHM, name))
            except OSError:
                pass
        except (ValueError, PermissionError):
            pass


_sweep_dead_files()


class Region:
    """Bytes of device memory: a shared-memory file mapped here (created, or opened by IPC).

    After the bytes, shared by every process that maps them, two counters per 2-byte granule
    count the owner's queued writes and the peers' queued reads of it, so that a race between
    them (on the same bytes) is an error in whichever process runs its work second, not a lucky
    answer (see ``start_write`` and ``start_read``).
    """

    GRANULE = 2

    def __init__(self, size: int, path: str | None = None):
        self.owner = path is None
        self.path = path or os.path.join(_SHM, f"{_PREFIX}{os.getpid()}-{next(_COUNTER)}")
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if self.owner else 0)
        self.fd = os.open(self.path, flags, 0o600)
        if self.owner:
            self.size = -(-max(int(size), 1) // 8) * 8
            os.ftruncate(self.fd, self._file_size(self.size))
        else:
            self.size = (os.fstat(self.fd).st_size - 8) // 5  # the file is 5 * size + 8 bytes
        self.map = mmap.mmap(self.fd, self._file_size(self.size))
        self.bytes = np.frombuffer(self.map, np.uint8, self.size)
        granules = self.size // self.GRANULE
        self.writes = np.frombuffer(self.map, np.int32, granules, offset=self.size + 8)
        self.reads = np.frombuffer(self.map, np.int32, granules, offset=self.size + 8 + 4 * granules)
        self.ptr = self.bytes.ctypes.data
        self.device_id = current_device()
        if self.owner:
            np.frombuffer(self.map, np.int64, 1, offset=self.size)[0] = self.size
            self.bytes[:] = GARBAGE
            _OWNED[self.ptr] = self

    @classmethod
    def _file_size(cls, size: int) -> int:
        """The bytes, their size (8 bytes), two int32 counters per granule."""
        return size + 8 + 2 * 4 * (size // cls.GRANULE)

    def _granules(self, ptr: int, nbytes: int) -> slice:
        lo = ptr - self.ptr
        return slice(lo // self.GRANULE, -(-(lo + nbytes) // self.GRANULE))

    def _count(self, counter, where: slice, by: int) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            counter[where] += by
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def queue_write(self, ptr: int, nbytes: int) -> None:
        self._count(self.writes, self._granules(ptr, nbytes), 1)

    def start_write(self, ptr: int, nbytes: int) -> None:
        """The owner's queued write runs: no peer may still have a read of these bytes queued."""
        where = self._granules(ptr, nbytes)
        self._count(self.writes, where, -1)
        if self.reads[where].any():
            raise RuntimeError(f"gpusim: this process overwrote device memory ({self.path}) that another process "
                               "still has a queued read of: it did not wait for the reader to finish (a missing "
                               "synchronisation or signal)")

    def queue_read(self, ptr: int, nbytes: int) -> None:
        self._count(self.reads, self._granules(ptr, nbytes), 1)

    def start_read(self, ptr: int, nbytes: int) -> None:
        """A peer's queued read runs: the owner may have no write of these bytes still queued."""
        where = self._granules(ptr, nbytes)
        self._count(self.reads, where, -1)
        if self.writes[where].any():
            raise RuntimeError(f"gpusim: this process read another process's device memory ({self.path}) while "
                               "that process still had writes to it queued: the owner did not synchronise before "
                               "saying the data was ready")

    def free(self) -> None:
        """cudaFree: the bytes become garbage (an IPC peer still reading them sees it), the file goes."""
        if self.owner and _OWNED.pop(self.ptr, None) is not None:
            FREES.append((self.device_id, self.size))
            self.bytes[:] = GARBAGE
            try:
                os.unlink(self.path)
            except OSError:
                pass


_OWNED: dict[int, Region] = {}
FREES: list[tuple[int, int]] = []  # (device, bytes) of each cudaFree in this process: on a GPU, each waits for the device
_OPENED: dict[int, Region] = {}  # IPC mappings, by the pointer ipcOpenMemHandle returned


@atexit.register
def _remove_files() -> None:
    for region in list(_OWNED.values()):
        try:
            os.unlink(region.path)
        except OSError:
            pass


def region_of(ptr: int) -> Region:
    found = find_region(ptr, _OWNED)
    if found is None:
        raise CUDARuntimeError(cudaErrorInvalidValue, f"{ptr:#x} is not device memory allocated in this process")
    return found


def find_region(ptr: int, regions: dict) -> Region | None:
    for region in list(regions.values()):
        if region.ptr <= ptr < region.ptr + region.size:
            return region
    return None


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """The bytes at ``ptr`` as a numpy uint8 array, without a copy."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(ptr))


_PINNED: dict[int, int] = {}  # start -> end of pinned host allocations


def is_pinned(array: np.ndarray) -> bool:
    address = array.__array_interface__["data"][0]
    return any(lo <= address < hi for lo, hi in list(_PINNED.items()))


class PinnedMemory:
    """Page-locked host memory (cudaHostAlloc): a memory file that each pointer to it maps; closed
    (cudaFreeHost) when nothing refers to it."""

    def __init__(self, size: int):
        self.size = int(size)
        self.fd = os.memfd_create(f"{_PREFIX}pinned")
        os.ftruncate(self.fd, max(self.size, 1))

    def __del__(self):
        fd = getattr(self, "fd", None)
        if fd is not None:
            os.close(fd)


class PinnedMemoryPointer(mmap.mmap):
    """A pointer to pinned memory (cupy.cuda.PinnedMemoryPointer): a buffer numpy can wrap, which
    keeps ``mem`` (a pool's block, or PinnedMemory) alive as long as it is."""

    def __new__(cls, mem, offset: int = 0):
        if offset:
            raise NotImplementedError("the stand-in points at the start of pinned memory only")
        self = super().__new__(cls, mem.fd, max(mem.size, 1))
        self.mem = mem
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self))
        _PINNED[self.ptr] = self.ptr + max(mem.size, 1)
        weakref.finalize(self, _PINNED.pop, self.ptr, None)
        return self


# --- streams and events -------------------------------------------------------------------------

_STREAMS: "weakref.WeakSet" = weakref.WeakSet()
_POINTERS = itertools.count(0x5000)


class _Op:
    __slots__ = ("run", "done")

    def __init__(self, run):
        self.run, self.done = run, False


class StreamBase:
    """A queue of device work, applied in order when something waits for it."""

    def __init__(self, device_id: int, null: bool):
        self.device_id, self.null = device_id, null
        self.ptr = 0 if null else next(_POINTERS)
        self.ops: deque[_Op] = deque()
        _STREAMS.add(self)

    def enqueue(self, run) -> _Op:
        op = _Op(run)
        with _LOCK:
            self.ops.append(op)
        return op

    def drain(self, upto: _Op | None = None) -> None:
        """Apply the queued work, all of it or up to and including ``upto``."""
        with _LOCK:
            if upto is not None and upto.done:
                return
            while self.ops:
                op = self.ops.popleft()
                op.run()
                op.done = True
                if op is upto:
                    return


_NULL: dict[int, StreamBase] = {}


def null_stream(device_id: int):
    from .cuda import Stream

    if device_id not in _NULL:
        _NULL[device_id] = Stream(null=True, _device=device_id)
    return _NULL[device_id]


def current_stream():
    device = current_device()
    stack = getattr(_THREAD, "streams", {}).get(device)
    return stack[-1] if stack else null_stream(device)


def push_stream(stream) -> None:
    if not hasattr(_THREAD, "streams"):
        _THREAD.streams = {}
    _THREAD.streams.setdefault(stream.device_id, []).append(stream)


def pop_stream(stream) -> None:
    _THREAD.streams[stream.device_id].pop()


def synchronize_device(device_id: int) -> None:
    for stream in list(_STREAMS):
        if stream.device_id == device_id:
            stream.drain()


def now() -> float:
    return time.perf_counter()


HOLDS: list[tuple[int, str, float, float]] = []  # (thread, what, start, end) of each pageable copy's hold


def hold_for_pageable(what: str, nbytes: int) -> None:
    """With ``RINGLAB_GPUSIM_PAGEABLE_BPS``: hold this thread for ``nbytes`` over that rate, as CUDA's copy
    through its pinned staging buffer does with a pageable buffer, and record it in ``HOLDS``."""
    rate = float(os.environ.get("RINGLAB_GPUSIM_PAGEABLE_BPS", 0))
    if rate:
        start = now()
        time.sleep(nbytes / rate)
        HOLDS.append((threading.get_ident(), what, start, now()))


def work_delay():
    """``RINGLAB_GPUSIM_WORK_SECONDS`` when work is queued: that piece of device work (kernel, copy)
    takes that long when it runs, for tests of what a clock counts. Returns the pause to make then."""
    delay = float(os.environ.get("RINGLAB_GPUSIM_WORK_SECONDS", 0))
    return (lambda: time.sleep(delay)) if delay else (lambda: None)
