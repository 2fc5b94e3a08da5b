"""Gather, scatter and alltoall: their collectives' provenance, every builder's result and traffic against
closed forms, wrong schedules caught, and rl.gather / rl.scatter / rl.alltoall against MPI's own calls."""
import math
from pathlib import Path

import numpy as np
import pytest

import ringlab as rl
from ringlab.predict.costmodel import predict, whatif
from ringlab.schedule import BUS_FACTORS, Collective, bus_factor, chunk_bounds, nccl_tests_size
from ringlab.cluster.launch import run_mpi
from ringlab.topology import uniform

HERE = Path(__file__).parent / "mpi"
GATHER = ["gather.direct", "gather.ring", "gather.tree"]
SCATTER = ["scatter.direct", "scatter.ring", "scatter.tree"]
ALLTOALL = ["alltoall.direct", "alltoall.pairwise", "alltoall.ring"]
RANKS = range(1, 17)


def lowbit(d: int) -> int:
    return d & -d


def inputs(nranks, count, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, count) for _ in range(nranks)]


def chunk(array, bounds, c):
    return array[bounds[c]:bounds[c + 1]]


def counts(n, blocks: int):
    """Element counts worth trying: none, fewer than the chunks, uneven, even, and a random one."""
    rng = np.random.default_rng(n * 31 + blocks)
    return sorted({0, 1, blocks - 1, blocks, blocks + 1, 3 * blocks, int(rng.integers(0, 5 * blocks + 7))})


def test_the_new_collectives_state_start_and_end():
    g = Collective("gather", 3, 3, root=1)
    assert g.start_table() == tuple(tuple(frozenset({r}) if r == c else frozenset() for c in range(3)) for r in range(3))
    assert g.end_table() == ((None,) * 3, (frozenset({0}), frozenset({1}), frozenset({2})), (None,) * 3)
    s = Collective("scatter", 3, 3, root=2)
    assert s.start_table() == ((frozenset(),) * 3, (frozenset(),) * 3, (frozenset({2}),) * 3)
    assert s.end_table() == tuple(tuple(frozenset({2}) if r == c else None for c in range(3)) for r in range(3))
    a = Collective("alltoall", 3, 9)  # chunk s*3+d: rank s's block for rank d
    assert [c for c in range(9) if a.start(1, c)] == [3, 4, 5] and a.start(1, 3) == frozenset({1})
    assert [(c, a.end(2, c)) for c in range(9) if a.end(2, c) is not None] == [
        (2, frozenset({0})), (5, frozenset({1})), (8, frozenset({2}))]


@pytest.mark.parametrize("kwargs, message", [
    (dict(kind="gather", nranks=3, nchunks=3), "root must be an integer rank, got None"),
    (dict(kind="scatter", nranks=3, nchunks=3, root=3), r"root must be a rank in 0..2, got 3"),
    (dict(kind="gather", nranks=3, nchunks=2, root=0), "gather needs one owner per chunk: 3 owners for 2 chunks"),
    (dict(kind="scatter", nranks=2, nchunks=2, root=0, owners=(0, 2)), r"chunk owners must be ranks 0..1, got 2"),
    (dict(kind="alltoall", nranks=3, nchunks=3), r"alltoall needs n x n chunks .*: 3 chunks for 3 ranks"),
    (dict(kind="alltoall", nranks=2, nchunks=4, root=0), "alltoall has no root"),
    (dict(kind="alltoall", nranks=2, nchunks=4, owners=(0, 1, 0, 1)), "alltoall has no chunk owners"),
])
def test_bad_collectives_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Collective(**kwargs)


def test_gather_and_scatter_take_owners_of_their_own():
    g = Collective("gather", 2, 4, root=0, owners=(0, 0, 1, 1))  # two chunks per rank
    assert g.start(1, 2) == frozenset({1}) and g.end(0, 3) == frozenset({1})
    two_each = rl.make_schedule("gather", 2, 4, [[(1, 0, 2, "copy"), (1, 0, 3, "copy")]], root=0, owners=(0, 0, 1, 1))
    assert rl.check(two_each)[-1][0] == (frozenset({0}),) * 2 + (frozenset({1}),) * 2


