"""Allreduce without a ring: through one root, a tree, a parameter server, halving-doubling."""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE
from . import broadcast, reduce
from .pattern import TERM_BYTES, Pattern, check_fits
from .registry import register


@register("allreduce.naive")
def naive(nranks: int, root: int = 0):
    """Reduce to the root, then broadcast from it: the root's links carry (n-1)K in and (n-1)K out."""
    pattern = Pattern(nranks, 1)
    broadcast.add_direct(pattern, nranks, root, reduce.add_direct(pattern, nranks, root))
    return 1, pattern.steps()


@register("allreduce.tree")
def tree(nranks: int, root: int = 0):
    """Binomial-tree reduce to the root, then binomial-tree broadcast: 2 ceil(log2 n) steps of the whole buffer."""
    pattern = Pattern(nranks, 1)
    broadcast.add_tree(pattern, nranks, root, reduce.add_tree(pattern, nranks, root))
    return 1, pattern.steps()


@register("allreduce.ps")
def parameter_server(nranks: int, servers: int = 1):
    """Parameter server with M shards: rank s (s < M) serves chunk s. Every rank pushes chunk s to
    server s, which adds them up, then every rank pulls the sum back. With M=1 (the classic single
    server) its links carry (n-1)K each way; M shards divide that load by M."""
    check_fits(2 * servers * nranks * TERM_BYTES, f"allreduce.ps with {servers} servers on {nranks} ranks "
               f"({2 * servers * (nranks - 1)} messages)", "Use fewer servers.")
    server, rank = np.divmod(np.arange(servers * nranks), nranks)
    server, rank = server[server != rank], rank[server != rank]
    pattern = Pattern(nranks, servers)
    pattern.label(0, "push gradients")
    pattern.add(rank, server, 0, 1, server, REDUCE, order=server * nranks + rank)
    pattern.label(1, "pull parameters")
    pattern.add(server, rank, 1, 2, server, COPY, order=server * nranks + rank)
    return servers, pattern.steps()


@register("allreduce.rhd")
def halving_doubling(nranks: int):
    """Recursive halving-doubling (Rabenseifner): with p = 2^k ranks and p chunks, a
    reduce-scatter in log2 p steps, each swapping half of what a rank still holds with a partner
    p/2, p/4, ... 1 away, then an allgather doubling back. When n is not a power of two, the first
    2(n-p) ranks pair up first: even ranks fold their buffer into the odd neighbour, sit out, and
    get the result back at the end (MPICH's approach)."""
    p = 1 << (nranks.bit_length() - 1)  # the largest power of two <= n
    extra = nranks - p
    v = np.arange(p)
    rank = np.where(v < extra, 2 * v + 1, v + extra)  # who plays position v of p
    pattern, step = Pattern(nranks, p), 0
    if extra:  # ranks 2v and 2v+1 pair up: 2v adds its buffer into 2v+1 and sits out
        pattern.label(step, "fold in extra ranks")
        pattern.add(2 * v[:extra], 2 * v[:extra] + 1, step, step + 1, 0, REDUCE, width=p, order=v[:extra])
        step += 1
    mask = p // 2
    pattern.label(step, "reduce-scatter (halving)")
    while mask >= 1:  # halving: of the 2*mask chunks v still works on, send the partner's half, keep yours
        block = v & ~(2 * mask - 1)  # the first chunk v and its partner share
        theirs = block + np.where(v & mask, 0, mask)
        pattern.add(rank, rank[v ^ mask], step, step + 1, theirs, REDUCE, width=mask, order=v)
        mask, step = mask // 2, step + 1
    mask = 1
    pattern.label(step, "allgather (doubling)")
    while mask < p:  # doubling: send the mask complete chunks you hold, receive as many back
        pattern.add(rank, rank[v ^ mask], step, step + 1, v & ~(mask - 1), COPY, width=mask, order=v)
        mask, step = mask * 2, step + 1
    if extra:
        pattern.label(step, "unfold to extra ranks")
        pattern.add(2 * v[:extra] + 1, 2 * v[:extra], step, step + 1, 0, COPY, width=p, order=v[:extra])
    return p, pattern.steps()
