"""Pipeline parallelism on paper (ringlab.predict.pipeline, ringlab.viz.pipeline, ringlab.lessons.lab06_training.pipeline): the
GPipe schedule built from dependencies alone has the bubble of the formula, the parameter count matches
torch's own transformer layer, and the exercise accepts the formula and rejects a wrong one."""
import pytest

from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab06_training.pipeline import check_bubble_fraction
from ringlab.lessons.lab06_training.pipeline import describe_bubble, describe_pipeline_traffic
from ringlab.predict.pipeline import (BACKWARD, FORWARD, bubble_fraction, gpipe_schedule, idle_slots, pipeline_traffic,
                                      transformer_layer_parameters)
from ringlab.viz.pipeline import bubble_plot, pipeline_chart


@pytest.mark.parametrize("n, m", [(1, 1), (1, 5), (2, 1), (2, 3), (4, 1), (4, 4), (4, 8), (5, 7), (8, 3), (8, 32)])
def test_the_drawn_schedules_idle_slots_equal_the_formula(n, m):
    grid = gpipe_schedule(n, m)
    slots = len(grid[0])
    assert all(len(row) == slots for row in grid) and slots == 2 * (m + n - 1)
    assert idle_slots(grid) == 2 * n * (n - 1)
    assert idle_slots(grid) / (n * slots) == pytest.approx(bubble_fraction(n, m), rel=1e-12)


@pytest.mark.parametrize("n, m", [(3, 4), (4, 8)])
def test_every_pass_runs_once_after_its_input(n, m):
    grid = gpipe_schedule(n, m)
    when = {(cell, stage): slot for stage, row in enumerate(grid) for slot, cell in enumerate(row) if cell}
    assert len(when) == 2 * n * m  # each micro-batch forward and backward on every stage, once
    for j in range(m):
        for s in range(1, n):
            assert when[((FORWARD, j), s)] > when[((FORWARD, j), s - 1)]
            assert when[((BACKWARD, j), s - 1)] > when[((BACKWARD, j), s)]
        assert when[((BACKWARD, j), n - 1)] > when[((FORWARD, j), n - 1)]


def test_bad_counts_are_refused():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="stages must be a whole number >= 1"):
            gpipe_schedule(bad, 4)
        with pytest.raises(ValueError, match="microbatches must be a whole number >= 1"):
            bubble_fraction(4, bad)
    with pytest.raises(ValueError, match="30 layers do not split evenly into 4 stages"):
        pipeline_traffic(64, 8, 30, 1, 4, 4)


def test_the_layer_count_and_the_boundary_match_torchs_transformer_layer():
    torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")
    for hidden in (32, 64):
        layer = torch.nn.TransformerEncoderLayer(d_model=hidden, nhead=4, dim_feedforward=4 * hidden,
                                                 batch_first=True)
        assert sum(p.numel() for p in layer.parameters()) == transformer_layer_parameters(hidden)
        out = layer(torch.zeros(3, 5, hidden))  # 3 sequences of 5 tokens: what the next stage receives
        row = pipeline_traffic(hidden, sequence=5, layers=2, microbatch=3, microbatches=4, devices=2,
                               bytes_per_value=4)
        assert row["activation_bytes"] == out.numel() * out.element_size()


def test_the_traffic_of_a_pipeline_against_data_parallel():
    row = pipeline_traffic(hidden=4096, sequence=2048, layers=32, microbatch=1, microbatches=8, devices=4)
    weights = 32 * (12 * 4096 ** 2 + 13 * 4096) * 2
    assert row["weight_bytes"] == weights and row["stage_weight_bytes"] == weights // 4
    assert row["activation_bytes"] == 2048 * 4096 * 2 and row["pipeline_bytes"] == 8 * 2048 * 4096 * 2
    assert row["allreduce_bytes"] == 2 * 3 * weights // 4  # 2(n-1)/n of the gradients
    assert row["bubble"] == 3 / 11
    text = describe_pipeline_traffic(row)
    assert "32 layers of hidden size 4096 hold 6.44 billion parameters: 12 GiB of weights" in text
    assert "8 micro-batches of 1 sequence of 2,048 tokens" in text
    assert "a pipeline boundary carries 16 MiB per micro-batch each way" in text and "128 MiB per step" in text
    assert "That is 144x fewer bytes each way across a pipeline link" in text
    assert "with 4 stages and 8 micro-batches, 27% of each step's stage-time is idle" in text
    tiny = pipeline_traffic(hidden=8, sequence=512, layers=2, microbatch=8, microbatches=4, devices=2)
    assert "more than the allreduce" in describe_pipeline_traffic(tiny)  # activations outweigh 2 tiny layers


def test_the_bubble_is_described_from_the_grid():
    text = describe_bubble(gpipe_schedule(4, 8))
    assert "4 stages x 22 slots = 88 stage-slots, 24 of them idle (27.3%)" in text
    assert "every stage idles 6 slots, 2(n-1) = 6" in text and "3/11 gives 27.3%: the same" in text
    grid = gpipe_schedule(4, 8)
    grid[0][10] = grid[0][0]  # pretend stage 0 were busy in a slot it idles (8-13: between F7 and B7)
    assert "not the same" in describe_bubble(grid) and "stages idle 5, 6 slots" in describe_bubble(grid)


def test_the_chart_shows_every_pass_and_every_idle_slot():
    grid = gpipe_schedule(3, 2)
    fig = pipeline_chart(grid)
    shown = {trace.name: trace for trace in fig.data}
    assert sorted(shown["forward"].text) == sorted(["F0", "F1"] * 3)
    assert sorted(shown["backward"].text) == sorted(["B0", "B1"] * 3)
    assert len(shown["idle (the bubble)"].x) == idle_slots(grid) == 12
    assert fig.layout.title.text == "3 stages, 8 slots: 12 of 24 stage-slots idle (50%)"
    curves = bubble_plot((4, 8), max_microbatches=16)
    assert [t.name for t in curves.data] == ["4 stages", "8 stages"]
    assert curves.data[1].y[0] == 7 / 8 and curves.data[0].y[-1] == 3 / 19


def test_the_exercise_accepts_the_formula_and_rejects_wrong_ones(capsys):
    right = lambda n, m: (n - 1) / (m + n - 1)  # noqa: E731
    assert check_bubble_fraction(right, strict=True) is right
    assert "Correct" in capsys.readouterr().out
    for wrong in (lambda n, m: (n - 1) / m, lambda n, m: (n - 1) / (m + n), lambda n, m: 1 / m):
        with pytest.raises(AssertionError, match="bubble_fraction\\(n=4, m=8\\) returned"):
            check_bubble_fraction(wrong, strict=True)
    with pytest.raises(NotDoneYet):
        check_bubble_fraction(lambda n, m: None, strict=True)
    assert check_bubble_fraction(lambda n, m: 1 / m, strict=False) is not None  # the reference, lab runs on
    assert "is not right yet" in capsys.readouterr().out
