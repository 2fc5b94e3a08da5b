"""PAT (Parallel Aggregated Trees, NCCL 2.23): all-gather and reduce-scatter in ceil(log2 n) steps.

Every rank's block is broadcast along a binomial tree of distances, and the n trees run side by side, one
rooted at each rank, so that at every step each rank sends all it has to forward as one message: the
Bruck all-gather with its dimensions reversed, farthest distance first (the PAT paper, arXiv 2506.20252). At the
step of distance d = 2^k (k from ceil(log2 n) - 1 down to 0), a rank that holds the block of the rank o
places behind it, for every o that is a multiple of 2d with o + d < n, passes it on to the rank d ahead.
Each block reaches each rank exactly once, so every rank sends n-1 blocks in all, as a ring does, but in
log2 n messages instead of n-1. Reduce-scatter is the same trees run backwards, adding.

NCCL's PAT also caps how many blocks one message aggregates, to fit its fixed intermediate buffers: at
large sizes that splits steps and adds messages. These schedules are the uncapped form.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE, Step
from .registry import register


def _forward_steps(n: int) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per step of the all-gather: (distance, src, dst, block) columns."""
    steps = []
    for k in reversed(range(max(n - 1, 0).bit_length())):
        d = 1 << k
        offsets = np.arange(0, n - d, 2 * d)  # blocks that sit o ranks behind a holder, o + d < n
        src = np.repeat(np.arange(n), len(offsets))
        block = (src - np.tile(offsets, n)) % n
        steps.append((d, src, (src + d) % n, block))
    return steps


@register("allgather.pat")
def allgather(nranks: int):
    """PAT all-gather: ceil(log2 n) steps, farthest first; at distance d each rank sends every block it
    holds from a rank a multiple of 2d behind it (one message), so n-1 blocks in all from each rank."""
    return nranks, [Step.columns(src, dst, block, COPY, f"allgather (PAT, distance {d})")
                    for d, src, dst, block in _forward_steps(nranks)]


@register("reduce_scatter.pat")
def reduce_scatter(nranks: int):
    """PAT reduce-scatter: the all-gather's trees run backwards, nearest first, each message added in; rank j
    ends with the full sum of block j."""
    return nranks, [Step.columns(dst, src, block, REDUCE, f"reduce-scatter (PAT, distance {d})")
                    for d, src, dst, block in reversed(_forward_steps(nranks))]
