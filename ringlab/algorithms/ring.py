"""Rings: rank j only ever talks to rank j+1 (mod n), so every link is busy at every step.

The buffer is cut into n chunks; which chunk rank j sends at step i is the whole algorithm.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE, Step
from .registry import register


@register("allreduce.ring")
def allreduce(nranks: int):
    """Ring allreduce: a reduce-scatter, then an allgather, n-1 steps each.

    Reduce-scatter, step i: rank j sends chunk (j-i) mod n to rank j+1, which adds it in;
    afterwards rank j holds the full sum of chunk (j+1) mod n. Allgather, step i: rank j sends
    chunk (j-i+1) mod n to rank j+1, which replaces its copy. Every rank sends and receives
    2(n-1)/n of the buffer, which tends to 2K however many ranks: bandwidth-optimal.
    """
    n = nranks
    j = np.arange(n)  # every rank at once ...
    right = (j + 1) % n  # ... sends to the next one
    steps = []
    for i in range(n - 1):  # reduce-scatter: rank j sends chunk (j - i) mod n, which j+1 adds in
        steps.append(Step.columns(j, right, (j - i) % n, REDUCE, "reduce-scatter"))
    for i in range(n - 1):  # allgather: one chunk later, passing on what it just completed
        steps.append(Step.columns(j, right, (j - i + 1) % n, COPY, "allgather"))
    return n, steps


@register("reduce_scatter.ring")
def reduce_scatter(nranks: int):
    """Ring reduce-scatter: at step i rank j sends chunk (j-i-1) mod n to rank j+1, which adds it
    in; after n-1 steps rank j holds the full sum of chunk j (MPI's Reduce_scatter_block layout)."""
    n = nranks
    j = np.arange(n)
    return n, [Step.columns(j, (j + 1) % n, (j - i - 1) % n, REDUCE, "reduce-scatter") for i in range(n - 1)]


@register("allgather.ring")
def allgather(nranks: int):
    """Ring allgather: rank j starts with chunk j; at step i it passes chunk (j-i) mod n to rank
    j+1; after n-1 steps every rank holds every chunk."""
    n = nranks
    j = np.arange(n)
    return n, [Step.columns(j, (j + 1) % n, (j - i) % n, COPY, "allgather") for i in range(n - 1)]
