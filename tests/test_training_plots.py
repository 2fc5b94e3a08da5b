"""The speed-up figure of lab 06 (ringlab.viz.training): its traces, title and axes, from rows made by hand."""
import pytest

from ringlab.viz.training import speedup_plot


def row(ranks, speedup, steps, samples=38400):
    return {"ranks": ranks, "speedup": speedup, "steps": steps, "samples": samples, "algorithm": "ring",
            "samples_per_s": 50000 * speedup, "comm_share": 0.1 * ranks}


ROWS = [row(1, 1.0, 1200), row(2, 1.9, 600), row(4, 0.6, 300)]


def traces(fig):
    return {trace.name: trace for trace in fig.data}


def test_measured_speedup_against_the_ideal_and_the_cores_ceiling():
    fig = speedup_plot(ROWS, cores=2)
    shown = traces(fig)
    assert set(shown) == {"measured here", "ideal: speed-up = ranks", "ideal on 2 cores: a rank per core at most"}
    assert list(shown["measured here"].x) == [1, 2, 4] and list(shown["measured here"].y) == [1.0, 1.9, 0.6]
    assert list(shown["ideal: speed-up = ranks"].y) == [1, 2, 4]
    assert list(shown["ideal on 2 cores: a rank per core at most"].y) == [1, 2, 2]
    assert fig.layout.title.text == ("measured here: data-parallel training speed-up against ranks "
                                     "(ring allreduce, 38,400 samples each)")
    assert fig.layout.xaxis.title.text == "ranks" and list(fig.layout.xaxis.tickvals) == [1, 2, 4]
    assert fig.layout.yaxis.title.text == "speed-up over 1 rank (×, samples/s ratio)"


def test_no_cores_ceiling_where_every_rank_had_a_core():
    assert "ideal on 8 cores: a rank per core at most" not in traces(speedup_plot(ROWS, cores=8))
    assert len(speedup_plot(ROWS).data) == 2  # cores unknown: measured and ideal only


def test_the_ideal_starts_from_the_first_run():
    rows = [row(2, 1.0, 600), row(4, 1.5, 300), row(8, 1.2, 150)]
    fig = speedup_plot(rows, cores=4)
    shown = traces(fig)
    assert list(shown["ideal: speed-up = ranks / 2"].y) == [1, 2, 4]
    assert list(shown["ideal on 4 cores: a rank per core at most"].y) == [1, 2, 2]
    assert fig.layout.yaxis.title.text.startswith("speed-up over 2 ranks")


def test_the_title_says_what_the_runs_shared():
    same_steps = [row(n, 1.0, 300, samples=300 * 32 * n) for n in (1, 2)]
    assert speedup_plot(same_steps).layout.title.text.endswith("(ring allreduce, 300 steps each)")
    assert speedup_plot(ROWS, title="mine").layout.title.text == "mine"


def test_no_rows_is_an_error():
    with pytest.raises(ValueError, match="no rows to plot"):
        speedup_plot([])
