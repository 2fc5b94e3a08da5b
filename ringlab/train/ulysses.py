"""DeepSpeed-Ulysses: attention over a sequence split across ranks, by trading the split for one over heads.

Jacobs et al. 2023 ("DeepSpeed Ulysses: System Optimizations for Enabling Training of Extreme Long Sequence
Transformer Models", arXiv 2309.14509). Each of n ranks holds s/n of the sequence, every head. Attention needs
every key for a query, but each head is independent of the others. So before attention one all-to-all
(ringlab's ``rl.alltoall``) regroups Q, K and V: rank r sends its tokens of head group j (H/n heads) to rank j
and receives everybody's tokens of its own group, so it then holds the whole sequence for H/n heads. It runs
ordinary attention on those heads (causal or not: it has every position), and a second all-to-all sends each
token's output back to the rank that holds the token. Backward is the same two all-to-alls reversed (an
all-to-all's gradient is the all-to-all of the gradient).

Bytes: an all-to-all keeps 1/n of a rank's buffer and sends the rest, so each rank sends (n-1)/n of its Q, K, V
and of its output: 4 s h b (n-1)/n^2 bytes forward for s tokens, h features, b bytes an element. Grow the
sequence with the ranks (s = n s0) and that stays about 4 s0 h b, the paper's point: a ring passes on
(n-1)/n of the whole sequence's K and V, 2 s h b (n-1)/n, and Megatron's sequence parallelism all-gathers
and reduce-scatters whole-sequence activations, both growing with s whatever n. The price: the
heads must divide by n (n is at most the number of heads; fewer with grouped-query attention's K, V heads),
and an all-to-all crosses every pair of ranks, so Ulysses lives best on one node's NVLink while a ring
(:mod:`ringlab.train.attention`) can cross nodes neighbour to neighbour.
"""
from __future__ import annotations

import torch

from .sequence import attend


class _AllToAll(torch.autograd.Function):
    """ringlab's all-to-all of a (n, ...) tensor (block d to rank d); backward, the all-to-all of the gradient."""

    @staticmethod
    def forward(ctx, blocks, group):
        ctx.group = group
        return group.alltoall(blocks)

    @staticmethod
    def backward(ctx, grad):
        return ctx.group.alltoall(grad.contiguous()), None


def ulysses_attention(q, k, v, group, causal: bool = False):
    """This rank's tokens of attention over the whole sequence, by two all-to-alls over ``group`` (a
    :class:`ringlab.train.sequence.CommGroup`, or a rank of :class:`~ringlab.train.sequence.SimulatedRanks`).

    ``q``, ``k``, ``v``: this rank's s/n tokens, shaped (tokens, batch, heads, head width), rank r holding tokens
    r s/n onwards; the output has the same shape. ``group.sent["alltoall"]`` counts this rank's bytes."""
    n = group.nranks
    if q.shape != k.shape or q.shape != v.shape or q.dim() != 4:
        raise ValueError(f"Ulysses takes q, k, v of one shape (tokens, batch, heads, head width); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    tokens, batch, heads, width = q.shape
    if heads % n:
        raise ValueError(f"Ulysses gives each rank whole heads: {heads} heads do not divide by {n} ranks")
    group_heads = heads // n
    # (tokens, batch, 3, n, H/n, d) -> block j = these tokens of head group j, for rank j
    stacked = torch.stack([q, k, v], dim=2).view(tokens, batch, 3, n, group_heads, width)
    received = _AllToAll.apply(stacked.permute(3, 0, 1, 2, 4, 5).contiguous(), group)
    whole = received.reshape(n * tokens, batch, 3, group_heads, width)  # block s: rank s's tokens, in order
    out = attend(*whole.unbind(2), causal).view(n, tokens, batch, group_heads, width)  # by the tokens' ranks
    back = _AllToAll.apply(out.contiguous(), group)  # block s: these tokens, head group s
    return back.permute(1, 2, 0, 3, 4).reshape(tokens, batch, heads, width)


def ulysses_bytes(tokens: int, batch: int, heads: int, width: int, nranks: int, itemsize: int = 2) -> dict:
    """Bytes each rank sends for one Ulysses attention over ``tokens`` in all (the paper's accounting): (n-1)/n
    of its Q, K and V (forward) and of its output, the same again backward."""
    if tokens % nranks or heads % nranks:
        raise ValueError(f"Ulysses needs tokens and heads that divide by {nranks} ranks; got {tokens} and {heads}")
    shard = tokens // nranks * batch * heads * width * itemsize
    forward = (nranks - 1) * 4 * shard // nranks
    return {"forward": forward, "backward": forward, "qkv_shard": 3 * shard, "output_shard": shard}
