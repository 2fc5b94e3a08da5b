"""Broadcast: the root's buffer ends up on every rank."""
from __future__ import annotations

import numpy as np

from ..schedule import COPY
from .chain import pipeline
from .pattern import Pattern
from .registry import register


def add_direct(pattern: Pattern, nranks: int, root: int, step: int = 0) -> int:
    """The root sends every other rank its buffer at ``step``; the step after it."""
    others = np.delete(np.arange(nranks), root)
    pattern.label(step, "broadcast")
    pattern.add(root, others, step, step + 1, 0, COPY, order=others)
    return step + int(nranks > 1)


def add_tree(pattern: Pattern, nranks: int, root: int, step: int = 0) -> int:
    """The binomial tree's levels from ``step`` on; the step after them."""
    pattern.label(step, "broadcast (tree level {i})", 0)
    mask = 1
    while mask * 2 < nranks:
        mask *= 2
    while mask >= 1 and nranks > 1:
        senders = np.arange(0, nranks - mask, 2 * mask)  # distances from the root
        pattern.add((senders + root) % nranks, (senders + mask + root) % nranks, step, step + 1, 0, COPY,
                    order=senders)
        mask, step = mask // 2, step + 1
    return step


@register("broadcast.direct")
def direct(nranks: int, root: int = 0):
    """The root sends its whole buffer to every other rank in one step: its link carries (n-1)K."""
    pattern = Pattern(nranks, 1)
    add_direct(pattern, nranks, root)
    return 1, pattern.steps()


@register("broadcast.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree: every rank that has the data sends it 2^k ranks further, for k from the
    highest power of two below n down to 1; the holders double each step, ceil(log2 n) steps."""
    pattern = Pattern(nranks, 1)
    add_tree(pattern, nranks, root)
    return 1, pattern.steps()


@register("broadcast.chain")
def chain(nranks: int, root: int = 0, segments: int | None = None):
    """Pipelined chain from the root: the buffer is cut into S segments (default n) and every
    segment flows root -> root+1 -> ... -> root+n-1, a rank passing segment s on the step after it
    arrived; S+n-2 steps, so time K(S+n-2)/(S B), which tends to K/B when S >> n."""
    segments = segments or nranks
    hops = [((root + d) % nranks, (root + d + 1) % nranks) for d in range(nranks - 1)]
    return segments, pipeline(Pattern(nranks, segments), hops, segments, COPY, "broadcast (pipeline)").steps()
