"""A parameter server on MPI ranks: ranks 0..M-1 serve shards of the parameters, the rest are workers.

Every step a worker computes gradients on its own batch, pushes each shard of them to the server
that owns it, and pulls the new parameters back.

- ``sync``: a server waits for every worker's push, applies the average, then answers them all
  (the same arithmetic as data-parallel SGD, so the weights match DDP's).
- ``async``: a server applies each push as it arrives (lr / W of it, so W pushes weigh one sync
  step) and answers that worker at once; nobody waits, so gradients are computed on parameters
  that other workers have since moved: the *staleness* of a push is how many updates the shard
  saw between the worker's pull and its push. Every push's staleness is recorded.

A ``straggler`` (a :class:`~ringlab.train.straggler.Straggler`, or a ``(worker, factor)`` pair) slows
one worker: sync waits for it every step; async lets the others run ahead, and the straggler's
pushes grow stale.

Every rank counts the bytes of the messages it sends and receives (headers included); a server
also measures how long it is busy on each step (sync) or update (async): receiving a push, adding
it in, updating and answering, but not waiting for a push to arrive. With ``history=True`` a server
keeps a copy of its shard after every update, with the seconds since the start.

On an emulated machine (``rl.emulate`` or ``RINGLAB_EMULATE``) every rank keeps virtual time
(:mod:`ringlab.mpi.emulate`), and nobody sleeps: every push and every answer carries its arrival on its
sender's clock (the clock when it was posted plus the time its links need,
:func:`~ringlab.mpi.emulate.message_times`, the messages of one round sharing the links they cross: all
workers' pushes to a server share its one link in, so on ``uniform`` links W pushes of K bytes take
W K / bandwidth, and its answers share its link out), and a rank that takes it moves its clock to the
later of its own and that arrival. Computing counts as this thread's CPU time (``compute="cpu"``) or as
modelled (``compute="model"``: a server's additions at the machine's reduce rate, a worker's compute what
:func:`~ringlab.mpi.emulate.elapse` says); sending, receiving and waiting count nothing of this CPU's. An
asynchronous server applies the pushes in the order of their arrival on the emulated machine, not this
machine's: it takes a push once every worker still working has one waiting (each worker has at most one
in flight), then the earliest; with several servers the order is the moment a worker's push has reached
them all, the same order on every server. Async answers are timed as if the server answered every worker
at once (the most it can meet): a simplification, said here. Every timer (``seconds``, ``busy_seconds``,
``compute_seconds``, ``wait_seconds``, the history) reads :func:`~ringlab.mpi.emulate.now`, virtual time on
an emulated machine, and ``wall_seconds`` beside ``seconds`` is what this machine took. The arrivals
travel as a small message of their own (tag ``STAMP``) beside each push and answer, not counted in the
bytes sent and received (they exist only on an emulated machine).

The server works on a communicator of its own (a duplicate of ``comm``, freed by :meth:`ParameterServer.close`
or with ``comm``), so no message of the user's, or of another ringlab object, meets its messages. The
ranks check that they agree on the model and the options before anything else, and on the number of
steps before each run; every wait has a deadline (``timeout``, as for :func:`ringlab.allreduce`), past
which the rank raises naming whom it waited for.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..mpi import emulate as emulation
from ..mpi import private
from ..mpi.deadlines import DEFAULT, deadline, probe, seconds, usable, wait
from ..schedule import chunk_bounds
from .agreement import agree_on
from .straggler import Straggler

PUSH, PULL, HEADER, STAMP = 11, 12, 13, 14  # STAMP: a message's arrival on the emulated machine (float64)


class ParameterServer:
    """``model``: the same architecture on every rank; the initial parameters of rank 0 win."""

    def __init__(self, model: torch.nn.Module, servers: int = 1, mode: str = "sync", lr: float = 0.1, comm=None,
                 straggler: Straggler | tuple[int, float] | None = None, history: bool = False, timeout=DEFAULT):
        from mpi4py import MPI

        user = MPI.COMM_WORLD if comm is None else comm
        size = user.Get_size()
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        if isinstance(servers, bool) or not isinstance(servers, (int, np.integer)) or not 1 <= servers < size:
            raise ValueError(f"servers must be in 1..{size - 1} so that at least one rank works, got {servers}")
        if isinstance(lr, bool) or not isinstance(lr, (int, float, np.number)) or not 0 < lr < math.inf:
            raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
        if not isinstance(history, bool):
            raise ValueError(f"history must be True or False, got {history!r}")
        if not usable(timeout):
            raise ValueError(f"timeout must be a number of seconds > 0 (or None: no limit), got {timeout!r}")
        self.model, self.servers, self.mode, self.lr, self.history = model, int(servers), mode, float(lr), history
        self.workers, self.timeout = size - servers, timeout
        self.straggler = Straggler.of(straggler)
        if self.straggler is not None and self.straggler.worker >= self.workers:
            raise ValueError(f"the straggler is worker {self.straggler.worker}, but there are {self.workers} workers "
                             f"(0..{self.workers - 1}): {size} ranks, {servers} serving")
        with emulation.inside():  # setting up is not the emulated machine's compute
            self.comm = private.duplicate(user, "ParameterServer", timeout)  # every rank comes, within the deadline
        self.rank = self.comm.Get_rank()
        options = {"servers": self.servers, "mode": mode, "lr": self.lr, "history": history,
                   "straggler": str(self.straggler)}
        try:
            agree_on(self.comm, "ParameterServer", list(model.named_parameters()), options, [], timeout)
        except BaseException:
            self.close()
            raise
        with torch.no_grad():
            flat = parameters_to_vector(model.parameters()).detach().contiguous()
        self.flat = flat.numpy()  # shares memory with `flat`
        self._bcast(self.flat, 0, "the initial parameters")
        self.bounds = chunk_bounds(len(self.flat), servers)
        self.staleness: list[tuple[int, int]] = []  # (worker, staleness) of every push, on servers
        self.sent_bytes = self.received_bytes = 0  # of the messages this rank sent and received in run()
        self._broken: str | None = None  # why run() refuses to go on: an earlier run failed part-way
        self._emulated = False  # whether this run keeps virtual time (set by run())
        self._per_byte = None   # with compute="model": the seconds a byte added in on a server costs

    def close(self) -> None:
        """Free the server's communicator (also freed with the communicator it was made from)."""
        if self.comm is not None:
            private.release(self.comm)
            self.comm = None

    def _waited(self, request, whom: str) -> None:
        """Wait for ``request`` within the deadline; past it, a StepTimeout saying whom this rank waited for.
        On an emulated machine the wait is not compute: it costs nothing on this rank's clock."""
        limit = seconds(self.timeout)
        with emulation.inside():
            wait(request, deadline(limit), lambda: f"rank {self.rank}: ParameterServer: waited more than {limit:g} s "
                                                   f"for {whom}")

    def _probe(self, source, tag: int, whom: str, status=None) -> None:
        """Wait, within the deadline, until a message from ``source`` with ``tag`` is there (not receiving it)."""
        limit = seconds(self.timeout)
        with emulation.inside():
            probe(self.comm, source, tag, deadline(limit),
                  lambda: f"rank {self.rank}: ParameterServer: waited more than {limit:g} s for {whom}", status)

    def _bcast(self, buf, root: int, what: str) -> None:
        self._waited(self.comm.Ibcast(buf, root=root), f"{what} from rank {root} (a rank that never came?)")

    def _send(self, message: np.ndarray, dest: int, tag: int, sent: list) -> None:
        """Post ``message`` to ``dest`` (kept in ``sent`` with its request until it is taken), counting its bytes."""
        with emulation.inside():
            sent.append((message, self.comm.Isend(message, dest=dest, tag=tag)))
        self.sent_bytes += message.nbytes

    def _receive(self, buf: np.ndarray, source: int, tag: int, whom: str) -> None:
        with emulation.inside():
            request = self.comm.Irecv(buf, source=source, tag=tag)
        self._waited(request, whom)
        self.received_bytes += buf.nbytes

    def _stamp(self, dest: int, arrival: float, order: float, sent: list) -> None:
        """On an emulated machine: tell ``dest`` when the message just posted to it arrives there on the emulated
        machine (``arrival``, on the sender's clock) and where it stands in the order of the pushes (``order``)."""
        if self._emulated:
            with emulation.inside():
                stamp = np.array([arrival, order])
                sent.append((stamp, self.comm.Isend(stamp, dest=dest, tag=STAMP)))

    def _arrived(self, source: int, whom: str) -> tuple[float, float] | None:
        """On an emulated machine: the (arrival, order) that came with the message just taken from ``source``
        (None on the raw machine)."""
        if not self._emulated:
            return None
        stamp = np.empty(2)
        with emulation.inside():
            request = self.comm.Irecv(stamp, source=source, tag=STAMP)
        self._waited(request, f"the emulated arrival of {whom}")
        return float(stamp[0]), float(stamp[1])

    def _landed(self, stamp: tuple[float, float] | None) -> None:
        """This rank's clock moves on to the message's arrival (nothing on the raw machine)."""
        if stamp is not None:
            emulation.clock().at_least(stamp[0])

    def _added(self, nbytes: int) -> None:
        """With compute="model", the modelled seconds of adding ``nbytes`` in (at the machine's reduce rate)."""
        if self._per_byte:
            emulation.elapse(nbytes * self._per_byte)

    def _times(self, messages) -> dict | None:
        """Seconds each message of ``[(src, dst, nbytes)]``, sent at once, takes on the emulated machine (None:
        the raw machine)."""
        if not self._emulated:
            return None
        with emulation.inside():  # the emulator's bookkeeping, not the machine's compute
            return emulation.message_times(messages, self.comm)

    @property
    def is_server(self) -> bool:
        return self.rank < self.servers

    @property
    def worker_index(self) -> int:
        return self.rank - self.servers

    def _shard(self, s: int) -> slice:
        return slice(int(self.bounds[s]), int(self.bounds[s + 1]))

    def _answer(self, answer: list, workers) -> list:
        """Send the messages of ``answer`` (``[(array, tag)]``) to every worker of ``workers``, each stamped with
        its arrival on the emulated machine as if the server answered all of ``range(servers, size)`` at once;
        ``[(worker, [(array, request)])]``."""
        times = self._times([(self.rank, w, answer[-1][0].nbytes) for w in range(self.servers, self.comm.Get_size())])
        posted, out = emulation.now(), []
        for w in workers:
            sent: list = []
            for message, tag in answer:
                self._send(message, w, tag, sent)
            if times is not None:
                arrival = posted + times.get((self.rank, w), 0.0)
                self._stamp(w, arrival, arrival, sent)
            out.append((w, sent))
        return out

    def run(self, steps: int, batch, loss_fn) -> dict:
        """Train for ``steps`` steps; ``batch(worker, step) -> (inputs, targets)``. Call on every rank.

        Returns this rank's record: bytes sent and received; seconds (virtual time on an emulated machine) and
        wall_seconds (this machine's) from the start to the end of training; losses, compute and wait seconds
        (workers); the staleness of every push, busy seconds per step or update, and the history if asked
        (servers). At the end every rank holds the final parameters in ``model``.
        """
        if self.comm is None:
            raise RuntimeError("ParameterServer: run() after close()")
        if self._broken is not None:
            raise RuntimeError(f"ParameterServer: an earlier run failed ({self._broken}): its pushes and answers may "
                               "still be in flight on the server's communicator, and one could be taken for this run's. "
                               "It refuses to go on: close() it and build a new ParameterServer")
        try:
            agree_on(self.comm, "ParameterServer.run", [], {"steps": steps, "machine": emulation.describe()},
                     [] if not isinstance(steps, bool) and isinstance(steps, int) and steps >= 1
                     else [f"steps must be a whole number >= 1, got {steps!r}"], self.timeout)
        except ValueError:  # the same on every rank, and nothing was sent: the server may run again
            raise
        except BaseException as err:
            self._broken = f"{type(err).__name__}: {err}"
            raise
        try:
            return self._run(steps, batch, loss_fn)
        except BaseException as err:
            self._broken = f"{type(err).__name__}: {err}"
            raise

    def _run(self, steps: int, batch, loss_fn) -> dict:
        self.sent_bytes = self.received_bytes = 0
        machine = emulation.current()
        self._emulated, self._per_byte = machine is not None, None
        if machine is not None:
            emulation.synchronize(self.comm, seconds(self.timeout))  # every rank's clock starts at the latest
            if machine.compute == "model":
                rate = float(getattr(machine.resolve(self.comm.Get_size()), "reduce_rate", math.inf))
                self._per_byte = machine.scale / rate if math.isfinite(rate) else None
        start, wall_start = emulation.now(), emulation.wall()  # every rank starts together, as the agreement ends
        record = self._serve(steps, start) if self.is_server else self._work(steps, batch, loss_fn)
        record["seconds"] = emulation.now() - start
        record["wall_seconds"] = emulation.wall() - wall_start
        record["clock"] = emulation.clock_name()
        record["sent_bytes"], record["received_bytes"] = self.sent_bytes, self.received_bytes
        for s in range(self.servers):  # everyone gets the final parameters
            self._bcast(self.flat[self._shard(s)], s, f"server {s}'s final parameters")
        vector_to_parameters(torch.from_numpy(self.flat.copy()), self.model.parameters())
        return record

    def _serve(self, steps: int, start: float) -> dict:
        mine = self.flat[self._shard(self.rank)]
        workers = range(self.servers, self.comm.Get_size())
        busy: list[float] = []  # seconds per step (sync) or per update (async), waiting for pushes left out
        history = [(0.0, mine.copy())] if self.history else None

        def keep() -> None:
            if history is not None:
                with emulation.inside():  # a record for the learner, not the emulated machine's compute
                    history.append((emulation.now() - start, mine.copy()))

        record = {"role": "server", "staleness": self.staleness, "busy_seconds": busy,
                  **({"history": history} if history is not None else {})}
        if self.mode == "async":
            return self._serve_async(mine, workers, busy, keep, record)
        total, incoming = np.empty_like(mine), np.empty_like(mine)
        for step in range(steps):
            total[:] = 0
            busy.append(0.0)
            for w in workers:  # fixed order: the same sum on every run
                whom = f"worker {w - self.servers}'s (rank {w}) push of step {step}"
                self._probe(w, PUSH, whom)  # waiting: not busy
                self._landed(self._arrived(w, whom))
                began = emulation.now()
                self._receive(incoming, w, PUSH, whom)
                total += incoming
                self._added(incoming.nbytes)
                busy[-1] += emulation.now() - began
                self.staleness.append((w - self.servers, 0))
            began = emulation.now()
            np.multiply(total, self.lr, out=total)  # mine -= lr * total / W, without temporaries
            np.divide(total, self.workers, out=total)
            mine -= total
            for w, sent in self._answer([(mine, PULL)], workers):
                for _, request in sent:
                    self._waited(request, f"worker {w - self.servers} (rank {w}) to take the parameters of "
                                          f"step {step}")
            busy[-1] += emulation.now() - began
            keep()
        return record

    def _serve_async(self, mine, workers, busy: list, keep, record: dict) -> dict:
        from mpi4py import MPI

        version, running, replies = 0, set(workers), []
        header = np.empty(2, dtype=np.int64)
        buffers = {w: np.empty_like(mine) for w in workers}
        waiting: dict = {}  # worker -> (the version its push was computed on, its stamp): taken, not yet applied
        status = MPI.Status()
        while running:
            # on the raw machine a push is applied as it comes; on an emulated one once every worker still
            # working has one waiting (each has at most one in flight), the earliest on the emulated machine
            if not waiting or (self._emulated and len(waiting) < len(running)):
                self._probe(MPI.ANY_SOURCE, HEADER, "a push from the ranks still working: "
                            + ", ".join(map(str, sorted(set(running) - set(waiting)))), status)  # waiting: not busy
                began = emulation.now()
                w = status.Get_source()
                self._receive(header, w, HEADER, f"worker {w - self.servers}'s header")
                if header[1]:  # that worker is done
                    running.discard(w)
                    continue
                self._receive(buffers[w], w, PUSH, f"worker {w - self.servers}'s push")
                waiting[w] = (int(header[0]), self._arrived(w, f"worker {w - self.servers}'s push"))
                if self._emulated and len(waiting) < len(running):
                    continue
            w = min(waiting, key=lambda v: (waiting[v][1][1], v)) if self._emulated else next(iter(waiting))
            computed_on, stamp = waiting.pop(w)
            if stamp is not None:  # applied once it has arrived: busy from there
                self._landed(stamp)
                began = emulation.now()
            np.multiply(buffers[w], self.lr / self.workers, out=buffers[w])  # mine -= lr / W x push, in place
            mine -= buffers[w]
            self._added(mine.nbytes)
            self.staleness.append((w - self.servers, version - computed_on))
            version += 1
            answer = [(np.array([version, 0], dtype=np.int64), HEADER), (mine.copy(), PULL)]  # mine moves on: a copy
            replies += [sent for _, sent in self._answer(answer, [w])]
            replies = [sent for sent in replies if not all(request.Test() for _, request in sent)]
            busy.append(emulation.now() - began)
            keep()
        for sent in replies:
            for _, request in sent:
                self._waited(request, "a worker to take its last answer")
        return record

    def _work(self, steps: int, batch, loss_fn) -> dict:
        versions = np.zeros(self.servers, dtype=np.int64)
        losses, compute, waiting = [], 0.0, 0.0
        header = np.empty(2, dtype=np.int64)
        everyone = range(self.servers, self.comm.Get_size())
        for step in range(steps):
            began = emulation.now()
            vector_to_parameters(torch.from_numpy(self.flat.copy()), self.model.parameters())
            self.model.zero_grad()
            inputs, targets = batch(self.worker_index, step)
            loss = loss_fn(self.model(inputs), targets)
            loss.backward()
            grad = parameters_to_vector(p.grad if p.grad is not None else torch.zeros_like(p)  # unused: no gradient
                                        for p in self.model.parameters()).detach().numpy()
            spent = emulation.now() - began
            if self.straggler is not None:
                spent = self.straggler.slow_down(self.worker_index, spent)
            compute += spent
            losses.append(loss.item())
            began = emulation.now()
            pushes: list = []  # non-blocking, so no worker and server ever wait on each other in a cycle
            times = self._times([(v, s, self.flat[self._shard(s)].nbytes) for v in everyone  # all push at once
                                 for s in range(self.servers)]) or {}
            arrivals = [began + times.get((self.rank, s), 0.0) for s in range(self.servers)]
            for s in range(self.servers):
                if self.mode == "async":  # the version it computed on goes first
                    self._send(np.array([versions[s], 0], dtype=np.int64), s, HEADER, pushes)
                self._send(np.ascontiguousarray(grad[self._shard(s)]), s, PUSH, pushes)
                self._stamp(s, arrivals[s], max(arrivals), pushes)  # ordered by when it has reached every server
            for s in range(self.servers):
                if self.mode == "async":
                    self._receive(header, s, HEADER, f"server {s}'s answer to step {step}")
                    versions[s] = header[0]
                self._receive(self.flat[self._shard(s)], s, PULL, f"server {s}'s parameters after step {step}")
                self._landed(self._arrived(s, f"server {s}'s parameters after step {step}"))
            for _, request in pushes:
                self._waited(request, f"a server to take this worker's push of step {step}")
            waiting += emulation.now() - began
        if self.mode == "async":
            done: list = []
            for s in range(self.servers):
                self._send(np.array([0, 1], dtype=np.int64), s, HEADER, done)
            for s, (_, request) in enumerate(done):
                self._waited(request, f"server {s} to hear this worker is done")
        return {"role": "worker", "losses": losses, "compute_seconds": compute, "wait_seconds": waiting}
