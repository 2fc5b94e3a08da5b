"""Scatter: the root's buffer is cut into n blocks and block r (chunk r) ends up on rank r.

The mirror image of gather: scatter.direct and scatter.tree are gather's steps run backwards; the
ring runs the same way round as gather's. Only the root starts with data; only chunk r of rank r
is defined at the end. Traffic below is for a buffer of K bytes (n blocks of K/n).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, Step
from .registry import register


@register("scatter.direct")
def direct(nranks: int, root: int = 0):
    """The root sends every other rank its block in one step: the root sends (n-1)K/n over its one
    link, each other rank receives K/n."""
    others = np.array([r for r in range(nranks) if r != root], dtype=np.int64)
    return nranks, [Step.columns(root, others, others, COPY, "scatter")]


@register("scatter.ring")
def ring(nranks: int, root: int = 0):
    """A ring opened at the root: blocks flow root -> root+1 -> ... -> root+n-1, the farthest first.
    At step i rank j sends chunk (j-1-i) mod n to rank j+1 (the chunk indices of reduce_scatter.ring),
    if it already holds it. n-1 steps; the root sends (n-1)K/n, all to root+1, and the rank at
    distance d receives n-d blocks: n(n-1)K/2n in all."""
    n = nranks
    steps = []
    for i in range(n - 1):
        distance = np.arange(0, i + 1)     # ranks root .. root+i hold a block to pass on at step i
        senders = (root + distance) % n
        steps.append(Step.columns(senders, (senders + 1) % n, (senders - 1 - i) % n, COPY, "scatter (ring)"))
    return n, steps


@register("scatter.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree (MPICH's scatter): the root sends the far half of the blocks 2^k ranks away, then
    every holder halves again; ceil(log2 n) steps. The root still sends (n-1)K/n; the rank at
    distance d receives min(lowbit(d), n-d) blocks."""
    n, steps, mask = nranks, [], 1
    while mask * 2 < n:
        mask *= 2
    while mask >= 1 and n > 1:
        src, dst, chunk = [], [], []
        for distance in range(mask, n, 2 * mask):  # receives its subtree's blocks from distance - mask
            for held in range(distance, min(distance + mask, n)):
                src.append((distance - mask + root) % n)
                dst.append((distance + root) % n)
                chunk.append((held + root) % n)
        steps.append(Step.columns(src, dst, chunk, COPY, f"scatter (tree level {len(steps)})"))
        mask //= 2
    return n, steps
