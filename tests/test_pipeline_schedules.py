"""Pipeline schedules as data (ringlab.predict.schedules, ringlab.viz.pipeline_schedules): GPipe, 1F1B, interleaved
1F1B and ZB-H1, run from their dependencies, meet the papers' closed forms for the bubble and the micro-batches held;
orders that break a dependency, and bad counts and times, are refused with a clear error; the figure is labelled."""
import math

import pytest

import ringlab as rl
from ringlab.predict.pipeline import gpipe_schedule
from ringlab.predict.schedules import (BACKWARD, FORWARD, WEIGHT, Pass, ScheduleError, Timeline, bubble_fraction,
                                       bubble_over_ideal, check, dependencies, gpipe_order, interleaved_order,
                                       one_f_one_b_order, order, peak_in_flight, schedule_timeline, timeline,
                                       zero_bubble_order)
from ringlab.viz.pipeline_schedules import schedule_chart

SHAPES = [(1, 1), (1, 4), (2, 1), (2, 3), (3, 7), (4, 2), (4, 4), (4, 8), (4, 16), (8, 8), (8, 32)]


@pytest.mark.parametrize("p, m", SHAPES)
@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_gpipe_and_1f1b_take_the_same_time_with_the_closed_form_bubble(name, p, m):
    t = schedule_timeline(name, p, m)
    assert t.makespan == pytest.approx((m + p - 1) * 3)  # F=1, B=2
    assert t.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=1e-12)
    assert t.bubble_fraction == pytest.approx(bubble_fraction(name, p, m), rel=1e-12)
    assert t.bubble_over_ideal == pytest.approx(bubble_over_ideal(name, p, m), rel=1e-12)


@pytest.mark.parametrize("p, m", SHAPES)
def test_1f1b_holds_at_most_p_micro_batches_and_gpipe_all_m(p, m):
    assert schedule_timeline("gpipe", p, m).in_flight == (m,) * p
    held = schedule_timeline("1f1b", p, m).in_flight
    assert held == tuple(min(p - s, m) for s in range(p))  # stage s: p - s, the first stage p
    assert held[0] == peak_in_flight("1f1b", p, m) and peak_in_flight("gpipe", p, m) == m
    assert peak_in_flight("1f1b", p) == p  # a long step's steady state, as the planner asks


@pytest.mark.parametrize("forward, backward", [(1, 1), (1, 2), (1.5, 2.5), (0.3, 1.7)])
def test_the_closed_forms_hold_for_any_pass_lengths(forward, backward):
    for name, p, m in [("gpipe", 4, 6), ("1f1b", 5, 9), ("1f1b", 8, 3)]:
        t = schedule_timeline(name, p, m, forward=forward, backward=backward)
        assert t.makespan == pytest.approx((m + p - 1) * (forward + backward))
        assert t.bubble_over_ideal == pytest.approx(bubble_over_ideal(name, p, m, forward=forward, backward=backward))


def test_gpipe_with_unit_passes_is_the_slot_grid_of_predict_pipeline():
    for p, m in [(3, 4), (4, 8)]:
        t = schedule_timeline("gpipe", p, m, forward=1, backward=1)
        grid = gpipe_schedule(p, m)
        for stage, row in enumerate(t.passes):
            assert [(x.kind, x.microbatch) for x in row] == [cell for cell in grid[stage] if cell]
            assert [int(x.start) for x in row] == [slot for slot, cell in enumerate(grid[stage]) if cell]


