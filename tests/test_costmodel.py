"""The cost model held to the closed forms (MPICH's collective cost formulas, NCCL's ring model)."""
import math
import time

import numpy as np
import pytest

import ringlab as rl
from ringlab.predict.costmodel import best_segments, crossover, whatif
from ringlab.topology import uniform

ALPHA, B, RATE = 5e-6, 10e9, 50e9  # a made-up network: 5 us, 10 GB/s, adds at 50 GB/s
GAMMA = 1 / RATE


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-9)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 16])
def test_ring_allreduce(n):
    K = n * 3 * 2**16
    got = rl.predict(rl.build("allreduce.ring", n), K, uniform(n, B, ALPHA, RATE)).seconds
    assert close(got, 2 * (n - 1) * (ALPHA + K / (n * B)) + (n - 1) * (K / n) * GAMMA)


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_naive_through_one_root(n):
    K = 1 << 20
    got = rl.predict(rl.build("allreduce.naive", n), K, uniform(n, B, ALPHA, RATE)).seconds
    # the root receives n-1 buffers one after another, adds them, then sends n-1
    assert close(got, 2 * (n - 1) * (ALPHA + K / B) + (n - 1) * K * GAMMA)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 13, 16])
def test_binomial_tree(n):
    K = 1 << 20
    log = math.ceil(math.log2(n))
    bcast = rl.predict(rl.build("broadcast.tree", n), K, uniform(n, B, ALPHA, RATE)).seconds
    assert close(bcast, log * (ALPHA + K / B))
    red = rl.predict(rl.build("reduce.tree", n), K, uniform(n, B, ALPHA, RATE)).seconds
    assert close(red, log * (ALPHA + K / B + K * GAMMA))


@pytest.mark.parametrize("n, S", [(2, 1), (4, 4), (8, 16), (16, 5)])
def test_pipelined_chain_broadcast(n, S):
    K = S * 2**16
    got = rl.predict(rl.build("broadcast.chain", n, segments=S), K, uniform(n, B, ALPHA)).seconds
    assert close(got, (n + S - 2) * (ALPHA + K / (S * B)))


@pytest.mark.parametrize("n", [4, 8, 16])
def test_best_chain_segments_match_the_calculus(n):
    K = 1 << 24
    best, seconds = best_segments(n, K, uniform(n, B, ALPHA))
    # d/dS of (n+S-2)(alpha + K/(S B)) = 0 at S = sqrt((n-2) K / (alpha B))
    s_star = math.sqrt((n - 2) * K / (ALPHA * B))
    assert best in (math.floor(s_star), math.ceil(s_star))
    formula = lambda S: (n + S - 2) * (ALPHA + K / (S * B))  # noqa: E731
    # segments differ by at most one byte (array_split), hence the tolerance
    assert seconds == pytest.approx(min(formula(math.floor(s_star)), formula(math.ceil(s_star))), rel=1e-5)


@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_recursive_halving_doubling(p):
    K = p * 2**16
    got = rl.predict(rl.build("allreduce.rhd", p), K, uniform(p, B, ALPHA, RATE)).seconds
    lg = int(math.log2(p))
    assert close(got, 2 * lg * ALPHA + 2 * (p - 1) / p * K / B + (p - 1) / p * K * GAMMA)


def test_recursive_halving_doubling_off_a_power_of_two():
    n, p, K = 6, 4, 4 * 2**16
    got = rl.predict(rl.build("allreduce.rhd", n), K, uniform(n, B, ALPHA, RATE)).seconds
    fold = ALPHA + K / B + K * GAMMA  # the extra ranks' whole buffers, in and out
    unfold = ALPHA + K / B
    assert close(got, fold + 2 * 2 * ALPHA + 2 * (p - 1) / p * K / B + (p - 1) / p * K * GAMMA + unfold)


