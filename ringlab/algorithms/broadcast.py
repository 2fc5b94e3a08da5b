"""Broadcast: the root's buffer ends up on every rank."""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, Step
from . import register, schedule


@register("broadcast.direct")
def direct(nranks: int, root: int = 0):
    """The root sends its whole buffer to every other rank in one step: its link carries (n-1)K."""
    others = [r for r in range(nranks) if r != root]
    steps = [Step.columns(root, others, 0, COPY, "broadcast")]
    return schedule("broadcast", "broadcast.direct", nranks, 1, steps, root=root)


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
    return schedule("broadcast", "broadcast.tree", nranks, 1, steps, root=root)


@register("broadcast.chain")
def chain(nranks: int, root: int = 0, segments: int | None = None):
    """Pipelined chain from the root: the buffer is cut into S segments (default n) and every
    segment flows root -> root+1 -> ... -> root+n-1, a rank passing segment s on the step after it
    arrived; S+n-2 steps, so time K(S+n-2)/(S B), which tends to K/B when S >> n."""
    segments = segments or nranks
    distance = np.arange(nranks - 1)  # rank root+d sends to root+d+1
    steps = []
    for t in range(segments + nranks - 2 if nranks > 1 else 0):
        segment = t - distance
        moving = (segment >= 0) & (segment < segments)
        d = distance[moving]
        steps.append(Step.columns((d + root) % nranks, (d + 1 + root) % nranks, segment[moving], COPY,
                                  "broadcast (pipeline)"))
    return schedule("broadcast", "broadcast.chain", nranks, segments, steps, root=root, segments=segments)
