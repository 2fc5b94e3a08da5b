"""Labs 00, 09 and 10 read what this machine measured, whatever a busy machine measures, and say what it says.

Three labs time things on the learner's own machine, in wall-clock time, and turn the times into sentences and
figures: lab 00 the host<->device copies of this machine's GPU (and the p2pBandwidthLatencyTest logs a learner
drops into my_logs/), lab 09 its ring attention with and without overlap, and the expert layer whose step counts
this CPU's work, and lab 10 one-shot, two-shot, the ring and MPI's own allreduce from 8 B to 1 MiB. On a busy
2-core laptop, or on CI under load, those times come out in any order: a faster call timed slower than a slower
one, the compute alone longer than the whole call, two algorithms exactly alike, one size a thousand times too
slow. Each reader is given every such measurement hypothesis can make (times > 0, in the shapes the measuring
code returns) and must return its words and figures without raising, with no "nan" or "inf" in them, and with
no sentence that its own numbers contradict (a gain larger than the most there was to gain, a negative time of
this CPU's work, a share of a call above 100%). Below the property tests, each defect they found is pinned by
one concrete example.
"""
from __future__ import annotations

import io
import math
import re

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from ringlab.lessons.lab09_model_parallelism import attention, experts, mesh
from ringlab.lessons.lab10_inside_nccl import symmetric

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# a time a busy machine could measure: 1 us to 1 s
seconds = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False, allow_infinity=False)


def noisy(n: int):
    """n times a busy machine could measure: any n in any order, all alike, or all alike but one huge outlier."""
    def outlier(args):
        base, factor, where = args
        times = [base] * n
        times[where % n] = base * factor
        return times

    return st.one_of(st.lists(seconds, min_size=n, max_size=n),
                     seconds.map(lambda t: [t] * n),
                     st.tuples(st.floats(min_value=1e-6, max_value=1e-3), st.floats(min_value=10, max_value=1000),
                               st.integers(min_value=0, max_value=n - 1)).map(outlier))


def clean(text: str) -> None:
    """Words a learner can read: something said, no nan or inf, no negative time or share."""
    assert text.strip()
    lowered = text.lower()
    assert "nan" not in re.findall(r"[a-z]+", lowered) and "inf" not in re.findall(r"[a-z]+", lowered), text
    assert not re.search(r"-\d+(\.\d+)? ?(ms|us|s|%)\b", text), text


# --- lab 00: this machine's host<->device copies, and the learner's own peer-copy logs ---------------------------

def _copies(times, peak):
    """The GPU part of ``ringlab bandwidth``'s result (``gpu_report``): 256 MiB copied in each of ``times``."""
    nbytes = 256 << 20
    whats = ("host->device", "device->host", "both ways at once")
    rows = []
    for i, (pinned, what) in enumerate((p, w) for p in (True, False) for w in whats):
        moved = 2 * nbytes if what.startswith("both") else nbytes
        rate = moved / times[i]
        rows.append({"what": what, "pinned": pinned, "Bps": rate, "spread_Bps": [rate * 0.9, rate * 1.1],
                     "peak_Bps": None if peak is None else (2 * peak if what.startswith("both") else peak)})
    return {"gpus": 2, "host_device": rows, "device_copy_Bps": nbytes / times[6], "small_h2d_latency_s": times[7],
            "p2p": {"peer_access_on": [[0.0, nbytes / times[8]], [nbytes / times[9], 0.0]],
                    "peer_access_off": [[0.0, nbytes / times[10]], [nbytes / times[11], 0.0]]},
            "source": "measured here"}


@SETTINGS
@given(times=noisy(12), peak=st.sampled_from([None, 15.754e9, 31.5e9]))
def test_lab00_prints_and_draws_any_copies_this_gpu_measured(times, peak):
    from ringlab.measure.recorded import print_gpu_bandwidth
    from ringlab.viz import bandwidth_heatmap, host_device_figure

    gpu = _copies(times, peak)
    out = io.StringIO()
    print_gpu_bandwidth(gpu, out)
    clean(out.getvalue())
    figure = host_device_figure(gpu, f"host<->device copies, {gpu['source']}")
    assert [t.name for t in figure.data][:2] == ["pinned", "pageable"]
    assert all(math.isfinite(y) and y > 0 for t in figure.data[:2] for y in t.y)
    for matrix in gpu["p2p"].values():
        bandwidth_heatmap(matrix, title="peer copies")


