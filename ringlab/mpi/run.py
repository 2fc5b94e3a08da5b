"""The run: one rank's part of a call, step by step, every wait within the step's deadline.

What runs is a bound plan (:class:`ringlab.mpi.transports.Bound`): the rank's compiled plan
(:mod:`ringlab.mpi.plan`) bound by a transport to the memory of this call, and held as data. Per step: the
MPI receives and sends, with the memory each one uses; what happens as each receive completes (where two
ranks' data meet: reduced into the buffer, or copied); and the little a transport needs around a step (a GPU
stream synchronised, a send staged through host memory, the "done reading" signals of CUDA IPC, an emulated
link's due time). The loop is the same for every transport, and it calls nothing back up: only MPI, the
array library, and the utilities (deadlines, reductions).

There is no barrier between steps: a rank moves on as soon as its own messages of a step are done, which is
exactly the simulator's lockstep semantics, because a step's sends read the buffer before anything of that
step lands in it (a step whose landing would overwrite what it sends waits for its sends first). Receives
land as they complete, so reducing one piece overlaps receiving the next. A step that does not finish
within ``timeout`` seconds raises StepTimeout, naming the step, what this rank still waits for, and (its
``peers``) every peer whose message of the step had not finished.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from .deadlines import StepTimeout, wait, wait_all

SIGNAL = np.empty(0, np.uint8)  # an empty message: "ready to be read", or "done reading"


_MPI: list = []  # Startall and Waitall, looked up once


def run(bound, timeout: float | None = None, recorder: "Recorder | None" = None, agreeing=None) -> None:
    """Carry out ``bound`` on this rank, each step within ``timeout`` seconds (None: no limit), recording every
    message's times in ``recorder`` when given. ``agreeing()``, when given, is called once the first step's
    messages are posted and before anything lands (the argument agreement carried alongside them, which
    raises when the ranks disagree)."""
    if not _MPI:
        from mpi4py import MPI
        _MPI.extend((MPI.Prequest.Startall, MPI.Request.Waitall))
    startall, waitall = _MPI
    comm, watched = bound.comm, recorder is not None or bound.stall > 0
    if bound.begin:
        for function, arguments in bound.begin:
            function(*arguments)
    for step in bound.steps:
        if watched or not step.plain:
            if agreeing is not None:
                agreeing()
                agreeing = None
            _step(bound, step, comm, timeout, recorder)
            continue
        # plain MPI messages: as little Python as a step allows
        recv_args, send_args, lands, requests, first, window, whole, sends_first = step.parts
        nrecv = len(recv_args)
        persistent = requests is not None
        if persistent:
            startall(first if window else requests)
        else:
            requests = ([comm.Irecv(v, source=p, tag=t) if i < (window or nrecv) else None
                         for i, (v, p, t) in enumerate(recv_args)]
                        + [comm.Isend(v, dest=p, tag=t) for v, p, t in send_args])
        if agreeing is not None:
            agreeing()
            agreeing = None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            if whole:
                if deadline is None:
                    waitall(requests)
                else:
                    wait_all(requests, deadline, lambda: _late(bound, step, timeout, _still(step, requests)))
                for land in lands:
                    for function, arguments in land:
                        function(*arguments)
                continue
            if sends_first:
                _finish_sends(bound, step, requests[nrecv:], deadline, timeout, waitall)
            for i, land in enumerate(lands):
                if deadline is None:
                    requests[i].Wait()
                else:
                    m = step.recvs[i]
                    wait(requests[i], deadline, lambda: _late(bound, step, timeout, _receiving(m)))
                for function, arguments in land:
                    function(*arguments)
                if window and i + window < nrecv:  # its slot is free again: take the next message
                    later = i + window
                    if persistent:
                        requests[later].Start()
                    else:
                        v, p, t = recv_args[later]
                        requests[later] = comm.Irecv(v, source=p, tag=t)
            if not sends_first:
                _finish_sends(bound, step, requests[nrecv:], deadline, timeout, waitall)
        except StepTimeout as err:  # which peers it still waited for: a rank that gives up tells them nothing
            err.peers = err.peers or unfinished(step, requests[:nrecv], requests[nrecv:])
            raise
    if agreeing is not None:  # no step at all
        agreeing()
    if bound.end:
        for function, arguments in bound.end:
            function(*arguments)
    if bound.stream is not None:
        bound.stream.synchronize()  # the result is in memory when the call returns


def _step(bound, step, comm, timeout, recorder) -> None:
    """A step with more than plain messages: synchronised, staged, paced, handshaken, recorded or stalled."""
    if bound.stamps is not None:
        _virtual_step(bound, step, comm, timeout, recorder)
        return
    if bound.stall:
        time.sleep(bound.stall)  # a straggler: late at every step
    deadline = None if timeout is None else time.monotonic() + timeout
    if step.before:
        _drain(bound)  # what the last step landed is in memory: MPI may send it, readers may look
    posted = recorder.clock() if recorder else 0.0
    nrecv = len(step.recv_args)
    recvs = [comm.Irecv(v, source=p, tag=t) if i < (step.window or nrecv) else None
             for i, (v, p, t) in enumerate(step.recv_args)]
    sends = [None] * len(step.send_args)
    for i in step.send_order:
        for function, arguments in step.stages[i]:
            function(*arguments)
        v, p, t = step.send_args[i]
        sends[i] = comm.Isend(v, dest=p, tag=t)

    sent = [None] * len(sends)  # a traced rank's sends: when each was seen done, while it waited for its receives

    def note_sends() -> None:
        for i, request in enumerate(sends):
            if sent[i] is None and request.Test():
                sent[i] = recorder.clock()

    noting = note_sends if recorder and not step.sends_first else None

    def finish_sends() -> None:
        for i, (m, request) in enumerate(zip(step.sends, sends)):
            wait(request, deadline, lambda: _late(bound, step, timeout, f"for rank {m.peer} to take chunk {m.first}"))
            if recorder:
                end = recorder.clock() if sent[i] is None else sent[i]
                recorder.record(step.index, m, "send", posted, end, step.via_send[i])

    try:
        if step.sends_first:
            finish_sends()
        for i, m in enumerate(step.recvs):
            wait(recvs[i], deadline, lambda: _late(bound, step, timeout, _receiving(m)), meanwhile=noting)
            for function, arguments in step.lands[i]:
                function(*arguments)
            if recorder:
                recorder.record(step.index, m, "recv", posted, recorder.clock(), step.via_recv[i])
            later = i + step.window
            if step.window and later < nrecv:  # its slot is free again: take the next message
                if step.reuse:
                    _drain(bound)  # the kernel that landed the slot reads it asynchronously
                v, p, t = step.recv_args[later]
                recvs[later] = comm.Irecv(v, source=p, tag=t)
        if not step.sends_first:
            finish_sends()
        if step.settle:
            _hand_shake(bound, step, comm, deadline, timeout)
    except StepTimeout as err:
        err.peers = err.peers or unfinished(step, recvs, sends)
        raise


def _drain(bound) -> None:
    """Wait for the bound plan's GPU stream: before a step's messages (what the last step landed is in memory)
    and before a window's slot takes its next message (the kernel that landed it has read it); the same in
    both loops, on this machine and on an emulated one."""
    bound.stream.synchronize()


def _hand_shake(bound, step, comm, deadline, timeout) -> None:
    """CUDA IPC's end of a step (see :meth:`ringlab.mpi.transports.BoundStep.hand_shake`)."""
    bound.stream.synchronize()  # every read of a peer's memory is done
    done = [comm.Isend(SIGNAL, dest=peer, tag=step.done_tag) for peer in step.sources]
    for peer in step.readers:
        wait(comm.Irecv(SIGNAL, source=peer, tag=step.done_tag), deadline,
             lambda: _late(bound, step, timeout, f"for rank {peer} to finish reading this rank's data"))
    for function, arguments in step.deferred:
        function(*arguments)
    for request in done:
        request.Wait()


