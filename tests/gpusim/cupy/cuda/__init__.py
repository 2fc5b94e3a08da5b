"""cupy.cuda for the stand-in: Device, Stream, Event, memory, pinned memory and their pools (see cupy/_sim.py)."""
from __future__ import annotations

import weakref

from .. import _sim
from . import nccl, runtime  # noqa: F401  (cupy.cuda.runtime and cupy.cuda.nccl are attributes in cupy too)


def is_available() -> bool:
    return _sim.device_count() > 0


class Device:
    """A GPU by ordinal. ``use()`` makes it this thread's current device; ``with Device(i):`` for a block."""

    def __init__(self, device=None):
        self.id = _sim.current_device() if device is None else int(device)
        self._previous: list[int] = []

    def use(self) -> None:
        _sim.set_current_device(self.id)

    def synchronize(self) -> None:
        _sim.synchronize_device(_sim.check_device(self.id))

    @property
    def pci_bus_id(self) -> str:
        return runtime.deviceGetPCIBusId(self.id)

    def __enter__(self):
        self._previous.append(_sim.current_device())
        self.use()
        return self

    def __exit__(self, *exc):
        _sim.set_current_device(self._previous.pop())

    def __eq__(self, other):
        return isinstance(other, Device) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return f"<CUDA Device {self.id}>"


class Stream(_sim.StreamBase):
    """A stream of the current device: work queued on it lands when it is synchronised."""

    def __init__(self, null: bool = False, non_blocking: bool = False, ptr: int = 0, *, _device=None):
        super().__init__(_sim.current_device() if _device is None else _device, null)
        self.non_blocking = non_blocking

    def synchronize(self) -> None:
        self.drain()

    @property
    def done(self) -> bool:
        return not self.ops

    def record(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event) -> None:
        """Work queued after this waits for the work ``event`` marks, on its stream."""
        marker, stream = event._marker, event._stream
        if marker is not None:
            self.enqueue(lambda: stream.drain(marker))

    def use(self):
        _sim.push_stream(self)
        return self

    def __enter__(self):
        _sim.push_stream(self)
        return self

    def __exit__(self, *exc):
        _sim.pop_stream(self)

    def __repr__(self):
        return f"<Stream {self.ptr:#x} (device {self.device_id})>"


def get_current_stream(device_id: int = -1):
    if device_id not in (-1, _sim.current_device()):
        raise NotImplementedError("the stand-in knows the current stream of the current device only")
    return _sim.current_stream()


class Event:
    """A point in a stream's work: done when the stream has run up to it."""

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False):
        self.disable_timing = disable_timing
        self._marker = self._stream = None
        self._time: float | None = None

    def record(self, stream=None) -> None:
        self._stream = _sim.current_stream() if stream is None else stream
        self._time = None

        def reached():
            self._time = _sim.now()
        self._marker = self._stream.enqueue(reached)

    def synchronize(self) -> None:
        if self._marker is not None:
            self._stream.drain(self._marker)

    @property
    def done(self) -> bool:
        return self._marker is None or self._marker.done


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two events that have both been reached."""
    for event in (start_event, end_event):
        if event.disable_timing:
            raise _sim.CUDARuntimeError(_sim.cudaErrorInvalidResourceHandle, "event created with disable_timing")
        if event._time is None:
            raise _sim.CUDARuntimeError(_sim.cudaErrorNotReady, "event not reached yet")
    return (end_event._time - start_event._time) * 1e3


class Memory:
    """Device memory of the current device (cudaMalloc), freed when nothing refers to it."""

    def __init__(self, size: int):
        self.size = int(size)
        self.device_id = _sim.current_device()
        self._region = _sim.Region(self.size) if self.size > 0 else None  # as cupy: no cudaMalloc for 0 bytes
        self.ptr = self._region.ptr if self._region is not None else 0

    @property
    def device(self):
        return Device(self.device_id)

    def __del__(self):
        region = getattr(self, "_region", None)
        if region is not None:
            region.free()


class UnownedMemory:
    """Device memory someone else owns (an opened IPC handle, another library's buffer)."""

    def __init__(self, ptr: int, size: int, owner, device_id: int | None = None):
        self.ptr, self.size, self._owner = int(ptr), int(size), owner
        self.device_id = _sim.current_device() if device_id is None else int(device_id)

    @property
    def device(self):
        return Device(self.device_id)


class MemoryPointer:
    """A pointer into device memory: ``mem`` plus ``offset``."""

    def __init__(self, mem, offset: int):
        self.mem, self.ptr = mem, mem.ptr + int(offset)
        self.device_id = mem.device_id

    @property
    def device(self):
        return Device(self.device_id)

    def __add__(self, offset: int):
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + int(offset))


PinnedMemory, PinnedMemoryPointer = _sim.PinnedMemory, _sim.PinnedMemoryPointer


# --- memory pools: as cupy's, a dropped block is kept for the next allocation of its size ------------

