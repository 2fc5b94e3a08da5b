"""Tensor parallelism (Megatron-LM's column- and row-parallel linear layers) and a 2-D device mesh.

An MLP ``y = W2 act(W1 x + b1) + b2`` splits over t ranks without moving any weight (Shoeybi et al., 2019):
W1's rows, the hidden features, are cut into t pieces (numpy.array_split's rule, so t need not divide
them) and each rank computes its slice of the hidden layer with nothing to exchange (column-parallel);
W2's columns are cut alike, so each rank's slice of the hidden layer times its columns is a partial sum of
y, and one allreduce adds them (row-parallel). Backward mirrors it: the gradient of x is a sum over the
ranks, one allreduce. These are Megatron's two functions: ``f`` is the identity forward and an allreduce
backward, ``g`` an allreduce forward and the identity backward. Every allreduce is ringlab's ring, and its
bytes are counted (``sent``).

A mesh of data x tensor ranks (:func:`device_mesh`) splits a communicator twice: the ranks of a tensor
group hold pieces of one model replica, those of a data group the same piece of different replicas.
:func:`mesh_groups` says which world ranks form each group: with ``tensor_inner`` the tensor groups are
runs of consecutive ranks (one node's GPUs, on its fast links), otherwise strided (across nodes).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from ..mpi.collectives import allreduce
from ..schedule import chunk_bounds
from .zero import as_array, sent_bytes


def _sum(tensor: torch.Tensor, comm, sent: Counter) -> torch.Tensor:
    """The sum of ``tensor`` over the ranks of ``comm`` (ringlab's ring allreduce), counted in ``sent``: the bytes
    this rank sent (``"allreduce"``) and the calls by size (``("calls", nbytes)``)."""
    array = as_array(tensor.contiguous())
    sent["allreduce"] += sent_bytes("allreduce.ring", comm.Get_size(), array.nbytes, array.itemsize)[comm.Get_rank()]
    sent[("calls", array.nbytes)] += 1
    return torch.as_tensor(allreduce(array, comm=comm), device=tensor.device)


class _CopyToRanks(torch.autograd.Function):
    """Megatron's f: the identity forward, an allreduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm, sent):
        ctx.comm, ctx.sent = comm, sent
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _sum(grad, ctx.comm, ctx.sent), None, None


class _SumOverRanks(torch.autograd.Function):
    """Megatron's g: an allreduce forward, the identity backward."""

    @staticmethod
    def forward(ctx, x, comm, sent):
        return _sum(x, comm, sent)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def _piece(count: int, comm) -> tuple[int, int]:
    lo, hi = chunk_bounds(count, comm.Get_size())[comm.Get_rank():comm.Get_rank() + 2]
    return int(lo), int(hi)


class ColumnParallelLinear(torch.nn.Module):
    """This rank's rows of ``linear`` (its slice of the output features); the input is whole on every rank."""

    def __init__(self, linear: torch.nn.Linear, comm, sent: Counter | None = None):
        super().__init__()
        self.comm, self.sent = comm, Counter() if sent is None else sent
        self.rows = _piece(linear.out_features, comm)
        lo, hi = self.rows
        self.weight = torch.nn.Parameter(linear.weight.detach()[lo:hi].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach()[lo:hi].clone())

    def forward(self, x):
        return torch.nn.functional.linear(_CopyToRanks.apply(x, self.comm, self.sent), self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """This rank's columns of ``linear``: it takes its slice of the input features and the partial outputs are
    summed over the ranks; the bias (whole on every rank) is added once, after the sum."""

    def __init__(self, linear: torch.nn.Linear, comm, sent: Counter | None = None):
        super().__init__()
        self.comm, self.sent = comm, Counter() if sent is None else sent
        self.columns = _piece(linear.in_features, comm)
        lo, hi = self.columns
        self.weight = torch.nn.Parameter(linear.weight.detach()[:, lo:hi].clone())
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().clone())

    def forward(self, x_piece):
        y = _SumOverRanks.apply(torch.nn.functional.linear(x_piece, self.weight), self.comm, self.sent)
        return y if self.bias is None else y + self.bias


def split_mlp(mlp: torch.nn.Sequential, comm, sent: Counter | None = None) -> torch.nn.Sequential:
    """``Sequential(Linear, elementwise activation, Linear)`` split over the ranks of ``comm``: column-parallel,
    the activation on this rank's slice, row-parallel (one allreduce forward, one backward)."""
    layers = list(mlp)
    if len(layers) != 3 or not isinstance(layers[0], torch.nn.Linear) or not isinstance(layers[2], torch.nn.Linear):
        raise ValueError("split_mlp takes Sequential(Linear, activation, Linear), got "
                         + ", ".join(type(layer).__name__ for layer in layers))
    if layers[0].out_features != layers[2].in_features:
        raise ValueError(f"the first layer's {layers[0].out_features} outputs are not the second's "
                         f"{layers[2].in_features} inputs")
    if layers[0].out_features < comm.Get_size():
        raise ValueError(f"{layers[0].out_features} hidden features cannot be split over {comm.Get_size()} ranks")
    sent = Counter() if sent is None else sent
    return torch.nn.Sequential(ColumnParallelLinear(layers[0], comm, sent), layers[1],
                               RowParallelLinear(layers[2], comm, sent))


def mesh_groups(world: int, data: int, tensor: int, tensor_inner: bool = True) -> tuple[list, list]:
    """(tensor groups, data groups) of world ranks for a ``data`` x ``tensor`` mesh: with ``tensor_inner``
    rank d*tensor + t is (d, t) (tensor groups consecutive), otherwise rank t*data + d is (d, t)."""
    for name, value in (("data", data), ("tensor", tensor)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if data * tensor != world:
        raise ValueError(f"a {data} x {tensor} mesh needs {data * tensor} ranks; there are {world}")
    rank = (lambda d, t: d * tensor + t) if tensor_inner else (lambda d, t: t * data + d)
    return ([[rank(d, t) for t in range(tensor)] for d in range(data)],
            [[rank(d, t) for d in range(data)] for t in range(tensor)])


@dataclass
class Mesh:
    """This rank's place in a data x tensor mesh: its two sub-communicators and the groups' world ranks."""

    tensor: object
    data: object
    tensor_groups: list
    data_groups: list

    def free(self) -> None:
        """Free both sub-communicators."""
        self.tensor.Free()
        self.data.Free()


def device_mesh(comm, data: int, tensor: int, tensor_inner: bool = True) -> Mesh:
    """Split ``comm`` into this rank's tensor group and data group (:func:`mesh_groups`; call it on every rank)."""
    tensor_groups, data_groups = mesh_groups(comm.Get_size(), data, tensor, tensor_inner)
    rank = comm.Get_rank()
    t_index = next(i for i, g in enumerate(tensor_groups) if rank in g)
    d_index = next(i for i, g in enumerate(data_groups) if rank in g)
    return Mesh(comm.Split(t_index, tensor_groups[t_index].index(rank)),
                comm.Split(d_index, data_groups[d_index].index(rank)), tensor_groups, data_groups)


def group_link(topology, group: list[int]) -> tuple[float, float]:
    """(bytes/s, seconds) the slowest pair of ``group``'s ranks has on ``topology``: the rate of the busiest
    link on its route and the route's latency; a uniform machine of these figures carries the group's
    messages as the topology would when every rank has its own port (NVSwitch, one NIC per GPU)."""
    rates, latencies = [], []
    for a in group:
        for b in group:
            if a != b:
                route = list(topology.route(a, b))
                rates.append(float(topology.channel_rate[route].min()))
                latencies.append(float(topology.channel_latency[route].sum()))
    if not rates:
        raise ValueError("a group of one rank has no links")
    return min(rates), max(latencies)
