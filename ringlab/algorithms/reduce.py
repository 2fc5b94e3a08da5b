"""Reduce: every rank contributes its buffer; the root ends with the sum of all of them."""
from __future__ import annotations

import numpy as np

from ..schedule import REDUCE
from .chain import pipeline
from .pattern import Pattern
from .registry import register


def add_direct(pattern: Pattern, nranks: int, root: int, step: int = 0) -> int:
    """Every other rank sends the root its buffer at ``step``; the step after it."""
    others = np.delete(np.arange(nranks), root)
    pattern.label(step, "reduce")
    pattern.add(others, root, step, step + 1, 0, REDUCE, order=others)
    return step + int(nranks > 1)


def add_tree(pattern: Pattern, nranks: int, root: int, step: int = 0) -> int:
    """The binomial tree's levels from ``step`` on; the step after them."""
    pattern.label(step, "reduce (tree level {i})", 0)
    mask = 1
    while mask < nranks:
        senders = np.arange(mask, nranks, 2 * mask)  # distances from the root
        pattern.add((senders + root) % nranks, (senders - mask + root) % nranks, step, step + 1, 0, REDUCE,
                    order=senders)
        mask, step = mask * 2, step + 1
    return step


@register("reduce.direct")
def direct(nranks: int, root: int = 0):
    """Every rank sends its whole buffer to the root in one step; the root adds n-1 buffers."""
    pattern = Pattern(nranks, 1)
    add_direct(pattern, nranks, root)
    return 1, pattern.steps()


@register("reduce.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree: at level k each rank whose distance from the root has lowest set bit 2^k
    sends its partial sum 2^k ranks closer; ceil(log2 n) steps."""
    pattern = Pattern(nranks, 1)
    add_tree(pattern, nranks, root)
    return 1, pattern.steps()


@register("reduce.chain")
def chain(nranks: int, root: int = 0, segments: int | None = None):
    """Pipelined chain ending at the root: the buffer is cut into S segments (default n) and
    every segment flows root+n-1 -> ... -> root+1 -> root, each rank adding its own part on the
    way; a rank passes on segment s one step after receiving it, so S+n-2 steps in all."""
    segments = segments or nranks
    hops = [((root + d) % nranks, (root + d - 1) % nranks) for d in range(nranks - 1, 0, -1)]  # farthest first
    return segments, pipeline(Pattern(nranks, segments), hops, segments, REDUCE, "reduce (pipeline)").steps()
