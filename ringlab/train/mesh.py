"""Training on a data x tensor mesh: a stack of tensor-parallel MLP blocks, its gradients averaged over the data group.

The model is an input layer, residual MLP blocks and an output layer (:func:`make_stack`). On a mesh
(:func:`ringlab.train.tensor.device_mesh`) every block's MLP is split over the tensor group (one allreduce
of activations forward and one backward per block); the input and output layers are whole on every rank.
After backward the data group averages every gradient this rank holds (one ring allreduce of them all) and
plain SGD steps. Each of the two groups' collectives may run on an emulated machine of its own
(``tensor_machine``, ``data_machine``: SPEC strings for ``rl.emulate``), so that the tensor group's messages
take one kind of link and the data group's another, as on a real cluster.
"""
from __future__ import annotations

import contextlib
import copy
from collections import Counter

import torch

from ..mpi.emulate import emulate
from .tensor import _sum, split_mlp


class Residual(torch.nn.Module):
    """x + block(x)."""

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x):
        return x + self.block(x)


def make_stack(features: int = 16, hidden: int = 64, blocks: int = 2, classes: int = 8, seed: int = 0):
    """Linear(features, hidden), ``blocks`` residual MLPs (hidden -> 4 hidden -> hidden, GELU), Linear(hidden,
    classes); float64, the same on every rank for the same seed."""
    torch.manual_seed(seed)
    mlps = [Residual(torch.nn.Sequential(torch.nn.Linear(hidden, 4 * hidden), torch.nn.GELU(),
                                         torch.nn.Linear(4 * hidden, hidden))) for _ in range(blocks)]
    return torch.nn.Sequential(torch.nn.Linear(features, hidden), *mlps, torch.nn.Linear(hidden, classes)).double()


def split_stack(model: torch.nn.Sequential, comm, sent: Counter) -> torch.nn.Sequential:
    """A copy of ``model`` whose residual blocks' MLPs are split over the ranks of ``comm``."""
    out = copy.deepcopy(model)
    for i, layer in enumerate(out):
        if isinstance(layer, Residual):
            out[i] = Residual(split_mlp(layer.block, comm, sent))
    return out


def _on(machine):
    return emulate(machine) if machine else contextlib.nullcontext()


class MeshTrainer:
    """Train ``model`` (unsplit, the same on every rank) on ``mesh``: tensor-parallel blocks, data-parallel SGD."""

    def __init__(self, model: torch.nn.Sequential, mesh, lr: float = 0.05, tensor_machine: str | None = None,
                 data_machine: str | None = None):
        self.mesh, self.lr = mesh, lr
        self.tensor_machine, self.data_machine = tensor_machine, data_machine
        self.tensor_sent, self.data_sent = Counter(), Counter()
        self.model = split_stack(model, mesh.tensor, self.tensor_sent)
        self.params = list(self.model.parameters())

    def step(self, x, y) -> float:
        """One step on this data rank's batch (the same on every rank of its tensor group); the loss."""
        for p in self.params:
            p.grad = None
        with _on(self.tensor_machine):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
            loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        with _on(self.data_machine):
            mean = _sum(flat, self.mesh.data, self.data_sent) / self.mesh.data.Get_size()
        with torch.no_grad():
            at = 0
            for p in self.params:
                p -= self.lr * mean[at:at + p.numel()].view_as(p)
                at += p.numel()
        return float(loss.detach())

