"""One-shot and two-shot allreduce: as schedules (simulator, cost model), and through the shared window of ranks
on one node (real MPI processes, 2 ranks and an odd count), against MPI's own allreduce."""
from pathlib import Path

import numpy as np
import pytest

import ringlab as rl
from ringlab.cluster.launch import run_mpi
from ringlab.simulate import check

HERE = Path(__file__).parent / "mpi"
SCRIPT = str(HERE / "symmetric.py")


def lines_by_rank(stdout: str) -> dict[int, str]:
    out = {}
    for line in stdout.splitlines():
        if line.startswith("rank ") and ": " in line:
            head, _, text = line.partition(": ")
            if head.split()[1].isdigit():
                out.setdefault(int(head.split()[1]), text)
    return out


@pytest.mark.parametrize("nranks", [1, 2, 3, 5, 8])
def test_schedules_do_what_allreduce_promises(nranks):
    for name in ("allreduce.oneshot", "allreduce.twoshot"):
        check(rl.build(name, nranks))  # raises if any rank ends without the sum


def test_one_synchronisation_against_two_and_against_the_ring():
    one, two, ring = (rl.build(f"allreduce.{a}", 8) for a in ("oneshot", "twoshot", "ring"))
    assert (len(one.steps), len(two.steps), len(ring.steps)) == (1, 2, 14)
    # what one rank takes in: (n-1)K for one-shot, 2(n-1)K/n for two-shot and the ring
    K = 8 * 1024

    def taken_in(schedule, rank=0):
        chunk = K / schedule.nchunks
        return sum(chunk * int(np.sum(step.dst == rank)) for step in schedule.steps)

    assert taken_in(one) == 7 * K
    assert taken_in(two) == taken_in(ring) == 2 * 7 * K / 8


def test_cost_model_prices_latency_against_bandwidth():
    """On a uniform machine the model says one-shot wins small messages (7 latencies one after another, against
    the ring's 14 steps) and loses large ones to the ring (7K in, against 2 x 7K/8)."""
    topology = rl.topology.uniform(8, 100e9, 5e-6)
    small = {a: rl.predict(rl.build(f"allreduce.{a}", 8), 1024, topology).seconds for a in ("oneshot", "ring")}
    large = {a: rl.predict(rl.build(f"allreduce.{a}", 8), 256 << 20, topology).seconds for a in ("oneshot", "ring")}
    assert small["oneshot"] < small["ring"] * 0.55
    assert large["oneshot"] > large["ring"] * 2


@pytest.mark.parametrize("nranks", [2, 3])
def test_window_matches_mpi(nranks):
    done = run_mpi(nranks, [SCRIPT, "match"], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = lines_by_rank(done.stdout)
    assert sorted(seen) == list(range(nranks))
    assert all(text.startswith("ok ") and text.endswith(" window") for text in seen.values()), seen


@pytest.mark.parametrize("nranks", [2, 3])
def test_a_different_size_on_the_window_is_the_same_error_everywhere(nranks):
    done = run_mpi(nranks, [SCRIPT, "sizes"], timeout=90)
    seen = lines_by_rank(done.stdout)
    assert sorted(seen) == list(range(nranks)), done.stderr[-3000:]
    expected = (f"rl.allreduce: the ranks disagree (shape: rank 0 has [10], rank 1 has [11]) | then "
                f"{[float(nranks)] * 3} window")
    assert set(seen.values()) == {expected}


@pytest.mark.parametrize("nranks", [2, 3])
def test_another_algorithm_on_one_rank_is_the_same_error_everywhere(nranks):
    """One-shot against two-shot (both on the window), then one-shot against the ring (the message path): the
    message agreement meets the ranks that wait on the window, and they are in step again afterwards."""
    done = run_mpi(nranks, [SCRIPT, "algorithms"], timeout=120)
    seen = lines_by_rank(done.stdout)
    assert sorted(seen) == list(range(nranks)), done.stderr[-3000:]
    expected = ("rl.allreduce: the ranks disagree (algorithm: rank 0 has oneshot, rank 1 has twoshot) | "
                "rl.allreduce: the ranks disagree (algorithm: rank 0 has oneshot, rank 1 has ring) | then "
                f"{[float(nranks)] * 3}")
    assert set(seen.values()) == {expected}


def test_calls_bigger_than_the_window_go_in_rounds():
    done = run_mpi(3, [SCRIPT, "big"], timeout=90, env={"RINGLAB_SYMMETRIC_BYTES": "4096"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(lines_by_rank(done.stdout).values()) == {"ok window"}


def test_a_rank_that_never_comes_is_named_within_the_deadline():
    done = run_mpi(3, [SCRIPT, "absent"], timeout=90)
    seen = lines_by_rank(done.stdout)
    assert sorted(seen) == [0, 1], f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    for rank, text in seen.items():
        assert "did not finish within 1 s: still waiting for rank 2 to leave its data in the shared window" in text
        assert "(call 2 on this communicator)" in text and "[peers [2]]" in text
        assert float(text.rsplit("after ", 1)[1].split()[0]) < 5


def test_simulated_nodes_run_them_as_messages():
    done = run_mpi(3, [SCRIPT, "nodes"], timeout=90, env={"RINGLAB_RANKS_PER_NODE": "2"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(lines_by_rank(done.stdout).values()) == {"ok messages"}


def test_release_buffers_gives_the_window_back():
    done = run_mpi(2, [SCRIPT, "release"], timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(lines_by_rank(done.stdout).values()) == {"window none window [2.0, 2.0, 2.0, 2.0]"}
