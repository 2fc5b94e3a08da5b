"""Whatever a busy machine measures, labs 04 and 07 read it back in words and figures and do not stop.

Lab 04 (parameter servers) and lab 07 (hangs and crawls) time real MPI ranks on the learner's machine: how long
each worker waited and computed, the seconds after every update of a race against the clock, the server's busy
time per step, the order in which pushes reached an asynchronous server, and traces of a ring allreduce with and
without a straggler. On a busy laptop or on CI under load these come out in any order: a step much longer than
the next, every step alike, one step a hundred times the others. Each reader of such a measurement is given
every kind hypothesis can make (times > 0, in the shapes the measuring code returns) and must answer in words
(no 'nan', no 'inf', no division by zero, no claim its own numbers contradict) and figures.

Readers in virtual time on an emulated machine, published figures and the exercises' checks are tested
elsewhere; here only their parts read on this machine's own clock (the wall time printed beside them).
"""
from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings, strategies as st

from ringlab.lessons.lab04_parameter_servers.serverload import describe_server_load, server_bottleneck_lesson
from ringlab.lessons.lab04_parameter_servers.staleness import describe_staleness, describe_waiting
from ringlab.lessons.lab04_parameter_servers.wallclock import common_target, describe_race
from ringlab.lessons.lab07_hangs_and_crawls import diagnose
from test_staleness import applied  # (worker, staleness) of pushes made in a given order

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WORKERS, STEPS = 4, 6  # lab 04's four workers (the notebook runs 30 steps; 6 keep the test quick)
STRAGGLER = {"worker": 3, "factor": 1.0, "extra_seconds": 0.02, "said": "worker 3 takes 20 ms more every step"}


def noisy(n: int, low: float = 1e-6, high: float = 1.0):
    """n times a busy machine could measure: any order, all alike, or one a hundred to a thousand times the rest."""
    one = st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    spread = st.lists(one, min_size=n, max_size=n)
    alike = one.map(lambda t: [t] * n)
    spiked = st.tuples(spread, st.integers(0, n - 1), st.floats(100, 1000)).map(
        lambda a: [t * a[2] if i == a[1] else t for i, t in enumerate(a[0])])
    return st.one_of(spread, alike, spiked)


def said_well(text: str) -> None:
    assert text.strip()
    for word in ("nan", "inf ", "inf)", "inf,", "inf.", "infx"):
        assert word not in text.lower(), (word, text)


# --- lab 04: who waited, the race against the clock, the server's load ----------------------------------------

def _worker(wait, compute):
    return {"role": "worker", "losses": [1.0] * STEPS, "wait_seconds": wait, "compute_seconds": compute}


def _share_words(text: str) -> None:
    """The amount said ('most of their time', ...) agrees with the percentage printed beside it."""
    for amount, percent in re.findall(r"spent (most|about half|a small part|a fair part) of their time waiting "
                                      r"\((\d+)%", text):
        p = int(percent)
        assert {"most": p > 50, "about half": 40 <= p <= 50, "a small part": p < 20,
                "a fair part": 20 <= p < 40}[amount], text


@SETTINGS
@given(sync=st.tuples(noisy(WORKERS, high=10.0), noisy(WORKERS, high=10.0)),
       asyn=st.tuples(noisy(WORKERS, high=10.0), noisy(WORKERS, high=10.0)))
def test_lab04s_waiting_reads_any_wait_and_compute_times(sync, asyn):
    runs = {mode: [_worker(w, c) for w, c in zip(*times)] for mode, times in (("sync", sync), ("async", asyn))}
    text = describe_waiting(runs, straggler=STRAGGLER["worker"])
    said_well(text)
    _share_words(text)
    if "so it waits less" in text:  # asynchronously less than synchronously, as printed
        sync_said, async_said = (int(p) for p in re.findall(r"waiting \((\d+)%", text))
        assert async_said < sync_said, text


