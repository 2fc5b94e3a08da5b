"""Emulated machines (rl.emulate, RINGLAB_EMULATE, bench --emulate): the topology, executed. Results stay
equal to MPI's; every message really takes its links' time (a lower bound that load cannot break); bad
machines are refused on every rank. How close measured comes to predicted is benchmarks/emulated_vs_model.py's."""
import json
from pathlib import Path

import pytest
from busy_support import busy_processes

import ringlab as rl
from ringlab.mpi.emulate import emulation, link_timings, message_times
from ringlab.cluster.launch import run_mpi


HERE = Path(__file__).parent / "mpi"
SCRIPT = HERE / "emulated.py"


def test_a_spec_names_a_preset_or_a_uniform_machine_and_a_scale():
    topology, scale = rl.topology.from_spec("uniform:1.5:20@10", 4)
    assert (topology.nranks, scale) == (4, 10.0)
    assert rl.predict(rl.build("broadcast.direct", 2), 1_500_000, topology).seconds == pytest.approx(20e-6 + 1e-3)
    assert rl.topology.from_spec("hgx-h100-8")[0].name == "hgx-h100-8"
    assert emulation("dgx1-v100@100").label == "emulated dgx1-v100, 100x slower"
    assert emulation(rl.topology.uniform(3, 1e9, 1e-6), scale=2).resolve(3).nranks == 3