def _finish_sends(bound, step, sends, deadline, timeout, waitall) -> None:
    if deadline is None:
        waitall(sends)
        return
    for m, request in zip(step.sends, sends):
        wait(request, deadline, lambda: _late(bound, step, timeout, f"for rank {m.peer} to take chunk {m.first}"))


def _virtual_step(bound, step, comm, timeout, recorder) -> None:
    """A step on an emulated machine, in virtual time (:mod:`ringlab.mpi.emulate`): each message is sent with
    its arrival time on the sender's clock (its posting time plus its due time: its links' latency and busy
    time), on the ``stamps`` communicator beside it, with the same peer and tag so that the two pair alike; a
    receive moves this rank's clock to the later of the arrival and its own due time, and its landing adds its
    CPU time (or its modelled cost); a send is done when it arrives. Nobody sleeps: only the clocks move."""
    ticking, stamps = bound.clock, bound.stamps
    deadline = None if timeout is None else time.monotonic() + timeout
    if step.before:
        _drain(bound)
    if bound.stall:
        ticking.add(bound.stall)  # a straggler: late at every step, on its clock
    start = ticking.now()
    nrecv, nsend = len(step.recv_args), len(step.send_args)
    recvs = [comm.Irecv(v, source=p, tag=t) if i < (step.window or nrecv) else None
             for i, (v, p, t) in enumerate(step.recv_args)]
    heard = np.empty(nrecv)  # each message's arrival, on its sender's clock
    hearing = [stamps.Irecv(heard[i:i + 1], source=p, tag=t) for i, (_, p, t) in enumerate(step.recv_args)]
    arrives, sends, telling = np.empty(nsend), [None] * nsend, [None] * nsend
    costs = step.land_cost
    for i in step.send_order:
        if step.stages[i]:
            ticking.work(step.stages[i], 0.0 if costs is not None else None)
        arrives[i] = ticking.now() + step.send_due[i]
        v, p, t = step.send_args[i]
        sends[i] = comm.Isend(v, dest=p, tag=t)
        telling[i] = stamps.Isend(arrives[i:i + 1], dest=p, tag=t)

    def finish_sends() -> None:
        for i, m in enumerate(step.sends):
            late = (lambda m=m: _late(bound, step, timeout, f"for rank {m.peer} to take chunk {m.first}"))
            wait(sends[i], deadline, late)
            wait(telling[i], deadline, late)
            ticking.at_least(arrives[i])  # a send is done when it has arrived
            if recorder:
                recorder.record(step.index, m, "send", start - recorder.origin, arrives[i] - recorder.origin,
                                step.via_send[i])

    try:
        if step.sends_first:
            finish_sends()
        for i, m in enumerate(step.recvs):
            late = (lambda m=m: _late(bound, step, timeout, _receiving(m)))
            wait(recvs[i], deadline, late)
            wait(hearing[i], deadline, late)
            ticking.at_least(max(float(heard[i]), start + step.recv_due[i]))
            ticking.work(step.lands[i], None if costs is None else costs[i])
            if recorder:
                recorder.record(step.index, m, "recv", start - recorder.origin, ticking.now() - recorder.origin,
                                step.via_recv[i])
            later = i + step.window
            if step.window and later < nrecv:  # its slot is free again: take the next message
                if step.reuse:
                    _drain(bound)
                v, p, t = step.recv_args[later]
                recvs[later] = comm.Irecv(v, source=p, tag=t)
        if not step.sends_first:
            finish_sends()
    except StepTimeout as err:
        err.peers = err.peers or unfinished(step, recvs, sends)
        raise


