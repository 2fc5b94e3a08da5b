"""Deadlines: every multi-rank operation of ringlab waits a bounded time unless the user turns it off.

``timeout="default"`` (every call's default) means :data:`DEFAULT_SECONDS`, or what the
environment variable ``RINGLAB_TIMEOUT`` says (seconds, or ``none``/``off`` for no limit);
``timeout=5`` five seconds; ``timeout=None`` no limit. The deadline bounds each wait of an
operation (the argument agreement, each step of a schedule, each message of a trainer): past it,
the operation raises :class:`StepTimeout` naming what it waited for and the ranks that did not come.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

DEFAULT = "default"          # the timeout every call takes unless told otherwise
DEFAULT_SECONDS = 60.0       # what DEFAULT means when RINGLAB_TIMEOUT is not set
ENV = "RINGLAB_TIMEOUT"      # seconds, or none/off
OFF = ("none", "off")
_ENV_BYTES = ENV.encode()


class StepTimeout(TimeoutError):
    """A step did not finish within ``timeout``: names the step and the peer this rank waits for.

    ``peers``: the ranks whose messages of that step had not finished (those still owed to this rank, or
    not yet taken from it), when the step's executor could tell; empty otherwise. They are still inside
    the same call (none can finish it without those messages), and one of them may have died."""

    def __init__(self, message: str = "", peers=()):
        super().__init__(message)
        self.peers = tuple(peers)


def default_seconds(environ=None, name: str = ENV, fallback: float = DEFAULT_SECONDS) -> float | None:
    """The default deadline in seconds: the environment variable ``name`` (a number > 0, or none/off: None),
    else ``fallback`` (for ``RINGLAB_TIMEOUT``: 60)."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return fallback
    if value.lower() in OFF:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0 < number < math.inf:
        raise ValueError(f"{name} must be a number of seconds > 0, or 'none' for no limit; got {value!r}")
    return number


def usable(timeout) -> bool:
    """Whether ``timeout`` is a valid timeout: "default", None (no limit) or a number of seconds > 0."""
    if timeout is None or (isinstance(timeout, str) and timeout == DEFAULT):
        return True
    return (not isinstance(timeout, bool) and isinstance(timeout, (int, float, np.number))
            and 0 < timeout < math.inf)


_UNREAD = object()
_READ: list = [_UNREAD, None]  # RINGLAB_TIMEOUT as last read, and what it means: worked out again when it changes
_RAW = getattr(os.environ, "_data", None)  # os.environ's own dict (on POSIX, names and values as bytes)
_RAW = _RAW if isinstance(_RAW, dict) and all(isinstance(k, bytes) for k in list(_RAW)[:1]) else None


def raw_setting(name: bytes):
    """What the environment holds for ``name`` (bytes, as the process has it; None: unset), in a tenth of
    ``os.environ.get``'s time: every ringlab call looks at a few settings, and a small call takes microseconds."""
    if _RAW is None:
        value = os.environ.get(name.decode())
        return None if value is None else value.encode()
    return _RAW.get(name)


def seconds(timeout) -> float | None:
    """The deadline ``timeout`` stands for, in seconds (None: no limit); an unusable one (NaN, inf, 0 or less,
    not a number) counts as the default, so that the call still waits a bounded time while it reports the
    mistake: a NaN would never expire, a negative number expire before anything is compared."""
    if timeout is None:
        return None
    if type(timeout) is float:  # the usual case first; NaN fails both comparisons
        if 0.0 < timeout < math.inf:
            return timeout
    elif usable(timeout) and not isinstance(timeout, str):
        return float(timeout)
    raw = raw_setting(_ENV_BYTES)
    if raw != _READ[0]:
        _READ[1], _READ[0] = default_seconds(), raw
    return _READ[1]


def deadline(limit: float | None) -> float | None:
    """The time.monotonic() at which ``limit`` seconds from now run out (None: never)."""
    return None if limit is None else time.monotonic() + limit


_YIELD: list[bool] = []
_ALL: list = []  # MPI's Waitall and Testall, looked up once


def wait(request, deadline: float | None, message, nap: float = 0.0, meanwhile=None) -> None:
    """Wait for one MPI request; past ``deadline`` (time.monotonic) raise StepTimeout(``message()``).

    Polling gives the core away between tests when the node runs more ranks than cores, so that the
    rank being waited for gets to run (without a deadline MPI waits, and yields by its own settings);
    with ``nap`` it sleeps that long between tests instead (on emulated links, where ranks wait by sleeping).
    ``meanwhile()``, when given, is called at every poll (a traced rank notes when its other requests finish).
    """
    if nap:
        while not request.Test():
            if meanwhile is not None:
                meanwhile()
            if deadline is not None and time.monotonic() > deadline:
                raise StepTimeout(message())
            time.sleep(nap)
        return
    if deadline is None and meanwhile is None:
        request.Wait()
        return
    if not _YIELD:
        from .devices import gives_way
        _YIELD.append(gives_way())
    give_way, polls = _YIELD[0], 0
    while not request.Test():
        if meanwhile is not None:
            meanwhile()
        polls += 1
        if deadline is not None and (polls % 256 == 0 or give_way) and time.monotonic() > deadline:
            raise StepTimeout(message())
        if give_way:
            os.sched_yield()


