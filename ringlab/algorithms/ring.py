"""Rings: rank j only ever talks to rank j+1 (mod n), so every link is busy at every step.

The buffer is cut into n chunks; which chunk rank j sends at step i is the whole algorithm. Each rank's
sends over a phase are one rotating term (``Pattern.rotating``): chunk (j - i + shift) mod n at step i.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE
from .pattern import Pattern
from .registry import register


def _ring(nranks: int, phases) -> Pattern:
    """Rank j sends to j+1 through every phase (first step, label, op, shift): chunk (j - i + shift) mod n at
    its step i, for n-1 steps."""
    n = nranks
    pattern = Pattern(n, n)
    j = np.arange(n)
    for first, label, op, shift in phases:
        pattern.label(first, label)
        if n > 1:
            pattern.rotating(j, (j + 1) % n, first, first + n - 1, j + shift, n, op, order=j)
    return pattern


@register("allreduce.ring")
def allreduce(nranks: int):
    """Ring allreduce: a reduce-scatter, then an allgather, n-1 steps each.

    Reduce-scatter, step i: rank j sends chunk (j-i) mod n to rank j+1, which adds it in;
    afterwards rank j holds the full sum of chunk (j+1) mod n. Allgather, step i: rank j sends
    chunk (j-i+1) mod n to rank j+1, which replaces its copy. Every rank sends and receives
    2(n-1)/n of the buffer, which tends to 2K however many ranks: bandwidth-optimal.
    """
    n = nranks  # reduce-scatter: chunk (j - i) mod n, added in; allgather: one chunk later, the one just completed
    return n, _ring(n, [(0, "reduce-scatter", REDUCE, 0), (n - 1, "allgather", COPY, 1)]).steps(2 * (n - 1))


@register("reduce_scatter.ring")
def reduce_scatter(nranks: int):
    """Ring reduce-scatter: at step i rank j sends chunk (j-i-1) mod n to rank j+1, which adds it
    in; after n-1 steps rank j holds the full sum of chunk j (MPI's Reduce_scatter_block layout)."""
    return nranks, _ring(nranks, [(0, "reduce-scatter", REDUCE, -1)]).steps(nranks - 1)


@register("allgather.ring")
def allgather(nranks: int):
    """Ring allgather: rank j starts with chunk j; at step i it passes chunk (j-i) mod n to rank
    j+1; after n-1 steps every rank holds every chunk."""
    return nranks, _ring(nranks, [(0, "allgather", COPY, 0)]).steps(nranks - 1)