def _run(method, durations, loss, **more):
    seconds = [0.0]
    for d in durations:
        seconds.append(seconds[-1] + d)
    return {"method": method, "workers": WORKERS, "steps": STEPS, "lr": 0.3, "staleness": None,
            "clock": "host (time.perf_counter)", "wall_seconds": seconds[-1] + 0.01, "straggler": dict(STRAGGLER),
            "seconds": seconds, "loss": loss, **more}


losses = st.floats(min_value=0.05, max_value=5.0, allow_nan=False)


@st.composite
def races(draw):
    """The three runs of lab 04's race, as race() returns them: the same initial loss; sync and ring the same
    loss after every step; async one update per push, its pushes in any order a busy machine makes."""
    first = draw(losses)

    def learned(n):  # any losses after the updates, one of them below the initial loss: the model learned
        after, lower = draw(st.lists(losses, min_size=n, max_size=n)), draw(st.integers(0, n - 1))
        return [first] + [min(x, 0.9 * first) if i == lower else x for i, x in enumerate(after)]

    steps = learned(STEPS)
    order = draw(st.permutations([w for w in range(WORKERS) for _ in range(STEPS)]))
    return {"sync": _run("sync", draw(noisy(STEPS)), steps),
            "async": _run("async", draw(noisy(WORKERS * STEPS, high=0.3)), learned(WORKERS * STEPS),
                          staleness=applied(order)),
            "ring": _run("ring", draw(noisy(STEPS)), steps[:1] + [x + 1e-7 for x in steps[1:]])}


def _rates(text: str) -> dict:
    found = re.search(r"(\d+) a second(?:, against (\d+) for the synchronous server and (\d+) for the ring)?", text)
    return {"async": int(found.group(1)), "sync": int(found.group(2)), "ring": int(found.group(3))}


@SETTINGS
@given(runs=races())
def test_lab04s_race_reads_any_seconds_the_three_runs_took(runs):
    from ringlab.viz.training import loss_against_time_plot

    text = describe_race(runs)
    said_well(text)
    reached = re.search(r"\n(.+?) reached it first, after ([\d.]+) s; (.+?) after ([\d.]+) s", text)
    if reached:  # whoever is called first took less time than the next, as printed
        assert float(reached.group(2)) < float(reached.group(4)), text
    if "more updates a second outweighed" in text:
        rates = _rates(text)
        assert rates["async"] > max(rates["sync"], rates["ring"]), text
    figure = loss_against_time_plot(runs, target=common_target(runs))
    assert len(figure.data) == 3


def _load_row(workers, busy, K=289_000):
    from ringlab.algorithms import build
    from ringlab.simulate import traffic

    ring = traffic(build("allreduce.ring", workers), K)["sent"][0] if workers > 1 else 0
    return {"workers": workers, "gradient_bytes": K, "steps": 20, "received": workers * K, "sent": workers * K,
            "busy_seconds": busy, "ring_bytes": ring}


@SETTINGS
@given(busy=noisy(WORKERS, high=0.1))
def test_lab04s_server_load_reads_any_busy_times(busy):
    from ringlab.viz.training import server_load_plot

    rows = [_load_row(w, b) for w, b in zip(range(1, WORKERS + 1), busy)]
    text = describe_server_load(rows, nranks=WORKERS + 1, cores=2)
    said_well(text)
    ratio = float(re.search(r"\(([\d.]+)x for", text).group(1))
    if ratio < 1:  # a busy time that fell is not said to have grown
        assert "its time grew" not in text, text
    server_load_plot(rows)


def _emulated_row(workers, ps, ring, walls=(None, None)):
    return {"workers": workers, "gradient_bytes": 288_800, "steps": 10, "machine": "emulated uniform:0.125:50",
            "ps_seconds": ps, "ps_predicted": ps, "ring_seconds": ring, "ring_predicted": ring,
            "ps_wall_seconds": walls[0], "ring_wall_seconds": walls[1]}


