"""NCCL's algorithms as schedules: the double binary tree, several rings (channels), hierarchical allreduce.

Each is checked by provenance, against numpy's sum, against closed forms for its traffic, in the
cost model and the widget, and on MPI ranks against MPI's own Allreduce.
"""
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st

import ringlab as rl
from ringlab.algorithms.dbtree import btree, dtree
from ringlab.cluster.launch import run_mpi
from ringlab.predict.rings import ring_orders

HERE = Path(__file__).parent / "mpi"
NEW = ("allreduce.dbtree", "allreduce.rings", "allreduce.hierarchical")
LCM = 720720  # divisible by 1..16


def link_bytes(schedule, nbytes: int) -> dict[tuple[int, int], int]:
    """Bytes sent over each (src, dst) pair, counted from the transfers themselves."""
    sizes = np.diff(rl.chunk_bounds(nbytes, schedule.nchunks))
    links: dict[tuple[int, int], int] = {}
    for step in schedule.steps:
        for t in step:
            links[t.src, t.dst] = links.get((t.src, t.dst), 0) + int(sizes[t.chunk])
    return links


@st.composite
def new_schedules(draw):
    """One of the three algorithms on 1..16 ranks with options drawn from everything they accept."""
    name = draw(st.sampled_from(NEW))
    n = draw(st.integers(1, 16))
    if name == "allreduce.dbtree":
        options = {"segments": draw(st.integers(1, 9))}
    elif name == "allreduce.rings":
        k = draw(st.integers(1, 4))
        if draw(st.booleans()):
            options = {"rings": k}
        else:  # k orders of our own
            options = {"orders": tuple(tuple(draw(st.permutations(range(n)))) for _ in range(k))}
    else:
        options = {"local": draw(st.integers(1, n))}
    return rl.build(name, n, **options)


@given(schedule=new_schedules(), count=st.integers(0, 60) | st.sampled_from([0, 1, 1001]),
       dtype=st.sampled_from([np.int64, np.float64]), seed=st.integers(0, 2**16))
def test_simulated_result_is_the_numpy_sum(schedule, count, dtype, seed):
    """Any n, option and size (0, and fewer elements than chunks, included): every rank ends with the sum."""
    rl.check(schedule)
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-1000, 1000, count).astype(dtype) for _ in range(schedule.nranks)]
    want = np.sum(inputs, axis=0)
    for out in rl.simulate(schedule, inputs):
        assert out.dtype == dtype and np.array_equal(out, want)  # small integers: exact in float64 too


@pytest.mark.parametrize("name", NEW)
def test_one_rank_moves_nothing_and_two_ranks_work(name):
    assert rl.build(name, 1).steps == ()
    two = rl.build(name, 2)
    assert [out.tolist() for out in rl.simulate(two, [np.arange(5), np.arange(5) * 10])] == [[0, 11, 22, 33, 44]] * 2


# --- the double binary tree -------------------------------------------------------------------

def children(parents, rank):
    return sorted(r for r, p in enumerate(parents) if p == rank)


def test_trees_are_nccls():
    """The pictures in NCCL's src/graph/trees.cc: 12 ranks (second tree mirrored), 13 (shifted by one)."""
    first, second = dtree(12)
    assert first == btree(12) and first.index(-1) == 0
    assert {r: children(first, r) for r in (0, 8, 4, 10, 2, 6)} == {
        0: [8], 8: [4, 10], 4: [2, 6], 10: [9, 11], 2: [1, 3], 6: [5, 7]}
    assert second.index(-1) == 11
    assert {r: children(second, r) for r in (11, 3, 1, 7, 5, 9)} == {
        11: [3], 3: [1, 7], 1: [0, 2], 7: [5, 9], 5: [4, 6], 9: [8, 10]}
    first, second = dtree(13)
    assert children(first, 8) == [4, 12] and children(first, 12) == [10]
    assert second.index(-1) == 1
    assert {r: children(second, r) for r in (1, 9, 5, 0, 3, 7, 11)} == {
        1: [9], 9: [0, 5], 5: [3, 7], 0: [11], 3: [2, 4], 7: [6, 8], 11: [10, 12]}


