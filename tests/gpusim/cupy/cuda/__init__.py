"""cupy.cuda for the stand-in: Device, Stream, Event, memory and pinned memory (see cupy/_sim.py)."""
from __future__ import annotations

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
        self._region = _sim.Region(self.size)
        self.ptr = self._region.ptr

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


PinnedMemoryPointer = _sim.PinnedMemoryPointer


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    return PinnedMemoryPointer(size)
