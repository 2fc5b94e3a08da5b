"""Lab 06's accumulation and large-batch sentences (ringlab.lessons.lab06_training.batches), from runs made by hand, both ways."""
import pytest

from ringlab.lessons.lab06_training.batches import describe_accumulation, describe_large_batches


def row(**changes):
    return {"ranks": 2, "steps": 10, "dtype": "float64", "micro_batch": 32, "difference": 2.8e-17,
            "accumulating_difference": 5.6e-17, "one_micro_batch_difference": 1.2e-2, "largest_weight": 0.255,
            **changes}


def test_accumulation_the_same_weights():
    said = describe_accumulation(row()).splitlines()
    assert said[0] == ("2 ranks each taking one micro-batch of 32 a step, and one process accumulating the 2 "
                       "micro-batches before each step (10 steps of plain SGD, float64): their weights differ by at "
                       "most 2.8e-17 (the largest weight is 0.26), under 1e-06: the same weights, up to the order in "
                       "which floats were added.")
    assert said[1].startswith("2 ranks each accumulating 2 micro-batches (the first backward pass inside no_sync()) "
                              "against one process accumulating 4: 5.6e-17")
    assert said[2] == ("One process taking only the first micro-batch ends 1.2e-02 away from the ranks: a different "
                       "run is told apart.")


def test_accumulation_that_differs_and_a_check_that_tells_nothing_apart():
    said = describe_accumulation(row(accumulating_difference=3e-3, one_micro_batch_difference=1e-7)).splitlines()
    assert said[0].endswith("3.0e-03 is more than 1e-06: these runs did not average the same gradients.")
    assert said[1].endswith(": no further than the others, so these differences tell nothing apart.")


def run(name, batch, steps, lr, accuracy, loss, first_lr=None, warmup=0):
    """A run whose evaluations at steps 0, steps/4, ... have these accuracies and losses."""
    marks = [0] + [steps * i // 4 for i in (1, 2, 3, 4)]
    return {"name": name, "batch": batch, "steps": steps, "samples": steps * batch, "lr": lr,
            "first_lr": lr if first_lr is None else first_lr, "warmup_steps": warmup, "k": 8,
            "points": [{"step": s, "samples": s * batch, "accuracy": a, "loss": l}
                       for s, a, l in zip(marks, accuracy, loss)]}


def runs(same_end=0.908, scaled_end=0.927, warm_end=0.928, scaled_loss=(2.08, 0.5, 0.3, 0.25, 0.213)):
    return [run("baseline", 32, 600, 0.1, [0.14, 0.89, 0.92, 0.93, 0.929], [2.08, 0.4, 0.3, 0.25, 0.217]),
            run("same", 256, 75, 0.1, [0.14, 0.6, 0.8, 0.88, same_end], [2.08, 1.2, 0.7, 0.5, 0.456]),
            run("scaled", 256, 75, 0.8, [0.14, 0.906, 0.92, 0.925, scaled_end], list(scaled_loss)),
            run("warm", 256, 75, 0.8, [0.14, 0.799, 0.91, 0.925, warm_end], [2.08, 0.6, 0.3, 0.25, 0.212],
                first_lr=0.1, warmup=16)]


def test_large_batches_as_linear_scaling_has_it():
    said = describe_large_batches(runs()).splitlines()
    assert said[0] == ("Every run saw 19,200 samples: batch 32 for 600 steps at lr 0.1, and batch 256 (8 times it, "
                       "what 8 ranks see together) for 75 steps at lr 0.1, at 0.8, and at 0.8 reached over 16 steps "
                       "from 0.1.")
    assert said[1] == ("Test accuracy at the end: baseline 0.929 (loss 0.217), same 0.908 (loss 0.456), scaled 0.927 "
                       "(loss 0.213), warm 0.928 (loss 0.212).")
    # the baseline's evaluations nearest step 75 are at 0 and 150: the later one (0.89), which 0.908 kept up with
    assert said[2].startswith("At the baseline's rate the large batch ended 2.1 points behind")
    assert said[2].endswith("Step for step it kept up (0.908 after 75 steps, the baseline 0.890 after 150): "
                            "against steps the large batch looks fine, against samples it is slow.")
    assert said[3] == ("At 8 times the rate it ended within 0.2 points of the baseline: linear scaling held, 8 times "
                       "fewer steps each going 8 times as far.")
    assert said[4].startswith("After the 16 warm-up steps the warmed-up run stood at 0.799 against 0.906 without "
                              "warm-up, and at the end they were within 0.1 points: this small model takes 0.8 from "
                              "the first step without its loss ever rising, so warm-up bought nothing here.")
    assert "Goyal et al. (2017, published)" in said[4]


def test_large_batches_where_scaling_fails_and_warmup_helps():
    said = describe_large_batches(runs(same_end=0.925, scaled_end=0.89, warm_end=0.92,
                                       scaled_loss=(2.08, 3.1, 0.6, 0.4, 0.35))).splitlines()
    assert said[2].startswith("At the baseline's rate the large batch ended within 0.4 points of the baseline")
    assert said[3].startswith("At 8 times the rate it ended 3.9 points behind the baseline: linear scaling did not "
                              "fully hold at this k")
    assert said[4].startswith("Without warm-up the test loss rose above its starting 2.08 along the way")
    assert "at the end warm-up was +3.0 points" in said[4]
    behind = runs(same_end=0.8)
    assert describe_large_batches(behind).splitlines()[2].endswith(
        "Even step for step it was behind (0.800 after 75 steps, the baseline 0.890 after 150).")


def test_runs_that_are_not_the_four():
    with pytest.raises(ValueError, match="need the baseline and three large-batch runs"):
        describe_large_batches(runs()[:3])