@pytest.mark.parametrize("n", range(1, 65))
def test_a_rank_that_forwards_in_one_tree_is_a_leaf_in_the_other(n):
    """Binary trees with one root each; every rank is a leaf in one of them, except rank 0 when n is odd
    (the root of the first tree, one child in each)."""
    trees = dtree(n)
    for parents in trees:
        assert parents.count(-1) == 1 and all(len(children(parents, r)) <= 2 for r in range(n))
    interior_in_both = [r for r in range(n) if all(children(parents, r) for parents in trees)]
    assert interior_in_both == ([0] if n % 2 and n > 1 else [])
    assert all(len(children(parents, 0)) == 1 for parents in trees if n > 1 and n % 2)


def tree_levels(parents):
    depth = [0] * len(parents)
    for rank in range(len(parents)):
        up = parents[rank]
        while up >= 0:
            depth[rank], up = depth[rank] + 1, parents[up]
    return max(depth)


@pytest.mark.parametrize("n", range(2, 17))
@pytest.mark.parametrize("segments", [1, 2, 5])
def test_dbtree_pipelines_one_level_per_step(n, segments):
    """S + 2H - 1 steps (H the trees' height); step 0 is the leaves sending segment 0 up."""
    schedule = rl.build("allreduce.dbtree", n, segments=segments)
    height = max(tree_levels(parents) for parents in dtree(n))
    assert schedule.nchunks == 2 * segments and len(schedule.steps) == segments + 2 * height - 1
    first = schedule.steps[0]
    assert set(first.chunk.tolist()) == {0, segments} and set(first.op.tolist()) == {"reduce"}
    for tree, parents in enumerate(dtree(n)):
        leaves = {r for r in range(n) if not children(parents, r) and parents[r] >= 0}
        assert {t.src for t in first if t.chunk == tree * segments} == leaves


@given(n=st.integers(1, 16), segments=st.integers(1, 9), nbytes=st.integers(0, 50_000))
def test_dbtree_traffic_is_the_tree_degrees_times_the_halves(n, segments, nbytes):
    """Exact for any K: rank r sends (and receives) deg_0(r) H_0 + deg_1(r) H_1, deg_t its degree in
    tree t and H_t the bytes of tree t's S chunks; all ranks together send 2(n-1)K."""
    counts = rl.traffic(rl.build("allreduce.dbtree", n, segments=segments), nbytes)
    bounds = rl.chunk_bounds(nbytes, 2 * segments)
    halves = [int(bounds[segments] - bounds[0]), int(bounds[2 * segments] - bounds[segments])]
    for rank in range(n):
        want = sum((len(children(parents, rank)) + (parents[rank] >= 0)) * half
                   for parents, half in zip(dtree(n), halves))
        assert counts["sent"][rank] == counts["received"][rank] == want
    assert sum(counts["sent"]) == 2 * (n - 1) * nbytes


@pytest.mark.parametrize("n", range(2, 65))
def test_dbtree_per_rank_closed_form(n):
    """Equal halves (2S | K): ranks 1..n-2 send and receive 2K each (3 K/2 where they forward, K/2
    where they are a leaf); the tree ends less: n even: K at ranks 0 and n-1; n odd: 3K/2 at ranks 0
    and n-1, K at rank 1. S changes the steps, not the bytes."""
    K = 2 * 8 * LCM
    want = [2 * K] * n
    if n % 2 == 0:
        want[0] = want[-1] = K
    else:
        want[0], want[1], want[-1] = 3 * K // 2, K, 3 * K // 2
    for segments in (1, 2, 8):
        counts = rl.traffic(rl.build("allreduce.dbtree", n, segments=segments), K)
        assert counts["sent"] == counts["received"] == want


