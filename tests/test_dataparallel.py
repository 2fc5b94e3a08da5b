"""ringlab.predict.dataparallel: a data-parallel step in the cost model, held to the closed forms."""
import pytest

from ringlab.predict.dataparallel import allreduce_seconds, speedup, step_seconds

ALPHA, B = 10e-6, 2e9  # 10 us, 2 GB/s


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_the_ring_allreduce_is_the_closed_form(n):
    nbytes = 12 << 20  # divides into n chunks of whole float32s for every n here
    assert allreduce_seconds(nbytes, n, ALPHA, B) == pytest.approx(2 * (n - 1) * ALPHA + 2 * (n - 1) / n * nbytes / B)


def test_one_rank_sends_nothing_and_gains_nothing():
    assert allreduce_seconds(1 << 20, 1, ALPHA, B) == 0.0
    assert speedup(1e-3, 1 << 20, 1, ALPHA, B) == 1.0


def test_speedup_is_n_compute_over_the_step():
    compute, nbytes = 2e-3, 1 << 20
    comm = 2 * 3 * ALPHA + 1.5 * nbytes / B
    assert step_seconds(compute, nbytes, 4, ALPHA, B) == pytest.approx(compute + comm)
    assert speedup(compute, nbytes, 4, ALPHA, B) == pytest.approx(4 * compute / (compute + comm))
    assert speedup(compute, nbytes, 4, ALPHA, B) < 4
    # the same compute with more bytes scales worse; more compute for the same bytes scales better
    assert speedup(compute, 8 * nbytes, 4, ALPHA, B) < speedup(compute, nbytes, 4, ALPHA, B)
    assert speedup(4 * compute, nbytes, 4, ALPHA, B) > speedup(compute, nbytes, 4, ALPHA, B)


def test_ranks_sharing_cores_compute_longer():
    compute, nbytes = 1e-3, 1 << 16
    comm = allreduce_seconds(nbytes, 3, ALPHA, B)
    assert step_seconds(compute, nbytes, 3, ALPHA, B, cores=2) == pytest.approx(1.5 * compute + comm)
    assert step_seconds(compute, nbytes, 2, ALPHA, B, cores=2) == pytest.approx(compute + allreduce_seconds(
        nbytes, 2, ALPHA, B))  # a core each: no sharing


def test_bad_input():
    with pytest.raises(ValueError, match="compute_s must be > 0"):
        speedup(0.0, 1024, 2, ALPHA, B)
    with pytest.raises(ValueError, match="nranks must be >= 1"):
        allreduce_seconds(1024, 0, ALPHA, B)
