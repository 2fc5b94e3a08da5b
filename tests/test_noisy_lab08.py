"""Whatever a busy machine measures, lab 08 reads it back in words and tables and does not stop.

Lab 08 measures on the learner's own machine: the time of a step with and without recomputation (wall clock, one
thread), the peak memory of a whole step as the operating system saw it (Linux's resident high-water mark), the
ZeRO steps' time on emulated links with this CPU's own work counted in it (and this machine's wall time beside
it), the hybrid check's differences and bytes (on one node as on several), and prefetch's steps and peaks (virtual
time with modelled compute, so never shorter than that compute). On a busy 2-core laptop, or on CI under load,
those numbers come out in any order: a recomputing step no slower than a plain one, a forward slower than a whole
step, one run a thousand times slower than the rest, a peak the operating system saw smaller than what autograd
keeps. Each reader of those numbers is given every such measurement hypothesis can make, in the shapes the
measuring code returns, and must return its sentences and tables without raising and without "nan", "inf" or a
sentence that says the opposite of the numbers it quotes. The examples at the end are the cases that once did.
"""
from __future__ import annotations

import io
import re

from hypothesis import HealthCheck, given, settings, strategies as st

from ringlab.lessons.lab08_sharding_and_memory import hybrid, peak, prefetch, recompute, sharding
from ringlab.measure.tables import table
from ringlab.measure.units import format_bytes

MiB = 1 << 20
PAGE = 4096
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a time a busy machine could measure: 1 us to 1 s
seconds = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False, allow_infinity=False)


def times(n: int):
    """``n`` times in any order: each anything, all equal, or all equal but one a thousand times slower."""
    anything = st.lists(seconds, min_size=n, max_size=n)
    equal = seconds.map(lambda t: [t] * n)
    outlier = st.tuples(st.floats(min_value=1e-6, max_value=1e-3), st.integers(0, n - 1)).map(
        lambda p: [p[0] * (1000 if i == p[1] else 1) for i in range(n)])
    return st.one_of(anything, equal, outlier)


def sane(text: str) -> str:
    """The text, after checking it holds no nan or inf (nor "inf GB/s", "inf%"), and says something."""
    assert text.strip()
    assert not re.search(r"\bnan\b|\binf\b|inf%", text, re.IGNORECASE), text
    return text


def printed(rows, columns) -> str:
    out = io.StringIO()
    table(rows, columns, out=out)
    return sane(out.getvalue())


# Recomputation (recompute.measure_recompute): the bytes autograd kept layer by layer, and three medians timed here
COUNT = recompute.korthikanti_bytes(*(recompute.SHAPE[k] for k in ("seq", "batch", "hidden", "heads")))
LAYERS = recompute.SHAPE["layers"]


def _recompute_result(keep, again, forward, step, recomputing):
    return {"shape": dict(recompute.SHAPE), "count": COUNT, "repeats": recompute.REPEATS,
            "kept": {"keep": list(keep), "recompute": list(again)},
            "seconds": {"forward": forward, "keep": step, "recompute": recomputing}}