# --- rings ------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", range(2, 17))
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_rings_each_rank_sends_2_n_minus_1_over_n_k(n, k):
    """k rings of K/k each: every rank sends and receives 2(n-1)/n K in all; the default orders
    alternate direction, so (n >= 3) rank r sends ceil(k/2) rings' 2(n-1)/(nk) K to r+1 and
    floor(k/2) rings' to r-1."""
    K = 12 * LCM  # divisible by n k (up to 16 x 4)
    schedule = rl.build("allreduce.rings", n, rings=k)
    counts = rl.traffic(schedule, K)
    assert counts["sent"] == counts["received"] == [2 * (n - 1) * K // n] * n
    assert schedule.nchunks == n * k and len(schedule.steps) == 2 * (n - 1)
    if n >= 3:
        per_ring = 2 * (n - 1) * K // (n * k)
        links = link_bytes(schedule, K)
        for r in range(n):
            assert links[r, (r + 1) % n] == (k + 1) // 2 * per_ring
            assert links.get((r, (r - 1) % n), 0) == k // 2 * per_ring
        assert len(links) == (2 * n if k > 1 else n)


def test_rings_follow_their_orders_and_one_ring_is_allreduce_ring():
    n = 6
    one = rl.build("allreduce.rings", n, rings=1)
    assert [list(s) for s in one.steps] == [list(s) for s in rl.build("allreduce.ring", n).steps]
    orders = ((0, 2, 4, 1, 3, 5), (5, 3, 1, 4, 2, 0))
    schedule = rl.build("allreduce.rings", n, orders=[list(o) for o in orders])
    assert schedule.options == {"rings": 2, "orders": orders}  # rings follows from orders
    for p, order in enumerate(orders):
        used = {(t.src, t.dst) for step in schedule.steps for t in step if p * n <= t.chunk < (p + 1) * n}
        assert used == {(order[i], order[(i + 1) % n]) for i in range(n)}


def test_ring_orders_from_the_ring_search():
    topology = rl.topology.preset("dgx1-v100")
    orders = ring_orders(topology, 2)
    assert len(orders) == 2 and all(sorted(o) == list(range(8)) for o in orders)
    assert orders[1] == (orders[0][0], *orders[0][:0:-1])  # the same ring backwards
    best = rl.predict(rl.build("allreduce.rings", 8, orders=orders), 1 << 26, topology).seconds
    plain = rl.predict(rl.build("allreduce.rings", 8), 1 << 26, topology).seconds
    assert 0 < best <= plain
    assert len(ring_orders(topology, 3)) == 3


# --- hierarchical -----------------------------------------------------------------------------

def node_traffic(schedule, local: int, nbytes: int):
    """(inside, across): bytes each rank sends to ranks of its own node and of other nodes."""
    inside, across = [0] * schedule.nranks, [0] * schedule.nranks
    for (src, dst), size in link_bytes(schedule, nbytes).items():
        (inside if src // local == dst // local else across)[src] += size
    return inside, across


@pytest.mark.parametrize("n", range(1, 17))
def test_hierarchical_closed_forms_when_nodes_are_equal(n):
    """L | n, G = n/L nodes, n | K: every rank sends 2(L-1)/L K inside its node and 2(G-1)/n K across
    (2(n-1)/n K in all, like a ring), in 2(L-1) + 2(G-1) steps."""
    K = LCM
    for local in (size for size in range(1, n + 1) if n % size == 0):
        G = n // local
        schedule = rl.build("allreduce.hierarchical", n, local=local)
        inside, across = node_traffic(schedule, local, K)
        assert inside == [2 * (local - 1) * K // local] * n
        assert across == [2 * (G - 1) * K // n] * n
        assert rl.traffic(schedule, K)["received"] == [2 * (n - 1) * K // n] * n
        assert len(schedule.steps) == 2 * (local - 1) + 2 * (G - 1)


@given(n=st.integers(1, 16), data=st.data(), nbytes=st.integers(0, 20_000))
def test_hierarchical_totals_for_any_node_size(n, data, nbytes):
    """Any L (a smaller last node included) and any K: all ranks together send 2(G-1)K across nodes and
    2(n-G)K inside them."""
    local = data.draw(st.integers(1, n), label="local")
    G = -(-n // local)
    inside, across = node_traffic(rl.build("allreduce.hierarchical", n, local=local), local, nbytes)
    assert sum(across) == 2 * (G - 1) * nbytes
    assert sum(inside) == 2 * (n - G) * nbytes


def test_hierarchical_across_nodes_only_holders_of_the_same_shard_talk():
    schedule = rl.build("allreduce.hierarchical", 8, local=4)
    across = {(t.src, t.dst) for step in schedule.steps for t in step if t.src // 4 != t.dst // 4}
    assert across == {(j, j + 4) for j in range(4)} | {(j + 4, j) for j in range(4)}
    uneven = rl.build("allreduce.hierarchical", 7, local=3)  # nodes {0,1,2} {3,4,5} {6}: rank 6 holds every shard
    assert {t.src for step in uneven.steps for t in step if t.dst == 6} == {3, 4, 5}  # the ring of shard j: 0+j, 3+j, 6
    assert {t.dst for step in uneven.steps for t in step if t.src == 6} == {0, 1, 2}
    assert rl.build("allreduce.hierarchical", 5).options == {}  # local=None: one node
    assert len(rl.build("allreduce.hierarchical", 5).steps) == 8


# --- options, cost model, widget ----------------------------------------------------------------

@pytest.mark.parametrize("name, options, message", [
    ("allreduce.rings", {"rings": 0}, "rings must be >= 1, got 0"),
    ("allreduce.rings", {"rings": "2"}, "rings must be an integer, got '2'"),
    ("allreduce.rings", {"orders": [[0, 1, 2, 2]]},
     r"orders\[0\] must be a permutation of the ranks 0..3, got \(0, 1, 2, 2\)"),
    ("allreduce.rings", {"orders": [[0, 1, 2]]}, r"orders\[0\] must be a permutation of the ranks 0..3"),
    ("allreduce.rings", {"orders": [[0, 1, 2, 3], [0, 1.0, 2, 3]]}, r"orders\[1\] must be a permutation"),
    ("allreduce.rings", {"orders": 3}, "orders must be a sequence of rank orders, one per ring, got 3"),
    ("allreduce.rings", {"orders": []}, "orders must give at least one rank order"),
    ("allreduce.rings", {"rings": 3, "orders": [[0, 1, 2, 3]]}, r"orders has 1 rank order\(s\), but rings=3"),
    ("allreduce.hierarchical", {"local": 0}, "local must be >= 1, got 0"),
    ("allreduce.hierarchical", {"local": 5}, r"local \(ranks per node\) must be in 1..4 for 4 ranks, got 5"),
    ("allreduce.hierarchical", {"local": 1.5}, "local must be an integer, got 1.5"),
    ("allreduce.dbtree", {"segments": 0}, "segments must be >= 1, got 0"),
    ("allreduce.dbtree", {"local": 2}, r"allreduce.dbtree does not take option 'local' \(it takes: segments\)"),
])
def test_bad_options_say_what_is_wrong(name, options, message):
    with pytest.raises(ValueError, match=message):
        rl.build(name, 4, **options)


@pytest.mark.parametrize("name, options", [("allreduce.dbtree", {"segments": 4}), ("allreduce.rings", {"rings": 2}),
                                           ("allreduce.hierarchical", {"local": 4})])
def test_cost_model_and_widget_take_them(name, options):
    from ringlab.viz import StepThrough

    schedule = rl.build(name, 8, **options)
    assert rl.predict(schedule, 1 << 26, rl.topology.preset("dgx1-v100")).seconds > 0
    widget = StepThrough(schedule)
    widget.step = len(schedule.steps)
    assert widget.step == len(schedule.steps)


# --- on MPI ranks ---------------------------------------------------------------------------------

@pytest.mark.parametrize("nranks", [2, 3, 4, 6])
def test_they_match_mpi_allreduce_and_refuse_bad_options_everywhere(nranks):
    done = run_mpi(nranks, [str(HERE / "check_nccl_algorithms.py")], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout
    said = json.loads(done.stdout.strip().splitlines()[-2])
    expected = {
        "rings=0": "rl.allreduce: rings must be >= 1, got 0",
        "local=0": "rl.allreduce: local must be >= 1, got 0",
        "local=n+1": f"rl.allreduce: local (ranks per node) must be in 1..{nranks} for {nranks} ranks, "
                     f"got {nranks + 1}",
        "segments=0": "rl.allreduce: segments must be >= 1, got 0",
        "orders not a permutation": f"rl.allreduce: orders[0] must be a permutation of the ranks 0..{nranks - 1}, "
                                    f"got {(0,) * nranks}",
        "orders and rings differ": "rl.allreduce: orders has 1 rank order(s), but rings=3: give one per ring",
        "local differs on rank 1": "rl.allreduce: the ranks disagree (local: rank 0 has 1, rank 1 has 2)",
    }
    assert said == {case: [message] * nranks for case, message in expected.items()}
