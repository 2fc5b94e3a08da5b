"""Gather: rank r's block (chunk r) ends up on the root, every block in its place.

The buffer is cut into n chunks, chunk r being rank r's block; only the root's end state is defined.
Traffic below is for a buffer of K bytes (n blocks of K/n).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY
from .pattern import Pattern
from .registry import register


def add_blocks(pattern: Pattern, src, dst, step: int, first, count, nranks: int, order) -> None:
    """At ``step`` each ``src`` sends ``dst`` the ``count`` blocks from ``first`` on, round the ranks: a run of
    chunks, or two where it passes the last rank's."""
    first, count, order = (np.asarray(v, dtype=np.int64) for v in (first, count, order))
    head = np.minimum(count, nranks - first)
    pattern.add(src, dst, step, step + 1, first, COPY, width=head, order=2 * order)
    wraps = count > head
    if wraps.any():
        pattern.add(np.broadcast_to(src, wraps.shape)[wraps], np.broadcast_to(dst, wraps.shape)[wraps], step,
                    step + 1, 0, COPY, width=(count - head)[wraps], order=2 * order[wraps] + 1)


@register("gather.direct")
def direct(nranks: int, root: int = 0):
    """Every other rank sends its block straight to the root in one step: each sends K/n, the root
    receives (n-1)K/n, all at once over its one link."""
    others = np.delete(np.arange(nranks), root)
    pattern = Pattern(nranks, nranks)
    pattern.label(0, "gather")
    pattern.add(others, root, 0, 1, others, COPY, order=others)
    return nranks, pattern.steps()


@register("gather.ring")
def ring(nranks: int, root: int = 0):
    """A ring opened at the root: blocks flow root+1 -> root+2 -> ... -> root, each rank passing on
    what it received the step before. At step i rank j sends chunk (j-i) mod n to rank j+1, as in
    allgather.ring, but a block stops at the root. n-1 steps; the rank at distance d from the root
    (going round from root+1) sends d blocks, so the root receives (n-1)K/n, only from root-1, and
    all ranks together send n(n-1)/2 blocks: n(n-1)K/2n."""
    n = nranks
    position = np.arange(n - 1)  # places along the chain root+1 .. root+n-1: each passes a block at steps 0..place
    senders = (root + 1 + position) % n
    pattern = Pattern(n, n)
    pattern.label(0, "gather (ring)")
    pattern.rotating(senders, (senders + 1) % n, 0, position + 1, senders, n, COPY, order=position)
    return n, pattern.steps()


@register("gather.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree (MPICH's gather): at level k each rank whose distance from the root has lowest set
    bit 2^k sends the blocks of its subtree (the distances d..d+2^k-1 it has collected) 2^k ranks
    closer; ceil(log2 n) steps. The root still receives (n-1)K/n; the rank at distance d sends
    min(lowbit(d), n-d) blocks."""
    n, mask, step = nranks, 1, 0
    pattern = Pattern(n, n)
    pattern.label(0, "gather (tree level {i})", 0)
    while mask < n:
        distance = np.arange(mask, n, 2 * mask)  # each sends its own block and its subtree's
        add_blocks(pattern, (distance + root) % n, (distance - mask + root) % n, step, (distance + root) % n,
                   np.minimum(mask, n - distance), n, distance)
        mask, step = mask * 2, step + 1
    return n, pattern.steps()
