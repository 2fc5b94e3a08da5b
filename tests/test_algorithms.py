import math

import numpy as np
import pytest

import ringlab as rl
from ringlab.algorithms import options_of

from conftest import all_schedules


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
def test_every_variant_meets_its_end_condition(name):
    """Every builder, 1..16 ranks, every root, several segment counts, every server count."""
    count = 0
    for algo, nranks, opts in all_schedules():
        if algo != name:
            continue
        schedule = rl.build(name, nranks, **opts)
        assert schedule.nranks == nranks and schedule.name == name
        history = rl.check(schedule)  # raises ScheduleError if the end condition is not met
        assert len(history) == len(schedule.steps) + 1
        count += 1
    assert count >= 16


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
def test_one_rank_is_an_empty_schedule(name):
    schedule = rl.build(name, 1)
    assert schedule.steps == () and schedule.num_transfers == 0
    assert rl.simulate(schedule, [np.arange(5)])[0].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("n", range(2, 17))
def test_ring_allreduce_uses_the_textbook_chunk_indices(n):
    """FACTS: reduce-scatter step i, rank j sends chunk (j-i) mod n to j+1 (added in), and then
    holds chunk (j+1) mod n complete; allgather step i, rank j sends chunk (j-i+1) mod n (copied)."""
    ring = rl.build("allreduce.ring", n)
    assert len(ring.steps) == 2 * (n - 1) and ring.nchunks == n
    for i in range(n - 1):
        assert set(ring.steps[i]) == {rl.Transfer(j, (j + 1) % n, (j - i) % n, "reduce") for j in range(n)}
        assert set(ring.steps[n - 1 + i]) == {rl.Transfer(j, (j + 1) % n, (j - i + 1) % n, "copy") for j in range(n)}
    after_reduce_scatter = rl.check(ring)[n - 1]
    for j in range(n):
        assert after_reduce_scatter[j][(j + 1) % n] == frozenset(range(n))


@pytest.mark.parametrize("n", range(2, 17))
def test_reduce_scatter_and_allgather_use_mpi_layout(n):
    """Standalone, rank j ends reduce-scatter owning chunk j, as MPI_Reduce_scatter_block does."""
    final = rl.check(rl.build("reduce_scatter.ring", n))[-1]
    for j in range(n):
        assert final[j][j] == frozenset(range(n))
    gather = rl.build("allgather.ring", n)
    assert set(gather.steps[0]) == {rl.Transfer(j, (j + 1) % n, j, "copy") for j in range(n)}


@pytest.mark.parametrize("n", range(1, 17))
def test_step_counts(n):
    log = math.ceil(math.log2(n)) if n > 1 else 0
    assert len(rl.build("reduce.tree", n).steps) == log
    assert len(rl.build("broadcast.tree", n).steps) == log
    assert len(rl.build("allreduce.tree", n).steps) == 2 * log
    assert len(rl.build("allreduce.naive", n).steps) == (2 if n > 1 else 0)
    for segments in (1, 4):
        expected = segments + n - 2 if n > 1 else 0
        assert len(rl.build("broadcast.chain", n, segments=segments).steps) == expected
        assert len(rl.build("reduce.chain", n, segments=segments).steps) == expected
    p = 1 << (n.bit_length() - 1)
    rhd = rl.build("allreduce.rhd", n)
    assert rhd.nchunks == p
    assert len(rhd.steps) == 2 * int(math.log2(p)) + (2 if n > p else 0)


def test_chain_passes_each_segment_on_the_step_after_it_arrives():
    chain = rl.build("broadcast.chain", 4, root=1, segments=3)
    # root 1 -> 2 -> 3 -> 0; segment s leaves rank root+d at step s+d
    assert [sorted(chain.steps[t]) for t in range(len(chain.steps))] == [
        [(1, 2, 0, "copy")],
        [(1, 2, 1, "copy"), (2, 3, 0, "copy")],
        [(1, 2, 2, "copy"), (2, 3, 1, "copy"), (3, 0, 0, "copy")],
        [(2, 3, 2, "copy"), (3, 0, 1, "copy")],
        [(3, 0, 2, "copy")],
    ]


def test_binomial_tree_reduce_for_five_ranks():
    tree = rl.build("reduce.tree", 5, root=2)
    # distances 1,3 -> 0,2; then 2 -> 0; then 4 -> 0 (distances are from root 2)
    assert [sorted(s) for s in tree.steps] == [
        [(0, 4, 0, "reduce"), (3, 2, 0, "reduce")],
        [(4, 2, 0, "reduce")],
        [(1, 2, 0, "reduce")],
    ]


def test_parameter_server_shards_are_served_by_their_ranks():
    ps = rl.build("allreduce.ps", 4, servers=2)
    push, pull = ps.steps
    assert {t.dst for t in push if t.chunk == 1} == {1}
    assert {t.src for t in pull if t.chunk == 0} == {0}
    assert all(t.op == "reduce" for t in push) and all(t.op == "copy" for t in pull)


@pytest.mark.parametrize("call, message", [
    (lambda: rl.build("allreduce.ring", 0), "nranks must be >= 1, got 0"),
    (lambda: rl.build("allreduce.ring", -3), "nranks must be >= 1, got -3"),
    (lambda: rl.build("allreduce.ring", 2.5), "nranks must be an integer, got 2.5"),
    (lambda: rl.build("allreduce.ring", True), "nranks must be an integer, got True"),
    (lambda: rl.build("reduce.tree", 4, root=4), "root must be a rank in 0..3, got 4"),
    (lambda: rl.build("broadcast.direct", 4, root=-1), "root must be a rank in 0..3, got -1"),
    (lambda: rl.build("allreduce.naive", 4, root="0"), "root must be an integer rank, got '0'"),
    (lambda: rl.build("broadcast.chain", 4, segments=0), "segments must be >= 1, got 0"),
    (lambda: rl.build("reduce.chain", 4, segments=-2), "segments must be >= 1, got -2"),
    (lambda: rl.build("allreduce.ps", 4, servers=0), "servers must be >= 1, got 0"),
    (lambda: rl.build("allreduce.ps", 4, servers=5), r"servers must be in 1..4 for 4 ranks, got 5"),
    (lambda: rl.build("allreduce.rign", 4), "unknown algorithm 'allreduce.rign' \\(did you mean 'allreduce.ring'\\?\\)"),
    (lambda: rl.build("gossip", 4), "unknown algorithm 'gossip'; known: allgather.pat, allgather.ring"),
    (lambda: rl.build("allreduce.ring", 4, root=0), "allreduce.ring does not take option 'root'"),
    (lambda: rl.build("reduce.tree", 4, segments=2), r"reduce.tree does not take option 'segments' \(it takes: root\)"),
])
def test_bad_build_arguments_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_registry_has_the_design_names():
    expected = {"reduce.direct", "reduce.tree", "reduce.chain", "broadcast.direct", "broadcast.tree",
                "broadcast.chain", "reduce_scatter.ring", "allgather.ring", "allreduce.naive",
                "allreduce.ring", "allreduce.ps", "allreduce.tree", "allreduce.rhd"}
    assert expected <= set(rl.ALGORITHMS)
    assert options_of("broadcast.chain") == {"root": 0, "segments": None}
    assert options_of("allreduce.ps") == {"servers": 1}
