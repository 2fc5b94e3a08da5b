"""The compact cost model (ringlab.predict.compact) against the explicit walk, the reference: every registered
algorithm, every rank count up to 64 and a sample up to 512, on uniform networks, every preset and clusters
built by rl.topology.cluster, with and without NCCL's protocols, agree to 1e-9 relative, step by step."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import ringlab as rl
from ringlab.algorithms import options_of
from ringlab.predict import costmodel, segments
from ringlab.predict.compact import pieces
from ringlab.topology import cluster, preset, preset_names, uniform
from ringlab.topology.graph import Topology

# PAT's steps are written one by one (each step sends blocks 2d apart, which no run of chunks describes): the
# default walks them, and method="compact" refuses them (tested below)
WALKED = ("allgather.pat", "reduce_scatter.pat")
ALGORITHMS = sorted(set(rl.ALGORITHMS) - set(WALKED))
PROTOCOLS = (None, "LL", "LL128", "Simple", "auto")
QUADRATIC = ("alltoall.direct", "alltoall.pairwise", "alltoall.ring")  # n x n blocks: the walk is slow past 64


def agree(schedule, nbytes, topology, itemsize=1, rank_map=None, protocol=None, dense=True):
    """The two methods' predictions, held to each other column by column; ``dense=False`` keeps the compact
    path to its sorted runs, which it takes for many steps, also where a table of steps would do."""
    limit = segments.DENSE_CELLS
    segments.DENSE_CELLS = limit if dense else 0
    try:
        compact = rl.predict(schedule, nbytes, topology, itemsize, rank_map, protocol, method="compact")
    finally:
        segments.DENSE_CELLS = limit
    walked = rl.predict(schedule, nbytes, topology, itemsize, rank_map, protocol, method="explicit")
    where = f"{schedule!r} on {topology.name}, {nbytes} B, itemsize {itemsize}, protocol {protocol}"
    assert compact.protocol == walked.protocol, where
    assert len(compact.steps) == len(walked.steps) == len(schedule.steps), where
    for name in ("latency", "transfer", "reduce", "time"):
        assert np.allclose(compact.steps[name], walked.steps[name], rtol=1e-9, atol=0), (where, name)
    for name in ("bottleneck", "messages", "nbytes"):
        assert np.array_equal(compact.steps[name], walked.steps[name]), (where, name)
    assert compact.seconds == pytest.approx(walked.seconds, rel=1e-9, abs=0), where
    return compact


def options(name: str, n: int, draw=None) -> dict:
    """Options for ``name`` on ``n`` ranks: the defaults, or drawn from what it accepts."""
    if draw is None:
        return {}
    accepted, out = options_of(name), {}
    if "root" in accepted:
        out["root"] = draw(st.integers(0, n - 1))
    if "segments" in accepted and draw(st.booleans()):
        out["segments"] = draw(st.integers(1, 12))
    if "servers" in accepted:
        out["servers"] = draw(st.integers(1, min(n, 6)))
    if "rings" in accepted:
        if draw(st.booleans()):
            out["rings"] = draw(st.integers(1, 4))
        else:
            rng = np.random.default_rng(draw(st.integers(0, 1000)))
            out["orders"] = [tuple(int(r) for r in rng.permutation(n)) for _ in range(draw(st.integers(1, 3)))]
    if "local" in accepted:
        out["local"] = draw(st.integers(1, n))
    return out


SIZES = st.sampled_from([0, 1, 7, 1000, 4096, 1000003, 1 << 20, (1 << 30) + 12345])


def uniform_for(n: int, draw) -> Topology:
    reduce_rate = draw(st.sampled_from([float("inf"), 3e9]))
    return uniform(n, draw(st.sampled_from([1e9, 12.5e9])), draw(st.sampled_from([0.0, 1e-6, 5e-6])), reduce_rate)


def clusters(n: int):
    """Clusters of at least n GPUs, every shape cluster() builds: NVLink or PCIe nodes, one NIC a GPU or fewer."""
    for gpu, per_node, nics in (("h100", 8, None), ("a100", 4, 2), ("pcie3", 4, 3), ("b200", 8, 1)):
        yield cluster(gpu, max(2, -(-n // per_node)), gpus_per_node=per_node, nics_per_node=nics)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_every_rank_count_to_64_on_uniform_networks(name):
    for n in range(1, 65):
        protocol = PROTOCOLS[n % len(PROTOCOLS)]
        nbytes = (1000003, 64, 1 << 20)[n % 3]
        agree(rl.build(name, n), nbytes, uniform(n, 12.5e9, 5e-6, reduce_rate=3e9 if n % 2 else float("inf")),
              itemsize=(1, 4)[n % 2], protocol=protocol, dense=n % 4 < 2)


@pytest.mark.parametrize("topology", preset_names())
def test_every_preset(topology):
    machine = preset(topology)
    for k, name in enumerate(ALGORITHMS):
        for n in {machine.nranks, max(1, machine.nranks - 3)}:
            if name in QUADRATIC and n > 64:
                n = 64
            for dense in (True, False):
                agree(rl.build(name, n), (1 << 24) + 3 * k, machine, protocol=PROTOCOLS[(k + n) % len(PROTOCOLS)],
                      dense=dense)


@pytest.mark.parametrize("n", [100, 257, 512])
def test_a_handful_of_rank_counts_to_512(n):
    big = uniform(n, 25e9, 2e-6)
    for k, name in enumerate(ALGORITHMS):
        if name not in QUADRATIC:
            agree(rl.build(name, n), (1 << 30) + 7, big, protocol=(None, "Simple")[k % 2], dense=k % 3 == 0)
    for machine in clusters(n):
        for name, opts in (("allreduce.ring", {}), ("allreduce.dbtree", {}), ("allreduce.rings", {"rings": 4}),
                           ("allreduce.hierarchical", {"local": machine.machine.gpus_per_node})):
            agree(rl.build(name, n, **opts), (1 << 28) + 1, machine, protocol=("Simple", None)[n % 2],
                  dense=len(name) % 2 == 0)


@st.composite
def cases(draw):
    name = draw(st.sampled_from(ALGORITHMS))
    n = draw(st.integers(1, 64) if name in QUADRATIC else st.integers(1, 64) | st.integers(65, 512))
    schedule = rl.build(name, n, **options(name, n, draw))
    where = draw(st.sampled_from(["uniform", "preset", "cluster"]))
    if where == "preset":
        machines = [preset(p) for p in preset_names() if preset(p).nranks >= n]
        where = "preset" if machines else "uniform"
    if where == "uniform":
        topology = uniform_for(n + draw(st.integers(0, 3)), draw)
    elif where == "preset":
        topology = draw(st.sampled_from(machines))
    else:
        topology = draw(st.sampled_from(list(clusters(n))))
    rank_map = None
    if draw(st.booleans()):  # the schedule on some of the topology's ranks, in any order
        rank_map = np.random.default_rng(draw(st.integers(0, 1000))).permutation(topology.nranks)[:n]
    return schedule, draw(SIZES), topology, draw(st.sampled_from([1, 2, 4, 8])), rank_map, draw(
        st.sampled_from(PROTOCOLS)), draw(st.booleans())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_any_schedule_size_placement_and_protocol(case):
    agree(*case)


@given(terms=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 12), st.integers(0, 40), st.integers(-6, 6),
                                st.integers(1, 4)), min_size=1, max_size=20),
       count=st.integers(0, 400), itemsize=st.integers(1, 8))
def test_a_term_is_priced_as_the_bytes_of_its_chunks_step_by_step(terms, count, itemsize):
    """pieces(): each term's bytes at each step are the sum of its chunks' sizes (numpy.array_split's rule)."""
    rows = []
    for t0, span, low, stride, width in terms:
        width = min(width, abs(stride)) if stride else width  # a run of chunks moves by at least its width
        rows.append((t0, t0 + span, low - stride * (span - 1) if stride < 0 else low, stride, width))
    columns = {k: np.array(v, dtype=np.int64) for k, v in zip(("t0", "t1", "c0", "stride", "width"), zip(*rows))}
    nchunks = max(max(c0, c0 + stride * (t1 - 1 - t0)) + width for t0, t1, c0, stride, width in rows)
    sizes = np.diff(rl.chunk_bounds(count, nchunks)) * itemsize
    term, start, end, nbytes = pieces(columns, count, nchunks, itemsize)
    for index, (t0, t1, c0, stride, width) in enumerate(rows):
        mine = term == index
        for t in range(t0, t1):
            first = c0 + stride * (t - t0)
            priced = nbytes[mine & (start <= t) & (t < end)]
            assert priced.sum() == sizes[first:first + width].sum() and len(priced) <= 1


def test_the_compact_path_is_the_default_for_registered_algorithms_and_refused_for_the_rest():
    ring = rl.build("allreduce.ring", 6)
    assert rl.predict(ring, 6 << 20, uniform(6, 1e9, 1e-6)).seconds == pytest.approx(
        2 * 5 * (1e-6 + (1 << 20) / 1e9))
    written = rl.make_schedule("allreduce", 6, 6, list(ring.steps))  # the same steps, written one by one
    assert rl.predict(written, 1 << 20, uniform(6, 1e9, 1e-6)).seconds == pytest.approx(
        rl.predict(ring, 1 << 20, uniform(6, 1e9, 1e-6)).seconds, rel=1e-12)
    with pytest.raises(ValueError, match="written one by one, so there is no compact form.*method='explicit'"):
        rl.predict(written, 1 << 20, uniform(6, 1e9, 1e-6), method="compact")
    with pytest.raises(ValueError, match="method must be one of auto, compact, explicit, not 'fast'"):
        rl.predict(ring, 1 << 20, uniform(6, 1e9, 1e-6), method="fast")


def test_a_walk_that_would_not_fit_is_refused_first_with_its_size_and_the_way_out(monkeypatch):
    from ringlab.algorithms import pattern

    monkeypatch.setattr(pattern, "free_memory", lambda: 1 << 20)  # 1 MB free: the walk's step of 20000 needs 4
    ring = rl.build("allreduce.ring", 20000)
    with pytest.raises(MemoryError, match=r"an explicit walk of allreduce.ring on 20000 ranks would need about "
                                          r"4.32 MB of memory; this machine has 1.05 MB free\. Use method='auto'"):
        rl.predict(ring, 1 << 30, uniform(20000, 25e9, 5e-6), method="explicit")
    assert rl.predict(ring, 1 << 30, uniform(20000, 25e9, 5e-6)).seconds > 0  # the compact path needs no walk
    ring_topology = rl.topology.ring(3000, 25e9, 5e-6)  # routes found by search, one per pair the walk meets
    assert costmodel.walk_memory(rl.build("allreduce.ring", 3000), ring_topology) > 3000 * 3000 * 100


def test_a_long_prediction_shows_a_progress_bar(monkeypatch, capsys):
    monkeypatch.setattr(costmodel, "PROGRESS_AFTER", 0.0)
    rl.predict(rl.build("allreduce.ring", 8), 1 << 20, uniform(8, 1e9, 1e-6), method="explicit")
    assert "predicting step by step" in capsys.readouterr().err
    rl.predict(rl.build("allreduce.ring", 8), 1 << 20, uniform(8, 1e9, 1e-6))
    assert "predicting (compact)" in capsys.readouterr().err


def test_a_quick_prediction_makes_no_progress_bar_at_all(monkeypatch):
    import tqdm.auto  # what the bar is made of, imported only when one is made
    made = []
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *args, **kwargs: made.append(kwargs))  # in a notebook: a widget
    for method in ("explicit", "auto"):
        rl.predict(rl.build("allreduce.ring", 8), 1 << 20, uniform(8, 1e9, 1e-6), method=method)
    assert made == []


