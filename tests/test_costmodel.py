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
    with pytest.raises(ValueError, match="bandwidth must be a finite number > 0"):
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


# --- NCCL's protocols, link ratings, half-duplex links, NVLS -------------------------------------------

US = 1e-6


@pytest.mark.parametrize("n", [2, 3, 8])
def test_protocols_charge_nccls_latencies_and_rate_shares(n):
    """On a uniform network (which counts as the network hardware class): Simple pays 8.4 us a call and
    14 us a step at the whole rate, LL 6.6 us and 2.7 us a step at half the rate (NCCL's tuning model)."""
    K = n * 3 * 2**16
    topo = uniform(n, B, ALPHA)
    ring = rl.build("allreduce.ring", n)
    simple = rl.predict(ring, K, topo, protocol="Simple")
    assert close(simple.seconds, 8.4 * US + 2 * (n - 1) * (14.0 * US + K / (n * B)))
    assert simple.protocol == "Simple" and close(simple.overhead, 8.4 * US)
    ll = rl.predict(ring, K, topo, protocol="ll")
    assert close(ll.seconds, 6.6 * US + 2 * (n - 1) * (2.7 * US + K / (n * 0.5 * B)))
    best = rl.predict(ring, K, topo, protocol="auto")
    assert best.seconds == min(simple.seconds, ll.seconds) and best.protocol in ("LL", "Simple")
    with pytest.raises(ValueError, match="unknown protocol 'fast'; known: LL, LL128, Simple"):
        rl.predict(ring, K, topo, protocol="fast")


def test_auto_moves_from_ll_to_simple_as_messages_grow_and_uses_ll128_only_over_nvlink():
    ring = rl.build("allreduce.ring", 8)
    h100 = rl.topology.preset("hgx-h100-8")
    chosen = [rl.predict(ring, size, h100, itemsize=4, protocol="auto").protocol for size in (1 << 12, 1 << 24, 1 << 30)]
    assert chosen == ["LL", "LL128", "Simple"]
    pcie = rl.topology.preset("rtx4090-8-p2p-on")
    assert {rl.predict(ring, size, pcie, 4, protocol="auto").protocol for size in (1 << 12, 1 << 24, 1 << 30)} \
        <= {"LL", "Simple"}
    step = rl.predict(ring, 1 << 20, pcie, 4, protocol="LL").steps
    assert step["latency"].max() == pytest.approx(1.0 * US)  # a PCIe step of LL
    assert rl.predict(ring, 1 << 20, h100, 4, protocol="LL").steps["latency"].max() == pytest.approx(0.6 * US)


def test_a_step_crossing_the_network_pays_the_network_latency():
    cluster = rl.topology.preset("ib-2x8-h100")
    p = rl.predict(rl.build("allreduce.ring", 16), 1 << 20, cluster, 4, protocol="Simple")
    assert p.steps["latency"].max() == pytest.approx(14.0 * US)  # ranks 7 -> 8 and 15 -> 0 cross nodes


def test_links_carry_their_rate_not_their_peak():
    from ringlab.topology import Link, Topology

    rated = Topology("rated", ("a", "b"), (Link("a", "b", 10e9, 0.0, "pcie", efficiency=0.5),))
    p = rl.predict(rl.build("allreduce.ring", 2), 2 << 20, rated)
    assert close(p.steps["transfer"].sum(), 2 * (1 << 20) / 5e9)


def test_a_half_duplex_link_carries_both_directions_at_one_rate():
    from ringlab.topology import Link, Topology

    def ring_on(duplex):
        topo = Topology("pair", ("a", "b"), (Link("a", "b", 10e9, 0.0, "host", duplex=duplex),))
        return rl.predict(rl.build("allreduce.ring", 2), 2 << 20, topo).steps["transfer"].sum()

    assert close(ring_on(False), 2 * ring_on(True))  # a and b send to each other at every step


