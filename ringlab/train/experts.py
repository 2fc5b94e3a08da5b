"""Expert parallelism: a mixture-of-experts layer whose tokens travel to their experts and back by all-to-all.

A router scores every token against E experts and sends it to the best one (top-1, as the Switch
Transformer does), whose output it scales by the router's probability. :class:`MixtureOfExperts` is the
layer on one rank; :class:`ExpertParallel` spreads its experts over n ranks (E/n each, in order) and, on
every rank, for its own tokens:

1. counts how many it sends to each rank; an allreduce of the n x n table of counts tells every rank
   every pair's count: the load on each expert, and the largest block;
2. dispatch: ringlab's all-to-all (``rl.alltoall``, equal blocks) of blocks of ``capacity`` token slots,
   the largest count in the table (a rank's count for its own experts included: that block stays home but
   shares the send buffer's layout), the other blocks padded with zeros;
3. each rank runs its experts on the tokens it received;
4. combine: the reverse all-to-all brings every token's output home, where its gate scales it.

Both all-to-alls are autograd functions (an all-to-all's gradient is the all-to-all of the gradients), so
forward and backward equal the single-rank layer's. Imbalance costs twice: the padded all-to-all moves n
x capacity slots whatever the mean load, and the busiest expert computes longest while the others wait.

Production layers do one of two other things, and so can this one:

- ``capacity_factor=f`` (GShard, Switch Transformer): each expert takes at most C = ceil(f x T / E) of a rank's T
  tokens, the first C that chose it in the rank's order, and the rest are dropped (their output is zero: in a
  transformer the residual connection carries them past the layer). The blocks are C slots an expert (the
  largest rank's C, where ranks hold different numbers of tokens), fixed whatever the router did, as static
  shapes want. ``MixtureOfExperts(x, capacity=C)`` drops the same tokens of
  one rank's ``x``.
- ``dispatch="dropless"`` (MegaBlocks, DeepEP): nothing padded, nothing dropped: each pair of ranks sends its
  own count, by ``rl.alltoallv`` (:func:`ringlab.mpi.collectives.alltoallv`) on the count table every rank already has; the
  combine sends the transposed table back, and so does each one's backward.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

import math

from ..mpi.collectives import alltoallv
from ..mpi.collectives import allreduce
from ..mpi.collectives import alltoall
from .zero import as_array, sent_bytes

DISPATCHES = ("padded", "dropless")


class MixtureOfExperts(torch.nn.Module):
    """A router (Linear(features, experts)) and ``experts`` MLPs (features -> hidden -> features); top-1 routing."""

    def __init__(self, features: int = 16, experts: int = 4, hidden: int = 32, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.router = torch.nn.Linear(features, experts)
        self.experts = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(features, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, features))
            for _ in range(experts))

    def route(self, x):
        """(gate, expert) of every token: the router's top probability and its expert."""
        return torch.softmax(self.router(x), dim=-1).max(dim=-1)

    def forward(self, x, capacity: int | None = None):
        """The layer on the tokens ``x``; with ``capacity``, each expert takes only the first ``capacity`` tokens that
        chose it (in ``x``'s order) and the others are dropped: zero out."""
        gate, choice = self.route(x)
        kept = torch.ones_like(choice, dtype=torch.bool) if capacity is None else within_capacity(choice, capacity)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            mine = (choice == e) & kept
            if mine.any():
                out[mine] = expert(x[mine])
        return out * gate[:, None]


def within_capacity(choice: torch.Tensor, capacity: int) -> torch.Tensor:
    """Which tokens an expert of ``capacity`` slots takes: for each expert, the first ``capacity`` that chose it."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"capacity must be a whole number of tokens >= 0, got {capacity!r}")
    chose = torch.nn.functional.one_hot(choice, int(choice.max()) + 1 if choice.numel() else 1)
    place = (chose.cumsum(0) * chose).sum(dim=1) - 1  # each token's place among those that chose its expert
    return place < capacity


def expert_capacity(factor: float, tokens: int, experts: int) -> int:
    """GShard's and Switch Transformer's capacity: ceil(factor x tokens / experts) slots an expert."""
    return math.ceil(factor * tokens / experts)


class _AllToAll(torch.autograd.Function):
    """ringlab's all-to-all of a (n, capacity, features) tensor; backward, the all-to-all of the gradient."""

    @staticmethod
    def forward(ctx, blocks, layer):
        ctx.layer = layer
        return layer._exchange(blocks)

    @staticmethod
    def backward(ctx, grad):
        return ctx.layer._exchange(grad.contiguous()), None


