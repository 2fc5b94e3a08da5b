"""Several rings at once (NCCL's channels): each carries its own part of the buffer, in its own rank order.

One ring leaves every link but one direction idle; NCCL runs several rings ("channels"), so that
a rank's links in both directions, and more than one NVLink, carry data at the same time.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE, check_count
from .pattern import Pattern
from .registry import register


def default_orders(nranks: int, rings: int) -> tuple[tuple[int, ...], ...]:
    """Ring p visits 0..n-1 for even p and n-1..0 for odd p: two rings are the bidirectional ring."""
    forward = tuple(range(nranks))
    return tuple(forward if p % 2 == 0 else forward[::-1] for p in range(rings))


def frozen_orders(orders):
    """``orders`` with lists and arrays made tuples (and numpy integers ints), so it can be a cache key;
    anything else is returned as it came, for :func:`check_orders` to refuse."""
    if isinstance(orders, (str, bytes)) or not hasattr(orders, "__iter__"):
        return int(orders) if isinstance(orders, np.integer) else orders
    return tuple(frozen_orders(o) for o in orders)


def check_orders(orders, rings, nranks: int) -> tuple[tuple[int, ...], ...]:
    """``orders`` as a tuple of rank orders, or a ValueError: one permutation of 0..n-1 per ring."""
    if isinstance(orders, (str, bytes)) or not hasattr(orders, "__iter__"):
        raise ValueError(f"orders must be a sequence of rank orders, one per ring, got {orders!r}")
    orders = frozen_orders(orders)
    if rings is not None and len(orders) != check_count("rings", rings):
        raise ValueError(f"orders has {len(orders)} rank order(s), but rings={rings}: give one per ring")
    if not orders:
        raise ValueError("orders must give at least one rank order")
    everyone = list(range(nranks))
    for p, order in enumerate(orders):
        if (isinstance(order, (str, bytes)) or not hasattr(order, "__iter__")
                or any(isinstance(r, bool) or not isinstance(r, int) for r in order)
                or sorted(order) != everyone):
            raise ValueError(f"orders[{p}] must be a permutation of the ranks 0..{nranks - 1}, got {order!r}")
    return orders


@register("allreduce.rings")
def allreduce(nranks: int, rings: int = 2, orders=None):
    """k rings at once (NCCL's channels): part p of the buffer (chunks pn..pn+n-1, n chunks per
    ring) runs a ring allreduce (reduce-scatter, then allgather, as allreduce.ring) along
    ``orders[p]``, rank orders[p][i] sending to orders[p][i+1]. Step i of every ring is one step.

    ``orders`` defaults to 0..n-1 for even p and the reverse for odd p (k=2: the bidirectional
    ring); give k permutations of the ranks to follow a topology (``ringlab.predict.rings.ring_orders``).
    Each rank still sends and receives 2(n-1)/n K in all, 2(n-1)/(nk) K per ring, but over up to
    2 neighbours each way instead of 1.
    """
    orders = default_orders(nranks, rings) if orders is None else check_orders(orders, rings, nranks)
    ranks = np.array(orders, dtype=np.int64).reshape(len(orders), nranks)  # [ring, position]
    k, n = ranks.shape
    src, dst = ranks.reshape(-1), np.roll(ranks, -1, axis=1).reshape(-1)  # position i sends to i+1
    first = np.repeat(np.arange(k) * n, n)  # the first chunk of each ring's part
    position = np.tile(np.arange(n), k)
    pattern = Pattern(n, k * n)
    for start, (phase, op, shift) in zip((0, n - 1), (("reduce-scatter", REDUCE, 0), ("allgather", COPY, 1))):
        pattern.label(start, phase)
        if n > 1:  # allreduce.ring's chunk rule, by position in each ring
            pattern.rotating(src, dst, start, start + n - 1, position + shift, n, op, base=first,
                             order=np.arange(k * n))
    return k * n, pattern.steps(2 * (n - 1))
