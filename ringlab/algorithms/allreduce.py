"""Allreduce without a ring: through one root, through a parameter server, a tree, halving-doubling."""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE, Step
from . import broadcast, reduce, register, schedule


@register("allreduce.naive")
def naive(nranks: int, root: int = 0):
    """Reduce to the root, then broadcast from it: the root's links carry (n-1)K in and (n-1)K out."""
    steps = reduce.direct(nranks, root).steps + broadcast.direct(nranks, root).steps
    return schedule("allreduce", "allreduce.naive", nranks, 1, steps, root=root)


@register("allreduce.tree")
def tree(nranks: int, root: int = 0):
    """Binomial-tree reduce to the root, then binomial-tree broadcast: 2 ceil(log2 n) steps of the whole buffer."""
    steps = reduce.tree(nranks, root).steps + broadcast.tree(nranks, root).steps
    return schedule("allreduce", "allreduce.tree", nranks, 1, steps, root=root)


@register("allreduce.ps")
def parameter_server(nranks: int, servers: int = 1):
    """Parameter server with M shards: rank s (s < M) serves chunk s. Every rank pushes chunk s to
    server s, which adds them up, then every rank pulls the sum back. With M=1 (the classic single
    server) its links carry (n-1)K each way; M shards divide that load by M."""
    push = [(r, s, s, REDUCE) for s in range(servers) for r in range(nranks) if r != s]
    pull = [(s, r, s, COPY) for s in range(servers) for r in range(nranks) if r != s]
    steps = [Step.of(push, "push gradients"), Step.of(pull, "pull parameters")]
    return schedule("allreduce", "allreduce.ps", nranks, servers, steps, servers=servers)


def _chunk_ranges(src, dst, first, count, op, label) -> Step:
    """One step in which src[i] sends chunks first[i] .. first[i]+count-1 to dst[i]."""
    offsets = np.arange(count)
    return Step.columns(np.repeat(src, count), np.repeat(dst, count),
                        (np.asarray(first)[:, None] + offsets).reshape(-1), op, label)


@register("allreduce.rhd")
def halving_doubling(nranks: int):
    """Recursive halving-doubling (Rabenseifner): with p = 2^k ranks and p chunks, a
    reduce-scatter in log2 p steps, each swapping half of what a rank still holds with a partner
    p/2, p/4, ... 1 away, then an allgather doubling back. When n is not a power of two, the first
    2(n-p) ranks pair up first: even ranks fold their buffer into the odd neighbour, sit out, and
    get the result back at the end (MPICH's approach)."""
    p = 1 << (nranks.bit_length() - 1)  # largest power of two <= n
    extra = nranks - p
    # The p active ranks: the odd ones of the first 2*extra, then all ranks from 2*extra on.
    active = np.array([2 * v + 1 if v < extra else v + extra for v in range(p)])
    folded = np.arange(0, 2 * extra, 2)
    v = np.arange(p)
    steps = []
    if extra:
        steps.append(_chunk_ranges(folded, folded + 1, np.zeros(extra, int), p, REDUCE, "fold in extra ranks"))
    mask = p // 2
    while mask >= 1:  # halving: keep the half your bit says, send the other half to the partner
        base = v & ~(2 * mask - 1)
        first = base + np.where(v & mask, 0, mask)
        steps.append(_chunk_ranges(active[v], active[v ^ mask], first, mask, REDUCE, "reduce-scatter (halving)"))
        mask //= 2
    mask = 1
    while mask < p:  # doubling: send everything you hold, receive as much back
        base = v & ~(mask - 1)
        steps.append(_chunk_ranges(active[v], active[v ^ mask], base, mask, COPY, "allgather (doubling)"))
        mask *= 2
    if extra:
        steps.append(_chunk_ranges(folded + 1, folded, np.zeros(extra, int), p, COPY, "unfold to extra ranks"))
    return schedule("allreduce", "allreduce.rhd", nranks, p, steps)
