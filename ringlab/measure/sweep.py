"""A measured allreduce sweep read back to the learner: where the ring overtakes naive (measured, and
as the fitted cost model puts it), and what the numbers say, in sentences computed from them.

The rows are ``ringlab bench`` rows (``bytes``, ``busbw_Bps``, ``algorithm``); the fits are
:class:`ringlab.predict.fitting.Fit` objects of those rows, one per algorithm, as ``fit_rows`` returns them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..algorithms import build
from .units import format_bytes
from ..predict.costmodel import first_size_where
from ..predict.fitting import USABLE, Fit
from ..simulate import traffic


@dataclass(frozen=True)
class Crossover:
    """Where ``second`` overtakes ``first`` among sizes ``lo`` to ``hi`` (bytes).

    ``size`` is the size from which ``second`` stays ahead up to ``hi``: ``lo`` when it is ahead over the
    whole range, None when it is not ahead at ``hi``. Only a size strictly above ``lo`` is a crossover
    found *within* the range (:attr:`within`).
    """

    first: str
    second: str
    lo: int
    hi: int
    size: int | None

    @property
    def within(self) -> bool:
        return self.size is not None and self.size > self.lo

    def __str__(self) -> str:
        span = f"{format_bytes(self.lo)} to {format_bytes(self.hi)}"
        if self.within:
            return f"{self.second} overtakes {self.first} at {format_bytes(self.size)}"
        if self.size is None:
            return f"not within {span}: {self.second} is not ahead of {self.first} at {format_bytes(self.hi)}"
        return f"not within {span}: {self.second} is ahead of {self.first} all along"


def busbw_by_size(rows: list[dict], algorithm: str) -> dict[int, float]:
    """{bytes: busbw (B/s)} of one algorithm's rows."""
    return {r["bytes"]: r["busbw_Bps"] for r in rows if r["algorithm"] == algorithm}


def measured_crossover(rows: list[dict], first: str = "naive", second: str = "ring") -> Crossover:
    """The smallest measured size from which ``second``'s busbw stays above ``first``'s (sizes both measured)."""
    mine, theirs = busbw_by_size(rows, second), busbw_by_size(rows, first)
    sizes = sorted(set(mine) & set(theirs))
    if len(sizes) < 2:
        raise ValueError(f"need {first} and {second} measured at two sizes or more, got {len(sizes)} in common")
    size = None
    for nbytes in reversed(sizes):  # walk down from the largest while second stays ahead
        if mine[nbytes] <= theirs[nbytes]:
            break
        size = nbytes
    return Crossover(first, second, sizes[0], sizes[-1], size)


