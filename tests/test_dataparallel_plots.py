"""Lab 06's figures of when data parallelism pays and of large batches (ringlab.viz.dataparallel), from
rows made by hand: their traces, what each shows, and their labels."""
import pytest

from ringlab.viz.dataparallel import large_batch_plot, payoff_plot


def row(hidden, ranks, predicted, measured=None, predicted_here=None, shares=False):
    return {"hidden": hidden, "gradient_bytes": 23072 if hidden == 64 else 4300832, "compute_s": 400e-6,
            "ranks": ranks, "predicted": predicted, "measured": measured, "predicted_here": predicted_here,
            "shares_cores": shares}


ROWS = [row(64, 1, 1.0), row(64, 2, 1.9, 1.8, 1.88), row(64, 3, 2.8, 1.2, 1.4, shares=True), row(64, 4, 3.7),
        row(1024, 1, 1.0), row(1024, 2, 1.5, 0.9, 1.5), row(1024, 3, 2.0, 0.6, 1.0, shares=True), row(1024, 4, 2.4)]


def traces(fig):
    return {trace.name: trace for trace in fig.data}


def test_lines_predicted_markers_measured():
    shown = traces(payoff_plot(ROWS))
    assert list(shown["ideal: speed-up = ranks"].y) == [1, 2, 3, 4]
    line = shown["width 64 (22.5 KiB, 400 us): predicted"]
    assert list(line.x) == [1, 2, 3, 4] and list(line.y) == [1.0, 1.9, 2.8, 3.7]
    marks = shown["width 1024 (4.1 MiB, 400 us): measured here"]
    assert list(marks.x) == [2, 3] and list(marks.y) == [0.9, 0.6]
    assert list(marks.marker.symbol) == ["circle", "circle-open"]  # open: the ranks shared cores
    crosses = shown["width 1024 (4.1 MiB, 400 us): predicted, ranks sharing cores"]
    assert list(crosses.x) == [3] and list(crosses.y) == [1.0]
    assert len(shown) == 1 + 2 * 3


def test_payoff_labels_and_no_rows():
    fig = payoff_plot(ROWS)
    assert fig.layout.title.text.startswith("speed-up against ranks: lines predicted (cost model")
    assert fig.layout.xaxis.title.text == "ranks" and list(fig.layout.xaxis.tickvals) == [1, 2, 3, 4]
    no_sharing = [dict(r, shares_cores=False) for r in ROWS]
    assert not any("sharing" in name for name in traces(payoff_plot(no_sharing)))
    with pytest.raises(ValueError, match="no rows to plot"):
        payoff_plot([])


def run(name, batch, steps):
    return {"name": name, "batch": batch, "points": [{"step": s, "samples": s * batch, "accuracy": 0.5 + s / 1000,
                                                      "loss": 2 - s / 100} for s in (0, steps // 2, steps)]}


def test_large_batches_against_steps_and_samples():
    runs = [run("baseline", 32, 600), run("large", 256, 75)]
    fig = large_batch_plot(runs)
    assert [t.name for t in fig.data] == ["baseline", "baseline", "large", "large"]
    assert [t.showlegend for t in fig.data] == [True, False, True, False]
    assert list(fig.data[2].x) == [0, 37, 75] and list(fig.data[3].x) == [0, 37 * 256, 75 * 256]
    assert list(fig.data[3].y) == [0.5, 0.537, 0.575]
    assert fig.layout.title.text == "measured here: test accuracy of large batches against the batch-32 baseline"
    loss = large_batch_plot(runs, "loss")
    assert list(loss.data[0].y) == [2.0, -1.0, -4.0] and loss.layout.yaxis.title.text == "test loss (cross-entropy)"
    with pytest.raises(ValueError, match="measure must be 'accuracy' or 'loss'"):
        large_batch_plot(runs, "speed")
    with pytest.raises(ValueError, match="no runs to plot"):
        large_batch_plot([])