@SETTINGS
@given(gbs=st.lists(st.floats(min_value=0.01, max_value=900.0), min_size=16, max_size=16))
def test_lab00_draws_any_peer_copy_log_a_learner_measured(gbs):
    from ringlab.viz import bandwidth_heatmap

    matrix = np.array(gbs).reshape(4, 4)  # p2pBandwidthLatencyTest's GB/s, its diagonal a copy inside one GPU
    figure = bandwidth_heatmap(matrix * 1e9, title="peer copies, P2P on: yours")
    assert np.isfinite(np.asarray(figure.data[0].z, dtype=float)).all()
    for row in figure.data[0].hovertext:
        for text in row:
            clean(text)



def test_a_peer_matrix_without_its_diagonal_hovers_not_measured_not_nan_or_a_0_gbs_link():
    from ringlab.viz import bandwidth_heatmap

    for diagonal in (np.nan, 0.0):  # a published matrix's blank self-copies; ringlab bandwidth's peer rates
        matrix = np.full((2, 2), 50e9)
        np.fill_diagonal(matrix, diagonal)
        figure = bandwidth_heatmap(matrix, title="peer copies")
        z = np.asarray(figure.data[0].z, dtype=float)
        assert np.isnan(np.diag(z)).all() and (z[~np.eye(2, dtype=bool)] == 50).all()  # blank, not a 0 GB/s link
        assert figure.data[0].hovertext[0][0] == "gpu0 → gpu0: not measured"
        assert figure.data[0].hovertext[0][1] == "gpu0 → gpu1: 50.00 GB/s"

# --- lab 09: ring attention timed here, the expert layer's steps with this CPU's work, the mesh's wall time --------

def _ring(overlapped, serial, compute, ranks=4, cores=2):
    """``measure_ring_attention``'s result (the causal layouts' work left out: it is counted, not timed)."""
    return {"ranks": ranks, "difference": 1e-16, "causal": True, "block_bytes": 2 * 2 * 256 * 16 * 8,
            "work": {}, "passed_bytes": (ranks - 1) * 2 * 2 * 256 * 16 * 8, "sequence": 256 * ranks,
            "cores": cores, "overlapped_s": overlapped, "serial_s": serial, "compute_s": compute}


def _numbers(text: str, before: str) -> list[float]:
    return [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)x " + before, text)]


@SETTINGS
@given(times=noisy(3), ranks=st.sampled_from([2, 4]), cores=st.integers(min_value=1, max_value=8))
def test_lab09_reads_any_ring_attention_timing(times, ranks, cores):
    overlapped, serial, compute = times
    finding = attention.attention_lesson(_ring(overlapped, serial, compute, ranks, cores))
    text = finding.text
    clean(text)
    shares = [int(x) for x in re.findall(r"(\d+)% of the call", text)]
    assert all(0 <= s <= 100 for s in shares), text
    best = float(re.search(r"would give at most (\d+\.\d+)x", text).group(1))
    assert best >= 1.0, text  # hiding a transfer never makes a call slower
    gain = serial / overlapped
    if "overlapping paid here" in text and f"of the {best:.2f}x there was" in text:
        assert round(gain, 2) <= best, text  # a gain is never more than the most there was
    assert finding.observations == (("overlapping paid on this machine",) if gain > attention.PAID else
                                    ("overlapping did not clearly pay on this machine",))