def fitted_crossover(fits: dict[str, Fit], first: str = "naive", second: str = "ring", widen: int = 4) -> Crossover:
    """Where ``second``'s fitted time drops below ``first``'s, searched over the measured sizes widened
    ``widen`` times each way (a fit far from its measurements is a guess)."""
    a, b = fits[first], fits[second]
    lo = max(1, int(min(a.sizes.min(), b.sizes.min())) // widen)
    hi = int(max(a.sizes.max(), b.sizes.max())) * widen

    def second_wins(nbytes: int) -> bool:
        return b.seconds(nbytes) < a.seconds(nbytes)

    if not second_wins(hi):
        size = None
    elif second_wins(lo):
        size = lo
    else:
        size = first_size_where(second_wins, lo, hi)
    return Crossover(first, second, lo, hi, size)


def busiest_rank_bytes(algorithm: str, nranks: int, nbytes: int = 1 << 20) -> int:
    """Bytes the busiest rank sends and receives in one allreduce of ``nbytes`` by ``algorithm``."""
    counted = traffic(build(f"allreduce.{algorithm}", nranks), nbytes)
    return max(s + r for s, r in zip(counted["sent"], counted["received"]))


def describe_sweep(rows: list[dict], fits: dict[str, Fit], nranks: int, cores: int, first: str = "naive",
                   second: str = "ring", peer: str = "mpi") -> str:
    """What a sweep of ``first``, ``second`` (and ``peer``, when measured) on ``nranks`` ranks sharing
    ``cores`` cores says, one sentence per line, every one worded from the numbers it quotes."""
    for name, fit in fits.items():
        if fit.schedule is not None and fit.schedule.nranks != nranks:
            raise ValueError(f"the {name} fit is of {fit.schedule.nranks} ranks, the sweep of {nranks}")
    lines = [_cores_sentence(nranks, cores)]
    lines.append(_measured_sentence(rows, measured_crossover(rows, first, second)))
    if first in fits and second in fits:
        loose = [name for name in (first, second) if not fits[name].usable]
        lines.append(_loose_sentence(loose, fits) if loose else _fitted_sentence(fitted_crossover(fits, first, second)))
    mine, theirs, peers = busbw_by_size(rows, second), busbw_by_size(rows, first), busbw_by_size(rows, peer)
    top = max(set(mine) & set(theirs))
    ratio = mine[top] / theirs[top]
    against_peer = f" and {mine[top] / peers[top]:.2f}x {peer}'s" if top in peers else ""
    quoted = f"{second} {_gbps(mine[top])}, {first} {_gbps(theirs[top])}" + (
        f", {peer} {_gbps(peers[top])}" if top in peers else "")
    lines.append(f"At {format_bytes(top)}, the largest size, {second}'s busbw was {ratio:.2f}x {first}'s"
                 f"{against_peer} ({quoted} GB/s).")
    lines += [_fit_sentence(name, fit) for name, fit in fits.items()]
    lines.append(_optimal_sentence(first, second, nranks, top, ratio, cores))
    return "\n".join(lines)


def _gbps(bps: float) -> str:
    """GB/s to three significant digits, zeros kept ("4.00" beside "2.05", not "4"); whole GB/s from 100 up."""
    value = bps / 1e9
    if value <= 0:
        return f"{value:.0f}"
    digits = 2 - math.floor(math.log10(value))
    if float(f"{value:.{max(0, digits)}f}") >= 10 ** (3 - digits):  # 9.996 rounds up to 10.00: one digit fewer
        digits -= 1
    return f"{value:.{max(0, digits)}f}"


def _cores_sentence(nranks: int, cores: int) -> str:
    if nranks > cores:
        return (f"{nranks} ranks ran on {cores} cores: oversubscribed. Ranks take turns on the cores, so a message "
                "can wait for its receiver to be scheduled; that wait comes with every step whatever the size, so it "
                "weighs most on small messages, whose time is mostly per-step latency.")
    return f"{nranks} ranks ran on {cores} cores: a core or more for every rank, so no rank waits for a core."


def _measured_sentence(rows: list[dict], cross: Crossover) -> str:
    mine, theirs = busbw_by_size(rows, cross.second), busbw_by_size(rows, cross.first)
    span = f"{format_bytes(cross.lo)} to {format_bytes(cross.hi)}"
    if cross.size is None:
        return (f"Measured: at {format_bytes(cross.hi)}, the largest size, {cross.second}'s busbw was not above "
                f"{cross.first}'s ({_gbps(mine[cross.hi])} against {_gbps(theirs[cross.hi])} GB/s), so {cross.second} "
                f"does not overtake {cross.first} within the sizes measured ({span}).")
    if not cross.within:
        return (f"Measured: {cross.second}'s busbw was above {cross.first}'s at every size from {span}, so the "
                f"crossover is not within the sizes measured: it lies at or below {format_bytes(cross.lo)}.")
    below = max(k for k in mine if k < cross.size and k in theirs)  # the size before it, where second was not ahead
    before = (f"at {format_bytes(below)} {cross.first} was ahead" if theirs[below] > mine[below] else
              f"at {format_bytes(below)} the two were level") + (
        f": {cross.first} {_gbps(theirs[below])} against {cross.second} {_gbps(mine[below])} GB/s")
    if cross.size == cross.hi:
        return (f"Measured: {cross.second}'s busbw was above {cross.first}'s at the largest size, "
                f"{format_bytes(cross.hi)}, but not at the size before it ({before}).")
    return (f"Measured: {cross.second}'s busbw stays above {cross.first}'s from {format_bytes(cross.size)} up to "
            f"{format_bytes(cross.hi)}, the largest size measured ({before}).")


def _fitted_sentence(cross: Crossover) -> str:
    span = f"{format_bytes(cross.lo)} to {format_bytes(cross.hi)}"
    if cross.size is None:
        return (f"Fitted: {cross.second}'s fit is not faster than {cross.first}'s at {format_bytes(cross.hi)}, so "
                f"the fits give no crossover from {span}.")
    if not cross.within:
        return (f"Fitted: {cross.second}'s fit is faster than {cross.first}'s at every size from {span}, so the "
                "fits cross below that range, if at all.")
    return (f"Fitted: the two fits predict equal times at {format_bytes(cross.size)}; above it {cross.second}'s "
            f"fit is the faster (searched {span}).")


def _loose_sentence(loose: list[str], fits: dict[str, Fit]) -> str:
    """Why the fits' crossover is not given: a fit that misses a measurement by more than USABLE."""
    missed = " and ".join(f"{name}'s misses a measurement by {fits[name].worst_residual:.0%}" for name in loose)
    return (f"Fitted: no crossover from the fits, because {missed}, more than the {USABLE:.0%} a usable fit may "
            "miss by: a prediction from it would be a guess.")


def _fit_sentence(name: str, fit: Fit) -> str:
    worst = fit.worst_residual
    rate = (f"a bandwidth of {_gbps(fit.bandwidth)} GB/s per link" if fit.bandwidth < float("inf")
            else "no bandwidth limit (its time did not grow with size)")
    return (f"Fitted to {name}'s times: alpha {fit.alpha * 1e6:.3g} us per message and {rate}; "
            f"the measurement farthest from the fit is {worst:.0%} off it"
            + ("." if fit.usable else f", more than the {USABLE:.0%} a usable fit may: too loose to use."
               if worst > USABLE else ": with no cost per byte it gives no link to predict with."))


def _optimal_sentence(first: str, second: str, nranks: int, top: int, ratio: float, cores: int) -> str:
    expected = busiest_rank_bytes(first, nranks) / busiest_rank_bytes(second, nranks)
    said = (f"{first}'s busiest rank sends and receives {expected:.2f}x the bytes of {second}'s busiest rank, "
            f"so where a rank's own traffic sets the pace {second}'s busbw is {expected:.2f}x {first}'s at large "
            f"sizes. At {format_bytes(top)} it was {ratio:.2f}x")
    if round(ratio, 2) >= round(expected, 2):  # compared as printed, so the verdict matches the figures shown
        return f"{said}: at least that, so {second} behaved as bandwidth-optimal here."
    if round(ratio, 2) <= 1:
        return f"{said}: no faster at all, so {second} did not behave as bandwidth-optimal here."
    shared = f"{cores} cores shared by {nranks} ranks, or " if nranks > cores else ""
    return (f"{said}: less than that, so {second} did not behave as fully bandwidth-optimal here; something besides "
            f"each rank's own bytes set the pace too (such as {shared}memory bandwidth that all ranks share).")
