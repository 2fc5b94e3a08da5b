"""Alltoall: every rank sends a different block to every rank (the transpose of a blocked matrix).

Chunks never move to another position, so the buffer holds n x n chunks: chunk s*n+d is the block
rank s sends to rank d. Rank s starts with row s (chunks s*n..s*n+n-1) and rank d must end with
column d (chunk s*n+d from every s). Traffic below is in blocks; with K the schedule's buffer (n^2
blocks), a block is K/n^2 bytes, and one rank's own n blocks (what MPI and nccl-tests call its
buffer) are K/n.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY
from .pattern import TERM_BYTES, Pattern, check_fits
from .registry import register


def _fits(name: str, nranks: int, terms: int) -> None:
    check_fits(terms * TERM_BYTES, f"{name} on {nranks} ranks ({terms} messages, one per pair of ranks and step)",
               "An all-to-all sends every pair of ranks a block of its own: use fewer ranks.")


@register("alltoall.direct")
def direct(nranks: int):
    """Every rank sends each of its n-1 blocks straight to its destination, all in one step: each
    rank sends and receives n-1 blocks, (n-1)/n of its own buffer, over n-1 messages at once."""
    n = nranks
    _fits("alltoall.direct", n, n * (n - 1))
    src, dst = np.divmod(np.arange(n * n), n)
    moved = np.flatnonzero(src != dst)
    pattern = Pattern(n, n * n)
    pattern.label(0, "alltoall")
    pattern.add(src[moved], dst[moved], 0, 1, moved, COPY, order=moved)
    return n * n, pattern.steps()


@register("alltoall.pairwise")
def pairwise(nranks: int):
    """Pairwise exchange (MPICH's and NCCL's): at step i (1..n-1) rank s sends block s*n+((s+i) mod n)
    to rank (s+i) mod n and receives from rank (s-i) mod n. n-1 steps of one block each way: each rank
    sends and receives n-1 blocks, (n-1)/n of its own buffer, the least any alltoall can."""
    n = nranks
    _fits("alltoall.pairwise", n, n * (n - 1))
    step, s = np.divmod(np.arange(n * (n - 1)), n)  # step i+1: rank s sends to rank s+i+1
    dst = (s + step + 1) % n
    pattern = Pattern(n, n * n)
    pattern.label(0, "alltoall (pairwise {i})", 1)
    pattern.add(s, dst, step, step + 1, s * n + dst, COPY, order=s)
    return n * n, pattern.steps()


@register("alltoall.ring")
def ring(nranks: int):
    """Store and forward round a ring: at step i (0..n-2) rank j passes to rank j+1 the blocks that
    left rank s = j-i (mod n) i hops ago and still have farther to go (destination d with
    (d-s) mod n > i). A block to the rank k places on travels k hops, so each rank sends and receives
    (n-1) + (n-2) + ... + 1 = n(n-1)/2 blocks, (n-1)/2 of its own buffer: n/2 times pairwise's
    traffic, in n-1 steps that each use only the links to the next rank."""
    n = nranks
    _fits("alltoall.ring", n, 2 * n * (n - 1))
    i, j = np.divmod(np.arange(n * (n - 1)), n)  # step i: every rank j passes on the blocks still going
    source = (j - i) % n
    first = (source + i + 1) % n  # destinations more than i hops from the source: n-1-i of them, round the ranks
    count = n - 1 - i
    head = np.minimum(count, n - first)
    pattern = Pattern(n, n * n)
    pattern.label(0, "alltoall (ring {i})", 0)
    pattern.add(j, (j + 1) % n, i, i + 1, source * n + first, COPY, width=head, order=2 * j)
    wraps = count > head
    pattern.add(j[wraps], (j[wraps] + 1) % n, i[wraps], i[wraps] + 1, source[wraps] * n, COPY,
                width=(count - head)[wraps], order=2 * j[wraps] + 1)
    return n * n, pattern.steps()
