"""ringlab.train.accumulation: k micro-batches accumulated on one rank give the weights of k ranks each
taking one, under real MPI at 2 and 3 ranks.

In float64, so that 1e-6 means something: float64 rounds at about 1e-16 of a weight, so a difference
near 1e-6 can only come from averaging different gradients, never from adding the same ones in another
order. (In float32, rounding alone reaches 1e-7 of a weight within a few steps: 1e-6 would be a few
roundings away, and a wrong average of nearly equal gradients could hide under it.)
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.train.accumulation import check_accumulation, train_accumulating  # noqa: E402
from ringlab.train.task import batches, make_data, make_model, weights  # noqa: E402

SAME = 1e-6


@pytest.mark.parametrize("nranks", [2, 3])
def test_ranks_and_accumulation_end_on_the_same_weights(nranks):
    row = check_accumulation(nranks, steps=10, timeout=300)
    assert (row["ranks"], row["steps"], row["dtype"]) == (nranks, 10, "float64")
    assert row["difference"] <= SAME  # n ranks, one micro-batch each / one process accumulating n
    assert row["accumulating_difference"] <= SAME  # n ranks accumulating 2 with no_sync / one process accumulating 2n
    assert row["one_micro_batch_difference"] > 1e-3  # a different run is told apart: the check can fail


def test_accumulating_is_one_step_on_the_whole_batch():
    x, y, _, _ = make_data()
    micro = batches(x, y, 1, 16)
    whole = batches(x, y, 1, 48)  # the same shuffle per step: the 3 micro-batches of 16, together
    accumulated = train_accumulating(make_model(dtype=torch.float64), micro, steps=5, micro_batches=3)
    model = make_model(dtype=torch.float64)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(5):
        sgd.zero_grad()
        inputs, targets = whole(0, step)
        torch.nn.functional.cross_entropy(model(inputs.double()), targets).backward()
        sgd.step()
    assert np.abs(accumulated - weights(model)).max() <= SAME
    wrong = train_accumulating(make_model(dtype=torch.float64), micro, steps=5, micro_batches=2)
    assert np.abs(wrong - weights(model)).max() > 1e-3


def test_bad_arguments():
    x, y, _, _ = make_data()
    with pytest.raises(ValueError, match="micro_batches must be >= 1"):
        train_accumulating(make_model(), batches(x, y, 1, 8), steps=1, micro_batches=0)
    with pytest.raises(ValueError, match="nranks must be >= 2"):
        check_accumulation(1)
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        check_accumulation(2, dtype="float16")