# what autograd keeps is counted from its tensors: the count plus what it leaves out, or near it (another torch)
kept_keep = st.one_of(st.just(COUNT["full"] + COUNT["uncounted"]), st.just(COUNT["full"]),
                      st.integers(COUNT["full"] // 2, 2 * COUNT["full"]))
kept_again = st.one_of(st.just(COUNT["recompute"]), st.integers(COUNT["recompute"] // 2, 2 * COUNT["recompute"]))


@FEW
@given(keep=st.lists(kept_keep, min_size=LAYERS, max_size=LAYERS),
       again=st.lists(kept_again, min_size=LAYERS, max_size=LAYERS), timed=times(3))
def test_the_recompute_lesson_reads_any_three_medians_of_a_busy_machine(keep, again, timed):
    result = _recompute_result(keep, again, *timed)
    finding = recompute.recompute_lesson(result)
    said = sane(finding.text)
    forward, step, recomputing = timed
    if recomputing <= step:
        assert finding.observations == ("recomputation took no longer on this machine",)
        assert "no longer" in said
    else:
        assert "ms more" in said and "no longer" not in said
    assert "-" not in re.sub(r"[A-Za-z]-[A-Za-z]|torch\.utils", "", said)  # no negative figure quoted
    printed(recompute.recompute_rows(result), recompute.RECOMPUTE_COLUMNS)


# The measured peak (peak.measure_peak): the resident high-water mark above the step's start, in pages, each way
PEAK_COUNT = recompute.korthikanti_bytes(*(peak.SHAPE[k] for k in ("seq", "batch", "hidden", "heads")))
PEAK_LAYERS = peak.SHAPE["layers"]
PARAMETERS = PEAK_LAYERS * (12 * peak.SHAPE["hidden"] ** 2 + 13 * peak.SHAPE["hidden"]) * 4  # fp32, about
pages = st.integers(0, (2 << 30) // PAGE).map(lambda n: n * PAGE)  # 0 to 2 GiB


def _peak_result(keep_peaks, again_peaks, layers=PEAK_LAYERS):
    keep_kept = [PEAK_COUNT["full"] + PEAK_COUNT["uncounted"]] * layers
    again_kept = [PEAK_COUNT["recompute"]] * layers
    return {"shape": dict(peak.SHAPE, layers=layers),
            "keep": {"recompute": False, "peaks": list(keep_peaks), "kept": list(keep_kept), "parameters": PARAMETERS},
            "recompute": {"recompute": True, "peaks": list(again_peaks), "kept": list(again_kept),
                          "parameters": PARAMETERS}}


def _near(counted: int):
    """A peak near ``counted`` bytes, in pages: what a quiet machine measures, give or take a busy one's change."""
    return st.integers(-64, 64 * 1024).map(lambda n: max(0, (counted // PAGE + n) * PAGE))


KEEP_HELD = PEAK_LAYERS * (PEAK_COUNT["full"] + PEAK_COUNT["uncounted"])
AGAIN_HELD = PEAK_LAYERS * PEAK_COUNT["recompute"] + PEAK_COUNT["full"] + PEAK_COUNT["uncounted"]


@FEW
@given(keep=st.one_of(st.lists(pages, min_size=peak.STEPS, max_size=peak.STEPS),
                      st.lists(_near(KEEP_HELD), min_size=peak.STEPS, max_size=peak.STEPS)),
       again=st.one_of(st.lists(pages, min_size=peak.STEPS, max_size=peak.STEPS),
                       st.lists(_near(AGAIN_HELD), min_size=peak.STEPS, max_size=peak.STEPS)),
       layers=st.sampled_from([PEAK_LAYERS, 1, 2]))  # measure_peak(shape) takes any depth
def test_the_peak_lesson_reads_any_peaks_the_operating_system_reports(keep, again, layers):
    result = _peak_result(keep, again, layers)
    rows = peak.peak_rows(result)
    finding = peak.peak_lesson(result)
    said = sane(finding.text)
    cut = max(keep) - max(again)
    assert (finding.conclusions[0] == "recomputation cut the step's peak") == (cut > 0)
    rest = [r["rest"] for r in rows]
    if "about the same either way" in said:
        assert abs(rest[0] - rest[1]) <= peak.AGREE * max(abs(r) for r in rest)
    if "not the same either way" in said:
        assert abs(rest[0] - rest[1]) > peak.AGREE * max(abs(r) for r in rest)
    assert not re.search(r"-\d", said), said  # no negative bytes "more" or "cut"
    printed(rows, peak.PEAK_COLUMNS)


# The ZeRO steps (sharding.measure_sharding): bytes measured from the tensors and counted from the schedules, the
# same on every machine; the steps' virtual time, the links' time plus this CPU's work, and this machine's wall time
RANKS = 4
SIZES = [s for a, b in zip(sharding.WIDTHS, sharding.WIDTHS[1:]) for s in (8 * a * b, 8 * b)]
NPARAMS = sum(SIZES) // 8


def _predicted():
    from ringlab.algorithms import build
    from ringlab.predict import predict
    from ringlab.topology import from_spec

    topology, _ = from_spec(sharding.MACHINE, RANKS)
    return {v: sum(predict(build(name, RANKS), nbytes, topology).seconds for name, nbytes in sharding._calls(v, SIZES))
            for v in sharding.VARIANTS}


PREDICTED = _predicted()


def _held(variant: str, rank: int) -> dict:
    """What a rank holds after a step, as ZeroOptimizer.memory() measures it: the formula's bytes, rank 0's pieces
    one element larger where a unit does not divide, and Adam's step count (a 4-byte tensor per parameter tensor)."""
    from ringlab.train.zero import zero_memory

    formula = zero_memory(NPARAMS, RANKS, sharding.STAGE[variant], **sharding.ADAM_FP64)
    extra = {k: (8 * len(SIZES) if rank == 0 and sharding.STAGE[variant] > 2 - i else 0)
             for i, k in enumerate(formula)}
    return {k: int(v) + extra[k] + (4 * len(SIZES) if k == "optimizer_state" else 0) for k, v in formula.items()}


def _sharding_result(virtual, walls) -> dict:
    from ringlab.lessons.lab08_sharding_and_memory.checks import counted_sent
    from ringlab.train.zero import zero_memory

    sent = counted_sent(RANKS)
    rows = [{"variant": v, "calls": len(sharding._calls(v, SIZES)), "measured_s": t, "predicted_s": PREDICTED[v],
             "wall_s": w, "held": [_held(v, r) for r in range(RANKS)], "sent": [sent[v]] * RANKS,
             "formula": sum(zero_memory(NPARAMS, RANKS, sharding.STAGE[v], **sharding.ADAM_FP64).values())}
            for v, t, w in zip(sharding.VARIANTS, virtual, walls)]
    return {"rows": rows, "machine": sharding.MACHINE, "ranks": RANKS, "nparams": NPARAMS}


def _check_sharding(result) -> str:
    finding = sharding.sharding_lesson(result)
    said = sane(finding.text)
    printed(sharding.memory_rows(result), sharding.MEMORY_COLUMNS)
    printed(sharding.traffic_rows(result), sharding.TRAFFIC_COLUMNS)
    from ringlab.viz.parallelism import memory_bars

    assert len(memory_bars(result).data) == 4
    return said


@FEW
@given(cpu=times(4), walls=times(4))
def test_the_sharding_lesson_reads_any_cpu_time_a_busy_machine_adds_to_the_steps(cpu, walls):
    # virtual time: the links' time (the cost model's, give or take) plus this CPU's own work, whatever it took
    virtual = [PREDICTED[v] + t for v, t in zip(sharding.VARIANTS, cpu)]
    result = _sharding_result(virtual, [w * 10 for w in walls])
    said = _check_sharding(result)
    time = dict(zip(sharding.VARIANTS, virtual))
    slowest_other = max(t for v, t in time.items() if v != "ZeRO stage 3")
    slower = "stage 3 is the slowest on the emulated machine" in sharding.sharding_lesson(result).conclusions
    assert slower == (time["ZeRO stage 3"] >= sharding.SLOWER * slowest_other)
    # "not clearly slower" quotes stage 3 against the slowest of the others, a figure below SLOWER (to its digit)
    m = re.search(r"stage 3 was not clearly slower \(([\d.]+)x (plain data parallelism|stage \d)\)", said)
    assert bool(m) == (not slower), said
    if m:
        name = "data parallel" if m.group(2) == "plain data parallelism" else "ZeRO " + m.group(2)
        assert time[name] == slowest_other and float(m.group(1)) <= sharding.SLOWER, said
    assert not re.search(r"(?<![\w(])-\d", said), said  # no negative milliseconds


@FEW
@given(virtual=times(4), walls=times(4))
def test_the_sharding_lesson_reads_any_step_times_at_all(virtual, walls):
    _check_sharding(_sharding_result([t * 0.1 for t in virtual], walls))


# The hybrid check (hybrid.hybrid_against_data_parallel): per optimizer, the weights' largest relative difference
# from data parallelism's, and the bytes a rank sent to other nodes against the formula
SMALL_PARAMS = 155  # sharding.small_model's


@FEW
@given(layout=st.sampled_from([(1, 4), (2, 2), (4, 1), (2, 3), (3, 2), (1, 2)]),
       differences=st.lists(st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=1.0)), min_size=2, max_size=2),
       off=st.lists(st.one_of(st.just(1.0), st.floats(min_value=0.9, max_value=1.1)), min_size=2, max_size=2))
def test_the_hybrid_check_reads_any_differences_and_any_layout(layout, differences, off):
    nodes, per_node = layout
    formula = 2 * (nodes - 1) / nodes * SMALL_PARAMS * 8 / per_node
    rows = [{"optimizer": name, "layout": f"{nodes} nodes x {per_node} GPUs", "difference": d,
             "across": formula * k, "formula": formula} for name, d, k in zip(("SGD", "Adam"), differences, off)]
    said = sane(hybrid.hybrid_check_sentence(rows))
    assert ("inside" in said) == (max(differences) <= hybrid.TOLERANCE)
    printed(rows, hybrid.CHECK_COLUMNS)


# Prefetch (prefetch.measure_prefetch): virtual time, modelled compute, so never shorter than the compute it models;
# the peak measured from the tensors
UNIT = (prefetch.WIDTH ** 2 + prefetch.WIDTH) * 8
PIECES = prefetch.LAYERS * UNIT // 4


@FEW
@given(extra=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=2, max_size=2),
       peaks=st.lists(st.integers(0, 4 * UNIT), min_size=2, max_size=2),
       predicted=st.lists(st.floats(min_value=0.05, max_value=0.5), min_size=2, max_size=2))
def test_the_prefetch_lesson_reads_any_steps_and_peaks(extra, peaks, predicted):
    compute = prefetch.LAYERS * (prefetch.FORWARD + prefetch.BACKWARD)
    rows = [{"prefetch": on, "measured_s": compute + e, "predicted_s": p, "peak": [PIECES + k] * 4,
             "pieces": [PIECES] * 4, "compute_s": compute, "gathers_s": 0.064, "scatters_s": 0.032}
            for on, e, k, p in zip((False, True), extra, peaks, predicted)]
    result = {"rows": rows, "machine": prefetch.MACHINE, "ranks": 4, "unit_bytes": UNIT,
              "forward": prefetch.FORWARD, "backward": prefetch.BACKWARD}
    said = sane(prefetch.prefetch_lesson(result).text)
    assert not re.search(r"[-+]\d+% (shorter|longer)", said), said  # "-5% shorter" for a step that grew
    printed(prefetch.prefetch_rows(result), prefetch.PREFETCH_COLUMNS)


# The cases that once raised or said the opposite of their numbers, kept as examples


def test_a_peak_below_what_autograd_holds_is_not_read_as_negative_working_memory():
    # the operating system saw nothing (or less than autograd keeps: memory already resident, or swapped out): the
    # lesson said "each peak has -196 MiB and -53 MiB more: the backward's own working memory"
    said = peak.peak_lesson(_peak_result([0, 0], [0, 0])).text
    assert "-196 MiB" not in said and "Beyond the activations held" not in said
    assert "the measured peaks were 0 B and 0 B: both below what autograd holds" in said
    assert "the measured peak did not fall: it did not follow the activations counted" in said
    # both 5 MiB below: equal rests, yet "not the same either way" (compared against the larger, negative, rest)
    said = peak.peak_lesson(_peak_result([KEEP_HELD - 5 * MiB] * 2, [AGAIN_HELD - 5 * MiB] * 2)).text
    assert "not the same either way" not in said and "both below what autograd holds" in said
    # a peak that rose with recomputation was "a measured cut of -20 MiB, 114% less than that"
    said = peak.peak_lesson(_peak_result([KEEP_HELD + 20 * MiB] * 2, [KEEP_HELD + 40 * MiB] * 2)).text
    assert "the measured peak did not fall but rose by 20 MiB" in said and "-20 MiB" not in said
    assert "each peak has 20 MiB and" in said  # beyond what autograd holds: the working memory, as before


def test_a_one_layer_peak_is_read_without_a_negative_count_or_inf():
    # one layer: recomputing brings the layer's activations back beside its input, so the count says it holds more;
    # a noisy cut then printed "recomputing holds -1 MiB less" and "inf% more than that"
    result = _peak_result([KEEP_HELD // 4 + 60 * MiB] * 2, [KEEP_HELD // 4 + 50 * MiB] * 2, layers=1)
    said = peak.peak_lesson(result).text
    more = format_bytes(PEAK_COUNT["recompute"])  # the layer's input, kept beside its activations brought back
    assert f"recomputing holds {more} more at the peak" in said and "inf" not in said
    assert "the measured cut is 10 MiB, where the count expects none" in said


def test_stage_3_not_clearly_slower_is_quoted_against_the_slowest_of_the_others():
    # stage 2 quick on a busy machine, the others a second slower: "stage 3 was not clearly slower (2.0x stage 2)"
    virtual = [PREDICTED[v] + t for v, t in zip(sharding.VARIANTS, (1.0, 1.0, 0.5, 1.0))]
    finding = sharding.sharding_lesson(_sharding_result(virtual, [5.0] * 4))
    assert "stage 3 is not clearly the slowest on the emulated machine" in finding.conclusions
    assert "(2.0x stage 2)" not in finding.text and "stage 3 was not clearly slower (1.0x stage 1)" in finding.text


def test_the_hybrid_check_on_one_node_sends_nothing_across_and_says_so():
    # hybrid_against_data_parallel on one node (no simulated_nodes): 0 B across, formula 0: ZeroDivisionError
    rows = [{"optimizer": name, "layout": "1 nodes x 4 GPUs", "difference": 0.0, "across": 0.0, "formula": 0.0}
            for name in ("SGD", "Adam")]
    said = hybrid.hybrid_check_sentence(rows)
    assert "A rank sent 0 B a step to other nodes, the formula's 2(m-1)/m x 8 Psi/g (float64 gradients)." in said
    assert "sends none" in hybrid.hybrid_check_sentence([dict(rows[0], across=8.0)])


def test_a_prefetch_step_that_grew_is_called_longer():
    # noise on a busy machine made the step with prefetch the longer one: the lesson said "-5% shorter with it"
    compute = prefetch.LAYERS * (prefetch.FORWARD + prefetch.BACKWARD)
    rows = [{"prefetch": on, "measured_s": compute * k, "predicted_s": compute, "peak": [PIECES + UNIT] * 4,
             "pieces": [PIECES] * 4, "compute_s": compute, "gathers_s": 0.064, "scatters_s": 0.032}
            for on, k in ((False, 1.0), (True, 1.05))]
    result = {"rows": rows, "machine": prefetch.MACHINE, "ranks": 4, "unit_bytes": UNIT,
              "forward": prefetch.FORWARD, "backward": prefetch.BACKWARD}
    said = prefetch.prefetch_lesson(result).text
    assert "the step was 5% longer with it" in said and "shorter" not in said
