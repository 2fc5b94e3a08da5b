"""Allreduce without a ring: through one root, a tree, a parameter server, halving-doubling."""
from __future__ import annotations

from ..schedule import COPY, REDUCE, Step
from . import broadcast, reduce
from .registry import register


@register("allreduce.naive")
def naive(nranks: int, root: int = 0):
    """Reduce to the root, then broadcast from it: the root's links carry (n-1)K in and (n-1)K out."""
    return 1, reduce.direct(nranks, root).steps + broadcast.direct(nranks, root).steps


@register("allreduce.tree")
def tree(nranks: int, root: int = 0):
    """Binomial-tree reduce to the root, then binomial-tree broadcast: 2 ceil(log2 n) steps of the whole buffer."""
    return 1, reduce.tree(nranks, root).steps + broadcast.tree(nranks, root).steps


@register("allreduce.ps")
def parameter_server(nranks: int, servers: int = 1):
    """Parameter server with M shards: rank s (s < M) serves chunk s. Every rank pushes chunk s to
    server s, which adds them up, then every rank pulls the sum back. With M=1 (the classic single
    server) its links carry (n-1)K each way; M shards divide that load by M."""
    push = [(r, s, s, REDUCE) for s in range(servers) for r in range(nranks) if r != s]
    pull = [(s, r, s, COPY) for s in range(servers) for r in range(nranks) if r != s]
    return servers, [Step.of(push, "push gradients"), Step.of(pull, "pull parameters")]


@register("allreduce.rhd")
def halving_doubling(nranks: int):
    """Recursive halving-doubling (Rabenseifner): with p = 2^k ranks and p chunks, a
    reduce-scatter in log2 p steps, each swapping half of what a rank still holds with a partner
    p/2, p/4, ... 1 away, then an allgather doubling back. When n is not a power of two, the first
    2(n-p) ranks pair up first: even ranks fold their buffer into the odd neighbour, sit out, and
    get the result back at the end (MPICH's approach)."""
    p = 1 << (nranks.bit_length() - 1)  # the largest power of two <= n
    extra = nranks - p
    rank = [2 * v + 1 if v < extra else v + extra for v in range(p)]  # who plays position v of p
    everything = range(p)
    steps = []
    if extra:  # ranks 2v and 2v+1 pair up: 2v adds its buffer into 2v+1 and sits out
        steps.append(Step.of([(2 * v, 2 * v + 1, c, REDUCE) for v in range(extra) for c in everything],
                             "fold in extra ranks"))
    mask = p // 2
    while mask >= 1:  # halving: of the 2*mask chunks v still works on, send the partner's half, keep yours
        transfers = []
        for v in range(p):
            partner = v ^ mask
            block = v & ~(2 * mask - 1)  # the first chunk v and its partner share
            theirs = block + (0 if v & mask else mask)
            transfers += [(rank[v], rank[partner], c, REDUCE) for c in range(theirs, theirs + mask)]
        steps.append(Step.of(transfers, "reduce-scatter (halving)"))
        mask //= 2
    mask = 1
    while mask < p:  # doubling: send the mask complete chunks you hold, receive as many back
        transfers = []
        for v in range(p):
            partner = v ^ mask
            mine = v & ~(mask - 1)
            transfers += [(rank[v], rank[partner], c, COPY) for c in range(mine, mine + mask)]
        steps.append(Step.of(transfers, "allgather (doubling)"))
        mask *= 2
    if extra:
        steps.append(Step.of([(2 * v + 1, 2 * v, c, COPY) for v in range(extra) for c in everything],
                             "unfold to extra ranks"))
    return p, steps
