"""Broadcast: the root's buffer ends up on every rank."""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, Step
from .registry import register
from .chain import pipeline


@register("broadcast.direct")
def direct(nranks: int, root: int = 0):
    """The root sends its whole buffer to every other rank in one step: its link carries (n-1)K."""
    others = [r for r in range(nranks) if r != root]
    return 1, [Step.columns(root, others, 0, COPY, "broadcast")]


@register("broadcast.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree: every rank that has the data sends it 2^k ranks further, for k from the
    highest power of two below n down to 1; the holders double each step, ceil(log2 n) steps."""
    steps, mask = [], 1
    while mask * 2 < nranks:
        mask *= 2
    while mask >= 1 and nranks > 1:
        senders = np.arange(0, nranks - mask, 2 * mask)  # distances from the root
        steps.append(Step.columns((senders + root) % nranks, (senders + mask + root) % nranks, 0, COPY,
                                  f"broadcast (tree level {len(steps)})"))
        mask //= 2
    return 1, steps


@register("broadcast.chain")
def chain(nranks: int, root: int = 0, segments: int | None = None):
    """Pipelined chain from the root: the buffer is cut into S segments (default n) and every
    segment flows root -> root+1 -> ... -> root+n-1, a rank passing segment s on the step after it
    arrived; S+n-2 steps, so time K(S+n-2)/(S B), which tends to K/B when S >> n."""
    segments = segments or nranks
    hops = [((root + d) % nranks, (root + d + 1) % nranks) for d in range(nranks - 1)]
    return segments, pipeline(hops, segments, COPY, "broadcast (pipeline)")
