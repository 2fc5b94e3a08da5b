"""Alltoall: every rank sends a different block to every rank (the transpose of a blocked matrix).

Chunks never move to another position, so the buffer holds n x n chunks: chunk s*n+d is the block
rank s sends to rank d. Rank s starts with row s (chunks s*n..s*n+n-1) and rank d must end with
column d (chunk s*n+d from every s). Traffic below is in blocks; with K the schedule's buffer (n^2
blocks), a block is K/n^2 bytes, and one rank's own n blocks (what MPI and nccl-tests call its
buffer) are K/n.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, Step
from .registry import register


@register("alltoall.direct")
def direct(nranks: int):
    """Every rank sends each of its n-1 blocks straight to its destination, all in one step: each
    rank sends and receives n-1 blocks, (n-1)/n of its own buffer, over n-1 messages at once."""
    n = nranks
    src, dst = np.divmod(np.arange(n * n), n)
    moved = src != dst
    return n * n, [Step.columns(src[moved], dst[moved], np.flatnonzero(moved), COPY, "alltoall")]


@register("alltoall.pairwise")
def pairwise(nranks: int):
    """Pairwise exchange (MPICH's and NCCL's): at step i (1..n-1) rank s sends block s*n+((s+i) mod n)
    to rank (s+i) mod n and receives from rank (s-i) mod n. n-1 steps of one block each way: each rank
    sends and receives n-1 blocks, (n-1)/n of its own buffer, the least any alltoall can."""
    n = nranks
    s = np.arange(n)
    return n * n, [Step.columns(s, (s + i) % n, s * n + (s + i) % n, COPY, f"alltoall (pairwise {i})")
                   for i in range(1, n)]


@register("alltoall.ring")
def ring(nranks: int):
    """Store and forward round a ring: at step i (0..n-2) rank j passes to rank j+1 the blocks that
    left rank s = j-i (mod n) i hops ago and still have farther to go (destination d with
    (d-s) mod n > i). A block to the rank k places on travels k hops, so each rank sends and receives
    (n-1) + (n-2) + ... + 1 = n(n-1)/2 blocks, (n-1)/2 of its own buffer: n/2 times pairwise's
    traffic, in n-1 steps that each use only the links to the next rank."""
    n = nranks
    steps = []
    for i in range(n - 1):
        j, hops = np.divmod(np.arange(n * (n - 1 - i)), n - 1 - i)  # every rank, and the blocks still going
        source = (j - i) % n
        chunk = source * n + (source + i + 1 + hops) % n  # destinations more than i hops from the source
        steps.append(Step.columns(j, (j + 1) % n, chunk, COPY, f"alltoall (ring {i})"))
    return n * n, steps