@pytest.mark.parametrize("p, m, v", [(2, 2, 2), (2, 4, 2), (4, 4, 2), (4, 8, 2), (4, 8, 3), (4, 16, 4), (8, 16, 2),
                                     (8, 32, 4), (3, 9, 5)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_of_the_ideal_time(p, m, v):
    t = schedule_timeline("interleaved", p, m, chunks=v)
    ideal = m * 3  # every stage computes m forwards and backwards, in v chunks of 1/v each
    assert t.busy == pytest.approx(p * ideal)
    assert t.bubble_over_ideal == pytest.approx((p - 1) / (v * m), rel=1e-9)
    assert t.bubble_over_ideal == pytest.approx(bubble_over_ideal("interleaved", p, m, chunks=v), rel=1e-9)
    assert t.makespan == pytest.approx(ideal * (1 + (p - 1) / (v * m)))
    assert t.bubble_over_ideal < schedule_timeline("1f1b", p, m).bubble_over_ideal or p == 1


@pytest.mark.parametrize("p, m, v", [(2, 4, 2), (4, 8, 2), (4, 16, 4), (8, 16, 2), (4, 4, 2)])
def test_interleaved_holds_p_plus_p_minus_1_over_v_on_the_first_stage(p, m, v):
    held = schedule_timeline("interleaved", p, m, chunks=v).in_flight
    assert held[0] == pytest.approx(peak_in_flight("interleaved", p, m, v))
    assert held[0] == max(held)
    if m >= 2 * p:  # the planner's count: pp (1 + (pp - 1) / (pp vp))
        assert held[0] == pytest.approx(p * (1 + (p - 1) / (p * v)))
    else:  # m = p: Megatron's warm-up covers every forward; the stage holds all m
        assert held[0] == m


@pytest.mark.parametrize("p, m", [(2, 2), (2, 4), (3, 7), (4, 4), (4, 8), (4, 16), (8, 8), (8, 24)])
def test_zero_bubble_h1_has_a_third_of_1f1bs_bubble_and_1f1bs_memory(p, m):
    zb, one = schedule_timeline("zero-bubble", p, m), schedule_timeline("1f1b", p, m)
    assert zb.durations == {FORWARD: 1.0, BACKWARD: 1.0, WEIGHT: 1.0}  # a backward of 2 split evenly, as the paper
    assert zb.busy == pytest.approx(one.busy)
    assert zb.idle == pytest.approx(one.idle / 3)  # (p-1)(F+B-W) against (p-1)(F+B+W), a stage
    assert zb.bubble_over_ideal == pytest.approx((p - 1) / (3 * m))
    assert zb.bubble_over_ideal == pytest.approx(bubble_over_ideal("zero-bubble", p, m))
    assert zb.bubble_fraction < one.bubble_fraction or p == 1
    assert max(zb.in_flight) == max(one.in_flight) == p == peak_in_flight("zero-bubble", p, m)


@pytest.mark.parametrize("forward, backward, weight", [(1, 2, 0.5), (1, 3, 1), (2, 2, 1), (1, 2, 1.5), (1, 1.5, 1),
                                                       (0.7, 2.9, 0.4)])
def test_zero_bubble_closed_form_and_where_the_papers_stops(forward, backward, weight):
    b = backward - weight  # the input-gradient pass
    for p, m in [(4, 4), (4, 9), (6, 12)]:
        t = schedule_timeline("zero-bubble", p, m, forward=forward, backward=backward, weight=weight)
        per_stage = t.idle / p
        assert per_stage == pytest.approx((p - 1) * max(forward + b - weight, forward, b))
        if weight <= min(forward, b):  # the paper's (p-1)(T_F + T_B - T_W)
            assert per_stage == pytest.approx((p - 1) * (forward + b - weight))
        assert t.bubble_over_ideal == pytest.approx(
            bubble_over_ideal("zero-bubble", p, m, forward=forward, backward=backward, weight=weight))


def test_send_time_adds_two_fills_to_gpipe_and_costs_1f1b_more():
    for p, m, send in [(4, 8, 0.1), (3, 5, 0.5)]:
        gpipe = schedule_timeline("gpipe", p, m, send=send)
        assert gpipe.makespan == pytest.approx((m + p - 1) * 3 + 2 * (p - 1) * send)
        # 1F1B's steady state waits for each backward's round trip: the sends stall it, not only the fill and drain
        assert schedule_timeline("1f1b", p, m, send=send).makespan > gpipe.makespan
        check(schedule_timeline("interleaved", p, 2 * p, chunks=2, send=send))


@pytest.mark.parametrize("name, v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zero-bubble", 1)])
def test_every_pass_runs_once_after_its_dependencies(name, v):
    p, m = 4, 8
    t = schedule_timeline(name, p, m, chunks=v, send=0.25)
    ended = {(x.kind, x.microbatch, x.chunk, x.stage): x for row in t.passes for x in row}
    assert len(ended) == (3 if name == "zero-bubble" else 2) * p * m * v
    for x in ended.values():
        for d in dependencies(x.kind, x.microbatch, x.chunk, x.stage, p, v):
            assert x.start >= ended[d].end + (0.25 if d[3] != x.stage else 0) - 1e-9


def test_an_order_that_waits_on_itself_raises():
    bad = one_f_one_b_order(3, 4)
    last = bad[-1]
    last[0], last[1] = last[1], last[0]  # the last stage's first backward before its own forward
    with pytest.raises(ScheduleError, match="never finish.*stage 2 at B0"):
        timeline(bad, microbatches=4)
    crossed = gpipe_order(2, 2)
    crossed[0] = [(BACKWARD, 0, 0), (FORWARD, 0, 0), (FORWARD, 1, 0), (BACKWARD, 1, 0)]
    with pytest.raises(ScheduleError, match="never finish"):
        timeline(crossed, microbatches=2)


