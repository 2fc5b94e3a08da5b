"""Gather: rank r's block (chunk r) ends up on the root, every block in its place.

The buffer is cut into n chunks, chunk r being rank r's block; only the root's end state is defined.
Traffic below is for a buffer of K bytes (n blocks of K/n).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, Step
from .registry import register


@register("gather.direct")
def direct(nranks: int, root: int = 0):
    """Every other rank sends its block straight to the root in one step: each sends K/n, the root
    receives (n-1)K/n, all at once over its one link."""
    others = np.array([r for r in range(nranks) if r != root], dtype=np.int64)
    return nranks, [Step.columns(others, root, others, COPY, "gather")]


@register("gather.ring")
def ring(nranks: int, root: int = 0):
    """A ring opened at the root: blocks flow root+1 -> root+2 -> ... -> root, each rank passing on
    what it received the step before. At step i rank j sends chunk (j-i) mod n to rank j+1, as in
    allgather.ring, but a block stops at the root. n-1 steps; the rank at distance d from the root
    (going round from root+1) sends d blocks, so the root receives (n-1)K/n, only from root-1, and
    all ranks together send n(n-1)/2 blocks: n(n-1)K/2n."""
    n = nranks
    steps = []
    for i in range(n - 1):
        position = np.arange(i, n - 1)     # places along the chain root+1 .. root+n-1 that have a block to pass
        senders = (root + 1 + position) % n
        steps.append(Step.columns(senders, (senders + 1) % n, (senders - i) % n, COPY, "gather (ring)"))
    return n, steps


@register("gather.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree (MPICH's gather): at level k each rank whose distance from the root has lowest set
    bit 2^k sends the blocks of its subtree (the distances d..d+2^k-1 it has collected) 2^k ranks
    closer; ceil(log2 n) steps. The root still receives (n-1)K/n; the rank at distance d sends
    min(lowbit(d), n-d) blocks."""
    n, steps, mask = nranks, [], 1
    while mask < n:
        src, dst, chunk = [], [], []
        for distance in range(mask, n, 2 * mask):
            for held in range(distance, min(distance + mask, n)):  # its own block and its subtree's
                src.append((distance + root) % n)
                dst.append((distance - mask + root) % n)
                chunk.append((held + root) % n)
        steps.append(Step.columns(src, dst, chunk, COPY, f"gather (tree level {len(steps)})"))
        mask *= 2
    return n, steps
