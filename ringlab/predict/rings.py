"""Topology-aware rings: which order of the ranks makes the ring's slowest link fastest.

A ring allreduce step has every rank send to the next one at once, so a step lasts as long as the
busiest link: the one whose bandwidth, shared among the ring edges routed over it, is lowest.
NCCL searches for rings with that in mind; :func:`best_ring` does the same on a topology (a
preset, a discovered one, or one built from a measured bandwidth matrix).
"""
from __future__ import annotations

import itertools

import numpy as np

from ..topology import Topology

EXHAUSTIVE_UP_TO = 9  # ranks; beyond this, a local search


def ring_time_per_byte(order, topology: Topology) -> float:
    """Seconds per byte of one ring step in this order: the busiest channel's load over its rate."""
    return _ring_cost(order, topology)[0]


def _ring_cost(order, topology: Topology) -> tuple[float, int]:
    """(seconds per byte of the busiest channel, hops in all): faster first, then fewer hops."""
    order = list(order)
    src = np.array(order)
    dst = np.array(order[1:] + order[:1])
    pairs, channels = topology.routes(src, dst)
    load = topology.channel_load(np.bincount(channels, minlength=len(topology.channel_bandwidth)).astype(float))
    return float(np.round((load / topology.channel_rate).max(), 22)), len(channels)


def best_ring(topology: Topology, nranks: int | None = None) -> tuple[list[int], float]:
    """The ring order (starting at rank 0) with the fastest busiest link, and its seconds per byte.

    Among equally fast rings the one with fewest hops wins (direct links: less latency).
    Exhaustive up to 9 ranks (rings that are rotations or reversals of each other are tried once);
    above that, the plain order improved by 2-opt moves until none helps.
    """
    n = topology.nranks if nranks is None else nranks
    if n <= 2:
        order = list(range(n))
        return order, (ring_time_per_byte(order, topology) if n == 2 else 0.0)
    if n <= EXHAUSTIVE_UP_TO:
        best = None
        for rest in itertools.permutations(range(1, n)):
            if rest[0] > rest[-1]:
                continue  # the same ring backwards
            order = [0, *rest]
            cost = _ring_cost(order, topology)
            if best is None or cost < best[1]:
                best = (order, cost)
        return best[0], best[1][0]
    order = list(range(n))
    cost = _ring_cost(order, topology)
    improved = True
    while improved:
        improved = False
        for i in range(1, n - 1):
            for j in range(i + 1, n):
                candidate = order[:i] + order[i:j + 1][::-1] + order[j + 1:]
                c = _ring_cost(candidate, topology)
                if c < cost:
                    order, cost, improved = candidate, c, True
    return order, cost[0]


def mesh_ring_rates(topology: Topology, nranks: int, rings: tuple = ()) -> tuple[float, float] | None:
    """(rated, peak) bus bytes/s of the rings NCCL or RCCL spread a call over on the first ``nranks`` GPUs when
    they are joined pairwise by direct links (an MI300X node's xGMI, a GH200 node's NVLink), or None where no
    ring of direct links visits them all.

    A ring uses one link out of each GPU; the library runs many rings at once, one a channel, and splits the data
    evenly among them, so the busiest link, shared by the rings that cross it, sets the pace of all: bus =
    rings x min over links of (rate / rings crossing it). ``rings`` (orders of ranks) are the library's own where
    its source fixes them for a whole node (RCCL's rome models); otherwise every ring over direct links is taken
    once, which on a full mesh loads every link alike and gives (n - 1) x a link's rate (RCCL's tuner sums a
    GPU's xGMI links to the same figure)."""
    ranks = set(topology.ranks[:nranks])
    index = {name: i for i, name in enumerate(topology.ranks[:nranks])}
    direct = {}
    for link in topology.links:
        if link.a in ranks and link.b in ranks:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                direct[index[a], index[b]] = (link.rate, link.bandwidth)
    if nranks < 2 or not direct:
        return None
    orders = [list(r) for r in rings if len(r) == nranks] or [
        [0, *rest] for rest in itertools.permutations(range(1, nranks))]
    load: dict[tuple[int, int], int] = {}
    used = 0
    for order in orders:
        hops = list(zip(order, order[1:] + order[:1]))
        if any(hop not in direct for hop in hops):
            continue
        used += 1
        for hop in hops:
            load[hop] = load.get(hop, 0) + 1
    if not used:
        return None
    return tuple(used * min(direct[hop][k] / count for hop, count in load.items()) for k in (0, 1))


def ring_report(topology: Topology, nbytes: int = 1 << 28) -> dict:
    """The plain order 0..n-1 against the best ring: predicted ring-allreduce times and the loss."""
    from ..algorithms import build
    from .costmodel import predict

    n = topology.nranks
    order, _ = best_ring(topology)
    ring = build("allreduce.ring", n)
    plain = predict(ring, nbytes, topology).seconds
    best = predict(ring, nbytes, topology, rank_map=order).seconds
    return {"topology": topology.name, "plain_order": list(range(n)), "best_order": order,
            "plain_seconds": plain, "best_seconds": best, "slowdown_of_plain": plain / best}


def best_gpus(bandwidth, count: int) -> tuple[list[int], float]:
    """The ``count`` GPUs whose slowest pair is fastest in a measured ``bandwidth`` matrix (bytes/s,
    row = sender; the diagonal is ignored), and that slowest pair's bytes/s: the GPUs to give a job of
    ``count`` ranks, since a ring or a tree among them runs at the pace of its slowest link. Every
    subset is tried (8 GPUs: at most 70)."""
    matrix = np.asarray(bandwidth, dtype=float)
    n = len(matrix)
    if matrix.shape != (n, n):
        raise ValueError(f"the bandwidth matrix must be square, got shape {matrix.shape}")
    if not 2 <= count <= n:
        raise ValueError(f"count must be from 2 to the {n} GPUs of the matrix, got {count}")
    best = ([], -1.0)
    for gpus in itertools.combinations(range(n), count):
        slowest = min(min(matrix[a, b], matrix[b, a]) for a, b in itertools.combinations(gpus, 2))
        if slowest > best[1]:
            best = (list(gpus), float(slowest))
    return best


def ring_orders(topology: Topology, rings: int = 2, nranks: int | None = None) -> tuple[tuple[int, ...], ...]:
    """Rank orders for ``allreduce.rings`` on ``topology``: :func:`best_ring` and the same ring backwards,
    alternately (NCCL also runs more channels than distinct rings by repeating them), so that
    every link of the best ring carries data both ways."""
    order, _ = best_ring(topology, nranks)
    backwards = order[:1] + order[1:][::-1]  # still starting at rank 0
    return tuple(tuple(order if p % 2 == 0 else backwards) for p in range(rings))