class _AllToAllV(torch.autograd.Function):
    """rl.alltoallv of rows by a count table; backward, the same of the gradient by the transposed table."""

    @staticmethod
    def forward(ctx, rows, layer, table):
        ctx.layer, ctx.table = layer, table
        return layer._exchange_v(rows, table)

    @staticmethod
    def backward(ctx, grad):
        return ctx.layer._exchange_v(grad.contiguous(), ctx.table.T), None, None


class ExpertParallel(torch.nn.Module):
    """``moe``'s experts spread over the ranks of ``comm`` (E/n each, in order), the router on every rank.

    ``dispatch``: ``"padded"`` (rl.alltoall of equal blocks) or ``"dropless"`` (rl.alltoallv, each pair's own
    count); ``capacity_factor``: None (nothing dropped), or each expert's capacity as a factor of the even share
    (padded dispatch only: fixed blocks of that many slots an expert, the tokens beyond dropped).

    ``sent`` counts the bytes this rank sent (``"alltoall"`` or ``"alltoallv"``, and ``"allreduce"``); ``last``
    holds the previous forward's count table (``table[s][d]``: tokens rank s sent to rank d, after any drop), its
    tokens per expert (as routed, before any drop), the block (``capacity``, in token slots a rank; None when
    dropless) and the tokens dropped on all ranks.
    """

    def __init__(self, moe: MixtureOfExperts, comm, dispatch: str = "padded", capacity_factor: float | None = None):
        super().__init__()
        n, rank = comm.Get_size(), comm.Get_rank()
        count = len(moe.experts)
        if count % n:
            raise ValueError(f"{count} experts do not spread evenly over {n} ranks: give each rank the same number")
        if dispatch not in DISPATCHES:
            raise ValueError(f"dispatch is 'padded' or 'dropless', got {dispatch!r}")
        if capacity_factor is not None:
            if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
                    or not 0 < capacity_factor < math.inf:
                raise ValueError(f"capacity_factor must be a number > 0 (Switch Transformer's 1.0 or 1.25), or None, "
                                 f"got {capacity_factor!r}")
            if dispatch == "dropless":
                raise ValueError("a dropless dispatch drops nothing: give it no capacity_factor")
        self.dispatch, self.capacity_factor = dispatch, capacity_factor
        self.comm, self.nranks, self.rank, self.per_rank = comm, n, rank, count // n
        self.router = moe.router
        self.experts = torch.nn.ModuleList(moe.experts[rank * self.per_rank:(rank + 1) * self.per_rank])
        self.sent, self.last = Counter(), {}

    def _exchange(self, blocks: torch.Tensor) -> torch.Tensor:
        array = as_array(blocks.contiguous())
        self.sent["alltoall"] += sent_bytes("alltoall.pairwise", self.nranks, array.nbytes * self.nranks,
                                            array.itemsize)[self.rank]
        return torch.as_tensor(alltoall(array, comm=self.comm), device=blocks.device)

    def _exchange_v(self, rows: torch.Tensor, table: np.ndarray) -> torch.Tensor:
        array = as_array(rows.contiguous())
        row_bytes = array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
        self.sent["alltoallv"] += int(table[self.rank].sum() - table[self.rank, self.rank]) * row_bytes
        return torch.as_tensor(alltoallv(array, table, comm=self.comm), device=rows.device)

    def _table(self, to_rank: torch.Tensor, choice: torch.Tensor, tokens: int) -> np.ndarray:
        """Every rank's counts to every rank (row s: rank s's), its tokens routed to every expert (row n, summed)
        and its tokens (row n + 1, column s): an allreduce of this rank's rows."""
        n, experts = self.nranks, self.per_rank * self.nranks
        mine = np.zeros((n + 2, max(n, experts)), dtype=np.int64)
        mine[self.rank, :n] = np.bincount(to_rank.numpy(), minlength=n)
        mine[n, :experts] = np.bincount(choice.numpy(), minlength=experts)
        mine[n + 1, self.rank] = tokens
        self.sent["allreduce"] += sent_bytes("allreduce.ring", n, mine.nbytes, mine.itemsize)[self.rank]
        return allreduce(mine, comm=self.comm)

    def forward(self, x):
        n, features = self.nranks, x.shape[-1]
        gate, choice = torch.softmax(self.router(x), dim=-1).max(dim=-1)
        experts = n * self.per_rank
        if self.capacity_factor is None:
            kept, slots_per_expert = torch.arange(len(x)), None
        else:
            slots_per_expert = expert_capacity(self.capacity_factor, len(x), experts)
            kept = within_capacity(choice, slots_per_expert).nonzero()[:, 0]  # the tokens their experts take
        routed = choice
        x_kept, choice = x.index_select(0, kept), choice.index_select(0, kept)
        to_rank = choice // self.per_rank
        order = torch.argsort(to_rank, stable=True)  # this rank's kept tokens, grouped by the rank they go to
        summed = self._table(to_rank, routed, len(x))
        table, per_expert, tokens = summed[:n, :n], summed[n, :experts], summed[n + 1, :n]
        dropped = int(per_expert.sum() - table.sum())  # routed, less what was sent
        if self.dispatch == "dropless":
            self.last = {"table": table.tolist(), "per_expert": per_expert.tolist(), "capacity": None,
                         "dropped": dropped}
            return self._dropless(x, x_kept, kept, choice, order, table, gate)
        if slots_per_expert is None:  # padded to the largest count in the table
            capacity = max(int(table.max()), 1)
        else:  # fixed: the largest rank's capacity, an expert's slots for each expert a rank holds
            capacity = max(self.per_rank * max(expert_capacity(self.capacity_factor, int(t), experts) for t in tokens), 1)
        self.last = {"table": table.tolist(), "per_expert": per_expert.tolist(), "capacity": capacity,
                     "dropped": dropped}
        starts = np.concatenate(([0], np.cumsum(table[self.rank])))
        slots = torch.as_tensor(np.concatenate([np.arange(starts[d], starts[d + 1]) - starts[d] + d * capacity
                                                for d in range(n)]), dtype=torch.long)
        send = torch.zeros(n * capacity, features, dtype=x.dtype).index_copy(0, slots, x_kept[order])
        expert_ids = torch.zeros(n * capacity, 1, dtype=x.dtype).index_copy(
            0, slots, choice[order].to(x.dtype)[:, None] % self.per_rank)  # which of the receiver's experts
        received = _AllToAll.apply(send.view(n, capacity, features), self)
        ids = self._exchange(expert_ids.view(n, capacity, 1)).view(n * capacity).long()
        valid = torch.as_tensor(np.concatenate([np.arange(capacity) < table[s, self.rank] for s in range(n)]))
        flat = received.reshape(n * capacity, features)
        outputs = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):  # every expert runs, on no tokens too: then every rank's backward
            mine = (valid & (ids == e)).nonzero()[:, 0]  # reaches both all-to-alls, and none waits for another
            outputs = outputs.index_put((mine,), expert(flat[mine]))
        back = _AllToAll.apply(outputs.view(n, capacity, features), self).reshape(n * capacity, features)
        out = torch.zeros_like(x).index_copy(0, kept.index_select(0, order), back.index_select(0, slots))
        return out * gate[:, None]

    def _dropless(self, x, x_kept, kept, choice, order, table, gate):
        """Dispatch and combine by rl.alltoallv: each pair's own count, nothing padded."""
        received = _AllToAllV.apply(x_kept.index_select(0, order), self, table)
        ids = self._exchange_v((choice.index_select(0, order) % self.per_rank).to(torch.int64)[:, None], table)[:, 0]
        outputs = torch.zeros_like(received)
        for e, expert in enumerate(self.experts):  # every expert runs, on no tokens too (see forward)
            mine = (ids == e).nonzero()[:, 0]
            outputs = outputs.index_put((mine,), expert(received.index_select(0, mine)))
        back = _AllToAllV.apply(outputs, self, table.T.copy())
        out = torch.zeros_like(x).index_copy(0, kept.index_select(0, order), back)
        return out * gate[:, None]
