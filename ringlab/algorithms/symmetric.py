"""Allreduce for ranks that can read each other's memory: one-shot and two-shot, the schedules of NCCL's
symmetric-memory kernels (NCCL 2.27+) and of PyTorch's ``SymmetricMemory`` one_shot_all_reduce and
two_shot_all_reduce.

As schedules they are messages like any other (the simulator, the cost model and the widgets read them so,
and ranks on several nodes run them so); ranks of one node run them through a shared window instead
(:mod:`ringlab.mpi.symmetric`), where "sending" a chunk is leaving it in one's own slot for the others
to read.
"""
from __future__ import annotations

import numpy as np

from ..schedule import COPY, REDUCE
from .pattern import TERM_BYTES, Pattern, check_fits
from .registry import register


def _pairs(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair (src, dst) of different ranks."""
    src, dst = np.divmod(np.arange(nranks * nranks), nranks)
    keep = src != dst
    return src[keep], dst[keep]


@register("allreduce.oneshot")
def oneshot(nranks: int):
    """One step: every rank reads every other rank's whole buffer and adds them all up itself. One
    synchronisation (the fewest there can be), but each rank takes in (n-1)K bytes and does n-1 additions
    of K: the fastest way for small messages, the slowest for large ones."""
    check_fits(nranks * nranks * TERM_BYTES, f"allreduce.oneshot on {nranks} ranks", "Use fewer ranks.")
    src, dst = _pairs(nranks)
    pattern = Pattern(nranks, 1)
    pattern.label(0, "read every buffer, add")
    pattern.add(src, dst, 0, 1, 0, REDUCE, order=src)
    return 1, pattern.steps()


@register("allreduce.twoshot")
def twoshot(nranks: int):
    """Two steps, n chunks: rank r reads chunk r of every other buffer and adds them (a reduce-scatter in one
    step), then every rank reads the other ranks' finished chunks (an all-gather in one step). Two
    synchronisations; each rank takes in 2(n-1)K/n bytes, as a ring does, where the ring needs 2(n-1) steps."""
    check_fits(2 * nranks * nranks * TERM_BYTES, f"allreduce.twoshot on {nranks} ranks", "Use fewer ranks.")
    src, dst = _pairs(nranks)
    pattern = Pattern(nranks, nranks)
    pattern.label(0, "reduce-scatter: add chunk r of every buffer")
    pattern.add(src, dst, 0, 1, dst, REDUCE, order=src)
    pattern.label(1, "all-gather: read the finished chunks")
    pattern.add(src, dst, 1, 2, src, COPY, order=src)
    return nranks, pattern.steps()