@pytest.mark.parametrize("shape", [dict(gpu="h100", nodes=3), dict(gpu="h100", nodes=13, nics_per_node=3),
                                   dict(gpu="pcie3", nodes=13, gpus_per_node=4, nics_per_node=3),
                                   dict(gpu="pcie3", nodes=2, gpus_per_node=4, nics_per_node=1),
                                   dict(gpu="a100", nodes=5, gpus_per_node=3, nics_per_node=2)])
def test_a_cluster_routes_by_arithmetic_as_the_search_routes_on_its_links(shape):
    machine = cluster(**shape)
    searched = Topology(machine.name, machine.ranks, tuple(machine.links), machine.reduce_rate)
    for src in range(machine.nranks):
        for dst in range(machine.nranks):
            assert machine.route(src, dst) == searched.route(src, dst), (src, dst)
    assert np.array_equal(machine.channel_rate, searched.channel_rate)
    assert np.array_equal(machine.channel_latency, searched.channel_latency)
    assert machine.nodes == searched.nodes


def test_100000_gpus_are_built_without_a_link_object_each():
    big = cluster("h100", 12500)
    assert big.nranks == 100000 and len(big.links) == 300000 and big.links._all is None
    assert big.links[2 * 99999 + 1].b == "nic99999" and big.links[-1].a == "nic99999"
    assert big.route(7, 8) == (4 * 7 + 2, 2 * (200000 + 7), 2 * (200000 + 8) + 1, 4 * 8 + 3)  # up, across, down


@pytest.mark.parametrize("name", WALKED)
def test_schedules_written_step_by_step_are_walked_by_default_and_refused_compact(name):
    schedule, topology = rl.build(name, 12), uniform(12, 50e9, 5e-6)
    walked = rl.predict(schedule, 1 << 20, topology, method="explicit")
    assert rl.predict(schedule, 1 << 20, topology).seconds == walked.seconds  # the default took the walk
    with pytest.raises(ValueError, match="written one by one.*method='explicit'"):
        rl.predict(schedule, 1 << 20, topology, method="compact")