def test_a_missing_or_repeated_pass_raises():
    short = one_f_one_b_order(2, 3)
    short[1].pop()
    with pytest.raises(ScheduleError, match="missing B2 \\(stage 1"):
        timeline(short, microbatches=3)
    twice = one_f_one_b_order(2, 3)
    twice[0].append((FORWARD, 0, 0))
    with pytest.raises(ScheduleError, match="repeated"):
        timeline(twice, microbatches=3)


def test_a_timeline_that_breaks_a_dependency_raises():
    t = schedule_timeline("1f1b", 3, 4, send=0.5)
    rows = [list(row) for row in t.passes]
    x = rows[1][0]  # stage 1's first forward, moved to before stage 0's has been sent
    rows[1][0] = Pass(x.kind, x.microbatch, x.chunk, x.stage, x.start - 0.25, x.end - 0.25)
    early = Timeline(t.schedule, t.stages, t.microbatches, t.chunks, t.durations, t.send, tuple(map(tuple, rows)))
    with pytest.raises(ScheduleError, match="stage 1: F0 .* before F0 of stage 0 .* ended and been sent"):
        check(early)
    rows = [list(row) for row in t.passes]
    y = rows[0][1]
    rows[0][1] = Pass(y.kind, y.microbatch, y.chunk, y.stage, y.start - 0.5, y.end - 0.5)  # on top of the one before
    with pytest.raises(ScheduleError, match="stage 0 runs F0 and F1 at once"):
        check(Timeline(t.schedule, t.stages, t.microbatches, t.chunks, t.durations, t.send, tuple(map(tuple, rows))))


def test_interleaved_needs_m_a_multiple_of_p_and_two_chunks():
    with pytest.raises(ValueError, match="microbatches must be a multiple of 4, got 6"):
        schedule_timeline("interleaved", 4, 6, chunks=2)
    with pytest.raises(ValueError, match="chunks .* >= 2"):
        interleaved_order(4, 8, 1)
    with pytest.raises(ValueError, match="one chunk a stage"):
        order("1f1b", 4, 8, chunks=2)
    with pytest.raises(ValueError, match="one chunk a stage"):
        bubble_over_ideal("zero-bubble", 4, 8, chunks=2)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "4", None])
def test_bad_counts_are_refused(bad):
    for call in (lambda: schedule_timeline("1f1b", bad, 4), lambda: gpipe_order(4, bad),
                 lambda: zero_bubble_order(bad, 4), lambda: bubble_fraction("gpipe", bad, 4),
                 lambda: peak_in_flight("1f1b", bad, 4)):
        with pytest.raises(ValueError, match="must be a whole number >= 1"):
            call()
    with pytest.raises(ValueError, match="chunks must be a whole number >= 1"):
        schedule_timeline("interleaved", 4, 8, chunks=bad)


@pytest.mark.parametrize("key, value", [("forward", 0), ("backward", -1), ("forward", math.nan), ("backward", math.inf),
                                        ("send", -0.1), ("weight", 2), ("weight", 3.5), ("forward", True)])
def test_bad_times_are_refused(key, value):
    with pytest.raises(ValueError, match=key if key != "weight" else "weight"):
        schedule_timeline("zero-bubble", 4, 8, **{key: value})


def test_unknown_schedules_and_too_few_micro_batches_for_zb_h1_are_refused():
    with pytest.raises(ValueError, match="unknown pipeline schedule 'pipedream'; known: gpipe, 1f1b"):
        schedule_timeline("pipedream", 4, 8)
    with pytest.raises(ValueError, match="at least as many micro-batches as stages"):
        bubble_over_ideal("zero-bubble", 8, 4)
    with pytest.raises(ValueError, match="give microbatches"):
        peak_in_flight("gpipe", 4)


@pytest.mark.parametrize("name, v, kinds", [("gpipe", 1, 3), ("1f1b", 1, 3), ("interleaved", 2, 3),
                                           ("zero-bubble", 1, 4)])
def test_the_figure_has_labelled_axes_and_one_trace_a_block_kind(name, v, kinds):
    t = schedule_timeline(name, 4, 8, chunks=v)
    fig = schedule_chart(t)
    names = [trace.name for trace in fig.data]
    assert len(names) == len(set(names)) == kinds and names[-1] == "idle (the bubble)"
    assert ("W: weight gradient" in names) == (name == "zero-bubble")
    assert fig.layout.xaxis.title.text.startswith("time") and fig.layout.yaxis.title.text == "pipeline stage"
    title = fig.layout.title.text
    assert "counted from the schedule's dependencies" in title and "not measured" in title
    assert fig.layout.legend.y < 0  # below the plot, clear of any controls above it
    blocks = sum(len(trace.x) for trace in fig.data[:-1])
    assert blocks == sum(len(row) for row in t.passes)
    idle = fig.data[-1]
    assert sum(idle.x) == pytest.approx(t.idle)  # the grey is the bubble, all of it
    first = fig.data[0]
    assert list(first.text[:2]) == (["0.0", "1.0"] if v > 1 else ["0", "1"])  # labelled by micro-batch (.chunk)


