"""Whatever a busy machine measures, the labs read it back in words and pictures and do not stop.

A lab's sweep on a learner's machine (or on CI's, under load) can come out in any order: times that do not grow
with the size, a size much slower than the next, all sizes alike. The fits then find no cost per byte, or no
latency, or miss by far; the readers must say so, not raise. CI stopped twice on such a sweep (lab 03:
'bandwidth must be a finite number > 0, got inf'), so each reader of a sweep measured here is given every kind
of sweep hypothesis can make (times > 0, over the sizes a lab uses) and must return its words and figures.
"""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings, strategies as st

from ringlab.lessons.lab06_training.payoff import describe_payoff, fits, measured_rows, speedup_rows
from ringlab.measure.sweep import describe_sweep, fitted_crossover, measured_crossover
from ringlab.predict.fitting import fit_rows
from ringlab.viz.dataparallel import payoff_plot
from ringlab.viz.plots import fitted_busbw_plot

SIZES = [1 << k for k in range(10, 23, 2)]  # 1 KiB to 4 MiB, as the labs sweep
N = 2

# a time a busy machine could measure: 1 us to 1 s, any order over the sizes
seconds = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False, allow_infinity=False)
sweep_times = st.lists(seconds, min_size=len(SIZES), max_size=len(SIZES))


def rows_of(times: dict[str, list[float]], n: int = N) -> list[dict]:
    return [{"algorithm": name, "bytes": k, "time_s": t, "busbw_Bps": k / t * 2 * (n - 1) / n}
            for name, values in times.items() for k, t in zip(SIZES, values)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ring=sweep_times, naive=sweep_times)
def test_an_allreduce_sweep_in_any_order_is_read_back_and_drawn(ring, naive):
    rows = rows_of({"ring": ring, "naive": naive})
    fitted = {name: fit_rows(rows, name, N) for name in ("ring", "naive")}
    text = describe_sweep(rows, fitted, N, cores=2)
    assert text.strip() and "nan" not in text
    measured_crossover(rows, "naive", "ring")
    fitted_crossover(fitted, "naive", "ring")
    figure = fitted_busbw_plot(rows, fitted)
    assert len(figure.data) >= 2  # each algorithm's markers at least


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(two=sweep_times, three=sweep_times,
       steps=st.lists(st.floats(min_value=1e-4, max_value=0.5), min_size=4, max_size=4),
       alone=st.lists(st.floats(min_value=1e-4, max_value=0.1), min_size=2, max_size=2))
def test_lab06s_payoff_reads_any_sweep_and_any_steps(two, three, steps, alone):
    widths = {64: 23072, 1024: 4300832}  # hidden: gradient bytes
    one = dict(zip(widths, alone))
    measured = {"cores": 2, "per_rank": 32,
                "one_rank": [{"hidden": h, "gradient_bytes": b, "step_s": one[h], "comm_s": 0.0}
                             for h, b in widths.items()],
                "runs": [{"ranks": n, "sweep": [{"bytes": k, "time_s": t, "algorithm": "ring"}
                                                for k, t in zip(SIZES, times)],
                          "widths": [{"hidden": h, "gradient_bytes": b, "step_s": step, "comm_s": step / 3,
                                      "waited_s": 0.0} for (h, b), step in zip(widths.items(), pair)]}
                         for n, times, pair in ((2, two, steps[:2]), (3, three, steps[2:]))]}
    assert all(f.alpha >= 0 for f in fits(measured).values())
    rows = speedup_rows(measured)
    assert all(math.isfinite(r["predicted"]) and r["predicted"] > 0 for r in rows)
    text = describe_payoff(rows, measured)
    assert text.strip() and "nan" not in text and "inf GB/s" not in text
    assert measured_rows(rows)
    payoff_plot(rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=sweep_times)
def test_lab05s_sizes_lesson_reads_any_sweep_of_this_machine(raw):
    from ringlab.algorithms import build
    from ringlab.lessons.lab05_scaling.sizes import MACHINE, sizes_lesson
    from ringlab.predict import predict
    from ringlab.topology import from_spec

    topology, _ = from_spec(MACHINE, N)
    emulated = [{"algorithm": "ring", "bytes": k, "time_s": t, "busbw_Bps": k / t}
                for k in SIZES for t in [predict(build("allreduce.ring", N), k, topology, itemsize=4).seconds]]
    finding = sizes_lesson(rows_of({"ring": raw}), emulated, N)
    said = finding.text
    assert said.strip() and "nan" not in said and "inf MB/s" not in said


def _overlap_row(buckets, overlap, step, waited, backward, allreduce, skew):
    return {"bucket_bytes": (5 << 20) // buckets, "buckets": buckets, "overlap": overlap, "ranks": 2,
            "gradient_bytes": 5 << 20, "steps": 6, "step_s": step, "waited_s": min(waited, step),
            "backward_s": min(backward, step), "allreduce_s": allreduce, "skew_s": skew, "load": None}


ms = st.floats(min_value=1e-4, max_value=0.5, allow_nan=False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(figures=st.lists(st.tuples(ms, ms, ms, ms, ms), min_size=6, max_size=6), bucket_times=sweep_times)
def test_lab06s_overlap_reads_any_steps_and_any_bucket_sweep(figures, bucket_times):
    from ringlab.algorithms import build
    from ringlab.lessons.lab06_training.overlap import (_step_time, describe_overlap, describe_prediction,
                                                        predict_sweep)
    from ringlab.predict.fitting import fit

    settings_ = [(1, False), (2, False), (4, False), (1, True), (2, True), (4, True)]
    rows = [_overlap_row(k, on, *f) for (k, on), f in zip(settings_, figures)]
    said = describe_overlap(rows, cores=2)
    assert said.strip() and "nan" not in said
    model = fit(build("allreduce.ring", 2), SIZES, bucket_times)
    predicted, compute = predict_sweep(rows, _step_time, model)
    said = describe_prediction(predicted, model, compute)
    assert said.strip() and "nan" not in said and "inf GB/s" not in said
