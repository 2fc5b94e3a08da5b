"""NCCL's double binary tree: two binary trees in which a rank that forwards in one is a leaf in the other.

The trees are built as NCCL builds them (``ncclGetBtree`` and ``ncclGetDtree`` in NCCL's
``src/graph/trees.cc``), over ranks here where NCCL's are nodes:

- tree 0, ``ncclGetBtree``: rank r's lowest set bit b; its parent is ``(r ^ b) | (b << 1)``, or
  ``r ^ b`` when that is past the last rank; its children are r - b/2 and r + b/2 (the latter
  moved closer, b/4, b/8 ..., while it is past the last rank). Odd ranks are leaves; rank 0 is
  the root, with one child, the highest power of two below n.
- tree 1, ``ncclGetDtree``: tree 0 mirrored (rank r plays n-1-r) when n is even, shifted by one
  (rank r plays r-1 mod n) when n is odd, so that the even ranks become the leaves.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE
from .pattern import Pattern
from .registry import register


def btree(nranks: int) -> list[int]:
    """Every rank's parent in NCCL's binary tree over ``nranks`` ranks (``ncclGetBtree``); -1 for the root, rank 0."""
    return _btree(nranks).tolist()


def dtree(nranks: int) -> tuple[list[int], list[int]]:
    """The parents in NCCL's two complementary trees (``ncclGetDtree``): the binary tree, and it mirrored
    (n even) or shifted by one rank (n odd)."""
    return tuple(parents.tolist() for parents in _dtree(nranks))


def _btree(nranks: int) -> np.ndarray:
    rank = np.arange(nranks)
    bit = rank & -rank  # the lowest set bit
    up = (rank ^ bit) | (bit << 1)
    parents = np.where(up < nranks, up, rank ^ bit)
    parents[0] = -1
    return parents


def _dtree(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    first, rank = _btree(nranks), np.arange(nranks)
    if nranks % 2:  # rank r plays r-1 of the first tree
        played = first[(rank - 1) % nranks]
        second = np.where(played < 0, -1, (played + 1) % nranks)
    else:  # rank r plays n-1-r
        played = first[nranks - 1 - rank]
        second = np.where(played < 0, -1, nranks - 1 - played)
    return first, second


def _levels(parents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(height, depth) of every rank in a tree: height 0 at the leaves, depth 0 at the root."""
    n = len(parents)
    depth, up = np.zeros(n, dtype=np.int64), parents.copy()
    while (up >= 0).any():  # a binary tree is log2(n) deep: one pass a level
        climbing = up >= 0
        depth += climbing
        up[climbing] = parents[up[climbing]]
    height = np.zeros(n, dtype=np.int64)
    for level in range(int(depth.max(initial=0)), 0, -1):  # deepest first: children before parents
        at = np.flatnonzero(depth == level)
        np.maximum.at(height, parents[at], height[at] + 1)
    return height, depth


@register("allreduce.dbtree")
def double_binary_tree(nranks: int, segments: int = 8):
    """Double binary tree (NCCL's tree allreduce): tree t of :func:`dtree` carries half t of the
    buffer, cut into S segments (2S chunks in all; chunks tS..tS+S-1 are tree t's), and both
    trees run at once.

    Every segment is summed up its tree and then copied back down, one level per step, the
    segments following each other: a rank of height h (leaves 0) sends segment s up at step
    s+h, once its children have; the root, of height H, sends it down at step s+H, and a rank
    of depth d passes it on at step s+H+d. So S+2H-1 steps, H = floor(log2 n) or one more.

    Traffic, whatever S: a rank sends and receives its degree in each tree (parent plus
    children) times that tree's half, deg_0 K/2 + deg_1 K/2 (K/2: the bytes of that half's
    chunks). A rank that forwards in one tree (3 K/2) is a leaf in the other (K/2), so ranks
    1..n-2 move 2K each way; the ends less: n even, K at ranks 0 and n-1; n odd, 3K/2 at ranks 0
    and n-1 and K at rank 1. All ranks together send 2(n-1)K, as a ring does. S does not change
    the bytes; it cuts the time, ~ (S+2H-1)(alpha + K/(2S B)), which tends to K/(2B) as S grows.
    """
    pattern = Pattern(nranks, 2 * segments)
    ups, downs = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]  # when each tree sends up, down
    for tree, parents in enumerate(_dtree(nranks)):
        height, depth = _levels(parents)
        top = int(height.max(initial=0))
        rank = np.flatnonzero(parents >= 0)
        parent = parents[rank]
        order = (tree * nranks + rank) * 2  # as the step-by-step builder listed them: down, then up
        up = height[rank]  # segment s goes up at step s + height, down at step s + top + depth of the parent
        down = top + depth[parent]
        pattern.add(parent, rank, down, down + segments, tree * segments, COPY, stride=1, order=order)
        pattern.add(rank, parent, up, up + segments, tree * segments, REDUCE, stride=1, order=order + 1)
        ups.append(up)
        downs.append(down)
    _label(pattern, np.concatenate(ups), np.concatenate(downs), segments)
    return 2 * segments, pattern.steps()


def _label(pattern: Pattern, ups: np.ndarray, downs: np.ndarray, segments: int) -> None:
    """Each step's label from what it does: summing up the trees, copying down, or both."""
    last = int(max(ups.max(initial=0), downs.max(initial=0))) + segments + 1
    going_up, going_down = (np.cumsum(np.bincount(start, minlength=last) - np.bincount(start + segments, minlength=last))
                            > 0 for start in (ups, downs))
    said = None
    for step in range(last):
        text = {(True, False): "reduce (up the trees)", (False, True): "broadcast (down the trees)",
                (True, True): "reduce up + broadcast down"}.get((bool(going_up[step]), bool(going_down[step])))
        if text is not None and text != said:
            pattern.label(step, text)
            said = text
