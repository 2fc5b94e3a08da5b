"""Scatter: the root's buffer is cut into n blocks and block r (chunk r) ends up on rank r.

The mirror image of gather: scatter.direct and scatter.tree are gather's steps run backwards; the
ring runs the same way round as gather's. Only the root starts with data; only chunk r of rank r
is defined at the end. Traffic below is for a buffer of K bytes (n blocks of K/n).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY
from .gather import add_blocks
from .pattern import Pattern
from .registry import register


@register("scatter.direct")
def direct(nranks: int, root: int = 0):
    """The root sends every other rank its block in one step: the root sends (n-1)K/n over its one
    link, each other rank receives K/n."""
    others = np.delete(np.arange(nranks), root)
    pattern = Pattern(nranks, nranks)
    pattern.label(0, "scatter")
    pattern.add(root, others, 0, 1, others, COPY, order=others)
    return nranks, pattern.steps()


@register("scatter.ring")
def ring(nranks: int, root: int = 0):
    """A ring opened at the root: blocks flow root -> root+1 -> ... -> root+n-1, the farthest first.
    At step i rank j sends chunk (j-1-i) mod n to rank j+1 (the chunk indices of reduce_scatter.ring),
    if it already holds it. n-1 steps; the root sends (n-1)K/n, all to root+1, and the rank at
    distance d receives n-d blocks: n(n-1)K/2n in all."""
    n = nranks
    distance = np.arange(n - 1)  # the rank at distance d from the root passes a block on at steps d .. n-2
    senders = (root + distance) % n
    pattern = Pattern(n, n)
    pattern.label(0, "scatter (ring)")
    pattern.rotating(senders, (senders + 1) % n, distance, n - 1, senders - 1 - distance, n, COPY, order=distance)
    return n, pattern.steps()


@register("scatter.tree")
def tree(nranks: int, root: int = 0):
    """Binomial tree (MPICH's scatter): the root sends the far half of the blocks 2^k ranks away, then
    every holder halves again; ceil(log2 n) steps. The root still sends (n-1)K/n; the rank at
    distance d receives min(lowbit(d), n-d) blocks."""
    n, mask, step = nranks, 1, 0
    pattern = Pattern(n, n)
    pattern.label(0, "scatter (tree level {i})", 0)
    while mask * 2 < n:
        mask *= 2
    while mask >= 1 and n > 1:
        distance = np.arange(mask, n, 2 * mask)  # receives its subtree's blocks from distance - mask
        add_blocks(pattern, (distance - mask + root) % n, (distance + root) % n, step, (distance + root) % n,
                   np.minimum(mask, n - distance), n, distance)
        mask, step = mask // 2, step + 1
    return n, pattern.steps()