def _loads(measured, walls, predicted=(0.0042, 0.0105)):
    """``measure_imbalance``'s rows: the router as initialised and skewed (virtual time, this CPU's work counted as
    the CPU time it took, so as noisy as it; wall time beside)."""
    tables = ([[64] * 4] * 4, [[160, 32, 32, 32]] + [[100, 52, 52, 52]] * 3)
    rows = []
    for router, table, m, w, p in zip(("as initialised", "skewed"), tables, measured, walls, predicted):
        per_expert = np.asarray(table).sum(axis=0).tolist()
        rows.append({"router": router, "per_expert": per_expert, "capacity": int(np.max(table)), "table": table,
                     "token_bytes": 512, "mean_pair": 256.0, "imbalance": max(per_expert) / np.mean(per_expert),
                     "sent": 3 * 3 * int(np.max(table)) * 512, "padded": 3, "measured_s": m, "wall_s": w,
                     "predicted_s": p})
    return rows


@SETTINGS
@given(measured=noisy(2), walls=noisy(2))
def test_lab09_reads_any_expert_steps(measured, walls):
    from ringlab.viz.parallelism import expert_load_bars

    rows = _loads(measured, walls)
    finding = experts.imbalance_lesson(rows)
    clean(finding.text)
    for r in rows:
        if r["measured_s"] < r["predicted_s"]:  # a step shorter than its collectives: no CPU work left to name
            assert f"this CPU's work came to {(r['measured_s'] - r['predicted_s']) * 1e3:.1f}" not in finding.text
    expert_load_bars(rows)


def _mapping(name, measured, wall, tensor, data, compute):
    """``measure_mappings``' row: with compute="model" its step is virtual and exact, otherwise it counts this CPU's
    work as the CPU time it took; its wall time is this machine's either way."""
    return {"mapping": name, "tensor_gpus": [[0, 1], [8, 9]], "data_gpus": [[0, 8], [1, 9]],
            "tensor_link": "uniform:360:3", "data_link": "uniform:48:5", "tensor_bytes": 4.5e6, "data_bytes": 3.3e3,
            "tensor_calls": 8, "predicted_tensor_s": tensor, "predicted_data_s": data, "predicted_s": tensor + data,
            "measured_s": measured, "scale": 1.0, "machine": "ib-2x8-h100", "compute": compute, "hidden": 8,
            "tokens": 4096, "tensor": 2, "wall_s": wall}


PREDICTED_MESH = ((3.0e-5, 1.1e-5), (1.8e-4, 1.0e-5))  # (tensor, data) seconds a step, inside and across nodes

# a step with this CPU's work counted: anything from far below its predicted collectives to far above them
steps_near_prediction = st.lists(st.floats(min_value=0.05, max_value=50.0), min_size=2, max_size=2).map(
    lambda factors: [f * sum(p) for f, p in zip(factors, PREDICTED_MESH)])


@SETTINGS
@given(measured=st.one_of(noisy(2), steps_near_prediction), walls=noisy(2), compute=st.sampled_from(["model", "cpu"]))
def test_lab09_reads_any_mesh_steps(measured, walls, compute):
    from ringlab.viz.parallelism import mapping_bars

    if compute == "model":  # virtual time, exact: only the wall time is this machine's
        measured = [4.1e-5, 1.9e-4]
    (inside, across) = PREDICTED_MESH
    rows = [_mapping("tensor inside nodes", measured[0], walls[0], *inside, compute),
            _mapping("tensor across nodes", measured[1], walls[1], *across, compute)]
    finding = mesh.mapping_lesson(rows)
    clean(finding.text)
    if any(r["measured_s"] < r["predicted_s"] for r in rows):  # below the prediction there is no CPU work to name
        assert "so this CPU's work is not small" not in finding.text
        assert "the rest is this CPU's work" not in finding.text
    mapping_bars(rows)


# --- lab 10: one-shot, two-shot, the ring and MPI's own, 8 B to 1 MiB on this machine's ranks ---------------------

def _symmetric(times, sizes, ranks=2, cores=2, window=1 << 20):
    """``measure_symmetric``'s result: every algorithm at every size, ``times`` in the rows' order."""
    rows = [{"algorithm": a, "bytes": k, "time_s": t, "burst_s": [t, t * 1.5]}
            for (k, a), t in zip(((k, a) for k in sizes for a in symmetric.ALGORITHMS), times)]
    return {"ranks": ranks, "cores": cores, "passes": 5, "iters": 10, "warmup": 2, "window_bytes": window,
            "wall_s": 31.0, "rows": rows}


