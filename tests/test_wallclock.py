"""Lab 04's race against the clock (ringlab.lessons.lab04_parameter_servers.wallclock) and the server's load (ringlab.lessons.lab04_parameter_servers.serverload):
on real ranks, the three trainers start alike and sync and ring agree step by step, the server's bytes are
counted exactly; the sentences follow the numbers, whichever way they fall; the figures show the runs."""
import json
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.lessons.lab04_parameter_servers.serverload import describe_server_load, server_bottleneck_lesson  # noqa: E402,E501
from ringlab.lessons.lab04_parameter_servers.wallclock import common_target, describe_race, time_to  # noqa: E402
from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.straggler import Straggler  # noqa: E402
from ringlab.viz.training import emulated_load_plot, loss_against_time_plot, server_load_plot  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "lab04_race.py"


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """Three ranks: one server (or one rank sitting out) and two workers, the last a straggler."""
    out = tmp_path_factory.mktemp("race") / "race.json"
    done = run_mpi(3, [str(SCRIPT), str(out)], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_three_trainers_start_alike_and_sync_and_ring_agree_step_by_step(measured):
    runs = measured["runs"]
    assert {run["loss"][0] for run in runs.values()} == {runs["sync"]["loss"][0]}  # the same initial weights
    assert len(runs["sync"]["loss"]) == len(runs["ring"]["loss"]) == 6 + 1  # the start, then every step
    assert len(runs["async"]["loss"]) == 2 * 6 + 1  # every push of both workers is an update
    assert max(abs(a - b) for a, b in zip(runs["sync"]["loss"], runs["ring"]["loss"])) < 1e-5
    for run in runs.values():
        assert run["seconds"][0] == 0 and run["seconds"] == sorted(run["seconds"])
        assert run["loss"][-1] < run["loss"][0]  # it learned
    pushes = runs["async"]["staleness"]
    assert sorted(w for w, _ in pushes) == [0] * 6 + [1] * 6 and all(s >= 0 for _, s in pushes)
    assert all(run["straggler"] == {"worker": 1, "factor": 1.0, "extra_seconds": 0.005,
                                    "said": "worker 1 takes 5 ms more every step"} for run in runs.values())
    assert runs["sync"]["staleness"] is None and runs["ring"]["staleness"] is None


def test_the_servers_load_is_counted_from_its_messages(measured):
    rows = measured["load"]
    K = (16 * 16 + 16) + (16 * 16 + 16) + (16 * 8 + 8)  # the MLP of hidden=16: weights and biases
    assert [row["workers"] for row in rows] == [1, 2]
    for row in rows:
        assert row["gradient_bytes"] == 4 * K
        assert row["received"] == row["sent"] == row["workers"] * 4 * K  # a push in and a reply out per worker
        assert row["busy_seconds"] > 0
    assert [row["ring_bytes"] for row in rows] == [0, 4 * K]  # 2(n-1)/n K at n = 2


SLOWED = {"worker": 2, "factor": 1.0, "extra_seconds": 0.08, "said": str(Straggler(2, extra_seconds=0.08))}


def run(seconds, loss, **more):
    return {"seconds": seconds, "loss": loss, "workers": 3, "staleness": None, "straggler": SLOWED, **more}


SYNC = run([0, .1, .2, .3, .4], [2.0, 1.8, 1.4, 1.0, 0.6])
RING = run([0, .11, .22, .33, .44], [2.0, 1.8, 1.4, 1.0, 0.6 + 1e-7])
# fast workers 0 and 1 push 4 times each in 40 ms, the straggler (2) four times, the last three alone
ASYNC = run([0, .01, .01, .02, .02, .025, .03, .03, .04, .04, .1, .2, .3],
            [2.0, 1.9, 1.8, 1.7, 1.6, 1.55, 1.5, 1.4, 1.3, 1.2, 1.0, 0.8, 0.7],
            staleness=[[0, 0], [1, 1], [0, 1], [1, 1], [2, 4], [0, 1], [1, 1], [0, 1], [1, 1], [2, 5], [2, 0], [2, 0]])


def test_the_target_and_who_reached_it():
    runs = {"sync": SYNC, "async": ASYNC, "ring": RING}
    assert common_target(runs) == pytest.approx((2.0 + 0.7) / 2)  # halfway to the lowest loss all reached
    assert time_to(SYNC, 1.35) == .3 and time_to(SYNC, 0.1) is None
    text = describe_race(runs)
    assert "Target: a test loss of 1.350, halfway from the initial loss" in text
    assert ("The asynchronous server reached it first, after 0.04 s; the synchronous server after 0.30 s; the "
            "ring allreduce after 0.33 s (measured here).") in text
    assert ("A step took the synchronous server 100.0 ms and the ring allreduce 110.0 ms on average, the "
            "straggler's 80 ms sleep included") in text
    assert "every worker goes at its pace" in text
    assert "agree to 1.0e-07" in text and "the synchronous server's steps were 9% shorter here" in text
    assert ("applied 12 updates in 0.30 s: 40 a second, against 10 for the synchronous server and 9 for the ring "
            "allreduce, each of lr/3.") in text
    assert "1.3 updates old on average (the straggler's 2.2)" in text  # (0+1+1+1+4+1+1+1+1+5+0+0)/12, (4+5+0+0)/4
    assert ("they had made all their 8 pushes by 0.04 s, and the straggler's last 3 came alone, one every "
            "87 ms") in text
    assert "Not waiting won" in text


def test_sync_and_ring_steps_that_took_the_same_time_are_said_to():
    """Both at 24.0 ms a step read 'the synchronous server's steps were 0% shorter': the same time, said so."""
    same = dict(RING, seconds=list(SYNC["seconds"]))
    text = describe_race({"sync": SYNC, "ring": same})
    assert "here their steps took the same time too: 100.0 ms each." in text
    assert "shorter" not in text and "differ only in time" not in text
    close = dict(RING, seconds=[0, .1003, .2006, .3009, .4012])  # 100.3 ms a step: 0.3% longer, 0% at the printed 0%
    text = describe_race({"sync": SYNC, "ring": close})
    assert "here their steps took the same time too: 100.0 and 100.3 ms, within 1% of each other." in text
    assert "shorter" not in text
    apart = dict(RING, seconds=[0, .102, .204, .306, .408])  # 2% longer: the words say which was shorter
    assert "so they differ only in time: the synchronous server's steps were 2% shorter here." in describe_race(
        {"sync": SYNC, "ring": apart})
    faster_ring = dict(RING, seconds=[0, .09, .18, .27, .36])
    assert "the ring allreduce's steps were 10% shorter here." in describe_race({"sync": SYNC, "ring": faster_ring})


def test_a_race_in_virtual_time_says_which_clock_and_the_wall_time_beside_it():
    virtual = "virtual (emulated uniform:0.125:50; compute: cpu)"
    runs = {m: dict(r, clock=virtual, wall_seconds=w) for (m, r), w in zip({"sync": SYNC, "ring": RING}.items(),
                                                                             (1.5, 2.25))}
    assert ("the ring allreduce after 0.33 s (measured in virtual time on the emulated machine: its links' time plus "
            "this CPU's compute counted as CPU time; this machine took 1.50 to 2.25 s of wall time a run).") in (
        describe_race(runs))


def test_the_words_follow_the_numbers_when_async_loses():
    slow = dict(ASYNC, seconds=[t * 10 for t in ASYNC["seconds"]])
    text = describe_race({"sync": SYNC, "async": slow, "ring": RING})
    assert "The synchronous server reached it first, after 0.30 s; the ring allreduce after 0.33 s" in text
    assert "Yet it did not reach the target first" in text and "Not waiting won" not in text
    text = describe_race({"sync": SYNC, "async": slow}, target=0.65)
    assert "the asynchronous server never did (lowest 0.700)" in text and "It never reached the target" in text
    long_sleep = dict(SYNC, straggler=dict(SLOWED, extra_seconds=0.5))  # longer than a step took: not the pace
    assert "less than the straggler's 500 ms sleep: the straggler was not what set the pace here" in describe_race(
        {"sync": long_sleep})
    with pytest.raises(ValueError, match="runs must be named among sync, async, ring, got ps"):
        describe_race({"ps": SYNC})
    with pytest.raises(ValueError, match="different stragglers, so their times do not compare"):
        describe_race({"sync": SYNC, "ring": dict(RING, straggler=None)})


def load_row(workers, busy, K=1000):
    ring = 2 * (workers - 1) * K // workers
    return {"workers": workers, "gradient_bytes": K, "received": workers * K, "sent": workers * K,
            "busy_seconds": busy, "ring_bytes": ring}


def test_the_load_is_worded_from_the_rows():
    rows = [load_row(1, 0.001), load_row(2, 0.002), load_row(3, 0.0031), load_row(4, 0.0042)]
    text = describe_server_load(rows, nranks=5, cores=8)
    assert "with 1 worker the server received 1.00 K a step and with 4 workers 4.00 K" in text
    assert "exactly 1 K per worker" in text and "it sent 4.00 K back" in text
    assert "1.00 K at 2, 1.33 K at 3, 1.50 K at 4, never more than 2 K" in text
    assert "busy 1.00 ms a step with 1 worker and 4.20 ms with 4 (4.2x for 4x the workers)" in text
    assert "about in proportion to the workers" in text and "shared" not in text
    rows[-1]["busy_seconds"] = 0.0018
    text = describe_server_load(rows, nranks=5, cores=2)
    assert "less than in proportion" in text and "The 5 ranks shared 2 cores" in text
    with pytest.raises(ValueError, match="at least two worker counts"):
        describe_server_load(rows[:1])


def test_the_figures_show_the_runs_and_the_load():
    fig = loss_against_time_plot({"sync": SYNC, "async": ASYNC}, target=1.35)
    assert [t.name for t in fig.data] == ["synchronous server (4 updates)", "asynchronous server (12 updates)"]
    assert list(fig.data[1].x) == ASYNC["seconds"] and list(fig.data[1].y) == ASYNC["loss"]
    assert fig.layout.shapes[0].y0 == 1.35  # the target
    assert "worker 2 takes 80 ms more every step" in fig.layout.title.text
    rows = [load_row(1, 0.001), load_row(2, 0.002), load_row(4, 0.004)]
    fig = server_load_plot(rows)
    shown = {t.name: t for t in fig.data}
    assert list(shown["server receives"].y) == [1, 2, 4] and list(shown["a ring rank sends (and receives)"].y) == [
        0, 1, 1.5]
    assert list(shown["server busy (median of steps)"].y) == [1, 2, 4]


def emulated_row(workers, ps, ring, ps_predicted=None, ring_predicted=None):
    return {"workers": workers, "gradient_bytes": 288800, "steps": 10, "machine": "emulated uniform:0.02:500",
            "ps_seconds": ps, "ps_predicted": ps if ps_predicted is None else ps_predicted,
            "ring_seconds": ring, "ring_predicted": ring if ring_predicted is None or ring is None else ring_predicted}


def test_the_emulated_servers_bottleneck_is_worded_from_the_rows():
    rows = [emulated_row(1, 0.030, None), emulated_row(2, 0.060, 0.016), emulated_row(3, 0.090, 0.021),
            emulated_row(4, 0.120, 0.025)]
    finding = server_bottleneck_lesson(rows)
    assert "waited 30.0 ms a step for the server with 1 worker and 120.0 ms with 4 (4.0x for 4x the workers)" in finding.text
    assert "about in proportion to the workers" in finding.text
    assert "took 16.0 ms with 2 and 25.0 ms with 4" in finding.text and "4.8x the ring's" in finding.text
    assert finding.conclusions == ("the server's step grows with the workers on the emulated machine",
                                   "the server is the bottleneck on the emulated machine",
                                   "the server's steps match the prediction on the emulated machine")
    assert finding.observations == ()
    # a ring slowed by the CPU past its prediction is said so, and a server no slower than it is no bottleneck
    rows = [emulated_row(1, 0.030, None), emulated_row(2, 0.040, 0.040, ring_predicted=0.016),
            emulated_row(4, 0.050, 0.050, ps_predicted=0.120, ring_predicted=0.025)]
    finding = server_bottleneck_lesson(rows)
    assert "The ring took 2.0x its prediction at 4 workers" in finding.text
    assert finding.observations == ("the ring took well over its prediction here",)
    assert finding.conclusions == ("the server's step does not grow with the workers on the emulated machine",
                                   "the server is not clearly the bottleneck on the emulated machine",
                                   "the server's steps miss the prediction on the emulated machine")
    with pytest.raises(ValueError, match="1, 2 and more workers"):
        server_bottleneck_lesson(rows[:2])


def test_the_emulated_servers_bottleneck_is_said_in_virtual_time_with_the_wall_time_beside_it():
    rows = [emulated_row(1, 0.030, None), emulated_row(2, 0.060, 0.016), emulated_row(4, 0.120, 0.025)]
    rows[-1].update(ps_wall_seconds=0.2, ring_wall_seconds=0.05)
    text = server_bottleneck_lesson(rows).text
    assert text.startswith("Measured on the emulated uniform:0.02:500, in virtual time (its links' time plus this "
                           "CPU's compute counted as CPU time): a worker waited 30.0 ms")
    assert ("On this machine's own clock a step of the server's took 200.0 ms with 4 workers and a ring allreduce "
            "50.0 ms: what its CPU took to run every rank's code on its cores, not the emulated machine's time.") in text
    assert "held back" not in text


def test_the_emulated_load_figure_shows_measured_beside_predicted():
    rows = [emulated_row(1, 0.030, None), emulated_row(2, 0.060, 0.016, ring_predicted=0.015),
            emulated_row(4, 0.120, 0.025, ring_predicted=0.024)]
    shown = {t.name: t for t in emulated_load_plot(rows).data}
    assert list(shown["one server: measured"].y) == pytest.approx([30, 60, 120])
    assert list(shown["ring allreduce: measured"].x) == [2, 4]
    assert list(shown["ring allreduce: predicted"].y) == pytest.approx([15, 24])
    with pytest.raises(ValueError, match="no rows"):
        emulated_load_plot([])


def test_the_emulated_load_refuses_bad_input_before_any_message():
    from ringlab.lessons.lab04_parameter_servers.serverload import measure_emulated_load

    class Comm:  # what every rank of a 5-rank job would see; nothing is sent before the checks
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 5

    with pytest.raises(ValueError, match="names no machine"):
        measure_emulated_load(machine="nowhere-8", comm=Comm())
    with pytest.raises(ValueError, match="steps must be a whole number >= 1"):
        measure_emulated_load(steps=0, comm=Comm())


def test_a_run_that_diverged_is_named_as_one_and_does_not_move_the_target():
    """An asynchronous run whose loss went to NaN: min() over it read 'lowest nan' (or a loss from before the NaN,
    depending on where it fell), and the target halfway to 'the lowest every run reached' became NaN."""
    diverged = dict(ASYNC, loss=ASYNC["loss"][:8] + [float("nan")] * 5)  # 1.4 its lowest before the NaN
    runs = {"sync": SYNC, "async": diverged, "ring": RING}
    assert common_target(runs) == pytest.approx((2.0 + 1.4) / 2)
    text = describe_race(runs, target=1.0)
    assert "the asynchronous server never did (it diverged, after a lowest of 1.400)" in text
    assert "nan" not in text.lower()
    at_once = dict(ASYNC, loss=[2.0] + [float("inf")] * 12)  # diverged on the first update
    text = describe_race({"sync": SYNC, "async": at_once})
    assert common_target({"sync": SYNC, "async": at_once}) == pytest.approx((2.0 + 0.6) / 2)  # not the start, 2.0
    assert ("halfway from the initial loss to the lowest that every run that learned reached (the asynchronous "
            "server never got below the initial loss)") in text
    assert "never did (it diverged, after a lowest of 2.000)" in text
