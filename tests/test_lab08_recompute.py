"""Lab 08's activation memory (issue 51): what a small transformer keeps for backward is measured layer by layer and
equals Korthikanti et al.'s count plus what it leaves out; full recomputation keeps the layer's input alone; the words
follow the numbers (driven from both sides of each verdict); the planner's Llama 3 70B says when recomputation pays."""
import pytest

from ringlab.lessons.lab08_sharding_and_memory import recompute as R

SMALL = dict(layers=2, seq=16, batch=2, hidden=16, heads=2)


@pytest.fixture(scope="module")
def measured():
    return R.measure_recompute(SMALL, repeats=2)


def test_each_layer_keeps_the_count_and_only_its_input_when_recomputing(measured):
    count = measured["count"]
    s, b, h, a = SMALL["seq"], SMALL["batch"], SMALL["hidden"], SMALL["heads"]
    assert count["per_token"] == 32 * h  # Korthikanti et al.'s 34 h less two dropout masks, in bytes (16-bit)
    assert count["full"] == 32 * s * b * h + 2 * a * s * s * b
    assert measured["kept"]["keep"] == [count["full"] + count["uncounted"]] * SMALL["layers"]
    assert measured["kept"]["recompute"] == [2 * s * b * h] * SMALL["layers"] == [count["recompute"]] * SMALL["layers"]
    rows = R.recompute_rows(measured)
    assert [r["layer"] for r in rows] == [0, 1] and all(r["count_recompute"] == r["recompute"] for r in rows)
    assert all(v > 0 for v in measured["seconds"].values())


def _result(keep=None, again=None, seconds=(0.001, 0.003, 0.004)):
    count = R.korthikanti_bytes(64, 2, 32, 4)
    keep = count["full"] + count["uncounted"] if keep is None else keep
    again = count["recompute"] if again is None else again
    return {"shape": dict(layers=2, seq=64, batch=2, hidden=32, heads=4), "count": count, "repeats": 5,
            "kept": {"keep": [keep] * 2, "recompute": [again] * 2},
            "seconds": dict(zip(("forward", "keep", "recompute"), seconds))}


def test_the_words_name_what_the_count_leaves_out_only_when_it_is_that():
    told = R.recompute_lesson(_result())
    assert "the 5 KiB more are LayerNorm's means and inverse deviations and the causal mask" in told.text
    assert "its input alone, the count's 2 s b h" in told.text
    assert told.conclusions == ("recomputation keeps 4.1% of a layer's activations",
                                "the measured bytes are the count's plus what it leaves out")
    exact = R.recompute_lesson(_result(keep=R.korthikanti_bytes(64, 2, 32, 4)["full"]))
    assert "; exactly." in exact.text and "LayerNorm" not in exact.text
    assert exact.conclusions[1] == "the measured bytes are the count's"
    other = R.recompute_lesson(_result(keep=300_000, again=16384))
    assert "than the count" in other.text and "LayerNorm" not in other.text and "its input alone" not in other.text
    assert "against the count's 8 KiB (its input)" in other.text


def test_the_words_on_time_follow_the_measured_extra_forward():
    one = R.recompute_lesson(_result(seconds=(0.001, 0.003, 0.004)))
    assert one.observations == ("recomputation cost about one more forward on this machine",)
    assert "1.00 ms more, 33% of the step" in one.text and "about one more forward" in one.text
    many = R.recompute_lesson(_result(seconds=(0.001, 0.003, 0.006)))
    assert many.observations == ("recomputation cost other than one more forward on this machine",)
    assert "3.0 forwards' time, not one" in many.text
    less = R.recompute_lesson(_result(seconds=(0.001, 0.003, 0.0032)))
    assert less.observations == ("recomputation cost other than one more forward on this machine",)
    assert "0.2 of a forward's time, less than the forward it runs again" in less.text and "Python" not in less.text
    none = R.recompute_lesson(_result(seconds=(0.001, 0.003, 0.003)))
    assert none.observations == ("recomputation took no longer on this machine",) and "noise" in none.text


def _plan(fits, memory, activations, compute, step, recompute):
    return {"tp": 8, "pp": 4, "micro_batch": 1, "recompute": recompute, "activations": activations, "memory": memory,
            "capacity": 80.0, "fits": fits, "compute_s": compute, "step_s": step}


def test_the_plans_say_recompute_only_where_it_buys_the_fit():
    def said(keep_fits, full_fits):
        return R.describe_plans([_plan(keep_fits, 90 if not keep_fits else 40, 30, 12, 14, "none"),
                                 _plan(full_fits, 50 if full_fits else 85, 3, 16, 19, "full")])

    off = said(True, True)
    assert off.conclusions == ("tp=8 pp=4 micro-batch 1: leave recomputation off",)
    assert "cuts activations from 30.0 to 3.0 GiB a GPU and adds 4.00 s of compute a step (33%" in off.text
    assert said(False, True).conclusions == ("tp=8 pp=4 micro-batch 1: recompute to fit",)
    assert "buys the fit, for 5.0 s a step" in said(False, True).text
    assert said(False, False).conclusions == ("tp=8 pp=4 micro-batch 1: fits neither way",)


def test_the_planner_on_llama_3_70b():
    rows = R.llama_plans()
    first, again = rows[0], rows[1]
    assert (first["recompute"], again["recompute"]) == ("none", "full")
    assert again["activations"] < first["activations"] / 5 and again["compute_s"] == pytest.approx(
        first["compute_s"] * 4 / 3, rel=0.05)  # the matmuls a third more: one more forward
    assert R.describe_plans(rows).conclusions == ("tp=8 pp=4 micro-batch 1: leave recomputation off",
                                                  "tp=4 pp=4 micro-batch 4: recompute to fit")
