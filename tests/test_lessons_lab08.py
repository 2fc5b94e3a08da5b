"""Lab 08's room: the sharding lesson's words follow its numbers, the exercise checks accept the reference and refuse
a wrong answer, the predictions at scale hold, and the plots draw."""
import math

import pytest

from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab08_sharding_and_memory import checks, sharding


def _sharding_result(stage3_s=0.03, stage2_s=0.02):
    held = lambda p, g, s: [{"parameters": p, "gradients": g, "optimizer_state": s}] * 2
    rows = [{"variant": "data parallel", "held": held(80, 80, 160), "sent": [80, 80], "calls": 1,
             "measured_s": 0.02, "predicted_s": 0.018, "formula": 320},
            {"variant": "ZeRO stage 1", "held": held(80, 80, 80), "sent": [80, 80], "calls": 6,
             "measured_s": 0.02, "predicted_s": 0.018, "formula": 240},
            {"variant": "ZeRO stage 2", "held": held(80, 40, 80), "sent": [80, 80], "calls": 6,
             "measured_s": stage2_s, "predicted_s": 0.018, "formula": 200},
            {"variant": "ZeRO stage 3", "held": held(40, 40, 80), "sent": [120, 120], "calls": 9,
             "measured_s": stage3_s, "predicted_s": 0.027, "formula": 160}]
    return {"rows": rows, "machine": "uniform:0.05:20", "ranks": 2, "nparams": 10}


def test_the_sharding_lesson_follows_its_numbers():
    finding = sharding.sharding_lesson(_sharding_result())
    assert finding.conclusions == ("each stage holds less than the one before", "stage 3 sends 1.5x what data "
                                   "parallelism sends", "stages 1 and 2 take about as long on the emulated machine",
                                   "stage 3 is the slowest on the emulated machine")
    assert "On the emulated links a step took, in virtual time, 20.0 ms with plain data parallelism" in finding.text
    assert "wall time" not in finding.text
    walled = _sharding_result()
    walled["rows"] = [dict(r, wall_s=0.05 * (i + 1)) for i, r in enumerate(walled["rows"])]
    assert "This machine took 50.0, 100.0, 150.0, 200.0 ms of wall time a step" in sharding.sharding_lesson(walled).text
    slow = sharding.sharding_lesson(_sharding_result(stage3_s=0.021, stage2_s=0.02))
    assert "stage 3 is not clearly the slowest on the emulated machine" in slow.conclusions
    assert [r["ratio"] for r in sharding.memory_rows(_sharding_result())] == [1.0, 1.0, 1.0, 1.0]


def test_at_scale_plain_data_parallelism_does_not_fit_and_stage_3_sends_most():
    rows = sharding.at_scale()
    dp = [r for r in rows if r["variant"] == "data parallel"]
    assert all(not r["fits"] and r["memory"] == pytest.approx(120e9) for r in dp)
    for machine in sharding.SCALE_MACHINES:
        mine = {r["variant"]: r for r in rows if r["machine"] == machine}
        assert mine["ZeRO stage 3"]["comm_s"] > mine["ZeRO stage 1"]["comm_s"] >= mine["data parallel"]["comm_s"]
    assert "ZeRO stage 1 is the first that fits" in sharding.describe_at_scale(rows)


def test_the_checks_take_the_reference_and_refuse_a_wrong_answer():
    assert checks.check_fewest_gpus(checks._fewest_gpus, strict=True) is checks._fewest_gpus
    with pytest.raises(AssertionError, match="no number of GPUs fits"):  # counts through what stays whole
        checks.check_fewest_gpus(lambda psi, stage, capacity=80e9, k=12: math.ceil((4 + k) * psi / capacity),
                                 strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_fewest_gpus(lambda psi, stage, capacity=80e9, k=12: None, strict=True)
    assert checks.check_stage3_sent(checks._stage3_sent, strict=True) is checks._stage3_sent
    with pytest.raises(AssertionError, match="Hint"):
        checks.check_stage3_sent(lambda sent, ranks, new_ranks: sent["ZeRO stage 3"], strict=True)


def test_the_plots_draw():
    from ringlab.viz import parallelism as P

    result = _sharding_result()
    assert len(P.memory_bars(result).data) == 4
    assert P.scale_bars(sharding.at_scale()).data
