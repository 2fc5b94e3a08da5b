"""ringlab.train.large_batch: the four runs on equal samples, seeded, with the learning rates they claim."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.train.large_batch import LR, large_batch_runs, scaled_lr, train_run  # noqa: E402


def test_scaled_lr_rises_linearly_then_holds():
    assert scaled_lr(0.1, 8, 0, 10) == pytest.approx(0.1)
    assert scaled_lr(0.1, 8, 5, 10) == pytest.approx(0.1 * (1 + 7 * 0.5))
    assert scaled_lr(0.1, 8, 10, 10) == scaled_lr(0.1, 8, 99, 10) == pytest.approx(0.8)


@pytest.fixture(scope="module")
def runs():
    return large_batch_runs(k=4, samples=2048, warmup_samples=256, evaluations=4)


def test_four_runs_on_equal_samples(runs):
    assert [r["name"] for r in runs] == ["batch 32, lr 0.1 (baseline)", "batch 128, lr 0.1 (the same)",
                                         "batch 128, lr 0.4, no warm-up", "batch 128, lr 0.4, warm-up over 2 steps"]
    assert [(r["batch"], r["steps"], r["samples"]) for r in runs] == [(32, 64, 2048)] + [(128, 16, 2048)] * 3
    assert [r["first_lr"] for r in runs] == pytest.approx([LR, LR, 4 * LR, LR])
    assert [r["lr"] for r in runs] == pytest.approx([LR, LR, 4 * LR, 4 * LR])  # the last step's
    assert [r["warmup_steps"] for r in runs] == [0, 0, 0, 2]
    for run in runs:
        assert [p["step"] for p in run["points"]] == [0] + [run["steps"] * i // 4 for i in (1, 2, 3, 4)]
        assert run["points"][-1]["samples"] == 2048
        assert run["points"][-1]["loss"] < run["points"][0]["loss"]  # every run learned something


def test_the_runs_are_the_same_every_time(runs):
    again = train_run("again", 128, 16, lambda step: 4 * LR, evaluations=4)
    assert again["points"] == runs[2]["points"]
    other = train_run("other", 128, 16, lambda step: LR, evaluations=4)  # another rate lands elsewhere
    assert other["points"][-1] != runs[2]["points"][-1]


def test_bad_arguments():
    with pytest.raises(ValueError, match="samples must be a positive multiple of k x batch = 256"):
        large_batch_runs(k=8, samples=1000)
    with pytest.raises(ValueError, match="warmup_samples must give 1 to 7 steps of 256"):
        large_batch_runs(k=8, samples=2048, warmup_samples=100)
    with pytest.raises(ValueError, match="k must be >= 2"):
        large_batch_runs(k=1)
