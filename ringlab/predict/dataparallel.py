"""Data-parallel training in the cost model: every step computes, then ring-allreduces the gradients.

Every rank takes the same samples per step (n ranks: n times the samples), so one step on n ranks
takes t_c + t_comm(n) and the speed-up over one rank is ``n * t_c / (t_c + t_comm(n))``, where t_c is
one rank's compute per step and t_comm(n) the ring allreduce of the gradient bytes: on a uniform
topology 2(n-1) alpha + 2(n-1)/n * bytes / B. The allreduce starts after backward (no overlap).
Where more ranks run than there are ``cores``, they take turns: compute takes n / cores as long.
"""
from __future__ import annotations

from ..algorithms import build
from ..schedule import check_count
from .fitting import uniform_seconds


def allreduce_seconds(nbytes: int, nranks: int, alpha: float, bandwidth: float, itemsize: int = 4) -> float:
    """The ring allreduce's predicted seconds for ``nbytes`` on ``nranks`` ranks linked alike (0 on one rank). An
    infinite ``bandwidth`` (a fit that found no cost per byte) leaves the 2(n-1) messages' alpha alone."""
    nranks = check_count("nranks", nranks)
    if nranks == 1:
        return 0.0
    return uniform_seconds(build("allreduce.ring", nranks), nbytes, alpha, bandwidth, itemsize=itemsize)


def step_seconds(compute_s: float, nbytes: int, nranks: int, alpha: float, bandwidth: float,
                 cores: int | None = None) -> float:
    """One step's predicted seconds on ``nranks`` ranks: compute (longer where ranks outnumber ``cores``),
    then the allreduce of ``nbytes`` of gradients."""
    if not compute_s > 0:
        raise ValueError(f"compute_s must be > 0 seconds, got {compute_s!r}")
    nranks = check_count("nranks", nranks)
    sharing = max(1.0, nranks / cores) if cores else 1.0
    return compute_s * sharing + allreduce_seconds(nbytes, nranks, alpha, bandwidth)


def speedup(compute_s: float, nbytes: int, nranks: int, alpha: float, bandwidth: float,
            cores: int | None = None) -> float:
    """Predicted samples per second on ``nranks`` ranks over one rank's: n * t_c / (step on n ranks)."""
    return nranks * compute_s / step_seconds(compute_s, nbytes, nranks, alpha, bandwidth, cores)
