"""Reduce: every rank contributes its buffer; the root ends with the sum of all of them."""
from __future__ import annotations

import numpy as np

from ..schedule import REDUCE, Step
from .registry import register
from .chain import pipeline


@register("reduce.direct")
def direct(nranks: int, root: int = 0):
    """Every rank sends its whole buffer to the root in one step; the root adds n-1 buffers."""
    others = [r for r in range(nranks) if r != root]
    return 1, [Step.columns(others, root, 0, REDUCE, "reduce")]


@register("reduce.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree: at level k each rank whose distance from the root has lowest set bit 2^k
    sends its partial sum 2^k ranks closer; ceil(log2 n) steps."""
    steps, mask = [], 1
    while mask < nranks:
        senders = np.arange(mask, nranks, 2 * mask)  # distances from the root
        steps.append(Step.columns((senders + root) % nranks, (senders - mask + root) % nranks, 0, REDUCE,
                                  f"reduce (tree level {len(steps)})"))
        mask *= 2
    return 1, steps


@register("reduce.chain")
def chain(nranks: int, root: int = 0, segments: int | None = None):
    """Pipelined chain ending at the root: the buffer is cut into S segments (default n) and
    every segment flows root+n-1 -> ... -> root+1 -> root, each rank adding its own part on the
    way; a rank passes on segment s one step after receiving it, so S+n-2 steps in all."""
    segments = segments or nranks
    hops = [((root + d) % nranks, (root + d - 1) % nranks) for d in range(nranks - 1, 0, -1)]  # farthest first
    return segments, pipeline(hops, segments, REDUCE, "reduce (pipeline)")