@pytest.mark.parametrize("name", GATHER + SCATTER)
def test_gather_and_scatter_give_numpys_answer_for_every_root(name):
    kind = name.split(".")[0]
    for n in RANKS:
        for root in range(n):
            schedule = rl.build(name, n, root=root)
            assert schedule.collective.root == root and schedule.nchunks == n
            rl.check(schedule)
            for count in counts(n, n):
                xs = inputs(n, count, seed=n * 100 + root)
                out = rl.simulate(schedule, xs)
                bounds = chunk_bounds(count, n)
                for c in range(n):
                    if kind == "gather":  # the root holds every rank's own block
                        assert np.array_equal(chunk(out[root], bounds, c), chunk(xs[c], bounds, c)), (n, root, c)
                    else:  # rank c holds the root's block c
                        assert np.array_equal(chunk(out[c], bounds, c), chunk(xs[root], bounds, c)), (n, root, c)


@pytest.mark.parametrize("name", ALLTOALL)
def test_alltoall_transposes_the_blocks(name):
    for n in RANKS:
        schedule = rl.build(name, n)
        assert schedule.nchunks == n * n
        for b in (0, 1, 3):  # blocks of b elements: the schedule's buffer is n*n*b
            xs = inputs(n, n * n * b, seed=n + b)
            out = rl.simulate(schedule, xs)
            sent = np.stack([xs[s].reshape(n, n, b)[s] for s in range(n)])      # sent[s, d]: rank s's block for d
            received = np.stack([out[d].reshape(n, n, b)[:, d] for d in range(n)])  # received[d, s]: from rank s
            assert np.array_equal(received, sent.transpose(1, 0, 2)), (name, n, b)
        for count in counts(n, n * n):  # any count at all, fewer elements than chunks too
            xs = inputs(n, count, seed=count)
            out, bounds = rl.simulate(schedule, xs), chunk_bounds(count, n * n)
            for s in range(n):
                for d in range(n):
                    assert np.array_equal(chunk(out[d], bounds, s * n + d), chunk(xs[s], bounds, s * n + d))


def gather_traffic(name, n, root, K):
    """(sent, received) per rank, closed forms, for a buffer of K bytes (n blocks of K/n)."""
    block = K // n
    distance = [(r - root) % n for r in range(n)]
    if name == "gather.direct":
        sent = [block * (d > 0) for d in distance]
    elif name == "gather.ring":  # rank root+d passes on d blocks: its own and those of root+1 .. root+d-1
        sent = [block * d for d in distance]
    else:  # binomial tree: rank at distance d sends its subtree, min(lowbit(d), n - d) blocks
        sent = [block * min(lowbit(d), n - d) if d else 0 for d in distance]
    if name == "gather.ring":  # root+d receives from root+d-1 all it sent but its own block; the root n-1
        received = [block * (n - 1) if d == 0 else block * (d - 1) for d in distance]
    elif name == "gather.direct":
        received = [block * (n - 1) * (d == 0) for d in distance]
    else:
        received = [sum(sent[(root + e) % n] for e in range(d + 1, n) if e - lowbit(e) == d) for d in distance]
    return sent, received


