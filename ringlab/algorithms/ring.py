"""Rings: rank j only ever talks to rank j+1 (mod n), so every link is busy every step.

The buffer is cut into n chunks. Which chunk a rank sends at step i is the whole trick; with
``shift`` the same loops give both MPI's layout (rank j owns chunk j) and the textbook ring
allreduce of Baidu and Horovod (rank j ends reduce-scatter with chunk j+1).
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE, Step
from . import register, schedule


def reduce_scatter_steps(nranks: int, shift: int = 0) -> list[Step]:
    """n-1 steps; at step i rank j adds chunk (j - i + shift - 1) mod n into rank j+1.

    Afterwards rank j holds the full sum of chunk (j + shift) mod n.
    """
    j = np.arange(nranks)
    return [Step.columns(j, (j + 1) % nranks, (j - i + shift - 1) % nranks, REDUCE, "reduce-scatter")
            for i in range(nranks - 1)]


def allgather_steps(nranks: int, shift: int = 0) -> list[Step]:
    """n-1 steps; at step i rank j passes chunk (j - i + shift) mod n to rank j+1, which replaces its copy.

    Starts from rank j owning chunk (j + shift) mod n.
    """
    j = np.arange(nranks)
    return [Step.columns(j, (j + 1) % nranks, (j - i + shift) % nranks, COPY, "allgather")
            for i in range(nranks - 1)]


@register("reduce_scatter.ring")
def reduce_scatter(nranks: int):
    """Ring reduce-scatter: at step i rank j sends chunk (j-i-1) mod n to rank j+1, which adds it
    in; after n-1 steps rank j holds the full sum of chunk j (MPI's Reduce_scatter_block layout)."""
    return schedule("reduce_scatter", "reduce_scatter.ring", nranks, nranks, reduce_scatter_steps(nranks))


@register("allgather.ring")
def allgather(nranks: int):
    """Ring allgather: rank j starts with chunk j; at step i it passes chunk (j-i) mod n to rank
    j+1; after n-1 steps every rank holds every chunk."""
    return schedule("allgather", "allgather.ring", nranks, nranks, allgather_steps(nranks))


@register("allreduce.ring")
def allreduce(nranks: int):
    """Ring allreduce: a reduce-scatter, then an allgather, n-1 steps each.

    Reduce-scatter, step i: rank j sends chunk (j-i) mod n to rank j+1, which adds it in;
    afterwards rank j holds the full sum of chunk (j+1) mod n. Allgather, step i: rank j sends
    chunk (j-i+1) mod n to rank j+1, which replaces its copy. Every rank sends and receives
    2(n-1)/n of the buffer, which tends to 2K however many ranks: bandwidth-optimal.
    """
    steps = reduce_scatter_steps(nranks, shift=1) + allgather_steps(nranks, shift=1)
    return schedule("allreduce", "allreduce.ring", nranks, nranks, steps)