@SETTINGS
@given(walls=st.lists(st.tuples(*[st.floats(1e-6, 100.0)] * 2), min_size=WORKERS, max_size=WORKERS))
def test_lab04s_emulated_bottleneck_reads_any_wall_time_beside_its_virtual_one(walls):
    virtual = [(0.030, None), (0.060, 0.016), (0.090, 0.021), (0.120, 0.025)]  # virtual time: not this machine's
    rows = [_emulated_row(w, ps, ring, wall) for w, (ps, ring), wall in zip(range(1, WORKERS + 1), virtual, walls)]
    rows[0]["ring_wall_seconds"] = None  # one worker: no ring
    said_well(server_bottleneck_lesson(rows).text)


@SETTINGS
@given(order=st.permutations([w for w in range(WORKERS) for _ in range(STEPS)]),
       extra=st.integers(0, STEPS))
def test_lab04s_staleness_reads_pushes_in_any_order_a_busy_machine_applies_them(order, extra):
    pushes = applied(list(order) + [STRAGGLER["worker"]] * extra)  # the straggler may end alone, or not
    said_well(describe_staleness(pushes, straggler=STRAGGLER["worker"]))


# --- lab 07: a straggler read back from a measured trace -----------------------------------------------------

NRANKS = 4


def _measured_trace(gaps, durations, wall=None):
    """A ring allreduce's Trace as a measured one is: per rank and step, the step posted (start) a gap after
    the rank's previous step ended, and each of its messages ending its duration after the one before."""
    from ringlab.algorithms import build
    from ringlab.mpi.run import Trace

    schedule = build("allreduce.ring", NRANKS)
    ends, rows, d = [0.0] * NRANKS, [], iter(durations)
    for index, step in enumerate(schedule.steps):
        mine = {r: [] for r in range(NRANKS)}
        for t in step:
            mine[t.src].append((t.dst, t.chunk, "send"))
            mine[t.dst].append((t.src, t.chunk, "recv"))
        for r, messages in mine.items():
            posted = ends[r] + gaps[r * len(schedule.steps) + index]
            at = posted
            for peer, chunk, side in messages:
                at += next(d)
                rows.append((r, index, peer, chunk, (1 << 18) // NRANKS, side, posted, at, "host"))
            ends[r] = at
    trace = Trace(rows, schedule, clock="host (MPI.Wtime, from a barrier)", itemsize=4)
    trace.wall_s = max(ends) if wall is None else wall
    return trace


STEPS_07 = 2 * (NRANKS - 1)
traces = st.tuples(noisy(NRANKS * STEPS_07, low=0.0, high=0.05), noisy(2 * NRANKS * STEPS_07, high=0.01))


@SETTINGS
@given(trace=traces)
def test_lab07s_straggler_is_read_from_any_measured_trace(trace):
    from ringlab.viz import timeline

    measured = _measured_trace(*trace)
    said_well(diagnose.describe_straggler(measured))
    assert 0 <= diagnose._straggler(measured) < NRANKS
    timeline(measured)


@SETTINGS
@given(plain=traces, slowed=traces, walls=st.tuples(st.floats(1e-6, 100.0), st.floats(1e-6, 100.0)))
def test_lab07s_straggler_lesson_reads_any_trace_of_this_machine(plain, slowed, walls):
    raw = {"as it is": _measured_trace(*plain), "slowed": _measured_trace(*slowed)}
    links_step = 1e-3 + (1 << 16) / 5e6  # a step on STRAGGLER_MACHINE: virtual time, not measured here
    emulated = {"as it is": diagnose.model_trace(NRANKS, transfer=links_step, nbytes=1 << 18),
                "slowed": diagnose.model_trace(NRANKS, 2, 0.02, links_step, nbytes=1 << 18)}
    for name, wall in zip(emulated, walls):
        emulated[name].wall_s = wall
    found = diagnose.straggler_lesson(raw, emulated)
    said_well(found.text)


# --- what the property tests found, each as the example that showed it ---------------------------------------

LOSS = [2.0, 1.8, 1.4, 1.0, 0.8, 0.7, 0.6]
ROUND_ROBIN = applied([w for _ in range(STEPS) for w in range(WORKERS)])


def test_sync_and_ring_that_reach_the_target_at_the_same_time_are_not_one_before_the_other():
    """Both at the straggler's pace, 100 ms a step: the lesson said 'The synchronous server reached it first, after
    0.30 s; the ring allreduce after 0.30 s'."""
    runs = {"sync": _run("sync", [0.1] * STEPS, LOSS), "ring": _run("ring", [0.1] * STEPS, LOSS),
            "async": _run("async", [0.1] * 24, [2.0 - 0.06 * i for i in range(25)], staleness=ROUND_ROBIN)}
    text = describe_race(runs)
    assert ("The synchronous server and the ring allreduce reached it first, together, after 0.30 s; the asynchronous "
            "server after 1.20 s (measured here).") in text
    assert "The synchronous server reached it first" not in text
    assert "Yet it did not reach the target first" in text


def test_async_winning_with_no_more_updates_a_second_is_not_put_down_to_its_rate():
    """24 updates in 6 s, 4 a second, against 4 steps a second for the others, yet first to the target: the lesson
    said 'Not waiting won: more updates a second outweighed their staleness'."""
    quick = [2.0, 1.0] + [1.5] * 23  # async at the target after one update, 0.25 s
    runs = {"sync": _run("sync", [0.25] * STEPS, LOSS), "ring": _run("ring", [0.25] * STEPS, LOSS),
            "async": _run("async", [0.25] * 24, quick, staleness=ROUND_ROBIN)}
    text = describe_race(runs)
    assert "applied 24 updates in 6.00 s: 4 a second, against 4 for the synchronous server and 4 for the ring" in text
    assert "The asynchronous server reached it first, after 0.25 s" in text
    assert "more updates a second outweighed" not in text
    assert "Not waiting won here, though not by more updates a second than theirs." in text
    # reaching it at the same printed time as the others is neither a win nor a loss
    level = [2.0] * 13 + [1.2] + [1.5] * 11  # at 1.3 after 13 updates of 0.25 s: 3.25 s, as sync and ring
    runs["async"] = _run("async", [0.25] * 24, level, staleness=ROUND_ROBIN)
    runs["sync"]["seconds"] = runs["ring"]["seconds"] = [0.0, 1.0, 2.0, 3.25, 4.0, 5.0, 6.0]
    text = describe_race(runs, target=1.3)
    assert "reached it first, together, after 3.25 s" in text
    assert "It reached the target together with the synchronous server and the ring allreduce" in text
    assert "did not reach the target first" not in text and "Not waiting won" not in text


def test_a_busy_time_that_fell_is_not_said_to_have_grown():
    """The server busy 93.75 ms a step with 1 worker and 62.50 with 4 (0.7x): the lesson said 'its time grew not at
    all'."""
    rows = [_load_row(w, b) for w, b in zip(range(1, 5), [0.09375, 0.0625, 0.0625, 0.0625])]
    text = describe_server_load(rows, nranks=5, cores=2)
    assert "(0.7x for 4x the workers): its time did not grow with the workers but fell." in text
    assert "grew not at all" not in text


def test_waiting_is_worded_from_the_shares_as_printed():
    """Fast workers waiting 20%, 82% and 49% of their time, 50.2% on average: the lesson said 'most of their time
    waiting (50% on average, ...)'; and 'so it waits less' when both modes printed 41%."""
    runs = {"sync": [_worker(1.0, 1.0)] * 4,
            "async": [_worker(w, c) for w, c in zip([0.25, 2.0, 8.5, 1.0], [1.0, 0.4375, 9.0, 1.0])]}
    text = describe_waiting(runs, straggler=3)
    assert "Async: the fast workers spent about half their time waiting (50% on average, 20% to 82%)" in text
    runs = {"sync": [_worker(0.41, 0.59)] * 3 + [_worker(0.1, 4.0)],
            "async": [_worker(0.4099, 0.5901)] * 3 + [_worker(0.1, 4.0)]}
    text = describe_waiting(runs, straggler=3)
    assert "(41% each)" in text and "so it waits less" not in text and "it did not wait less" in text
