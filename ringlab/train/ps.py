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

On an emulated machine (``rl.emulate`` or ``RINGLAB_EMULATE``), every push and every answer is held back
by its sender for the time its links need, with the messages of one round sharing the links they cross:
all workers' pushes to a server share its one link in (on ``uniform`` links, W pushes of K bytes take
W K / bandwidth), and its answers share its link out; every rank waits by sleeping. Async servers are
paced as if every worker pushed at once (the most they can meet): a simplification, said here.

The server works on a communicator of its own (a duplicate of ``comm``, freed by :meth:`ParameterServer.close`
or with ``comm``), so no message of the user's, or of another ringlab object, meets its messages. The
ranks check that they agree on the model and the options before anything else, and on the number of
steps before each run; every wait has a deadline (``timeout``, as for :func:`ringlab.allreduce`), past
which the rank raises naming whom it waited for.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..mpi import emulate as emulation
from ..mpi import private
from ..mpi.deadlines import DEFAULT, deadline, probe, seconds, usable, wait
from ..schedule import chunk_bounds
from .agreement import agree_on
from .straggler import Straggler

PUSH, PULL, HEADER = 11, 12, 13


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

    def close(self) -> None:
        """Free the server's communicator (also freed with the communicator it was made from)."""
        if self.comm is not None:
            private.release(self.comm)
            self.comm = None

    def _waited(self, request, whom: str) -> None:
        """Wait for ``request`` within the deadline; past it, a StepTimeout saying whom this rank waited for."""
        limit = seconds(self.timeout)
        wait(request, deadline(limit), lambda: f"rank {self.rank}: ParameterServer: waited more than {limit:g} s "
                                               f"for {whom}", nap=_nap())

    def _probe(self, source, tag: int, whom: str, status=None) -> None:
        """Wait, within the deadline, until a message from ``source`` with ``tag`` is there (not receiving it)."""
        limit = seconds(self.timeout)
        probe(self.comm, source, tag, deadline(limit),
              lambda: f"rank {self.rank}: ParameterServer: waited more than {limit:g} s for {whom}", status, _nap())

    def _bcast(self, buf, root: int, what: str) -> None:
        self._waited(self.comm.Ibcast(buf, root=root), f"{what} from rank {root} (a rank that never came?)")

    @property
    def is_server(self) -> bool:
        return self.rank < self.servers

    @property
    def worker_index(self) -> int:
        return self.rank - self.servers

    def _shard(self, s: int) -> slice:
        return slice(int(self.bounds[s]), int(self.bounds[s + 1]))

    def _held(self, messages) -> dict | None:
        """Seconds each message of ``[(src, dst, nbytes)]``, sent at once, is held back on an emulated machine
        (None: the raw machine)."""
        return emulation.message_times(messages, self.comm)

    def _answer(self, mine: np.ndarray, workers) -> list:
        """Send ``mine`` to every worker, each when its emulated link would have delivered it (at once on the
        raw machine); ``[(worker, request)]``."""
        held = self._held([(self.rank, w, mine.nbytes) for w in workers])
        since, out = time.monotonic(), []
        for w in sorted(workers, key=lambda w: _due(held, self.rank, w) or 0.0):
            emulation.hold_back(_due(held, self.rank, w), since)
            out.append((w, self.comm.Isend(mine, dest=w, tag=PULL)))
        return out

    def run(self, steps: int, batch, loss_fn) -> dict:
        """Train for ``steps`` steps; ``batch(worker, step) -> (inputs, targets)``. Call on every rank.

        Returns this rank's record: bytes sent and received; losses, compute and wait seconds (workers);
        the staleness of every push, busy seconds per step or update, and the history if asked
        (servers). At the end every rank holds the final parameters in ``model``.
        """
        if self.comm is None:
            raise RuntimeError("ParameterServer: run() after close()")
        if self._broken is not None:
            raise RuntimeError(f"ParameterServer: an earlier run failed ({self._broken}): its pushes and answers may "
                               "still be in flight on the server's communicator, and one could be taken for this run's. "
                               "It refuses to go on: close() it and build a new ParameterServer")
        try:
            agree_on(self.comm, "ParameterServer.run", [], {"steps": steps},
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
        start = time.perf_counter()  # every rank starts the clock together, as the agreement ends
        record = self._serve(steps, start) if self.is_server else self._work(steps, batch, loss_fn)
        record["seconds"] = time.perf_counter() - start
        record["sent_bytes"], record["received_bytes"] = self.sent_bytes, self.received_bytes
        for s in range(self.servers):  # everyone gets the final parameters
            self._bcast(self.flat[self._shard(s)], s, f"server {s}'s final parameters")
        vector_to_parameters(torch.from_numpy(self.flat.copy()), self.model.parameters())
        return record

    def _serve(self, steps: int, start: float) -> dict:
        from mpi4py import MPI

        mine = self.flat[self._shard(self.rank)]
        workers = range(self.servers, self.comm.Get_size())
        incoming = np.empty_like(mine)
        busy: list[float] = []  # seconds per step (sync) or per update (async), waiting for pushes left out
        history = [(0.0, mine.copy())] if self.history else None

        def keep() -> None:
            if history is not None:
                history.append((time.perf_counter() - start, mine.copy()))

        if self.mode == "sync":
            total = np.empty_like(mine)
            for step in range(steps):
                total[:] = 0
                busy.append(0.0)
                for w in workers:  # fixed order: the same sum on every run
                    self._probe(w, PUSH, f"worker {w - self.servers}'s (rank {w}) push of step {step}")  # not busy
                    began = time.perf_counter()
                    self.comm.Recv(incoming, source=w, tag=PUSH)
                    total += incoming
                    busy[-1] += time.perf_counter() - began
                    self.received_bytes += incoming.nbytes
                    self.staleness.append((w - self.servers, 0))
                began = time.perf_counter()
                mine -= self.lr * total / self.workers
                requests = self._answer(mine, workers)
                for w, r in requests:
                    self._waited(r, f"worker {w - self.servers} (rank {w}) to take the parameters of step {step}")
                busy[-1] += time.perf_counter() - began
                self.sent_bytes += mine.nbytes * len(requests)
                keep()
            return {"role": "server", "staleness": self.staleness, "busy_seconds": busy,
                    **({"history": history} if history is not None else {})}

        version, running, replies = 0, set(workers), []
        header = np.empty(2, dtype=np.int64)
        status = MPI.Status()
        while running:
            self._probe(MPI.ANY_SOURCE, HEADER, "a push from the ranks still working: "
                        + ", ".join(map(str, sorted(running))), status)  # waiting: not busy
            began = time.perf_counter()
            w = status.Get_source()
            self.comm.Recv(header, source=w, tag=HEADER)
            self.received_bytes += header.nbytes
            if header[1]:  # that worker is done
                running.discard(w)
                continue
            self._waited(self.comm.Irecv(incoming, source=w, tag=PUSH), f"worker {w - self.servers}'s push")
            self.received_bytes += incoming.nbytes
            mine -= (self.lr / self.workers) * incoming
            self.staleness.append((w - self.servers, int(version - header[0])))
            version += 1
            answer = (np.array([version, 0], dtype=np.int64), mine.copy())  # a snapshot: mine moves on
            held = self._held([(self.rank, v, mine.nbytes) for v in workers])  # as if it answered them all
            emulation.hold_back(_due(held, self.rank, w), time.monotonic())
            replies.append((answer, [self.comm.Isend(answer[0], dest=w, tag=HEADER),
                                     self.comm.Isend(answer[1], dest=w, tag=PULL)]))
            self.sent_bytes += answer[0].nbytes + answer[1].nbytes
            replies = [(a, r) for a, r in replies if not all(q.Test() for q in r)]
            busy.append(time.perf_counter() - began)
            keep()
        for _, requests in replies:
            for q in requests:
                self._waited(q, "a worker to take its last answer")
        return {"role": "server", "staleness": self.staleness, "busy_seconds": busy,
                **({"history": history} if history is not None else {})}

    def _work(self, steps: int, batch, loss_fn) -> dict:
        versions = np.zeros(self.servers, dtype=np.int64)
        losses, compute, waiting = [], 0.0, 0.0
        header = np.empty(2, dtype=np.int64)
        for step in range(steps):
            began = time.perf_counter()
            vector_to_parameters(torch.from_numpy(self.flat.copy()), self.model.parameters())
            self.model.zero_grad()
            inputs, targets = batch(self.worker_index, step)
            loss = loss_fn(self.model(inputs), targets)
            loss.backward()
            grad = parameters_to_vector(p.grad if p.grad is not None else torch.zeros_like(p)  # unused: no gradient
                                        for p in self.model.parameters()).detach().numpy()
            spent = time.perf_counter() - began
            if self.straggler is not None:
                spent = self.straggler.slow_down(self.worker_index, spent)
            compute += spent
            losses.append(loss.item())
            began = time.perf_counter()
            pushes = []  # non-blocking, so no worker and server ever wait on each other in a cycle
            everyone = range(self.servers, self.comm.Get_size())  # on an emulated machine all push at once
            held = self._held([(v, s, self.flat[self._shard(s)].nbytes) for v in everyone
                               for s in range(self.servers)])
            since = time.monotonic()
            for s in sorted(range(self.servers), key=lambda s: _due(held, self.rank, s) or 0.0):
                emulation.hold_back(_due(held, self.rank, s), since)
                messages = [(np.ascontiguousarray(grad[self._shard(s)]), PUSH)]
                if self.mode == "async":  # the version it computed on goes first
                    messages.insert(0, (np.array([versions[s], 0], dtype=np.int64), HEADER))
                for message, tag in messages:
                    pushes.append(self.comm.Isend(message, dest=s, tag=tag))
                    self.sent_bytes += message.nbytes
            for s in range(self.servers):
                if self.mode == "async":
                    self._waited(self.comm.Irecv(header, source=s, tag=HEADER), f"server {s}'s answer to step {step}")
                    versions[s] = header[0]
                    self.received_bytes += header.nbytes
                self._waited(self.comm.Irecv(self.flat[self._shard(s)], source=s, tag=PULL),
                             f"server {s}'s parameters after step {step}")
                self.received_bytes += self.flat[self._shard(s)].nbytes
            for request in pushes:
                self._waited(request, f"a server to take this worker's push of step {step}")
            waiting += time.perf_counter() - began
        if self.mode == "async":
            done = np.array([0, 1], dtype=np.int64)
            for s in range(self.servers):
                self._waited(self.comm.Isend(done, dest=s, tag=HEADER), f"server {s} to hear this worker is done")
                self.sent_bytes += done.nbytes
        return {"role": "worker", "losses": losses, "compute_seconds": compute, "wait_seconds": waiting}


def _due(held: dict | None, src: int, dst: int) -> float | None:
    """How long the message ``src`` -> ``dst`` is held back (None: not at all: the raw machine, or no bytes)."""
    return None if held is None else held.get((src, dst))


def _nap() -> float:
    """On an emulated machine ranks wait by sleeping (so that the ranks sharing a core measure the links, not
    the CPU); on the raw machine they poll, as ringlab's collectives do."""
    return emulation.NAP if emulation.current() is not None else 0.0
