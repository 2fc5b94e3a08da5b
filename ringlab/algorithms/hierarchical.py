"""Two-level allreduce: fast links inside a node, the slower network between nodes only for what must cross it.

Node g holds the consecutive ranks gL .. gL+L-1 (the last node fewer when L does not divide n).
"""
from __future__ import annotations

from ..schedule import COPY, REDUCE, Step
from .registry import register


@register("allreduce.hierarchical")
def hierarchical(nranks: int, local: int | None = None):
    """Reduce-scatter inside every node, ring allreduce of each shard across the nodes, allgather
    inside every node (Horovod's hierarchical allreduce: NCCL inside nodes, MPI between them).

    ``local=L`` ranks per node (default None: all n on one node, which is a ring reduce-scatter
    and allgather; to follow a real machine pass ``ringlab.mpi.launch.ranks_on_node()``). With
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
    sizes = [min(L, nranks - g * L) for g in range(G)]

    def group(j: int, m: int) -> list[int]:  # the chunks local rank j of an m-rank node is left holding
        return [shard * G + q for shard in range(j, L, m) for q in range(G)]

    def holder(g: int, shard: int) -> int:
        return g * L + shard % sizes[g]

    def inside(i: int, shift: int, op: str, label: str) -> Step:  # ring step i over every node's groups
        return Step.of([(g * L + j, g * L + (j + 1) % m, c, op) for g, m in enumerate(sizes) if i < m - 1
                        for j in range(m) for c in group((j - i + shift) % m, m)], label)

    steps = [inside(i, -1, REDUCE, "reduce-scatter (inside nodes)") for i in range(L - 1)]
    for phase, op, shift in (("reduce-scatter", REDUCE, 0), ("allgather", COPY, 1)):
        for i in range(G - 1):  # every shard's ring across the nodes, with allreduce.ring's chunk rule
            steps.append(Step.of([(holder(g, shard), holder((g + 1) % G, shard), shard * G + (g - i + shift) % G, op)
                                  for shard in range(L) for g in range(G)], f"{phase} (across nodes)"))
    steps += [inside(i, 0, COPY, "allgather (inside nodes)") for i in range(L - 1)]
    return L * G, steps
