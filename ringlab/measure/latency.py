"""A fitted per-step latency (alpha) set against one raw MPI message measured in the same run.

The alpha that labs fit to ringlab's own collectives is not the latency of a message: a step of a
collective is a message plus everything around it (Python, bookkeeping, waiting for the slowest
rank, and on an oversubscribed machine the scheduler). :func:`describe_alpha` says how much of each
step that is, in sentences worded from the two numbers.

    raw = pingpong(comm, [8])            # on the ranks: rows on rank 0 only
    print(describe_alpha(fitted, raw[0]["one_way_s"], "ring allreduce", nranks=4, cores=cores()))
"""
from __future__ import annotations

from ..predict.fitting import USABLE, Fit

ABOUT_THE_SAME = 1.5  # alpha within this factor of one message counts as "about one message"


def describe_alpha(fit: Fit, message: float, collective: str, nranks: int, cores: int) -> str:
    """What a fitted alpha (seconds per step of ``collective``) says beside ``message``, the one-way time
    of a tiny raw MPI message measured on the same machine, for ``nranks`` ranks sharing ``cores`` cores."""
    if message <= 0:
        raise ValueError(f"a raw message takes a positive time, got {message} s")
    alpha, us = fit.alpha, 1e6
    head = (f"This alpha is {alpha * us:.1f} us per step of the {collective}; a raw MPI message here (8 bytes, "
            f"one way, rank 0 to rank 1) takes {message * us:.1f} us")
    if alpha < message / ABOUT_THE_SAME:
        text = (f"{head}. The fit put alpha below one message, which no real step can cost: these sizes pin the "
                "bandwidth well and alpha hardly, so read this alpha as a loose figure, not as a latency.")
    elif alpha <= message * ABOUT_THE_SAME:
        text = f"{head}: a step costs about one message here, little more."
    else:
        rest = alpha - message
        share = "nearly all" if rest / alpha >= 0.995 else f"{rest / alpha:.0%}"
        text = (f"{head}. The rest, {rest * us:.1f} us ({share} of each step, {alpha / message:.0f}x a "
                f"raw message in all), is what a step of ringlab's {collective} costs beyond one message: Python, "
                f"bookkeeping, and waiting for the slowest rank{_cores_clause(nranks, cores)}")
    if not fit.usable and fit.worst_residual > USABLE:
        text += (f" The fit misses one measurement by {fit.worst_residual:.0%}, more than the {USABLE:.0%} a usable "
                 "fit may: take alpha as rough, a least-squares compromise over every size, not a measurement.")
    elif not fit.usable:
        text += (" The fit found no cost per byte at all (the times did not grow with the bytes a step carries, as "
                 "a busy machine's can fail to): take alpha as rough, and no bandwidth from it.")
    return text


def _cores_clause(nranks: int, cores: int) -> str:
    if nranks > cores:
        return (f"; and, with {nranks} ranks on {cores} cores, the scheduler: a rank often waits for a core before "
                "it can answer, while the ping-pong ran with the other ranks idle.")
    return f". With {nranks} ranks on {cores} cores every rank has a core, so the scheduler adds little."