def test_staging_through_host_memory_shares_the_switch_uplink():
    """2 GPUs behind one PCIe switch without P2P: an allgather of K moves K/2 each way, and every byte
    crosses the switch's uplink twice (up to memory and down), both ranks' bytes at one half-duplex rate."""
    K = 1 << 26
    off = rl.topology.preset("pcie3-switch-2-p2p-off")
    rate = off.links[0].rate
    got = rl.predict(rl.build("allgather.ring", 2), K, off, itemsize=4).steps["transfer"].sum()
    assert close(got, 2 * K / rate)
    on = rl.predict(rl.build("allgather.ring", 2), K, rl.topology.preset("pcie3-switch-2"), 4)
    assert close(on.steps["transfer"].sum(), (K / 2) / rate)


def test_nvls_closed_form():
    from ringlab.predict import nvls_allreduce, nvls_busbw
    from ringlab.predict.nvls import EFFICIENCY, LATENCY

    h100 = rl.topology.preset("hgx-h100-8")
    rate = h100.links[0].rate
    K = 1 << 30
    assert close(nvls_allreduce(K, h100), LATENCY + K * 9 / (8 * rate * EFFICIENCY))
    # past the ring's ceiling (busbw = the port's rate): 2(n-1)/(n+1) of it, before the latency
    assert nvls_busbw(1 << 40, h100) == pytest.approx(14 / 9 * rate * EFFICIENCY, rel=1e-3)
    assert nvls_busbw(1 << 40, h100) > rate
    with pytest.raises(ValueError, match="hgx-a100-8: its switches cannot add"):
        nvls_allreduce(K, rl.topology.preset("hgx-a100-8"))


def test_versus_sets_nccls_model_beside_measured_rows():
    from ringlab.predict.harness import harness
    from ringlab.predict.nccl import predict_nccl
    from ringlab.predict.versus import model_seconds, versus

    h100 = rl.topology.preset("hgx-h100-8")
    rows = [{"bytes": 0, "busbw_Bps": None}, {"bytes": 1 << 20, "busbw_Bps": 2e9},
            {"bytes": 1 << 24, "busbw_Bps": None, "inplace_busbw_Bps": 5e9}]
    got = versus(rows, h100, "allreduce", "ring")
    assert [r["bytes"] for r in got] == [1 << 20, 1 << 24] and got[1]["measured_busbw"] == 5e9
    for r in got:
        p = predict_nccl("allreduce", r["bytes"], h100, "ring")
        assert close(r["predicted_busbw"], p.busbw) and close(r["ratio"], r["predicted_busbw"] / r["measured_busbw"])
        assert r["predicted"] == f"ring, {p.protocol}"
    assert model_seconds("best", "allreduce", 1 << 30, h100)[1] == "nvls, Simple"
    assert model_seconds("best", "allreduce", 1 << 30, rl.topology.preset("hgx-a100-8"))[1] == "ring, Simple"
    g8 = harness("nccl-tests", 8)  # one thread driving 8 GPUs: no call faster than its launches
    assert model_seconds("ring", "allreduce", 8, h100, bench=g8)[0] == g8.floor
    with pytest.raises(ValueError, match="unknown model 'fastest'"):
        versus(rows, h100, "allreduce", "fastest")


def test_an_alltoallv_is_priced_round_by_round_as_the_pairwise_alltoall_with_equal_blocks():
    from ringlab.predict import predict_alltoallv
    from ringlab.topology import from_spec

    topology, _ = from_spec("uniform:10:5", 4)
    block = 1 << 20
    equal = np.full((4, 4), block)
    pairwise = rl.predict(rl.build("alltoall.pairwise", 4), 4 * 4 * block, topology).seconds  # n x n blocks
    assert predict_alltoallv(equal, topology) == pytest.approx(pairwise, rel=1e-12)  # the same rounds, the same bytes
    skewed = equal.copy()
    skewed[0, 1] = 8 * block  # one large message: its round takes its time, the others are unchanged
    one_round = 5e-6 + block / 10e9
    assert predict_alltoallv(skewed, topology) == pytest.approx(pairwise - one_round + 5e-6 + 8 * block / 10e9,
                                                                rel=1e-9)
    assert predict_alltoallv(np.diag([block] * 4), topology) == 0.0  # what stays home costs nothing
    with pytest.raises(ValueError, match="square table of bytes >= 0"):
        predict_alltoallv(np.ones((4, 3)), topology)
