"""Lab 10's exercises (issue 51): the learner solves for the size at which NCCL's model changes protocol, and picks
one-shot or two-shot from what the schedules count; each check accepts the reference and explains a wrong answer."""
import pytest

from ringlab import predict_nccl
from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab10_inside_nccl import checks
from ringlab.topology import preset


def test_the_switch_size_is_where_nccls_model_changes_protocol():
    options = checks.protocol_options()
    topology = preset("hgx-h100-8")
    for small, large in (("LL", "LL128"), ("LL128", "Simple")):
        size = checks._switch_size(options[small], options[large])
        assert 1 << 20 < size < 1 << 30
        for factor, faster in ((0.98, small), (1.02, large)):
            assert checks.fastest_protocol(factor * size, options) == faster
            times = {p: predict_nccl("allreduce", int(factor * size), topology, algorithm="ring", protocol=p).seconds
                     for p in (small, large)}
            assert min(times, key=times.get) == faster  # NCCL's model itself, not only the two numbers


def test_a_wrong_switch_size_says_which_side_it_is_on():
    with pytest.raises(AssertionError, match="LL is still the faster, so the switch is further up"):
        checks.check_switch_size(lambda a, b: 0.5 * checks._switch_size(a, b), strict=True)
    with pytest.raises(AssertionError, match="LL128 is already the faster, so the switch is further down"):
        checks.check_switch_size(lambda a, b: 2 * checks._switch_size(a, b), strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_switch_size(lambda a, b: None, strict=True)


def test_one_shot_or_two_shot_follows_the_counts():
    picks = {(c["nranks"], c["nbytes"]): checks._pick_symmetric(**c) for c in checks.SYMMETRIC_CASES}
    assert {n for (n, _), p in picks.items() if p == "two-shot"} == {4, 8}  # both picks are tried
    assert all(p == "one-shot" for (n, _), p in picks.items() if n == 2)  # reads as much, waits twice
    assert picks[(8, 4 << 10)] == "one-shot" and picks[(8, 16 << 20)] == "two-shot"
    assert checks.check_pick_symmetric(lambda nbytes, nranks, sync_s, read_Bps: checks._pick_symmetric(
        nbytes, nranks, sync_s, read_Bps).replace("-", ""), strict=True)  # "oneshot" is as good


def test_a_wrong_pick_gives_both_costs():
    with pytest.raises(AssertionError, match=r"one-shot waits 1 time and reads 7\.00 buffers: .* two-shot waits 2 "
                                             r"times and reads 1\.75 buffers"):
        checks.check_pick_symmetric(lambda nbytes, nranks, sync_s, read_Bps: "one-shot", strict=True)
    with pytest.raises(NotDoneYet):
        checks.check_pick_symmetric(lambda nbytes, nranks, sync_s, read_Bps: None, strict=True)
