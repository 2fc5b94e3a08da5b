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
"""
from __future__ import annotations

import time

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from ..schedule import chunk_bounds
from .optimizer import agree_on_parameters
from .straggler import Straggler

PUSH, PULL, HEADER = 11, 12, 13


class ParameterServer:
    """``model``: the same architecture on every rank; the initial parameters of rank 0 win."""

    def __init__(self, model: torch.nn.Module, servers: int = 1, mode: str = "sync", lr: float = 0.1, comm=None,
                 straggler: Straggler | tuple[int, float] | None = None, history: bool = False):
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD if comm is None else comm
        size = self.comm.Get_size()
        if mode not in ("sync", "async"):
            raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
        if not 1 <= servers < size:
            raise ValueError(f"servers must be in 1..{size - 1} so that at least one rank works, got {servers}")
        self.model, self.servers, self.mode, self.lr, self.history = model, servers, mode, lr, history
        self.workers = size - servers
        self.straggler = Straggler.of(straggler)
        if self.straggler is not None and self.straggler.worker >= self.workers:
            raise ValueError(f"the straggler is worker {self.straggler.worker}, but there are {self.workers} workers "
                             f"(0..{self.workers - 1}): {size} ranks, {servers} serving")
        self.rank = self.comm.Get_rank()
        agree_on_parameters(self.comm, "ParameterServer", list(model.named_parameters()))
        with torch.no_grad():
            flat = parameters_to_vector(model.parameters()).detach().contiguous()
        self.flat = flat.numpy()  # shares memory with `flat`
        self.comm.Bcast(self.flat, root=0)
        self.bounds = chunk_bounds(len(self.flat), servers)
        self.staleness: list[tuple[int, int]] = []  # (worker, staleness) of every push, on servers
        self.sent_bytes = self.received_bytes = 0  # of the messages this rank sent and received in run()

    @property
    def is_server(self) -> bool:
        return self.rank < self.servers

    @property
    def worker_index(self) -> int:
        return self.rank - self.servers

    def _shard(self, s: int) -> slice:
        return slice(int(self.bounds[s]), int(self.bounds[s + 1]))

    def run(self, steps: int, batch, loss_fn) -> dict:
        """Train for ``steps`` steps; ``batch(worker, step) -> (inputs, targets)``. Call on every rank.

        Returns this rank's record: bytes sent and received; losses, compute and wait seconds (workers);
        the staleness of every push, busy seconds per step or update, and the history if asked
        (servers). At the end every rank holds the final parameters in ``model``.
        """
        self.sent_bytes = self.received_bytes = 0
        self.comm.Barrier()  # every rank starts the clock together
        start = time.perf_counter()
        record = self._serve(steps, start) if self.is_server else self._work(steps, batch, loss_fn)
        record["seconds"] = time.perf_counter() - start
        record["sent_bytes"], record["received_bytes"] = self.sent_bytes, self.received_bytes
        for s in range(self.servers):  # everyone gets the final parameters
            self.comm.Bcast(self.flat[self._shard(s)], root=s)
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
                    self.comm.Probe(source=w, tag=PUSH)  # waiting for the push: not busy
                    began = time.perf_counter()
                    self.comm.Recv(incoming, source=w, tag=PUSH)
                    total += incoming
                    busy[-1] += time.perf_counter() - began
                    self.received_bytes += incoming.nbytes
                    self.staleness.append((w - self.servers, 0))
                began = time.perf_counter()
                mine -= self.lr * total / self.workers
                requests = [self.comm.Isend(mine, dest=w, tag=PULL) for w in workers]
                for r in requests:
                    r.Wait()
                busy[-1] += time.perf_counter() - began
                self.sent_bytes += mine.nbytes * len(requests)
                keep()
            return {"role": "server", "staleness": self.staleness, "busy_seconds": busy,
                    **({"history": history} if history is not None else {})}

        version, finished, replies = 0, 0, []
        header = np.empty(2, dtype=np.int64)
        status = MPI.Status()
        while finished < self.workers:
            self.comm.Probe(source=MPI.ANY_SOURCE, tag=HEADER, status=status)  # waiting: not busy
            began = time.perf_counter()
            w = status.Get_source()
            self.comm.Recv(header, source=w, tag=HEADER)
            self.received_bytes += header.nbytes
            if header[1]:  # that worker is done
                finished += 1
                continue
            self.comm.Recv(incoming, source=w, tag=PUSH)
            self.received_bytes += incoming.nbytes
            mine -= (self.lr / self.workers) * incoming
            self.staleness.append((w - self.servers, int(version - header[0])))
            version += 1
            answer = (np.array([version, 0], dtype=np.int64), mine.copy())  # a snapshot: mine moves on
            replies.append((answer, [self.comm.Isend(answer[0], dest=w, tag=HEADER),
                                     self.comm.Isend(answer[1], dest=w, tag=PULL)]))
            self.sent_bytes += answer[0].nbytes + answer[1].nbytes
            replies = [(a, r) for a, r in replies if not all(q.Test() for q in r)]
            busy.append(time.perf_counter() - began)
            keep()
        for _, requests in replies:
            for q in requests:
                q.Wait()
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
            for s in range(self.servers):
                messages = [(np.ascontiguousarray(grad[self._shard(s)]), PUSH)]
                if self.mode == "async":  # the version it computed on goes first
                    messages.insert(0, (np.array([versions[s], 0], dtype=np.int64), HEADER))
                for message, tag in messages:
                    pushes.append(self.comm.Isend(message, dest=s, tag=tag))
                    self.sent_bytes += message.nbytes
            for s in range(self.servers):
                if self.mode == "async":
                    self.comm.Recv(header, source=s, tag=HEADER)
                    versions[s] = header[0]
                    self.received_bytes += header.nbytes
                self.comm.Recv(self.flat[self._shard(s)], source=s, tag=PULL)
                self.received_bytes += self.flat[self._shard(s)].nbytes
            for request in pushes:
                request.Wait()
            waiting += time.perf_counter() - began
        if self.mode == "async":
            done = np.array([0, 1], dtype=np.int64)
            for s in range(self.servers):
                self.comm.Send(done, dest=s, tag=HEADER)
                self.sent_bytes += done.nbytes
        return {"role": "worker", "losses": losses, "compute_seconds": compute, "wait_seconds": waiting}