def _receiving(m) -> str:
    return f"to receive chunk {m.first} from rank {m.peer}"


def _late(bound, step, timeout, waiting: str) -> str:
    label = f" ({step.label})" if step.label else ""
    return f"rank {bound.rank}: step {step.index}{label} did not finish within {timeout:g} s: still waiting {waiting}"


def _still(step, requests) -> str:
    """What a step whose requests did not all finish still waits for (the first unfinished one)."""
    for i, m in enumerate(step.recvs):
        if requests[i] is not None and not requests[i].Test():
            return _receiving(m)
    for m, request in zip(step.sends, requests[len(step.recvs):]):
        if not request.Test():
            return f"for rank {m.peer} to take chunk {m.first}"
    return "for a message of this step"


def unfinished(step, recvs, sends) -> tuple[int, ...]:
    """The peers of ``step`` whose messages (``recvs`` and ``sends``: the step's requests, in the order of
    its messages; None for a receive not yet posted) have not finished."""
    peers = {m.peer for m, r in zip(step.recvs, recvs) if r is not None and not r.Test()}
    peers.update(m.peer for m, r in zip(step.sends, sends) if r is not None and not r.Test())
    return tuple(sorted(peers))


class Recorder:
    """Collects this rank's rows of a :class:`Trace`: rank, step, peer, chunk, bytes, side (send/recv), start,
    end, via; ``bounds`` are the chunks' element boundaries, ``clock()`` the time now on the trace's clock
    (on an emulated machine the rows are times on the virtual clock less ``origin``)."""

    def __init__(self, rank: int, itemsize: int, clock, bounds, clock_name: str = "", origin: float = 0.0):
        self.rank, self.itemsize, self.clock, self.bounds, self.rows = rank, itemsize, clock, bounds, []
        self.clock_name, self.origin = clock_name, origin  # origin: where a virtual clock's trace starts

    def record(self, step: int, message, side: str, start: float, end: float, via: str = "") -> None:
        bounds = self.bounds
        for chunk in range(message.first, message.last + 1):
            lo, hi = max(message.lo, bounds[chunk]), min(message.hi, bounds[chunk + 1])
            if hi > lo:
                self.rows.append((self.rank, step, message.peer, chunk, (hi - lo) * self.itemsize, side, start, end,
                                  via))


