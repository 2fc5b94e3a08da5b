"""The reference that ringlab's trainers are checked against: torch's own DistributedDataParallel."""
from __future__ import annotations

import time

import torch

from ..cluster.launch import torch_process_group
from .task import weights


def ddp_weights(model: torch.nn.Module, batch, steps: int, lr: float, comm=None, loss_fn=None):
    """Train ``model`` with torch DDP (gloo) and plain SGD at ``lr`` for ``steps`` steps, this rank
    taking ``batch(rank, step)``; return its weights (one flat array, the same on every rank).

    Call on every rank of ``comm`` (default COMM_WORLD), with the same ``model`` on each.
    """
    ddp_train(model, batch, steps, lr, comm, loss_fn)
    return weights(model)


def ddp_train(model: torch.nn.Module, batch, steps: int, lr: float, comm=None, loss_fn=None) -> float:
    """As :func:`ddp_weights`, training ``model`` in place; return the seconds the ``steps`` steps took on
    this rank (the process group's start and DDP's first broadcast left out), on this machine's clock even on
    an emulated machine: torch's own messages (gloo) do not cross the emulated links, so virtual time would
    count its compute and none of its communication."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    loss_fn = torch.nn.CrossEntropyLoss() if loss_fn is None else loss_fn
    with torch_process_group(comm, "gloo"):
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        sgd = torch.optim.SGD(ddp.parameters(), lr=lr)
        start = time.perf_counter()
        for step in range(steps):
            sgd.zero_grad()
            inputs, targets = batch(comm.Get_rank(), step)
            loss_fn(ddp(inputs), targets).backward()
            sgd.step()
        seconds = time.perf_counter() - start
        del ddp, sgd  # before the group goes: freed after it, DDP may hang on a store that is gone
    return seconds