SIZES = [8 << k for k in range(18)]  # 8 B .. 1 MiB, as the lab measures


# a sentence calling a time faster or slower than the ring's same time (a tie). The time is a whole number: CI's
# Hypothesis run drew one-shot at 360061.0 us and the ring at 61.0 us, and without the lookbehind "61.0 us" matched
# the end of the larger time, a tie where there was none.
TIE = re.compile(r"(?<![\d.])(\d+\.\d us), \d+\.\dx (faster|slower) than the ring's \1")


def test_a_tie_is_a_whole_time_said_twice():
    assert TIE.search("Two-shot took 61.0 us, 1.0x slower than the ring's 61.0 us")
    assert not TIE.search("One-shot took 360061.0 us, 5899.2x slower than the ring's 61.0 us")


def test_a_sweep_of_two_sizes_names_each_size_once_and_a_tiny_ratio_in_digits():
    """CI's Hypothesis run, two sizes (4 B and 8 B) with the ring thousands of times faster: the lesson said 'from 4 B
    to 4 B', 'From 8 B to 8 B' and 'the ring took 0.0x the time'."""
    by = {("oneshot", 4): 0.360061, ("twoshot", 4): 1.0, ("ring", 4): 61e-6, ("mpi", 4): 1e-4,
          ("oneshot", 8): 1.0, ("twoshot", 8): 1.0, ("ring", 8): 8e-5, ("mpi", 8): 1e-4}
    result = _symmetric([by[a, k] for k in (4, 8) for a in symmetric.ALGORITHMS], [4, 8], window=4)
    text = symmetric.symmetric_lesson(result).text
    clean(text)
    assert "from 4 B to 4 B" not in text and "From 8 B to 8 B" not in text and "0.0x" not in text, text
    assert "it took 2.78x one-shot's time at 4 B and 1.00x at 8 B." in text, text
    assert "At 8 B MPI's own allreduce took 0.00010x the time of the faster of one-shot and two-shot." in text, text
    assert re.search(r"the ring took 0\.\d{4}\d*x the time", text), text
    _agrees(symmetric.symmetric_lesson(result), result)


def _agrees(finding, result) -> None:
    """The symmetric lesson's claims against the numbers it quotes."""
    text = finding.text
    smallest = min(r["bytes"] for r in result["rows"])
    first = {r["algorithm"]: f"{r['time_s'] * 1e6:.1f} us" for r in result["rows"] if r["bytes"] == smallest}
    alone = re.search(r"(MPI's own|one-shot|two-shot|ring) was the fastest \((\d+\.\d us)\)", text)
    if alone:  # the fastest alone: nobody else printed the same time
        assert [a for a, t in first.items() if t == alone.group(2)] and list(first.values()).count(alone.group(2)) == 1
    assert not TIE.search(text), text
    gain = re.search(r"two-shot gains on one-shot: it took (\d+\.\d+)x .* and (\d+\.\d+)x from", text)
    if gain:
        assert float(gain.group(2)) < float(gain.group(1)), text


@SETTINGS
@given(times=noisy(4 * len(SIZES)), ranks=st.sampled_from([2, 4]), cores=st.integers(min_value=1, max_value=8))
def test_lab10_reads_any_symmetric_sweep(times, ranks, cores):
    result = _symmetric(times, SIZES, ranks, cores)
    finding = symmetric.symmetric_lesson(result)
    clean(finding.text)
    _agrees(finding, result)
    assert len(finding.conclusions) == 5
    rows = symmetric.symmetric_rows(result)
    assert rows and all(r["fastest"] in symmetric.NAMES.values() for r in rows)
    figure = symmetric.symmetric_plot(result)
    assert len(figure.data) == len(symmetric.ALGORITHMS)


