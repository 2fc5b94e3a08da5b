"""A fitted per-step alpha set against a raw MPI message: the wording follows the two numbers
(ringlab.measure.latency)."""
import numpy as np
import pytest

import ringlab as rl
from ringlab.measure.latency import describe_alpha
from ringlab.predict.fitting import fit


def ring_fit(alpha: float, noise=None):
    """A fit of a 4-rank ring allreduce to times made by the cost model at ``alpha`` and 1 GB/s."""
    ring, sizes = rl.build("allreduce.ring", 4), [1 << k for k in range(10, 23, 2)]
    truth = rl.topology.uniform(4, bandwidth=1e9, latency=alpha)
    seconds = np.array([rl.predict(ring, k, truth).seconds for k in sizes])
    if noise is not None:
        seconds = seconds * noise
    return fit(ring, sizes, seconds)


def test_an_alpha_well_above_a_message_is_split_into_message_and_the_rest():
    text = describe_alpha(ring_fit(50e-6), 5e-6, "ring allreduce", nranks=4, cores=2)
    assert text.startswith("This alpha is 50.0 us per step of the ring allreduce; a raw MPI message here")
    assert "takes 5.0 us. The rest, 45.0 us (90% of each step, 10x a raw message in all)" in text
    assert "with 4 ranks on 2 cores, the scheduler" in text
    assert "take alpha as rough" not in text  # exact data: the fit is tight


def test_enough_cores_say_the_scheduler_adds_little():
    text = describe_alpha(ring_fit(50e-6), 5e-6, "ring allreduce", nranks=4, cores=8)
    assert "4 ranks on 8 cores every rank has a core" in text and "the scheduler:" not in text


def test_an_alpha_near_one_message_says_so():
    text = describe_alpha(ring_fit(6e-6), 5e-6, "chain broadcast", nranks=4, cores=2)
    assert "a step costs about one message here, little more" in text and "The rest" not in text


def test_an_alpha_below_one_message_is_called_loose():
    text = describe_alpha(ring_fit(1e-6), 5e-6, "ring allreduce", nranks=4, cores=2)
    assert "below one message, which no real step can cost" in text


def test_a_fit_far_off_its_measurements_is_flagged():
    noisy = ring_fit(50e-6, noise=np.array([1, 1, 3, 1, 1, 1, 1]))  # one measurement three times too slow
    text = describe_alpha(noisy, 5e-6, "ring allreduce", nranks=4, cores=2)
    assert "The fit misses one measurement by" in text and "take alpha as rough" in text


def test_a_message_must_take_time():
    with pytest.raises(ValueError, match="a raw message takes a positive time"):
        describe_alpha(ring_fit(50e-6), 0.0, "ring allreduce", nranks=4, cores=2)


def test_a_step_of_almost_only_overhead_is_not_rounded_to_a_hundred_percent():
    text = describe_alpha(ring_fit(1.36e-3), 2.2e-6, "chain broadcast", nranks=4, cores=2)
    assert "(nearly all of each step, 618x a raw message in all)" in text and "100%" not in text