TRACE_DTYPE = np.dtype([("rank", "i4"), ("step", "i4"), ("peer", "i4"), ("chunk", "i4"), ("nbytes", "i8"),
                        ("side", "U4"), ("start", "f8"), ("end", "f8"), ("via", "U16")])


class Trace:
    """Every transfer of one run as a table: one row per side (send or recv) of each transfer.

    Times are seconds from a common start (a barrier just before the run). ``records`` is a numpy
    structured array with columns rank, step, peer, chunk, nbytes, side, start, end, and via: the
    path the transfer took (``host``, ``cuda-aware`` or ``ipc``; empty for a modelled trace).
    """

    def __init__(self, rows, schedule, clock: str, itemsize: int = 1):
        rows = [tuple(r) if len(r) == len(TRACE_DTYPE) else (*r, "") for r in rows]
        self.records = np.array(sorted(rows, key=lambda r: (r[1], r[0], r[6])), dtype=TRACE_DTYPE)
        self.schedule, self.clock, self.itemsize = schedule, clock, itemsize

    def __len__(self) -> int:
        return len(self.records)

    def to_dicts(self) -> list[dict]:
        """The rows as plain dicts (for JSON, pandas.DataFrame, plotting)."""
        return [dict(zip(TRACE_DTYPE.names, row.tolist())) for row in self.records]

    def step_times(self) -> np.ndarray:
        """When each step ended on its slowest rank (seconds from the start)."""
        ends = np.zeros(len(self.schedule.steps))
        np.maximum.at(ends, self.records["step"], self.records["end"])
        return ends

    def __repr__(self) -> str:
        return f"Trace({self.schedule.name!r}: {len(self)} rows, {self.clock} clock)"


class Clock:
    """One thread's virtual clock on emulated machines, in seconds (see :mod:`ringlab.mpi.emulate`).

    With ``cpu`` (compute="cpu") it runs with this thread's CPU time (``time.thread_time``) outside ringlab's
    calls; inside one (:meth:`enter` to :meth:`leave`), or always without ``cpu`` (compute="model"), it stands
    still but for what is added: messages' arrivals (:meth:`at_least`), a landing's work (:meth:`work`), a
    straggler's pause or a modelled cost (:meth:`add`)."""

    __slots__ = ("t", "mark", "inside", "cpu")

    def __init__(self):
        self.t, self.mark, self.inside, self.cpu = 0.0, time.thread_time(), 0, True

    def now(self) -> float:
        """The time on this clock."""
        return self.t if self.inside or not self.cpu else self.t + (time.thread_time() - self.mark)

    def settle(self, cpu: float | None = None) -> None:
        """Count the CPU time used since the last look, up to ``cpu`` when given (outside a call, with ``cpu``)."""
        if not self.inside:
            cpu = time.thread_time() if cpu is None else cpu
            if self.cpu:
                self.t += cpu - self.mark
            self.mark = cpu

    def restart(self) -> None:
        """Count from here on: the CPU this thread used before (outside any emulation) is not the emulated
        machine's."""
        if not self.inside:
            self.mark = time.thread_time()

    def enter(self, cpu: float | None = None) -> None:
        """A ringlab call starts: the learner's compute so far (up to ``cpu``, when the call read it first) is
        counted, the call's own bookkeeping is not."""
        self.settle(cpu)
        self.inside += 1

    def leave(self) -> None:
        """The call ends: the clock runs with this thread's CPU time again, from now."""
        self.inside -= 1
        if not self.inside:
            self.mark = time.thread_time()

    def at_least(self, moment: float) -> None:
        """Not before ``moment`` (a message arrived then, or a thread handed work over then)."""
        self.settle()
        if moment > self.t:
            self.t = moment

    def add(self, seconds: float) -> None:
        """``seconds`` pass on this clock (a straggler's pause, a modelled cost)."""
        self.settle()
        self.t += seconds

    def work(self, calls, modelled: float | None) -> None:
        """Make ``calls`` (``(function, arguments)`` pairs), counting the CPU time they take, or ``modelled``
        seconds when it is given."""
        if modelled is not None:
            for function, arguments in calls:
                function(*arguments)
            self.t += modelled
            return
        cpu = time.thread_time()
        for function, arguments in calls:
            function(*arguments)
        self.t += time.thread_time() - cpu


_CLOCKS = threading.local()  # each thread's Clock


def thread_clock() -> Clock:
    """This thread's virtual clock (made at first use)."""
    found = getattr(_CLOCKS, "clock", None)
    if found is None:
        found = _CLOCKS.clock = Clock()
    return found
