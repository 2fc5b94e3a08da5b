"""A slow worker made on purpose (ringlab.train.straggler): only the straggler sleeps, by the stated amount."""
import pytest

from ringlab.train.straggler import Straggler


def test_only_the_straggler_is_slowed_by_its_factor_and_extra_seconds():
    slow = Straggler(2, factor=3.0, extra_seconds=0.004)
    assert slow.slow_down(0, 0.001) == 0.001  # another worker: as it was
    assert slow.slow_down(2, 0.001) == pytest.approx(0.001 * 3 + 0.004)
    assert str(slow) == "worker 2 computes 3x as slowly and takes 4 ms more every step"
    assert str(Straggler(0, extra_seconds=0.02)) == "worker 0 takes 20 ms more every step"
    assert str(Straggler(1)) == "worker 1 runs at full speed"


def test_a_pair_is_a_worker_and_a_factor():
    assert Straggler.of((3, 4)) == Straggler(3, factor=4.0)
    assert Straggler.of(None) is None
    same = Straggler(1, extra_seconds=0.1)
    assert Straggler.of(same) is same


@pytest.mark.parametrize("args, message", [((-1,), "worker index"), ((True,), "worker index"),
                                           ((0, 0.5), "factor must be in 1..1000"),
                                           ((0, float("nan")), "factor must be in 1..1000"),
                                           ((0, float("inf")), "factor must be in 1..1000"),
                                           ((0, 1.0, -0.1), "extra_seconds must be in 0..30"),
                                           ((0, 1.0, 1e9), "outlast the others' deadline"),
                                           ((0, 1.0, float("nan")), "extra_seconds must be in 0..30")])
def test_bad_stragglers_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        Straggler(*args)
    with pytest.raises(ValueError, match="a \\(worker, factor\\) pair"):
        Straggler.of((1, 2, 3))