def test_simulated_nodes_are_free_inside_and_a_port_per_rank_between_them():
    """nodes:RANKS:GBPS:US, what RINGLAB_NODE_LINK_GBPS emulates: a message inside a node costs nothing, one
    between nodes its latency and its bytes at the port's rate, shared by the step's messages on that port."""
    topology, _ = rl.topology.from_spec("nodes:2:0.5:10", 4)
    ring = link_timings(rl.build("allreduce.ring", 4), 1_000_000 // 4, 4, topology, 1.0)
    assert ring[0][(0, 1)] == (0.0, 0.0) and ring[0][(2, 3)] == (0.0, 0.0)  # inside a node
    assert ring[0][(1, 2)] == pytest.approx((10e-6, 250_000 / 0.5e9))  # a chunk across
    naive = link_timings(rl.build("allreduce.naive", 4), 1_000_000 // 4, 4, topology, 1.0)
    assert naive[0][(3, 0)] == pytest.approx((10e-6, 2 * 1_000_000 / 0.5e9))  # ranks 2 and 3 share rank 0's port
    assert naive[0][(1, 0)] == (0.0, 0.0)
    assert emulation("nodes:2:0.5:10@4").label == "emulated nodes:2:0.5:10, 4x slower"


def test_a_slowed_link_between_simulated_nodes_is_that_emulated_machine(monkeypatch):
    from ringlab.mpi import emulate

    monkeypatch.setenv("RINGLAB_RANKS_PER_NODE", "2")
    monkeypatch.setenv("RINGLAB_NODE_LINK_GBPS", "0.02")
    now = emulate.current()
    assert now.spec == "nodes:2:0.02:0" and now.resolve(4).name == "nodes of 2 ranks, 0.02 GB/s, 0 us between them"
    assert now.label == "simulated nodes joined by slowed links (RINGLAB_NODE_LINK_GBPS=0.02)"
    with pytest.raises(ValueError, match="use one of them"), rl.emulate("uniform:1:1"):
        emulate.current()
    monkeypatch.setenv("RINGLAB_EMULATE", "uniform:1:1")
    with pytest.raises(ValueError, match="RINGLAB_NODE_LINK_GBPS slows the links between simulated nodes"):
        emulate.current()


@pytest.mark.parametrize("spec,said", [
    ("dgx3", "'dgx3' names no machine: a preset name"), ("uniform:1", "a uniform machine is uniform:GBPS:US"),
    ("nodes:2:1", "simulated nodes are nodes:RANKS:GBPS:US"), ("nodes:0:1:0", "RANKS must be a whole number >= 1"),
    ("uniform:x:1", "GBPS must be a number, got 'x'"), ("uniform:0:1", "GBPS must be > 0"),
    ("hgx-h100-8@0", "SCALE must be > 0"), ("hgx-h100-8@nan", "SCALE must be finite"), ("", "an emulated machine is")])
def test_a_bad_spec_says_what_is_wrong_and_what_a_spec_looks_like(spec, said):
    with pytest.raises(ValueError, match=said):
        emulation(spec)


def test_bad_machines_and_scales_are_refused():
    with pytest.raises(ValueError, match="scale must be a number > 0"):
        emulation(rl.topology.uniform(2, 1e9, 0.0), scale=-1)
    with pytest.raises(ValueError, match="emulate a Topology"):
        emulation(42)
    with pytest.raises(ValueError, match="has 2 ranks; this job has 4"):
        emulation("pcie3-switch-2").resolve(4)


def test_links_are_shared_by_the_messages_that_cross_them_in_a_step():
    """Naive allreduce's reduce step: n-1 messages into the root share its one downlink; a ring step does not."""
    n, nbytes = 4, 4_000_000
    topology = rl.topology.uniform(n, bandwidth=1e9, latency=10e-6)
    naive = link_timings(rl.build("allreduce.naive", n), nbytes // 4, 4, topology, 1.0)
    into_root = {pair: t for pair, t in naive[0].items() if pair[1] == 0}
    assert len(into_root) == n - 1
    assert all(t == pytest.approx((10e-6, (n - 1) * nbytes / 1e9)) for t in into_root.values())
    ring = link_timings(rl.build("allreduce.ring", n), nbytes // 4, 4, topology, 2.0)
    assert all(t == pytest.approx((20e-6, 2 * nbytes / n / 1e9)) for t in ring[0].values())  # scale 2: twice as long


def test_fresh_machines_made_in_a_loop_get_their_own_links_times():
    """The times are kept by content: a machine made after another one died, which may take its id, still gets
    its own (on ids, 291 of 300 fresh machines got an earlier one's)."""
    ring, elements = rl.build("allreduce.ring", 4), 1 << 18  # float32: 1 MiB, a ring message of 256 KiB
    for i in range(300):
        bandwidth = 1e9 * (1 + i % 3)
        machine = rl.topology.uniform(4, bandwidth=bandwidth, latency=1e-6 * (i % 2))
        latency, busy = link_timings(ring, elements, 4, machine, 1.0)[0][(0, 1)]
        assert (latency, busy) == pytest.approx((1e-6 * (i % 2), elements * 4 / 4 / bandwidth)), i
        with rl.emulate(machine):
            assert message_times([(0, 1, 1000)], _Comm(4))[(0, 1)] == pytest.approx(1e-6 * (i % 2) + 1000 / bandwidth)
        del machine
    alike = [rl.topology.uniform(4, bandwidth=1e9, latency=0.0) for _ in range(2)]
    assert alike[0] is not alike[1] and alike[0].fingerprint() == alike[1].fingerprint()
    assert rl.topology.uniform(4, bandwidth=2e9, latency=0.0).fingerprint() != alike[0].fingerprint()


class _Comm:
    def __init__(self, size: int):
        self.size = size

    def Get_size(self) -> int:
        return self.size


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_loop_of_fresh_emulated_machines_measures_each_machines_own_links(nranks):
    """Slow (5 MB/s) and fast (5 GB/s) machines in turn, each a new object: every slow run takes its links' time
    or more, and every fast run far less than the slow links need (a fast machine paced by a slow one's times
    would take them all)."""
    done = run_mpi(nranks, [str(SCRIPT), "fresh"], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [line.split() for line in done.stdout.splitlines() if line.split(":")[0].isdigit()]
    assert len(runs) == 16 and all(right == "right" for _, _, right, _, _ in runs), done.stdout
    for i, kind, _, over_link, over_slow in runs:
        if kind == "slow":
            assert float(over_link) >= 0.95, (i, done.stdout)
        else:
            assert float(over_slow) < 0.25, (i, done.stdout)


@pytest.mark.parametrize("nranks", [2, 3])
def test_on_emulated_links_results_equal_mpi_and_messages_take_their_links_time(nranks):
    done = run_mpi(nranks, [str(SCRIPT), "right"], timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    for case in ("allreduce.ring", "allreduce.naive", "allreduce.rhd", "allreduce.tree", "broadcast.chain"):
        verdict, ratio = lines[case].split()
        assert verdict == "right", lines
        assert float(ratio) >= 0.95, (case, lines)  # never faster than its links: the pacing is real
    assert lines["after"].startswith("right")


def test_ringlab_emulate_in_the_environment_runs_the_job_on_that_machine():
    done = run_mpi(3, [str(SCRIPT), "environment"], timeout=120, env={"RINGLAB_EMULATE": "uniform:0.2:500@2"})
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout.strip()
    assert said.startswith("env: emulated uniform:0.2:500, 2x slower; right"), said
    assert float(said.split()[-1]) >= 0.95


def test_a_machine_too_small_or_ranks_that_disagree_raise_on_every_rank():
    done = run_mpi(3, [str(SCRIPT), "errors"], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = {}
    for line in done.stdout.splitlines():
        if not line.startswith("rank "):
            continue
        head, case, text = line.split(": ", 2)
        seen.setdefault(case, {})[head] = text
    assert set(seen["a Topology"].values()) == {"no error"}  # every rank describes the same links the same way
    assert set(seen["preset too small"].values()) == {
        "rl.allreduce: the emulated machine pcie3-switch-2 has 2 ranks; this job has 3"}
    mismatched = set(seen["mismatched"].values())
    assert mismatched == {"rl.allreduce: the ranks disagree (emulation: rank 0 has emulated uniform:0.2:500, rank 1 "
                          "has emulated uniform:0.2:400)"} and len(seen["mismatched"]) == 3, mismatched
    slow = seen["slow links"]  # virtual time: 8 MiB on 3 ranks over 1 MB/s links needs 4/3 x 8.4 s = 11.2 s, past
    # the 5 s deadline, which is this machine's: the call is right and says 11 s
    assert len(slow) == 3 and all(said.startswith("right in ") and said.split()[2] == "11"
                                  for said in slow.values()), slow
    then = seen["then"]  # and the calls after them are right
    assert len(then) == 3 and all(said in ("right after 0 refused", "right after 1 refused") for said in then.values())


def test_bench_emulate_records_the_machine_and_both_units(tmp_path):
    out = tmp_path / "bench.json"
    done = run_mpi(2, ["-m", "ringlab", "bench", "-b", "64K", "-e", "256K", "-f", "4", "-a", "ring,mpi", "--iters",
                       "2", "-w", "1", "--emulate", "uniform:0.2:500@2", "--json", str(out)], timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["emulation"] == {"spec": "uniform:0.2:500@2", "label": "emulated uniform:0.2:500, 2x slower",
                                   "scale": 2.0, "compute": "cpu", "clock": "virtual"}
    ring = [r for r in result["rows"] if r["algorithm"] == "ring"]
    assert all(r["emulated"] and r["machine_time_s"] == r["time_s"] / 2 and r["wrong"] == 0 for r in ring)
    assert all(r["wall_time_s"] > 0 for r in ring)  # this machine's time beside (tests/test_virtual_time.py: no sleeps)
    assert all(not r["emulated"] and r["machine_time_s"] is None for r in result["rows"] if r["algorithm"] == "mpi")
    assert "emulated uniform:0.2:500, 2x slower: ringlab's algorithms run in virtual time" in done.stdout
    assert "not emulated" in done.stdout and "wall (us)" in done.stdout


def test_messages_sent_at_once_share_the_links_they_cross():
    """Three pushes into rank 0 share its one link in; answers out of it share its link out; a pair alone
    pays latency plus its own bytes."""
    class Comm:
        def Get_size(self):
            return 4

    links = rl.topology.uniform(4, bandwidth=1e9, latency=10e-6)
    assert message_times([(1, 0, 1000)], Comm()) is None  # no emulation: the raw machine
    with rl.emulate(links, scale=2.0):
        pushes = message_times([(w, 0, 1_000_000) for w in (1, 2, 3)], Comm())
        alone = message_times([(1, 2, 1_000_000)], Comm())
    assert pushes == pytest.approx({(w, 0): 2.0 * (10e-6 + 3e6 / 1e9) for w in (1, 2, 3)})
    assert alone == pytest.approx({(1, 2): 2.0 * (10e-6 + 1e6 / 1e9)})


@pytest.mark.parametrize("nranks, compute, busy", [(2, "model", 2), (3, "model", 2), (3, "cpu", 2)])
def test_a_parameter_server_on_emulated_links_keeps_virtual_time_and_computes_the_same(tmp_path, nranks, compute,
                                                                                      busy):
    """In virtual time: a synchronous step takes its links' time (W workers' pushes share the server's link in,
    its answers its link out; message_times), to 5% with compute="model" whatever else runs on the cores, and
    that plus the workers' compute and the server's busy time with compute="cpu"; nobody sleeps (the wall time
    is a fraction of the virtual); an asynchronous server applies the pushes in their emulated order (a
    straggler's extra 0.3 s is on its clock only, and its pushes are as stale as on the emulated machine); the
    weights are the raw run's, bit for bit."""
    out = tmp_path / "ps.json"
    with busy_processes(busy):
        done = run_mpi(nranks, [str(HERE / "ps_emulated.py"), str(out), "6", compute], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(out.read_text())
    assert seen["equal"] and seen["async_finite"]
    links = seen["steps"] * (seen["push"] + seen["answer"])
    assert seen["push"] == pytest.approx(1e-3 + seen["workers"] * 0.2)  # the W pushes share the server's link
    if compute == "model":
        assert seen["seconds"] == pytest.approx(links, rel=0.05), seen
        # the server's clock ends at its last answer: the last push's arrival
        assert seen["async_seconds"] == pytest.approx(links - seen["answer"], rel=0.05), seen
    else:
        assert links <= seen["seconds"] <= 1.05 * (links + seen["compute_seconds"] + seen["busy_seconds"]), seen
    assert seen["wall_seconds"] < 0.5 * seen["seconds"], seen  # nobody sleeps: on the old code wall >= virtual
    if seen["workers"] == 2 and compute == "model":
        # pushes arrive every 802 ms from the fast worker (401, 1203, 2005, 2807, 3609, 4411 ms) and from the
        # straggler 300 ms later each time and then every 1102 ms (701, 1803, 2905, 4007, 5109, 6211 ms), each
        # computed on the version of its last answer: 1, 1, 2, 1, 1 and 0 updates in between
        assert seen["straggler_staleness"] == [1, 1, 2, 1, 1, 0], seen
        assert seen["straggler_seconds"] == pytest.approx(6.211, rel=1e-3), seen
