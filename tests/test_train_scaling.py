"""ringlab.train.scaling: equal samples at every rank count, and n ranks learning what one process
learns on their slices together (real MPI jobs, a few seconds each)."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.train.scaling import (PER_RANK, measure_scaling, recipe, steps_for,  # noqa: E402
                                   train_in_one_process)
from ringlab.train.task import make_model  # noqa: E402


def test_recipe_scales_batch_and_learning_rate_linearly():
    assert recipe(1) == {"batch": 32, "lr": 0.05, "momentum": 0.9}
    assert recipe(4)["batch"] == 128 and recipe(4)["lr"] == pytest.approx(0.2)


def test_steps_for_equal_samples():
    assert [steps_for(38400, n) for n in (1, 2, 3, 4)] == [1200, 600, 400, 300]
    with pytest.raises(ValueError, match=r"a positive multiple of 32 x ranks \(96 for 3 ranks\).*got 1000"):
        steps_for(1000, 3)
    with pytest.raises(ValueError, match="positive multiple"):
        steps_for(0, 1)
    with pytest.raises(ValueError, match="not both"):
        measure_scaling([1], steps=10, samples=3200)


def test_equal_samples_and_the_one_process_equivalent():
    rows = measure_scaling([1, 2], samples=6400, timeout=300)
    assert [(r["ranks"], r["steps"], r["batch"], r["samples"]) for r in rows] == [(1, 200, 32, 6400),
                                                                                  (2, 100, 64, 6400)]
    assert rows[1]["lr"] == pytest.approx(2 * rows[0]["lr"]) and rows[0]["speedup"] == 1.0
    assert rows[0]["gradient_bytes"] == sum(p.numel() * 4 for p in make_model().parameters())
    assert rows[0]["test_points"] == 2000 and rows[0]["train_points"] == 10000
    alone = train_in_one_process(2, 100)
    assert (alone["batch"], alone["samples"]) == (2 * PER_RANK, 6400)
    assert abs(alone["accuracy"] - rows[1]["accuracy"]) <= 2 / 2000  # the same but for float rounding
    fewer = train_in_one_process(2, 10)  # a different run lands elsewhere: the comparison can fail
    assert abs(fewer["accuracy"] - rows[1]["accuracy"]) > 2 / 2000