def wait_all(requests, deadline: float | None, message) -> None:
    """Wait for every request of ``requests`` (one ``Testall`` a poll), as :func:`wait` does for one."""
    if not _YIELD:
        from .devices import gives_way
        _YIELD.append(gives_way())
    if not _ALL:
        from mpi4py import MPI
        _ALL.extend((MPI.Request.Waitall, MPI.Request.Testall))
    if deadline is None:
        _ALL[0](requests)
        return
    give_way, polls, testall = _YIELD[0], 0, _ALL[1]
    while not testall(requests):
        polls += 1
        if (polls % 256 == 0 or give_way) and time.monotonic() > deadline:
            raise StepTimeout(message())
        if give_way:
            os.sched_yield()


def probe(comm, source: int, tag: int, deadline: float | None, message, status=None, nap: float = 0.0) -> None:
    """Wait until a message from ``source`` with ``tag`` has arrived on ``comm`` (without receiving it), as
    :func:`wait` waits for a request: past ``deadline`` a StepTimeout(``message()``); with ``nap``, sleeping
    that long between looks."""
    if nap:
        while not comm.Iprobe(source=source, tag=tag, status=status):
            if deadline is not None and time.monotonic() > deadline:
                raise StepTimeout(message())
            time.sleep(nap)
        return
    if deadline is None:
        comm.Probe(source=source, tag=tag, status=status)
        return
    if not _YIELD:
        from .devices import gives_way
        _YIELD.append(gives_way())
    give_way, polls = _YIELD[0], 0
    while not comm.Iprobe(source=source, tag=tag, status=status):
        polls += 1
        if (polls % 256 == 0 or give_way) and time.monotonic() > deadline:
            raise StepTimeout(message())
        if give_way:
            os.sched_yield()


def _late(comm, what: str, limit: float | None):
    """The message of a collective that not every rank reached in time: no one can tell which rank is missing."""
    return lambda: (f"rank {comm.Get_rank()}: {what}: not every rank of the communicator ({comm.Get_size()} ranks) "
                    f"got there within {limit:g} s: a rank stopped, died or is still busy elsewhere")


def allgather(comm, obj, what: str, limit: float | None):
    """``comm.allgather(obj)`` (any picklable object) within ``limit`` seconds, as :func:`wait` waits: the
    sizes, then the pickled bytes, each a non-blocking collective; past the deadline a StepTimeout saying
    ``what`` was gathered. (mpi4py's own allgather of objects blocks: a rank that died there hung the others.)"""
    import pickle

    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    until, late = deadline(limit), _late(comm, what, limit)
    sizes = np.empty(comm.Get_size(), np.int64)
    wait(comm.Iallgather(np.array([data.size], np.int64), sizes), until, late)
    counts = [int(s) for s in sizes]
    everything = np.empty(max(sum(counts), 1), np.uint8)
    wait(comm.Iallgatherv(data, (everything, counts)), until, late)
    ends = np.cumsum(counts)
    return [pickle.loads(everything[end - size:end].tobytes()) for size, end in zip(counts, ends)]


def gather(comm, obj, root: int, what: str, limit: float | None):
    """``comm.gather(obj, root=root)`` within ``limit`` seconds, as :func:`allgather`: the list on ``root``,
    None elsewhere."""
    import pickle

    data = np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)
    until, late = deadline(limit), _late(comm, what, limit)
    mine = comm.Get_rank() == root
    sizes = np.empty(comm.Get_size() if mine else 1, np.int64)
    wait(comm.Igather(np.array([data.size], np.int64), sizes if mine else None, root=root), until, late)
    counts = [int(s) for s in sizes] if mine else None
    everything = np.empty(max(sum(counts), 1), np.uint8) if mine else None
    wait(comm.Igatherv(data, (everything, counts) if mine else None, root=root), until, late)
    if not mine:
        return None
    ends = np.cumsum(counts)
    return [pickle.loads(everything[end - size:end].tobytes()) for size, end in zip(counts, ends)]


def barrier(comm, what: str, limit: float | None) -> None:
    """``comm.Barrier()`` within ``limit`` seconds (a non-blocking barrier waited on as :func:`wait` does)."""
    wait(comm.Ibarrier(), deadline(limit), _late(comm, what, limit))
