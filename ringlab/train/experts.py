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
forward and backward equal the single-rank layer's. Nothing is dropped: production layers fix each expert's
capacity at a capacity factor times the even share and drop the rest (GShard, Switch Transformer), or send
variable sizes (MegaBlocks, DeepEP). Imbalance costs twice: the padded all-to-all moves n
x capacity slots whatever the mean load, and the busiest expert computes longest while the others wait.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import torch

from ..mpi.collectives import allreduce
from ..mpi.collectives import alltoall
from .zero import as_array, sent_bytes


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

    def forward(self, x):
        gate, choice = self.route(x)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            mine = choice == e
            if mine.any():
                out[mine] = expert(x[mine])
        return out * gate[:, None]


class _AllToAll(torch.autograd.Function):
    """ringlab's all-to-all of a (n, capacity, features) tensor; backward, the all-to-all of the gradient."""

    @staticmethod
    def forward(ctx, blocks, layer):
        ctx.layer = layer
        return layer._exchange(blocks)

    @staticmethod
    def backward(ctx, grad):
        return ctx.layer._exchange(grad.contiguous()), None


class ExpertParallel(torch.nn.Module):
    """``moe``'s experts spread over the ranks of ``comm`` (E/n each, in order), the router on every rank.

    ``sent`` counts the bytes this rank sent (``"alltoall"``, ``"allreduce"``); ``last`` holds the previous
    forward's count table (``table[s][d]``: tokens rank s sent to rank d), its tokens per expert and capacity.
    """

    def __init__(self, moe: MixtureOfExperts, comm):
        super().__init__()
        n, rank = comm.Get_size(), comm.Get_rank()
        count = len(moe.experts)
        if count % n:
            raise ValueError(f"{count} experts do not spread evenly over {n} ranks: give each rank the same number")
        self.comm, self.nranks, self.rank, self.per_rank = comm, n, rank, count // n
        self.router = moe.router
        self.experts = torch.nn.ModuleList(moe.experts[rank * self.per_rank:(rank + 1) * self.per_rank])
        self.sent, self.last = Counter(), {}

    def _exchange(self, blocks: torch.Tensor) -> torch.Tensor:
        array = as_array(blocks.contiguous())
        self.sent["alltoall"] += sent_bytes("alltoall.pairwise", self.nranks, array.nbytes * self.nranks,
                                            array.itemsize)[self.rank]
        return torch.as_tensor(alltoall(array, comm=self.comm), device=blocks.device)

    def _table(self, to_rank: torch.Tensor, choice: torch.Tensor) -> np.ndarray:
        """Every rank's counts to every rank, and to every expert (an allreduce of this rank's row)."""
        n, experts = self.nranks, self.per_rank * self.nranks
        mine = np.zeros((n + 1, max(n, experts)), dtype=np.int64)
        mine[self.rank, :n] = np.bincount(to_rank.numpy(), minlength=n)
        mine[n, :experts] = np.bincount(choice.numpy(), minlength=experts)
        self.sent["allreduce"] += sent_bytes("allreduce.ring", n, mine.nbytes, mine.itemsize)[self.rank]
        return allreduce(mine, comm=self.comm)

    def forward(self, x):
        n, features = self.nranks, x.shape[-1]
        gate, choice = torch.softmax(self.router(x), dim=-1).max(dim=-1)
        to_rank = choice // self.per_rank
        order = torch.argsort(to_rank, stable=True)  # this rank's tokens, grouped by the rank they go to
        summed = self._table(to_rank, choice)
        table, per_expert = summed[:n, :n], summed[n, :n * self.per_rank]
        capacity = max(int(table.max()), 1)
        self.last = {"table": table.tolist(), "per_expert": per_expert.tolist(), "capacity": capacity}
        starts = np.concatenate(([0], np.cumsum(table[self.rank])))
        slots = torch.as_tensor(np.concatenate([np.arange(starts[d], starts[d + 1]) - starts[d] + d * capacity
                                                for d in range(n)]), dtype=torch.long)
        send = torch.zeros(n * capacity, features, dtype=x.dtype).index_copy(0, slots, x[order])
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
        out = torch.zeros_like(x).index_copy(0, order, back.index_select(0, slots))
        return out * gate[:, None]