@pytest.mark.parametrize("n", RANKS)
def test_gather_and_scatter_traffic_closed_forms(n):
    K = 8 * n * 9
    for root in range(n):
        for name in GATHER:
            sent, received = gather_traffic(name, n, root, K)
            assert rl.traffic(rl.build(name, n, root=root), K) == {"sent": sent, "received": received}, (name, root)
            assert received[root] == (n - 1) * K // n and sum(sent) == sum(received)
            # scatter.direct and .tree are gather's steps run backwards: what a rank sent there it receives here
            mirror = name.replace("gather", "scatter")
            want = {"sent": received, "received": sent}
            if name == "gather.ring":  # scatter's ring runs the same way round: root+d receives the blocks of
                distance = [(r - root) % n for r in range(n)]  # root+d .. root+n-1 and passes all but its own on
                want = {"sent": [K // n * (n - 1 - d) for d in distance],
                        "received": [K // n * (n - d) * (d > 0) for d in distance]}
            assert rl.traffic(rl.build(mirror, n, root=root), K) == want, mirror
    if n > 1:
        assert sum(gather_traffic("gather.ring", n, 0, K)[0]) == n * (n - 1) // 2 * K // n


@pytest.mark.parametrize("n", RANKS)
def test_alltoall_traffic_closed_forms(n):
    """K is the schedule's buffer, n*n blocks; one rank's own buffer (MPI's, nccl-tests' size) is K/n."""
    K = 8 * n * n * 5
    own = K // n
    assert rl.traffic(rl.build("alltoall.direct", n), K) == {"sent": [(n - 1) * own // n] * n,
                                                              "received": [(n - 1) * own // n] * n}
    assert rl.traffic(rl.build("alltoall.pairwise", n), K) == {"sent": [(n - 1) * own // n] * n,
                                                                "received": [(n - 1) * own // n] * n}
    ring = n * (n - 1) // 2 * K // (n * n)  # (n-1) + (n-2) + ... + 1 blocks: (n-1)/2 of a rank's own buffer
    assert rl.traffic(rl.build("alltoall.ring", n), K) == {"sent": [ring] * n, "received": [ring] * n}


@pytest.mark.parametrize("n", RANKS)
def test_step_counts_and_the_pairwise_exchange(n):
    log = math.ceil(math.log2(n)) if n > 1 else 0
    expected = {"gather.direct": min(n - 1, 1), "gather.ring": n - 1, "gather.tree": log,
                "alltoall.direct": min(n - 1, 1), "alltoall.pairwise": n - 1, "alltoall.ring": n - 1}
    for name, steps in expected.items():
        assert len(rl.build(name, n).steps) == steps, name
        if name.startswith("gather"):
            assert len(rl.build(name.replace("gather", "scatter"), n).steps) == steps
    pairwise = rl.build("alltoall.pairwise", n)
    for i, step in enumerate(pairwise.steps, start=1):  # step i: rank s sends block s*n+(s+i) to rank s+i
        assert set(step) == {rl.Transfer(s, (s + i) % n, s * n + (s + i) % n, "copy") for s in range(n)}


def test_the_ring_forms_use_only_the_links_to_the_next_rank():
    for name in ("gather.ring", "scatter.ring", "alltoall.ring"):
        for n in (2, 5, 8):
            for root in range(n) if "alltoall" not in name else [None]:
                schedule = rl.build(name, n, **({} if root is None else {"root": root}))
                assert all(t.dst == (t.src + 1) % n for step in schedule.steps for t in step), (name, n, root)
    # the textbook indices: gather, rank j sends chunk (j-i) mod n; scatter, chunk (j-1-i) mod n
    assert sorted(rl.build("gather.ring", 4, root=0).steps[0]) == [(1, 2, 1, "copy"), (2, 3, 2, "copy"),
                                                                    (3, 0, 3, "copy")]
    assert sorted(rl.build("scatter.ring", 4, root=0).steps[1]) == [(0, 1, 2, "copy"), (1, 2, 3, "copy")]


@pytest.mark.parametrize("kind", ["gather", "scatter", "alltoall"])
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_bus_factor_is_the_busiest_link_over_nccl_tests_size(kind, n):
    """nccl-tests' (n-1)/n: the root's link in gather and scatter, every link in pairwise alltoall."""
    assert BUS_FACTORS[kind] == "(n-1)/n"
    name = {"gather": "gather.direct", "scatter": "scatter.direct", "alltoall": "alltoall.pairwise"}[kind]
    K = 720720 * n
    counted = rl.traffic(rl.build(name, n), K)
    busiest = max(counted["sent"] + counted["received"])
    assert busiest / nccl_tests_size(kind, n, K) == pytest.approx(bus_factor(kind, n))


def test_the_cost_model_charges_pairwise_its_closed_form_and_reports_nccl_tests_busbw():
    n, alpha, bandwidth, K = 4, 1e-6, 1e9, 1 << 20
    network = uniform(n, bandwidth=bandwidth, latency=alpha)
    seconds = predict(rl.build("alltoall.pairwise", n), K, network).seconds
    assert seconds == pytest.approx((n - 1) * (alpha + K / n ** 2 / bandwidth))
    row = whatif(["alltoall.pairwise"], K, [network])[0]
    assert row["busbw"] == pytest.approx(K / n / seconds * (n - 1) / n)  # the size is one rank's buffer, K/n


def test_an_alltoall_that_forgets_one_block_names_the_rank_and_chunk():
    n = 4
    pairwise = rl.build("alltoall.pairwise", n)
    steps = [list(step) for step in pairwise.steps]
    steps[1] = [t for t in steps[1] if t.src != 1]  # rank 1 never sends block 1*4+3 to rank 3
    broken = rl.make_schedule("alltoall", n, n * n, steps, name="forgetful")
    with pytest.raises(rl.ScheduleError, match=r"rank 3 holds - in chunk 7, but alltoall needs r1 there") as err:
        rl.check(broken)
    assert (err.value.step, err.value.rank, err.value.chunk) == (None, 3, 7)


def test_a_block_sent_to_the_wrong_rank_is_caught():
    wrong = rl.make_schedule("gather", 3, 3, [[(1, 0, 1, "copy"), (2, 1, 2, "copy")]], root=0)
    with pytest.raises(rl.ScheduleError, match=r"rank 0 holds - in chunk 2, but gather needs r2 there") as err:
        rl.check(wrong)
    assert (err.value.rank, err.value.chunk) == (0, 2)


def test_a_rank_forwarding_a_block_it_has_not_received_is_caught():
    # a scatter ring run in the wrong order: rank 1 passes chunk 2 on before the root has sent it
    wrong = rl.make_schedule("scatter", 3, 3, [[(1, 2, 2, "copy")], [(0, 1, 2, "copy")], [(0, 1, 1, "copy")]], root=0)
    with pytest.raises(rl.ScheduleError, match=r"step 0: rank 1 sends chunk 2 to rank 2, but rank 1 holds no data"):
        rl.check(wrong)


def test_gathering_by_adding_is_caught():
    wrong = rl.make_schedule("gather", 2, 2, [[(1, 0, 1, "reduce")]], root=0)
    with pytest.raises(rl.ScheduleError, match=r"rank 0 holds no data for chunk 1 to add it to \(use 'copy'\)"):
        rl.check(wrong)


def test_build_checks_the_new_options():
    with pytest.raises(ValueError, match=r"root must be a rank in 0..3, got 4"):
        rl.build("gather.ring", 4, root=4)
    with pytest.raises(ValueError, match=r"alltoall.pairwise does not take option 'root'"):
        rl.build("alltoall.pairwise", 4, root=0)
    assert rl.build("scatter.tree", 5, root=3).options == {"root": 3}


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_the_primitives_equal_mpis_on_every_root_size_dtype_and_algorithm(nranks):
    done = run_mpi(nranks, [str(HERE / "check_primitives.py")], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"ok {nranks} ranks" in done.stdout


def test_bad_arguments_raise_the_same_error_on_every_rank():
    done = run_mpi(3, [str(HERE / "check_primitives.py"), "failures"], timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, dict[int, str]] = {}
    for line in done.stdout.splitlines():
        if " rank " in line and ": " in line:
            head, _, text = line.partition(": ")
            label, _, who = head.rpartition(" rank ")
            seen.setdefault(label, {})[int(who)] = text
    axis = "x must hold one block per rank along its first axis (3 for 3 ranks)"
    expected = {
        "sizes": "rl.gather: the ranks disagree (shape: rank 0 has [10], rank 1 has [11])",
        "dtypes": "rl.alltoall: the ranks disagree (dtype: rank 0 has float32, rank 1 has float64)",
        "axis": f"rl.alltoall: {axis}, got shape (4, 2)",
        "axis on one rank": f"rl.scatter: the ranks disagree (problems: rank 0 has [], rank 2 has ['{axis}, got shape "
                            "(4, 2)']; shape: rank 0 has [3, 2], rank 2 has [4, 2])",
        "scalar": f"rl.scatter: {axis}, got shape ()",
        "root": "rl.gather: root must be a rank in 0..2, got 3",
        "root on one rank": "rl.scatter: the ranks disagree (root: rank 0 has 1, rank 1 has 0)",
        "algorithm": "rl.scatter: unknown scatter algorithm 'pairwise'; choose one of: direct, ring, tree",
        "schedule": "rl.scatter: this schedule is for gather, not scatter",
        "owners": "rl.gather: this schedule's chunk owners are [0, 0, 0]; rl.gather needs chunk r owned by rank r",
        "timeout": "rl.alltoall: timeout must be a number of seconds > 0 (or None: no limit), got -1",
    }
    assert {label: set(by_rank) for label, by_rank in seen.items()} == {label: {0, 1, 2} for label in expected}
    assert {label: set(by_rank.values()) for label, by_rank in seen.items()} == {k: {v} for k, v in expected.items()}


def test_a_rank_that_never_comes_is_named_in_the_timeout(tmp_path):
    said = tmp_path / "said"
    run_mpi(3, [str(HERE / "check_primitives.py"), "absent", str(said)], timeout=60)
    assert said.read_text().strip() == "rank 0: rl.alltoall: rank 2 did not call it within 1 s"