@SETTINGS
@given(data=st.data(), count=st.integers(min_value=2, max_value=6), smallest=st.sampled_from([4, 8, 64]))
def test_lab10_reads_a_shorter_sweep_a_learner_asked_for(data, count, smallest):
    sizes = [smallest << k for k in range(count)]  # measure_symmetric(smallest=..., largest=...)
    times = data.draw(noisy(4 * count))
    result = _symmetric(times, sizes, window=sizes[-1] // 2)
    finding = symmetric.symmetric_lesson(result)
    clean(finding.text)
    _agrees(finding, result)
    assert symmetric.symmetric_rows(result)
    symmetric.symmetric_plot(result)


# --- the defects the tests above found, one concrete example each ---------------------------------------------------

def test_a_gain_beyond_what_hiding_could_give_is_not_called_a_share_of_it():
    """Overlapped 0.5 s, serial 1.0 s, compute alone 1.0 s: the lesson said 'overlapping paid here, 2.00x of the 1.00x
    there was' (and, with the compute at 5 ms of a 10 ms call overlapped in 1 ms, '10.00x of the 2.00x')."""
    text = attention.attention_lesson(_ring(0.5, 1.0, 1.0, ranks=2, cores=1)).text
    assert "of the 1.00x there was" not in text
    assert "overlapping paid here, 2.00x, more than the 1.00x that hiding the transfers wholly could give" in text
    assert "do not add up" in text
    text = attention.attention_lesson(_ring(0.001, 0.010, 0.005)).text
    assert "10.00x, more than the 2.00x that hiding the transfers wholly could give" in text
    quiet = attention.attention_lesson(_ring(0.006, 0.010, 0.005)).text  # a gain within the most: said as before
    assert "overlapping paid here, 1.67x of the 2.00x there was" in quiet and "do not add up" not in quiet


def test_a_compute_timed_longer_than_the_call_leaves_nothing_to_hide_not_a_slowdown():
    """Overlapped 1.0 s, serial 0.5 s, compute alone 1.0 s: the lesson said hiding the transfers 'would give at most
    0.50x' (a slowdown) and 'the compute took 200% of the call'."""
    finding = attention.attention_lesson(_ring(1.0, 0.5, 1.0, ranks=2, cores=1))
    assert "would give at most 1.00x" in finding.text and "0.50x:" not in finding.text
    assert "200%" not in finding.text
    assert "the compute alone took 2.00x the whole call, so no time was left for the transfers" in finding.text
    assert finding.observations == ("overlapping did not clearly pay on this machine",)


def test_a_step_shorter_than_its_predicted_collectives_shows_no_negative_cpu_work():
    """Both routers' steps timed 7.8 ms, the skewed router's collectives predicted at 10.5 ms: the lesson said 'this
    CPU's work came to ... -2.7 ms skewed'."""
    finding = experts.imbalance_lesson(_loads([0.0078125, 0.0078125], [1.0, 1.0]))
    assert "-2.7 ms" not in finding.text
    assert "this CPU's work came to 3.6 ms a step as initialised and nothing skewed" in finding.text
    assert ("(10.5 ms predicted for its collectives; more than the whole step: the emulated collectives ran faster "
            "than predicted") in finding.text
    assert "it did not grow with the busiest expert's load here" in finding.text
    assert finding.conclusions[2] == "the skewed layer does not take clearly longer on the emulated machine"


def test_a_mesh_step_below_its_prediction_is_not_blamed_on_this_cpu():
    """With this CPU's work counted (compute="cpu"), steps of 1 us against 41 and 190 us predicted: the lesson said
    'more than 30% apart, so this CPU's work is not small beside the emulated links'; 10% below it said 'the rest
    is this CPU's work'."""
    (inside, across) = PREDICTED_MESH
    rows = lambda a, b: [_mapping("tensor inside nodes", a, 0.1, *inside, "cpu"),  # noqa: E731
                         _mapping("tensor across nodes", b, 0.2, *across, "cpu")]
    text = mesh.mapping_lesson(rows(1e-6, 1e-6)).text
    assert "so this CPU's work is not small" not in text
    assert ("more than 30% apart, and not by this CPU's work: a step shorter than its predicted collectives leaves it "
            "no time") in text
    text = mesh.mapping_lesson(rows(0.9 * sum(inside), 0.9 * sum(across))).text
    assert "the rest is this CPU's work" not in text and "is small beside the links" in text
    above = mesh.mapping_lesson(rows(1.1 * sum(inside), 2 * sum(across))).text  # CPU work on top: said as before
    assert "more than 30% apart, so this CPU's work is not small beside the emulated links" in above


def test_a_symmetric_sweep_whose_times_tie_says_alike_not_faster_or_slower():
    """Every algorithm timed 10 us at every size: the lesson said 'MPI's own was the fastest (10.0 us). One-shot took
    10.0 us, 1.0x slower than the ring's 10.0 us ... 1.0x slower than one-shot'."""
    finding = symmetric.symmetric_lesson(_symmetric([1e-5] * 4 * len(SIZES), SIZES))
    assert "1.0x slower" not in finding.text and "1.0x faster" not in finding.text
    assert "At 8 B MPI's own, one-shot, two-shot and ring were the fastest, alike (10.0 us)" in finding.text
    assert "One-shot took 10.0 us, as fast as the ring's 10.0 us" in finding.text
    assert "MPI's own call is C inside MPICH" not in finding.text  # it was not faster: nothing to explain
    assert finding.observations[0] == "MPI's own, one-shot, two-shot and ring tie as the fastest at the smallest size"
    assert finding.conclusions[:2] == ("one-shot is not faster than the ring at the smallest size",
                                       "one-shot is not faster than two-shot at the smallest size")


def test_two_shot_does_not_gain_where_both_ratios_print_alike():
    """Two-shot at 1.004x one-shot's time at the small sizes and 1.001x at the large: the lesson said 'two-shot gains
    on one-shot: it took 1.00x one-shot's time ... and 1.00x'."""
    def time_of(algorithm, nbytes):
        one = 4e-6 + nbytes / 14e9
        return {"mpi": 3e-6 + nbytes / 7e9, "ring": 8e-6 + nbytes / 8e9, "oneshot": one,
                "twoshot": one * (1.004 if nbytes < 1 << 10 else 1.001)}[algorithm]

    times = [time_of(a, k) for k in SIZES for a in symmetric.ALGORITHMS]
    finding = symmetric.symmetric_lesson(_symmetric(times, SIZES))
    assert "two-shot does not gain on one-shot: it took 1.00x one-shot's time" in finding.text
    assert "two-shot does not gain on one-shot as messages grow" in finding.conclusions


def test_mpi_is_not_said_ahead_at_a_size_where_it_tied():
    """The pair ahead of MPI's own from 8 B to 512 KiB and timed exactly as MPI's own at 1 MiB: the lesson said 'at 1
    MiB MPI's own was ahead'."""
    def time_of(algorithm, nbytes):
        pair = 4e-6 + nbytes / 14e9
        if algorithm == "mpi":
            return pair if nbytes == SIZES[-1] else 2 * pair
        return {"ring": 3 * pair, "oneshot": pair, "twoshot": 1.5 * pair}[algorithm]

    times = [time_of(a, k) for k in SIZES for a in symmetric.ALGORITHMS]
    text = symmetric.symmetric_lesson(_symmetric(times, SIZES)).text
    assert "MPI's own was ahead" not in text
    assert "the pair took less time than MPI's own from 8 B to 512 KiB." in text


def test_a_host_device_row_without_a_pcie_peak_prints_a_dash_not_nan():
    """``ringlab bandwidth`` on a GPU whose PCIe link NVML does not report: the row says so, and no 'nan GB/s'."""
    from ringlab.measure.bandwidth import _host_device_line

    row = {"what": "host->device", "pinned": True, "Bps": 12.5e9, "spread_Bps": (12.0e9, 13.0e9), "peak_Bps": 25e9}
    assert _host_device_line(row) == ("  host->device       pinned       12.50 GB/s  peak    25.00 GB/s  ratio 0.50  "
                                      "(repeats 12.00-13.00)")
    said = _host_device_line({**row, "peak_Bps": None})
    assert "nan" not in said
    assert said == ("  host->device       pinned       12.50 GB/s  peak        - (NVML gave no PCIe link)  ratio -  "
                    "(repeats 12.00-13.00)")
