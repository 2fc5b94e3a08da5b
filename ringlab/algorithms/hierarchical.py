"""Two-level allreduce: fast links inside a node, the slower network between nodes only for what must cross it.

Node g holds the consecutive ranks gL .. gL+L-1 (the last node fewer when L does not divide n).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE
from .pattern import Pattern
from .registry import register


@register("allreduce.hierarchical")
def hierarchical(nranks: int, local: int | None = None):
    """Reduce-scatter inside every node, ring allreduce of each shard across the nodes, allgather
    inside every node (Horovod's hierarchical allreduce: NCCL inside nodes, MPI between them).

    ``local=L`` ranks per node (default None: all n on one node, which is a ring reduce-scatter
    and allgather; to follow a real machine pass ``ringlab.mpi.devices.ranks_on_node()``). With
    G = ceil(n/L) nodes the buffer has L shards of G chunks (shard j: chunks jG..jG+G-1):

    1. inside each node a ring reduce-scatter leaves local rank j holding the node's sum of shard j;
       on a last node of m < L ranks, local rank j holds shards j, j+m, j+2m ...;
    2. for every shard a ring allreduce (G-1 + G-1 steps) among its holders, one per node, in node
       order, all shards at once;
    3. inside each node a ring allgather, the reverse of step 1.

    2(L-1) + 2(G-1) steps. Traffic, when L divides n and n divides K: every rank sends (and
    receives) 2(L-1)/L K inside its node and 2(G-1)/n K across the network, 2(n-1)/n K in all,
    the same as one ring; but a node's network traffic is 2(G-1)/G K spread over its L ranks,
    where a ring through the node sends 2(n-1)/n K through one. For any n, L and K all ranks
    together send 2(G-1)K across nodes and 2(n-G)K inside them.
    """
    L = nranks if local is None else local
    G = -(-nranks // L)  # nodes
    full, last = nranks // L, nranks - (G - 1) * L  # nodes of L ranks; the last node's ranks
    pattern = Pattern(nranks, L * G)
    first = [0, L - 1, L - 1 + G - 1, L - 1 + 2 * (G - 1)]  # where each phase starts
    for start, label in zip(first, ("reduce-scatter (inside nodes)", "reduce-scatter (across nodes)",
                                    "allgather (across nodes)", "allgather (inside nodes)")):
        pattern.label(start, label)
    for start, op, shift in ((first[0], REDUCE, -1), (first[3], COPY, 0)):  # a ring inside every node
        g, j = np.divmod(np.arange(full * L), L)  # full nodes: local rank j sends shard (j - i + shift) mod L
        if L > 1:
            pattern.rotating(g * L + j, g * L + (j + 1) % L, start, start + L - 1, j + shift, L, op, scale=G,
                             width=G, order=(g * L + j) * L)
        if last < L:  # the last node's m ranks: local rank j holds shards j, j+m, j+2m ...
            _short_node(pattern, (G - 1) * L, last, L, G, start, shift, op)
    shard, g = np.divmod(np.arange(L * G), G)
    holder = g * L + shard % np.where(g == G - 1, last, L)  # shard's holder on node g
    nxt = (g + 1) % G
    holder_next = nxt * L + shard % np.where(nxt == G - 1, last, L)
    for start, op, shift in ((first[1], REDUCE, 0), (first[2], COPY, 1)):  # allreduce.ring's rule across nodes
        if G > 1:
            pattern.rotating(holder, holder_next, start, start + G - 1, g + shift, G, op, base=shard * G,
                             order=shard * G + g)
    return L * G, pattern.steps()


def _short_node(pattern: Pattern, base: int, m: int, L: int, G: int, start: int, shift: int, op: str) -> None:
    """The ring inside a last node of m < L ranks, a step at a time: local rank j sends every shard of
    group (j - i + shift) mod m, the shards r, r+m, r+2m ... below L, G chunks each."""
    for i in range(m - 1):
        for j in range(m):
            shards = np.arange((j - i + shift) % m, L, m)
            pattern.add(base + j, base + (j + 1) % m, start + i, start + i + 1, shards * G, op, width=G,
                        order=(base + j) * L + np.arange(len(shards)))
