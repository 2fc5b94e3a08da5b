import math

import pytest
from hypothesis import given, strategies as st

import ringlab as rl

from conftest import variants


@pytest.mark.parametrize("n", range(2, 17))
def test_ring_allreduce_moves_2_n_minus_1_over_n(n):
    K = n * 1000  # divisible by n, so chunks are equal
    counts = rl.traffic(rl.build("allreduce.ring", n), K)
    assert counts["sent"] == [2 * (n - 1) * K // n] * n
    assert counts["received"] == [2 * (n - 1) * K // n] * n


@pytest.mark.parametrize("n", range(2, 17))
def test_naive_and_single_server_load_the_root_with_n_minus_1_k(n):
    K = 4096
    for schedule in (rl.build("allreduce.naive", n), rl.build("allreduce.ps", n, servers=1)):
        counts = rl.traffic(schedule, K)
        assert counts["received"][0] == (n - 1) * K and counts["sent"][0] == (n - 1) * K
        assert counts["sent"][1:] == [K] * (n - 1) and counts["received"][1:] == [K] * (n - 1)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8, 12, 16])
def test_sharded_server_load_divides_by_m(n):
    for m in range(1, n + 1):
        K = 720720  # divisible by 1..16
        counts = rl.traffic(rl.build("allreduce.ps", n, servers=m), K)
        # as a server each of the M ranks takes (n-1)K/M in and out: the single server's load / M;
        # as a worker it also pushes and pulls the M-1 shards it does not serve
        serve, work = (n - 1) * K // m, (m - 1) * K // m
        assert counts["received"][:m] == [serve + work] * m
        assert counts["sent"][:m] == [serve + work] * m
        assert counts["received"][m:] == [K] * (n - m) and counts["sent"][m:] == [K] * (n - m)


@pytest.mark.parametrize("n", range(2, 17))
def test_tree_and_chain_closed_forms(n):
    K = 1000
    tree = rl.traffic(rl.build("reduce.tree", n, root=0), K)
    assert tree["received"][0] == math.ceil(math.log2(n)) * K  # one child per level
    assert sum(tree["sent"]) == (n - 1) * K  # every non-root sends its partial sum once
    chain = rl.traffic(rl.build("broadcast.chain", n, root=0, segments=5), K)
    assert chain["received"] == [0] + [K] * (n - 1)
    assert chain["sent"] == [K] * (n - 1) + [0]
    rs = rl.traffic(rl.build("reduce_scatter.ring", n), n * K)
    assert rs["sent"] == [(n - 1) * K] * n


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_is_bandwidth_optimal_on_powers_of_two(n):
    K = n * 64
    counts = rl.traffic(rl.build("allreduce.rhd", n), K)
    assert counts["sent"] == [2 * (n - 1) * K // n] * n


@given(name=st.sampled_from(sorted(rl.ALGORITHMS)), n=st.integers(1, 16), nbytes=st.integers(0, 5000))
def test_every_byte_sent_is_received(name, n, nbytes):
    counts = rl.traffic(rl.build(name, n, **variants(name, n)[0]), nbytes)
    assert sum(counts["sent"]) == sum(counts["received"])


@given(n=st.integers(1, 16), nbytes=st.integers(0, 100))
def test_ring_total_is_2_n_minus_1_k_even_with_empty_chunks(n, nbytes):
    # every chunk travels n-1 hops in each phase, whatever its size
    assert sum(rl.traffic(rl.build("allreduce.ring", n), nbytes)["sent"]) == 2 * (n - 1) * nbytes


def test_chunks_are_cut_on_element_boundaries():
    # 10 float32 elements over 3 chunks: 4, 3, 3 elements = 16, 12, 12 bytes
    counts = rl.traffic(rl.build("reduce_scatter.ring", 3), 40, itemsize=4)
    assert sorted(counts["sent"]) == [24, 28, 28]
    assert sorted(rl.traffic(rl.build("reduce_scatter.ring", 3), 40)["sent"]) == [26, 27, 27]


@pytest.mark.parametrize("nbytes, itemsize, message", [
    (-1, 1, "nbytes must be >= 0"),
    (10, 4, "nbytes=10 is not a whole number of 4-byte elements"),
    (8, 0, "itemsize must be >= 1"),
    (1.5, 1, "nbytes must be an integer"),
])
def test_bad_sizes(nbytes, itemsize, message):
    with pytest.raises(ValueError, match=message):
        rl.traffic(rl.build("allreduce.ring", 2), nbytes, itemsize)