def test_the_figure_refuses_what_is_not_a_timeline():
    with pytest.raises(TypeError, match="draws a Timeline"):
        schedule_chart(gpipe_schedule(2, 2))


# -- the planner takes its pipeline facts from here ---------------------------------------------------------------
H100x4 = rl.topology.cluster("h100", nodes=4)  # 32 GPUs: tp=8 x pp=4, one data-parallel rank
LAYOUT = dict(tp=8, pp=4, zero=1, global_batch=64, seq=4096)  # 64 micro-batches a step


def test_the_planner_s_bubble_and_activations_are_this_module_s_closed_forms():
    for vp, name in ((1, "1f1b"), (2, "interleaved")):
        p = rl.plan("llama3-70b", H100x4, vp=vp, **LAYOUT)
        m = p.layout["micro_batches"]
        assert m == 64 and p.layout["schedule"] == "1f1b"
        assert p.time["bubble"] == pytest.approx(p.time["compute"] * bubble_over_ideal(name, 4, m, chunks=vp))
        assert p.time["bubble"] == pytest.approx(p.time["compute"] * 3 / (vp * m))  # (pp - 1) / (vp m)
        said = rl.plan("llama3-70b", H100x4, vp=vp, schedule=name, **LAYOUT)
        assert said.time == p.time and said.memory == p.memory  # "interleaved" is 1F1B with vp > 1, said outright
    one, two = rl.plan("llama3-70b", H100x4, **LAYOUT), rl.plan("llama3-70b", H100x4, vp=2, **LAYOUT)
    held = (two.memory["activations"] / one.memory["activations"])  # p + (p-1)/v against p micro-batches
    assert held == pytest.approx(peak_in_flight("interleaved", 4, chunks=2) / peak_in_flight("1f1b", 4))


def test_zero_bubble_in_the_planner_is_a_third_of_1f1bs_bubble_at_1f1bs_memory():
    one = rl.plan("llama3-70b", H100x4, **LAYOUT)
    zb = rl.plan("llama3-70b", H100x4, schedule="zero-bubble", **LAYOUT)
    assert zb.time["bubble"] == pytest.approx(one.time["bubble"] / 3)  # F = W = a third of a micro-batch's compute
    assert zb.memory == one.memory and zb.step_seconds < one.step_seconds
    assert {k: v for k, v in zb.time.items() if k != "bubble"} == {k: v for k, v in one.time.items() if k != "bubble"}
    assert "schedule=zero-bubble" in zb.layout_str() and "schedule" not in one.layout_str()
    full = rl.plan("llama3-70b", H100x4, schedule="zero-bubble", recompute="full", **LAYOUT)
    m = full.layout["micro_batches"]  # B carries the recomputed forward: (p-1)(F + B - W) = (p-1) x 2 quarters
    assert full.time["bubble"] == pytest.approx(full.time["compute"] * 3 * (2 / 4) / m)


def test_gpipe_in_the_planner_has_1f1bs_time_and_holds_every_micro_batch():
    kw = dict(LAYOUT, global_batch=8)  # 8 micro-batches, 4 stages
    one = rl.plan("llama3-70b", H100x4, **kw)
    gpipe = rl.plan("llama3-70b", H100x4, schedule="gpipe", **kw)
    assert gpipe.time == one.time
    assert gpipe.memory["activations"] > one.memory["activations"] * 1.9  # 8 micro-batches held, not 4


@pytest.mark.parametrize("kw, message", [
    ({"schedule": "pipedream"}, "unknown pipeline schedule 'pipedream'"),
    ({"schedule": "interleaved"}, "needs vp > 1"),
    ({"schedule": "zero-bubble", "vp": 2}, "vp must be 1"),
    ({"schedule": "gpipe", "vp": 2}, "vp must be 1"),
    ({"schedule": "zero-bubble", "global_batch": 2}, "at least as many micro-batches as stages")])
def test_the_planner_refuses_a_schedule_it_cannot_run(kw, message):
    with pytest.raises(ValueError, match=message):
        rl.plan("llama3-70b", H100x4, **dict(LAYOUT, **kw))
