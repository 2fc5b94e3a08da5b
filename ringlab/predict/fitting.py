"""Fitting the cost model to measurements: alpha and bandwidth from times over sizes (of any
schedule, a benchmark's rows, a ping-pong), and a measured Trace set against the prediction step by step."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .costmodel import predict
from ..schedule import Schedule, make_schedule
from ..topology import uniform

USABLE = 0.25  # a fit that misses a measurement by more than this share is shown as such, not used


def coefficients(schedule: Schedule, nbytes: int, itemsize: int = 1) -> np.ndarray:
    """(latency count, bytes on the busiest channel, bytes reduced) summed over steps.

    On a uniform topology predicted time = alpha * c[0] + c[1] / bandwidth + c[2] / reduce_rate,
    which is what makes the fit a linear least-squares problem.
    """
    unit = predict(schedule, nbytes, uniform(schedule.nranks, bandwidth=1.0, latency=1.0, reduce_rate=1.0),
                   itemsize=itemsize)
    return np.array([unit.steps["latency"].sum(), unit.steps["transfer"].sum(), unit.steps["reduce"].sum()])


def uniform_seconds(schedule: Schedule, nbytes: int, alpha: float, bandwidth: float,
                    reduce_rate: float = float("inf"), itemsize: int = 1) -> float:
    """``schedule``'s predicted seconds for ``nbytes`` on ranks linked alike: alpha a message, ``bandwidth`` (B/s)
    a link, ``reduce_rate`` (B/s) to reduce, as ``predict`` on ``uniform(...)`` gives them. An infinite bandwidth
    or reduction rate costs nothing per byte: a fit to a noisy sweep can find that (:attr:`Fit.usable` says it is
    no link), and ``uniform`` refuses it, so the time is summed here from :func:`coefficients`."""
    if not (0 <= alpha < np.inf):
        raise ValueError(f"alpha must be a finite number of seconds >= 0, got {alpha!r}")
    for name, rate in (("bandwidth", bandwidth), ("reduce_rate", reduce_rate)):
        if not rate > 0:
            raise ValueError(f"{name} must be > 0 (inf: no cost per byte), got {rate!r}")
    latency, moved, reduced = coefficients(schedule, int(nbytes), itemsize)
    return float(alpha * latency + moved / bandwidth + reduced / reduce_rate)


@dataclass(frozen=True)
class Fit:
    """alpha (s), bandwidth (B/s) and reduce_rate (B/s, inf when not fitted) with the residuals, and the
    schedule fitted (None when the measurements came from several, as :func:`fit_schedules` takes them)."""

    alpha: float
    bandwidth: float
    reduce_rate: float
    sizes: np.ndarray
    measured: np.ndarray
    predicted: np.ndarray
    schedule: Schedule | None = None

    @property
    def relative_residuals(self) -> np.ndarray:
        return (self.measured - self.predicted) / self.measured

    @property
    def worst_residual(self) -> float:
        """How far, as a share of the measurement, the fit misses the measurement it misses most."""
        return float(np.abs(self.relative_residuals).max()) if len(self.sizes) else 0.0

    @property
    def usable(self) -> bool:
        """Whether the fit is close enough to use for predictions: no measurement missed by more than :data:`USABLE`,
        and a link it can describe (a noisy sweep on a busy machine can be fitted best with no cost per byte at all:
        an infinite bandwidth, which no topology has)."""
        return (self.worst_residual <= USABLE and 0 < self.bandwidth < np.inf and 0 <= self.alpha < np.inf)

    def topology(self, nranks: int):
        """A uniform topology with the fitted figures, to predict other algorithms from."""
        return uniform(nranks, bandwidth=self.bandwidth, latency=self.alpha, reduce_rate=self.reduce_rate,
                       name=f"fitted-{nranks}")

    def seconds(self, nbytes: int) -> float:
        """The fitted schedule's predicted time for a buffer of ``nbytes``, at the fitted figures (with no cost per
        byte where the fit found none)."""
        if self.schedule is None:
            raise ValueError("this fit spans several schedules: predict one of them on fit.topology(nranks)")
        return uniform_seconds(self.schedule, int(nbytes), self.alpha, self.bandwidth, self.reduce_rate)

    def __repr__(self) -> str:
        worst = self.worst_residual
        rate = "" if not np.isfinite(self.reduce_rate) else f", reduce {self.reduce_rate / 1e9:.3g} GB/s"
        why = ("" if self.usable else ": too loose to use" if worst > USABLE else
               ": no cost per byte found, so no link to predict with")
        return (f"Fit(alpha={self.alpha * 1e6:.3g} us, bandwidth={self.bandwidth / 1e9:.3g} GB/s{rate}; "
                f"worst residual {worst:.1%} over {len(self.sizes)} measurements{why})")


def fit(schedule: Schedule, sizes, seconds, with_reduction: bool = False) -> Fit:
    """Least-squares alpha and bandwidth (and the reduction rate) from measured ``seconds`` at ``sizes``.

    Relative errors are weighted alike at every size (each row is divided by its time), so small
    sizes pin alpha and large sizes the bandwidth. Parameters come out non-negative.
    """
    fitted = _least_squares([coefficients(schedule, int(k)) for k in sizes], sizes, seconds, with_reduction)
    return replace(fitted, schedule=schedule)


def _least_squares(rows, sizes, seconds, with_reduction: bool) -> Fit:
    sizes, seconds = np.asarray(sizes, dtype=np.int64), np.asarray(seconds, dtype=float)
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("fit needs at least two (size, time) measurements of equal count")
    if (seconds <= 0).any():
        raise ValueError("measured times must be > 0")
    design = np.array(rows)
    if not with_reduction:
        design = design[:, :2]
    weights = 1.0 / seconds
    best = None
    for keep in _subsets(design.shape[1]):  # non-negative least squares by trying active sets
        solution = np.zeros(design.shape[1])
        a = design[:, keep] * weights[:, None]
        solution[keep] = np.linalg.lstsq(a, seconds * weights, rcond=None)[0]
        if (solution < 0).any():
            continue
        error = np.sum(((design @ solution - seconds) * weights) ** 2)
        if best is None or error < best[0]:
            best = (error, solution)
    alpha, beta = best[1][0], best[1][1]
    gamma = best[1][2] if with_reduction else 0.0
    return Fit(alpha, 1 / beta if beta > 0 else float("inf"), 1 / gamma if gamma > 0 else float("inf"),
               sizes, seconds, design @ best[1])


def fit_schedules(schedules: list[Schedule], sizes, seconds, with_reduction: bool = False) -> Fit:
    """Like :func:`fit`, over measurements of different schedules (say a chain at several segment
    counts): row i is ``schedules[i]`` run on ``sizes[i]`` bytes in ``seconds[i]``."""
    if len(schedules) != len(sizes):
        raise ValueError("one schedule per measurement")
    return _least_squares([coefficients(s, int(k)) for s, k in zip(schedules, sizes)], sizes, seconds,
                          with_reduction)


def _subsets(k: int):
    for mask in range(1, 1 << k):
        yield [i for i in range(k) if mask >> i & 1]


def fit_rows(rows: list[dict], algorithm: str, nranks: int, **options) -> Fit:
    """Fit from benchmark JSON rows ({"bytes", "time_s", "algorithm"}), using those of ``algorithm``
    (``"allreduce.ring"`` also takes the rows of ``"ring"``).

    Rows read by ``ringlab import`` from nccl-tests, or shipped in ``ringlab.measure.published``,
    fit the same way: they have no ``algorithm`` (they are what NCCL ran, which you name as the
    schedule to fit, e.g. ``"ring"``), and where a source printed only the in-place time that one is
    used. Rows of size 0, which nccl-tests prints, are left out.
    """
    from ..algorithms import build

    mine = [r for r in rows if r.get("algorithm", algorithm) in (algorithm, algorithm.split(".")[-1])]
    if not mine:
        raise ValueError(f"no rows for {algorithm!r}; rows have: {sorted({r.get('algorithm') for r in rows})}")
    timed = [(r["bytes"], _seconds(r)) for r in mine if r["bytes"] > 0 and _seconds(r) is not None]
    name = algorithm if "." in algorithm else f"allreduce.{algorithm}"
    return fit(build(name, nranks, **options), [k for k, _ in timed], [t for _, t in timed])


def _seconds(row: dict) -> float | None:
    return row["time_s"] if row.get("time_s") is not None else row.get("inplace_time_s")


# one message from rank 0 to rank 1: on a uniform topology it takes alpha + K/B
PINGPONG = make_schedule("broadcast", 2, 1, [[(0, 1, 0, "copy")]], root=0, name="ping-pong, one way")


def fit_pingpong(rows: list[dict], no_cost_per_byte: str = "raise") -> Fit:
    """alpha (s) and bandwidth (B/s) of t = alpha + K/B, fitted to ping-pong rows ({"bytes", "one_way_s"},
    sizes > 0), as :func:`fit` does: least squares on relative error. Rows whose times do not grow with size fit
    best with no cost per byte (an infinite B): a ValueError, or with ``no_cost_per_byte="keep"`` that fit
    (alpha + K/inf is alpha; its ``usable`` is False)."""
    if no_cost_per_byte not in ("raise", "keep"):
        raise ValueError(f"no_cost_per_byte must be 'raise' or 'keep', got {no_cost_per_byte!r}")
    if len(rows) < 2:
        raise ValueError(f"need ping-pong rows for at least two sizes to fit alpha and B, got {len(rows)}")
    fitted = fit(PINGPONG, [r["bytes"] for r in rows], [r["one_way_s"] for r in rows])
    if not np.isfinite(fitted.bandwidth) and no_cost_per_byte == "raise":
        raise ValueError("these rows do not fit t = alpha + K/B (time does not grow with size): measure larger sizes")
    return fitted


def compare_trace(trace, nbytes: int, topology) -> np.ndarray:
    """Per step: measured seconds (from the Trace: when the step's last transfer ended minus when
    the previous step's did) against the prediction on ``topology``."""
    measured_end = trace.step_times()
    measured = np.diff(np.concatenate(([0.0], measured_end)))
    predicted = predict(trace.schedule, nbytes, topology, itemsize=trace.itemsize).steps["time"]
    out = np.zeros(len(measured), dtype=[("step", "i4"), ("measured", "f8"), ("predicted", "f8")])
    out["step"], out["measured"], out["predicted"] = np.arange(len(measured)), measured, predicted
    return out
