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

from ..schedule import COPY, REDUCE, Step
from .registry import register


def btree(nranks: int) -> list[int]:
    """Every rank's parent in NCCL's binary tree over ``nranks`` ranks (``ncclGetBtree``); -1 for the root, rank 0."""
    parents = [-1]
    for rank in range(1, nranks):
        bit = rank & -rank  # the lowest set bit
        up = (rank ^ bit) | (bit << 1)
        parents.append(up if up < nranks else rank ^ bit)
    return parents


def dtree(nranks: int) -> tuple[list[int], list[int]]:
    """The parents in NCCL's two complementary trees (``ncclGetDtree``): the binary tree, and it mirrored
    (n even) or shifted by one rank (n odd)."""
    first = btree(nranks)
    if nranks % 2:  # rank r plays r-1 of the first tree
        second = [-1 if first[(r - 1) % nranks] < 0 else (first[(r - 1) % nranks] + 1) % nranks
                  for r in range(nranks)]
    else:  # rank r plays n-1-r
        second = [-1 if first[nranks - 1 - r] < 0 else nranks - 1 - first[nranks - 1 - r] for r in range(nranks)]
    return first, second


def _levels(parents: list[int]) -> tuple[list[int], list[int]]:
    """(height, depth) of every rank in a tree: height 0 at the leaves, depth 0 at the root."""
    n = len(parents)
    depth = [0] * n
    for rank in range(n):  # a chain of parents is at most n long
        up = parents[rank]
        while up >= 0:
            depth[rank] += 1
            up = parents[up]
    height = [0] * n
    for rank in sorted(range(n), key=lambda r: -depth[r]):  # deepest first: children before parents
        if parents[rank] >= 0:
            height[parents[rank]] = max(height[parents[rank]], height[rank] + 1)
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
    steps: dict[int, list] = {}
    for tree, parents in enumerate(dtree(nranks)):
        height, depth = _levels(parents)
        top = max(height)
        for rank, parent in enumerate(parents):
            if parent < 0:
                continue
            for s in range(segments):
                chunk = tree * segments + s
                steps.setdefault(s + height[rank], []).append((rank, parent, chunk, REDUCE))
                steps.setdefault(s + top + depth[parent], []).append((parent, rank, chunk, COPY))
    return 2 * segments, [Step.of(steps[t], _label(steps[t])) for t in sorted(steps)]


def _label(transfers: list) -> str:
    ops = {t[3] for t in transfers}
    if ops == {REDUCE}:
        return "reduce (up the trees)"
    return "broadcast (down the trees)" if ops == {COPY} else "reduce up + broadcast down"
