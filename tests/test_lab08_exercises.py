"""Lab 08's exercises (issue 51): the learner works out how few GPUs a model needs and derives what stage 3 sends on
other ranks from the lab's measurement; each check accepts the reference and explains a wrong answer by its numbers."""
import math

import pytest

from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab08_sharding_and_memory import checks
from ringlab.train.zero import zero_memory


def test_fewest_gpus_is_the_least_count_that_fits_or_none():
    assert [checks._fewest_gpus(70e9, s) for s in range(4)] == [None, None, None, 14]
    assert [checks._fewest_gpus(13e9, s) for s in range(4)] == [None, 6, 4, 3]
    assert [checks._fewest_gpus(1e9, s) for s in range(4)] == [1, 1, 1, 1]
    for case in checks.FEWEST_CASES:
        n = checks._fewest_gpus(**case)
        if n is not None:
            held = lambda m: sum(zero_memory(case["psi"], m, case["stage"]).values())
            assert held(n) <= case["capacity"] and (n == 1 or held(n - 1) > case["capacity"])


def test_a_wrong_count_is_explained_by_what_it_holds():
    def off_by(delta):
        return lambda psi, stage, capacity=80e9, k=12: (None if checks._fewest_gpus(psi, stage, capacity) is None
                                                        else checks._fewest_gpus(psi, stage, capacity) + delta)
    with pytest.raises(AssertionError, match=r"on 13 GPUs each holds 86\.2 GB, more than 80"):
        checks.check_fewest_gpus(off_by(-1), strict=True)
    with pytest.raises(AssertionError, match="14 already suffice"):
        checks.check_fewest_gpus(off_by(+1), strict=True)
    with pytest.raises(AssertionError, match="at stage 1 each GPU still holds about 280 GB unsharded"):
        checks.check_fewest_gpus(lambda psi, stage, capacity=80e9, k=12: math.ceil(16 * psi / capacity)
                                 if stage else None, strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_fewest_gpus(lambda psi, stage, capacity=80e9, k=12: None, strict=True)


def test_stage3_sent_scales_the_measured_bytes_by_the_ring():
    measured = checks.counted_sent(4)
    assert measured["ZeRO stage 3"] == pytest.approx(1.5 * measured["ZeRO stage 1"])
    assert measured["data parallel"] == measured["ZeRO stage 1"] == pytest.approx(2 * 3 / 4 * 54_430 * 8)
    for new in (2, 5, 8):
        assert checks._stage3_sent(measured, 4, new) == pytest.approx(checks.counted_sent(new)["ZeRO stage 3"])


def test_a_wrong_stage3_answer_names_the_mistake():
    with pytest.raises(AssertionError, match="that is what a rank sent on 4 ranks"):
        checks.check_stage3_sent(lambda sent, ranks, new: sent["ZeRO stage 3"], strict=True)
    with pytest.raises(AssertionError, match="that is what stage 1 sends on 8 ranks"):
        checks.check_stage3_sent(lambda sent, ranks, new: sent["ZeRO stage 1"] * (new - 1) / new * ranks / (ranks - 1),
                                 strict=True)
    with pytest.raises(AssertionError, match="the schedules send"):
        checks.check_stage3_sent(lambda sent, ranks, new: 2 * sent["ZeRO stage 3"], strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_stage3_sent(lambda sent, ranks, new: None, strict=True)