_UNIT = 512  # cupy's pools round every request up to a multiple of this


def _rounded(size: int) -> int:
    return -(-int(size) // _UNIT) * _UNIT


class _PooledMemory:
    """A block lent by a MemoryPool (cupy's memory.PooledMemory): when nothing refers to it, the block
    goes back to the pool, overwritten with garbage as freed memory is here; nothing is freed."""

    def __init__(self, block: Memory, pool: "MemoryPool"):
        self._block, self._pool = block, weakref.ref(pool)
        self.ptr, self.size, self.device_id = block.ptr, block.size, block.device_id

    @property
    def device(self):
        return Device(self.device_id)

    def __del__(self):
        pool = self._pool()
        if pool is not None:
            pool._give_back(self._block)


class MemoryPool:
    """Device memory pool (``cupy.get_default_memory_pool()``, which ``alloc`` and so every new array uses):
    a dropped array's block is kept for the next allocation of its rounded size, on its device, so neither
    cudaMalloc nor cudaFree is called, until ``free_all_blocks``. As in cupy, every method acts on the
    current device's blocks. (cupy also splits a bigger free block for a smaller request; the stand-in
    reuses a block for its own size only.)"""

    def __init__(self, allocator=None):
        self._free: dict[int, dict[int, list[Memory]]] = {}  # device -> rounded size -> free blocks
        self._used: dict[int, int] = {}                      # device -> bytes lent out

    def malloc(self, size: int) -> MemoryPointer:
        if size == 0:
            return MemoryPointer(Memory(0), 0)
        size, device = _rounded(size), _sim.current_device()
        with _sim._LOCK:
            free = self._free.get(device, {}).get(size)
            block = free.pop() if free else None
        block = Memory(size) if block is None else block
        with _sim._LOCK:
            self._used[device] = self._used.get(device, 0) + size
        return MemoryPointer(_PooledMemory(block, self), 0)

    def _give_back(self, block: Memory) -> None:
        block._region.bytes[:] = _sim.GARBAGE
        with _sim._LOCK:
            self._free.setdefault(block.device_id, {}).setdefault(block.size, []).append(block)
            self._used[block.device_id] -= block.size

    def free_all_blocks(self, stream=None) -> None:
        """Free (cudaFree) the current device's free blocks."""
        with _sim._LOCK:
            blocks = self._free.pop(_sim.current_device(), {})
        blocks.clear()

    def n_free_blocks(self) -> int:
        return sum(len(blocks) for blocks in self._free.get(_sim.current_device(), {}).values())

    def used_bytes(self) -> int:
        return self._used.get(_sim.current_device(), 0)

    def free_bytes(self) -> int:
        return sum(size * len(blocks) for size, blocks in self._free.get(_sim.current_device(), {}).items())

    def total_bytes(self) -> int:
        return self.used_bytes() + self.free_bytes()


class _PooledPinnedMemory:
    """A pinned block lent by a PinnedMemoryPool (cupy's PooledPinnedMemory): back to the pool when
    nothing refers to it."""

    def __init__(self, block: PinnedMemory, pool: "PinnedMemoryPool"):
        self._block, self._pool = block, weakref.ref(pool)
        self.fd, self.size = block.fd, block.size

    def __del__(self):
        pool = self._pool()
        if pool is not None:
            pool._give_back(self._block)


class PinnedMemoryPool:
    """Pinned host memory pool (``cupy.get_default_pinned_memory_pool()``, which ``alloc_pinned_memory``
    uses): as cupy's, a dropped block is kept for the next request of its rounded size until ``free_all_blocks``."""

    def __init__(self, allocator=None):
        self._free: dict[int, list[PinnedMemory]] = {}  # rounded size -> free blocks

    def malloc(self, size: int) -> PinnedMemoryPointer:
        if size == 0:
            return PinnedMemoryPointer(PinnedMemory(0), 0)
        size = _rounded(size)
        with _sim._LOCK:
            free = self._free.get(size)
            block = free.pop() if free else None
        block = PinnedMemory(size) if block is None else block
        return PinnedMemoryPointer(_PooledPinnedMemory(block, self), 0)

    def _give_back(self, block: PinnedMemory) -> None:
        with _sim._LOCK:
            self._free.setdefault(block.size, []).append(block)

    def free_all_blocks(self) -> None:
        """Free (cudaFreeHost) every free block."""
        with _sim._LOCK:
            self._free.clear()

    def n_free_blocks(self) -> int:
        return sum(len(blocks) for blocks in self._free.values())


_default_memory_pool, _default_pinned_memory_pool = MemoryPool(), PinnedMemoryPool()


def alloc(size: int) -> MemoryPointer:
    """Device memory from the default memory pool (cupy's default allocator)."""
    return _default_memory_pool.malloc(size)


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    """Pinned host memory from the default pinned memory pool (cupy's default pinned allocator)."""
    return _default_pinned_memory_pool.malloc(size)
