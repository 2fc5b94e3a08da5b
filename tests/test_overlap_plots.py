"""Lab 06's pictures of buckets and overlap (ringlab.viz.overlap), from rows and trace records made by hand."""
import numpy as np
import pytest

from ringlab.train.buckets import TRACE_DTYPE
from ringlab.viz.overlap import bucket_sweep_plot, median_step, overlap_timeline


def row(buckets, overlap, step, waited, cap, predicted=None):
    out = {"bucket_bytes": cap, "buckets": buckets, "overlap": overlap, "ranks": 2, "gradient_bytes": 5 << 20,
           "step_s": step, "waited_s": waited}
    return out if predicted is None else dict(out, predicted_s=predicted)


ROWS = [row(1, False, 0.10, 0.03, 5 << 20), row(4, False, 0.11, 0.04, 1 << 20), row(1, True, 0.10, 0.03, 5 << 20),
        row(4, True, 0.08, 0.01, 1 << 20)]


def _plain(title: str) -> str:
    """A title as read: long titles are wrapped to the figure's width with <br> at spaces (issue 51)."""
    return title.replace("<br>", " ")


def traces(fig):
    return {trace.name: trace for trace in fig.data}


def test_step_and_waiting_against_buckets():
    fig = bucket_sweep_plot(ROWS)
    shown = traces(fig)
    assert set(shown) == {"step, overlap off", "step, overlap on", "waiting on communication, overlap off",
                          "waiting on communication, overlap on"}
    assert list(shown["step, overlap on"].x) == [1, 4] and list(shown["step, overlap on"].y) == pytest.approx([100, 80])
    assert list(shown["waiting on communication, overlap off"].y) == pytest.approx([30, 40])
    assert fig.layout.title.text == "measured here: a training step on 2 ranks against its bucket count (5 MiB of gradients)"
    assert list(fig.layout.xaxis.ticktext) == ["1<br>(5 MiB)", "4<br>(1 MiB)"]
    assert fig.layout.yaxis.title.text == "time per step (ms)"
    with pytest.raises(ValueError, match="no rows to plot"):
        bucket_sweep_plot([])


def test_predictions_are_dashed_and_said_in_the_title():
    fig = bucket_sweep_plot([dict(r, predicted_s=r["step_s"] / 2) for r in ROWS])
    predicted = traces(fig)["step predicted, overlap on"]
    assert predicted.line.dash == "dash" and list(predicted.y) == pytest.approx([50, 40])
    assert _plain(fig.layout.title.text).endswith("; dashed: predicted, alpha and B fitted here")


def records(extras=(0.0, 0.0, 0.0), ranks=2):
    """Two parameters in two buckets a rank, a step per entry of ``extras``: how much longer its last allreduce took."""
    rows = []
    for step, extra in enumerate(extras):
        t0 = step * 10.0
        for rank in range(ranks):
            rows.append(("backward", "out.weight", 0, rank, step, t0, t0 + 0.01, 400, np.nan, 0.0))
            rows.append(("backward", "in.weight", 1, rank, step, t0 + 0.01, t0 + 0.03, 800, np.nan, 0.0))
            rows.append(("allreduce", "bucket 0", 0, rank, step, t0 + 0.012, t0 + 0.02, 400, t0 + 0.01, 0.0))
            rows.append(("allreduce", "bucket 1", 1, rank, step, t0 + 0.03, t0 + 0.05 + extra, 800, t0 + 0.03, 0.02))
    return np.array(rows, dtype=TRACE_DTYPE)


def test_timeline_of_one_step_per_rank_from_the_trace():
    fig = overlap_timeline({"overlap off": records(), "overlap on": records()}, step=2)
    bars = [t for t in fig.data if t.type == "bar"]
    assert {b.name for b in bars} == {"bucket 0", "bucket 1"}
    backward = [b for b in bars if b.y[0].endswith("backward") and b.name == "bucket 1"][0]
    assert list(backward.y) == ["rank 0 backward", "rank 1 backward"]
    assert list(backward.base) == pytest.approx([10, 10]) and list(backward.x) == pytest.approx([20, 20])  # ms
    allreduce = [b for b in bars if b.y[0].endswith("allreduce") and b.name == "bucket 0"][0]
    assert list(allreduce.base) == pytest.approx([12, 12]) and list(allreduce.x) == pytest.approx([8, 8])
    diamonds = [t for t in fig.data if t.type == "scatter"]
    assert sorted(x for d in diamonds for x in d.x) == pytest.approx([10, 10, 10, 10, 30, 30, 30, 30])
    assert sum(b.showlegend for b in bars) == 2  # one legend entry a bucket, not one a panel
    assert [a.text for a in fig.layout.annotations] == ["overlap off", "overlap on"]
    assert _plain(fig.layout.title.text).startswith("measured here: backward layer by layer against each bucket's "
                                                    "allreduce, every rank (overlap off: step 2; overlap on: step 2) "
                                                    "colour: the bucket")
    assert "step() waited 20 ms for it" in [b for b in bars if b.name == "bucket 1"][-1].hovertext[0]


def test_a_timeline_in_virtual_time_names_its_emulated_machine_not_this_one():
    clock = "virtual (emulated uniform:0.25:50, modelled compute)"
    fig = overlap_timeline({"overlap off": records(), "overlap on": records()}, step=2, clock=clock)
    assert _plain(fig.layout.title.text).startswith("in virtual time on the emulated uniform:0.25:50, modelled "
                                                    "compute: backward layer by layer")
    here = overlap_timeline({"on": records()}, step=2, clock="host (time.perf_counter)")
    assert _plain(here.layout.title.text).startswith("measured here: backward layer by layer")


def test_the_default_step_is_the_median_one():
    assert median_step(records((0.0, 0.5, 0.1))) == 2  # steps of 50, 550 and 150 ms
    assert median_step(records((0.3, 0.0, 0.1, 0.2))) == 2  # of four, the shorter middle one
    fig = overlap_timeline({"off": records((0.0, 0.5, 0.1)), "on": records((0.2, 0.1, 0.0))})
    assert "(off: step 2; on: step 1)" in _plain(fig.layout.title.text)
    with pytest.raises(ValueError, match="no rows of step 7"):
        overlap_timeline({"on": records()}, step=7)
    with pytest.raises(ValueError, match="no traces"):
        overlap_timeline({})