@pytest.mark.parametrize("n, M", [(4, 1), (8, 1), (8, 2), (8, 4), (12, 3), (8, 8)])
def test_parameter_server_with_m_shards(n, M):
    K = 720720 * 16
    got = rl.predict(rl.build("allreduce.ps", n, servers=M), K, uniform(n, B, ALPHA, RATE)).seconds
    # each server receives n-1 pushes of its shard, adds them, and sends n-1 pulls
    assert close(got, 2 * (n - 1) * ALPHA + 2 * (n - 1) * K / (M * B) + (n - 1) * (K / M) * GAMMA)


def test_on_a_ring_topology_far_neighbours_share_links():
    n, K = 6, 6 * 2**16
    ring_topo = rl.topology.ring(n, B, ALPHA)
    ring = rl.predict(rl.build("allreduce.ring", n), K, ring_topo).seconds
    assert close(ring, 2 * (n - 1) * (ALPHA + K / (n * B)))  # neighbours only: one hop each
    naive = rl.predict(rl.build("allreduce.naive", n), K, ring_topo)
    # every buffer reaches root 0 over its two links, so each carries half of the n-1 buffers
    assert naive.steps["transfer"][0] == pytest.approx((n // 2) * K / B)
    assert naive.bottleneck_link(0).endswith("(ring, 10 GB/s)")


def test_steps_say_which_link_bounded_them():
    p = rl.predict(rl.build("allreduce.ring", 8), 64 << 20, rl.topology.preset("dual-socket-qpi-8"))
    assert p.bottleneck_link(0).startswith("cpu0->cpu1 (qpi")
    assert p.seconds == pytest.approx(p.steps["time"].sum())


def test_tree_beats_ring_below_a_crossover():
    topo = uniform(8, B, ALPHA)
    size = crossover("allreduce.tree", "allreduce.ring", topo)
    ring, tree = rl.build("allreduce.ring", 8), rl.build("allreduce.tree", 8)
    assert rl.predict(tree, size // 2, topo).seconds < rl.predict(ring, size // 2, topo).seconds
    assert rl.predict(ring, size * 2, topo).seconds < rl.predict(tree, size * 2, topo).seconds
    assert crossover("allreduce.ring", "allreduce.ring", topo) is None


def test_whatif_table_over_presets():
    presets = [rl.topology.preset(name) for name in ("dgx1-v100", "dgx2-nvswitch")]
    rows = whatif(["allreduce.ring", "allreduce.tree"], 1 << 26, presets)
    assert [(r["topology"], r["algorithm"]) for r in rows] == [
        ("dgx1-v100", "allreduce.ring"), ("dgx1-v100", "allreduce.tree"),
        ("dgx2-nvswitch", "allreduce.ring"), ("dgx2-nvswitch", "allreduce.tree")]
    assert all(r["seconds"] > 0 and "published" in r["source"] for r in rows)


def test_bad_arguments():
    with pytest.raises(ValueError, match="needs 8 ranks; topology uniform-4 has 4"):
        rl.predict(rl.build("allreduce.ring", 8), 100, uniform(4, B, ALPHA))
    with pytest.raises(ValueError, match="nbytes must be >= 0"):
        rl.predict(rl.build("allreduce.ring", 2), -1, uniform(2, B, ALPHA))
    with pytest.raises(ValueError, match="rank_map must give 3 different ranks"):
        rl.predict(rl.build("allreduce.ring", 3), 100, uniform(4, B, ALPHA), rank_map=[0, 0, 1])
    with pytest.raises(ValueError, match="bandwidth must be > 0"):
        uniform(4, 0, ALPHA)


def test_scale_1024_ranks_is_vectorised():
    """Not a speed target (that lives in benchmarks/predict_scale.py): a guard against a Python
    loop per transfer, which would take minutes here."""
    schedule = rl.build("allreduce.ring", 1024)
    assert schedule.num_transfers == 2046 * 1024
    start = time.perf_counter()
    p = rl.predict(schedule, 1 << 30, uniform(1024, B, ALPHA))
    assert time.perf_counter() - start < 30
    assert close(p.seconds, 2 * 1023 * (ALPHA + (1 << 30) / (1024 * B)))
