"""Whatever a busy machine measures, lab 01 reads it back in words, tables and figures and does not stop.

Lab 01 times, on the learner's own machine, one core's np.copyto at every ping-pong size (``copy_rows``), an MPI
ping-pong between two ranks direct and staged through a buffer on each side (``pingpong``), fits alpha and B to the
direct one, and sets MPI against the copies, exercise 2's formula against the staged messages and their parts, and
(with a GPU) draws the host<->device and peer copies measured here or recorded. On a 2-core laptop or a busy CI
machine those times come out in any order: ties, one run a thousand times slower, rates that do not grow with size,
a fit that finds no cost per byte. Each reader is given every such measurement hypothesis can make, in the shapes
the measuring code returns, and must return its sentences and figures without raising, without "nan" or "inf", and
without a claim (below, level, faster, the furthest size, the piece that makes the gap, within the cache) that the
numbers it quotes contradict. The notebook's own cells run too, from ``labs/src/01_moving_bytes.py``, on the same
measurements. The examples at the end are the cases that once failed.
"""
from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ringlab.measure.copies import (CLOSE, copy_against_mpi, describe_best_pingpong, describe_fit, describe_staged,
                                    fit_direct, staged_rows)
from ringlab.measure.recorded import peer_matrices, print_gpu_bandwidth
from ringlab.measure.units import parse_size
from ringlab.predict.fitting import PINGPONG, USABLE, Fit, fit
from test_noisy_lab08 import seconds, times  # a time a busy machine could measure: 1 us to 1 s; n of them in any order

MiB = 1 << 20
SIZES = [8, 64, 1024, 16 << 10, 256 << 10, MiB, 4 * MiB, 16 * MiB, 64 * MiB]  # the notebook's %%px cell
SOURCE = Path(__file__).resolve().parents[1] / "labs" / "src" / "01_moving_bytes.py"
FEW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOTEBOOK = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

caches = st.one_of(st.none(), st.sampled_from([512 << 10, 3 * MiB // 2, 6 * MiB, 8 * MiB, 32 * MiB, 256 * MiB]))


# the notebook's sizes, or any two or more of them (copy_rows and pingpong take any list)
sizes = st.one_of(st.just(SIZES), st.lists(st.sampled_from(SIZES), min_size=2, max_size=len(SIZES), unique=True)
                  .map(sorted))


def copy_rows_of(nbytes, timed) -> list[dict]:
    """What ``copy_rows`` returns: ``bytes``, ``copy_s`` and ``copy_Bps`` (bytes over the time)."""
    return [{"bytes": k, "copy_s": t, "copy_Bps": k / t} for k, t in zip(nbytes, timed)]


def pingpong_rows_of(nbytes, timed, staged: bool = False) -> list[dict]:
    """What ``pingpong`` returns on rank 0: ``bytes``, ``one_way_s``, ``bandwidth_Bps`` and ``staged``."""
    return [{"bytes": k, "one_way_s": t, "bandwidth_Bps": k / t, "staged": staged} for k, t in zip(nbytes, timed)]


@st.composite
def runs(draw):
    """(copies, direct, staged) as the notebook pulls them from rank 0: every size copied, sent and staged."""
    nbytes = draw(sizes)
    n = len(nbytes)
    return (copy_rows_of(nbytes, draw(times(n))), pingpong_rows_of(nbytes, draw(times(n))),
            pingpong_rows_of(nbytes, draw(times(n)), staged=True))


def sane(text: str) -> str:
    """The text, after checking it says something and holds no nan or inf (nor "inf GB/s"), no negative time,
    share or ratio, no positive ratio or share rounded to nothing ("0.00x", "0%"), and no "1 sizes"."""
    assert text.strip()
    assert not re.search(r"\bnan\b|\binf\b|inf%", text, re.IGNORECASE), text
    assert not re.search(r"-\d+(\.\d+)? ?(ms|us|s|%|x|GB/s)\b", text), text
    assert not re.search(r"(?<![\d.])0(\.0+)?(x|%)", text), text
    assert not re.search(r"\b1 sizes\b", text), text
    assert not re.search(r"\d[eE][+-]?\d", text), text  # "8e-06 GB/s" reads as neither a rate nor a time
    return text


def _close(ratio: float) -> bool:
    return 1 / CLOSE <= ratio <= CLOSE


# --- MPI against a copy of its own size (copy_against_mpi, describe_best_pingpong) ------------------------------

@FEW
@given(run=runs(), cache=caches)
def test_mpi_against_a_copy_is_read_from_any_rates(run, cache):
    copies, direct, _ = run
    rows = {r["bytes"]: r for r in copy_against_mpi(copies, direct)}
    text = sane(describe_best_pingpong(copies, direct, cache=cache))
    best = rows[parse_size(re.search(r"MPI's best ping-pong: \S+ GB/s at ([^,]+),", text).group(1))]
    assert best["mpi_Bps"] == max(r["mpi_Bps"] for r in rows.values())  # the best it names is the best
    ref = rows[max(rows)]
    top = max(r["ratio"] for r in rows.values())
    if round(top, 2) < 1:  # as quoted: 1.00x is level with the copy, not below it
        assert "stayed below" in text and "level with" not in text and "faster than one core" not in text
        share = re.search(r"at most ([\d.]+)% of it", text).group(1)
        assert 0 < float(share) < 100  # "below" never quotes 100% (nor 0%)
    elif top <= CLOSE:
        assert "level with or slightly above" in text and "stayed below" not in text
    else:
        assert "moved bytes faster than one core's np.copyto" in text and "stayed below" not in text
    said = re.search(r"At (.+?), MPI (came out level|moved bytes faster)", text)
    if said:  # the sizes named as at or above a copy of their size are exactly those
        named = {parse_size(s) for s in said.group(1).split(", ")}
        assert named == {k for k, r in rows.items() if round(r["ratio"], 2) >= 1}
    for source, where, llc in re.findall(r"source and destination ([^,]+), (within|more than) the (\S+ \S+) "
                                         r"last-level cache", text):
        assert (parse_size(source) <= parse_size(llc)) == (where == "within")
    assert ("last-level cache" in text) == (cache is not None)
    if best["bytes"] == ref["bytes"]:
        assert "MPI's best size" not in text
    else:
        assert "MPI's best size" in text
        assert ("a copy's rate depends on its size" in text) == (not _close(best["copy_Bps"] / ref["copy_Bps"]))
    only = best["bytes"] != ref["bytes"] and best["mpi_Bps"] > ref["copy_Bps"] and best["ratio"] <= 1
    assert ("only because it was measured at another size" in text) == only


# --- exercise 2's formula against the staged ping-pong and its parts (staged_rows, describe_staged) -------------

fitted_figures = st.one_of(
    st.just("fit"),  # the notebook's: the direct ping-pong fitted, with or without a cost per byte
    st.tuples(st.floats(min_value=0.0, max_value=1e-3), st.one_of(st.just(math.inf), st.floats(1e6, 1e12))))


@FEW
@given(run=runs(), figures=fitted_figures)
def test_the_staged_formula_is_read_from_any_staged_times_and_parts(run, figures):
    copies, direct, staged = run
    alpha, bandwidth = ((fit_direct(direct).alpha, fit_direct(direct).bandwidth) if figures == "fit" else figures)
    copy_rate, copy_nbytes = copies[-1]["copy_Bps"], copies[-1]["bytes"]
    rows = staged_rows(staged, direct, copies, alpha, bandwidth, copy_rate)
    for row in rows:
        assert all(math.isfinite(v) and v >= 0 for v in row.values() if isinstance(v, float)), row
    by_size = {r["bytes"]: r for r in rows}
    text = sane(describe_staged(rows, copy_rate, copy_nbytes))
    lines = text.splitlines()
    ratios = [r["formula_ratio"] for r in rows]
    assert ("of the measurement at every size" in text) == all(_close(r) for r in ratios)
    furthest = [(i, way, by_size[parse_size(size)]) for i, line in enumerate(lines)
                for way, size in re.findall(r"^It predicts most too (long|short) at ([^:]+):", line)]
    assert len({way for _, way, _ in furthest}) == len(furthest)  # each way said once at most
    assert ("long" in [w for _, w, _ in furthest]) == (max(ratios) > CLOSE)
    assert ("short" in [w for _, w, _ in furthest]) == (min(ratios) < 1 / CLOSE)
    for i, way, row in furthest:
        ratio = row["formula_ratio"]
        assert ratio == (max(ratios) if way == "long" else min(ratios))
        gap = row["formula_s"] - row["staged_s"]  # the pieces add up to it
        pieces = {"message": row["link_s"] - row["direct_s"], "copies": row["formula_copies_s"] - row["copies_s"],
                  "rest": row["parts_s"] - row["staged_s"]}
        assert math.isclose(sum(pieces.values()), gap, rel_tol=1e-6, abs_tol=1e-15)
        # the message's model is alpha + K/B, or alpha alone where the fit found no cost per byte (B infinite)
        assert ("(alpha + K/B " in lines[i]) == math.isfinite(bandwidth)
        assert ("(alpha alone, no cost per byte fitted: " in lines[i]) == (not math.isfinite(bandwidth))
        piece = re.match(r"The (message|copies|rest) makes? most of it", lines[i + 1]).group(1)
        assert pieces[piece] * gap > 0, (piece, pieces, gap)  # the piece named points the way the gap does
        assert abs(pieces[piece]) == max(abs(v) for v in pieces.values() if v * gap > 0)
        if piece == "message":
            assert ("one alpha and one B fitted" in lines[i + 1]) == math.isfinite(bandwidth)
        if piece == "copies":
            assert ("faster than" in lines[i + 1]) == (pieces["copies"] > 0)
        if piece == "rest":
            assert ("took longer than its parts" in lines[i + 1]) == (pieces["rest"] < 0)
    together = all(_close(r["parts_ratio"]) for r in rows)
    assert ("costs its parts one after the other" in text) == together
    assert ("do not add up" in text) == (not together)


# --- the fitted alpha and B (fit_direct, describe_fit) ----------------------------------------------------------

@FEW
@given(nbytes=sizes, data=st.data())
def test_the_fitted_alpha_and_b_are_said_from_any_direct_times(nbytes, data):
    direct = pingpong_rows_of(nbytes, data.draw(times(len(nbytes))))
    fitted = fit_direct(direct)
    reference = fit(PINGPONG, nbytes, [r["one_way_s"] for r in direct])  # fit_direct keeps what the fit finds
    assert (fitted.alpha, fitted.bandwidth) == (reference.alpha, reference.bandwidth)
    text = sane(describe_fit(fitted))
    assert ("no cost per byte" in text) == (fitted.bandwidth == math.inf)
    assert ("B = " in text) == (fitted.bandwidth < math.inf)
    assert ("a usable fit may: the model below is rough" in text) == (fitted.worst_residual > USABLE)


def _fit_missing_by(residual: float) -> Fit:
    """A fit of t = alpha + K/B (alpha 2 us, B 10 GB/s) whose relative residual, (measured - predicted) / measured,
    is ``residual`` at its 1 KiB measurement and under 10% at the others."""
    sizes = np.array([8, 1024, 1 << 20], dtype=float)
    predicted = 2e-6 + sizes / 10e9
    measured = predicted / np.array([1.0, 1 - residual, 1.1])
    return Fit(2e-6, 10e9, math.inf, sizes, measured, predicted)


@pytest.mark.parametrize("residual", [0.34, 0.252, -1.5])  # measured above the model, and below it
def test_a_fit_that_misses_a_measurement_by_more_than_usable_says_by_how_much_and_that_the_model_is_rough(residual):
    fitted = _fit_missing_by(residual)
    share = abs(residual)
    assert fitted.worst_residual == pytest.approx(share) and not fitted.usable
    text = sane(describe_fit(fitted))
    assert len(text.splitlines()) == 2, text  # alpha and B, then what the fit misses
    miss = text.splitlines()[1]
    assert miss.startswith("The fit misses the 1 KiB measurement by ")
    quoted = re.search(r"by (just over )?(\d+)%", miss)
    assert quoted.group(1) or int(quoted.group(2)) == round(share * 100)  # 25.2% is not quoted as "25%, more than 25%"
    assert f"more than the {USABLE:.0%} a usable fit may: the model below is rough" in miss
    model, measured = re.search(r"the model gives ([\d.]+ us) where ([\d.]+ us) was measured", miss).groups()
    assert (model, measured) == (f"{fitted.predicted[1] * 1e6:.3g} us", f"{fitted.measured[1] * 1e6:.3g} us")


@pytest.mark.parametrize("residual", [0.0, 0.1, 0.24, -0.24])
def test_a_fit_within_usable_of_every_measurement_says_nothing_of_a_miss(residual):
    fitted = _fit_missing_by(residual)
    assert fitted.worst_residual <= USABLE
    text = describe_fit(fitted)
    assert text.startswith("fitted to the measurements: alpha = 2 us, B = 10 GB/s")
    assert "misses" not in text and "rough" not in text and "\n" not in text


def test_a_fit_with_no_cost_per_byte_that_misses_a_measurement_says_both():
    sizes = np.array([8.0, 1024.0, float(1 << 20)])
    fitted = Fit(1e-3, math.inf, math.inf, sizes, np.array([2e-3, 1e-3, 1e-3]), np.full(3, 1e-3))
    text = sane(describe_fit(fitted))
    assert "no cost per byte" in text and "The fit misses the 8 B measurement by 50%" in text


# --- the notebook's cells, run on the measurements -------------------------------------------------------------

def _code_cells() -> list[str]:
    """The code cells of lab 01's source, in order (a ``# %%`` line starts a cell; ``# %%px`` is inside one)."""
    cells, lines, code = [], [], False
    for line in SOURCE.read_text().splitlines():
        if re.match(r"# %%( |$)", line):
            if code:
                cells.append("\n".join(lines))
            lines, code = [], "[markdown]" not in line
        else:
            lines.append(line)
    if code:
        cells.append("\n".join(lines))
    return cells


CELLS = _code_cells()
MEASURED_CELLS = ("ranks.pull_rank0(", "describe_best_pingpong(", "def message_time(", "check_message_time(",
                  'label="(alpha-beta fit)"', "def staged_time(", "check_staged_time(", "staged_rows(",
                  "host_device_figure(gpu, f\"pinned against pageable", "best = max(copy_against_mpi")
DRAWN = ("measured_vs_predicted", "links_figure", "host_device_figure", "bandwidth_heatmap")


def _cell(fragment: str) -> str:
    found = [cell for cell in CELLS if fragment in cell]
    assert found, f"no code cell of {SOURCE.name} holds {fragment!r}"
    return found[0]


class _Pulled:
    """Stands for the notebook's MPI cluster: rank 0's measurements, pulled as the notebook pulls them."""

    def __init__(self, **measured):
        self.measured = measured

    def pull_rank0(self, *names):
        return tuple(self.measured[name] for name in names)

    def stop(self):
        pass


class _Shown:
    """A figure the notebook draws: kept, and shown nowhere."""

    def __init__(self, figure):
        self.figure = figure

    def show(self):
        pass


def run_lab(copies, direct, staged, gpu=None, cache=32 * MiB) -> tuple[str, list]:
    """Lab 01's cells that read this machine's measurements, run on these: (what they print, [(function, args,
    figure)] for every figure they draw)."""
    import plotly.io as pio

    space: dict = {}
    renderer = pio.renderers.default
    try:
        exec(CELLS[0], space)  # the imports
    finally:
        pio.renderers.default = renderer
    drawn = []

    def drawing(name):
        function = space[name]

        def draw(*args, **kwargs):
            figure = function(*args, **kwargs)
            drawn.append((name, args, kwargs, figure))
            return _Shown(figure)
        return draw

    space.update({name: drawing(name) for name in DRAWN})
    space.update(ranks=_Pulled(copies=copies, direct=direct, staged=staged), gpu=gpu, last_level_cache=lambda: cache)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for fragment in MEASURED_CELLS:
            exec(_cell(fragment), space)
    return out.getvalue(), drawn


def _numbers(values) -> list[float]:
    return [float(v) for v in np.ravel(np.asarray(values, dtype=object)) if isinstance(v, (int, float, np.number))]


def check_figure(name: str, figure, gpu) -> None:
    """Finite data (positive on a log axis); every measured series or bar says measured, every predicted one
    predicted; a figure recorded elsewhere never says measured here."""
    logs = {letter for letter in "xy" if figure.layout[f"{letter}axis"].type == "log"}
    for trace in figure.data:
        for letter in ("x", "y", "z"):
            values = _numbers(getattr(trace, letter, None) if getattr(trace, letter, None) is not None else [])
            if name == "bandwidth_heatmap" and letter == "z":  # a GPU to itself is not measured: blank, not 0 GB/s
                z = np.asarray(trace.z, dtype=float)
                values = list(z[~np.eye(len(z), dtype=bool)])
            assert all(math.isfinite(v) for v in values), (name, trace.name, letter, values)
            if letter in logs and trace.type != "bar" or letter in logs and trace.orientation == "h" and letter == "x":
                assert all(v > 0 for v in values), (name, trace.name, letter, values)
        for text in np.ravel(np.asarray(trace.hovertext if trace.hovertext is not None else [], dtype=object)):
            assert not re.search(r"\bnan\b|\binf\b", str(text)), (name, text)
    title = figure.layout.title.text or ""
    if name == "measured_vs_predicted":
        assert [t.name.split()[0] for t in figure.data] == ["measured", "predicted"]
        assert "measured here" in title and "predicted" in title
    if name in ("host_device_figure", "bandwidth_heatmap"):
        assert title.endswith(gpu["source"])
        assert "possible" not in title  # which pairs could have peer access is no bandwidth
    if name == "links_figure" and len(figure.data) > 1:
        bars = figure.data[1]
        for label, hover in zip(bars.y, bars.hovertext):
            recorded = "recorded" in label
            assert recorded or label.endswith("(measured here)")
            assert ("measured here" in hover) == (not recorded), hover


@st.composite
def gpus(draw):
    """None (no GPU, nothing recorded), or the GPU part of ``ringlab bandwidth`` (``gpu_report``) on 1 to 4 GPUs,
    measured here or recorded: 256 MiB copied in any times, a PCIe peak or none, and with 2 GPUs or more the
    peer-copy matrices (a zero diagonal) beside which pairs could have peer access."""
    count = draw(st.sampled_from([0, 1, 2, 4]))
    if count == 0:
        return None
    nbytes = 256 << 20
    peak = draw(st.sampled_from([None, 15.754e9, 31.508e9]))
    timed = draw(times(6))
    rows = []
    for (pinned, what), t in zip([(p, w) for p in (True, False)
                                  for w in ("host->device", "device->host", "both ways at once")], timed):
        moved = 2 * nbytes if what.startswith("both") else nbytes
        rows.append({"what": what, "pinned": pinned, "Bps": moved / t, "spread_Bps": [moved / t / 2, moved / t * 2],
                     "peak_Bps": None if peak is None else (2 * peak if what.startswith("both") else peak)})
    result = {"gpus": count, "host_device": rows, "device_copy_Bps": nbytes / draw(seconds),
              "small_h2d_latency_s": draw(seconds), "p2p": {},
              "source": draw(st.sampled_from(["measured here", "recorded on gpu-box (4 x H100) on 2026-11-27"]))}
    if count >= 2:
        result["p2p"]["peer_access_possible"] = [[a != b and draw(st.booleans()) for b in range(count)]
                                                 for a in range(count)]
        for access in ("peer_access_on", "peer_access_off"):
            peer = draw(times(count * count))
            result["p2p"][access] = [[0.0 if a == b else nbytes / peer[a * count + b] for b in range(count)]
                                     for a in range(count)]
    return result


@NOTEBOOK
@given(run=runs(), gpu=gpus(), cache=caches)
def test_the_notebook_reads_any_measurement_and_draws_it(run, gpu, cache):
    copies, direct, staged = run
    printed, drawn = run_lab(copies, direct, staged, gpu, cache)
    sane(printed)
    bandwidth = fit(PINGPONG, [r["bytes"] for r in direct], [r["one_way_s"] for r in direct]).bandwidth
    assert ("no cost per byte" in printed) == (bandwidth == math.inf)
    names = [name for name, *_ in drawn]
    assert names.count("measured_vs_predicted") == 2 and names.count("links_figure") == 1
    heatmaps = [kwargs["title"] for name, _, kwargs, _ in drawn if name == "bandwidth_heatmap"]
    assert len(heatmaps) == (0 if gpu is None else len(peer_matrices(gpu)))
    for name, _, _, figure in drawn:
        check_figure(name, figure, gpu)
    if gpu is not None and gpu["source"] != "measured here":
        out = io.StringIO()
        print_gpu_bandwidth(gpu, out)  # what gpu_bandwidth prints for a recorded result
        assert "possible" not in sane(out.getvalue())


# --- the cases that once raised or said the opposite of their numbers, kept as examples -------------------------

def test_mpi_level_with_a_copy_of_its_size_is_not_said_to_stay_below_it():
    copies = copy_rows_of(SIZES, [k / 5e9 for k in SIZES])
    direct = pingpong_rows_of(SIZES, [k / 5e9 for k in SIZES])  # a tie at every size
    text = sane(describe_best_pingpong(copies, direct, cache=32 * MiB))
    assert "stayed below" not in text and "at most 100%" not in text
    assert "MPI came out level with or slightly above" in text
    within_rounding = pingpong_rows_of(SIZES, [k / 5e9 * (1 + 1e-15) for k in SIZES])  # 0.9999999999999998x
    text = sane(describe_best_pingpong(copies, within_rounding))
    assert "stayed below" not in text and "MPI came out level with or slightly above" in text


def test_copies_of_two_sizes_at_the_same_rate_do_not_show_that_a_rate_depends_on_size():
    copies = copy_rows_of(SIZES, [k / 5e9 for k in SIZES])
    direct = pingpong_rows_of(SIZES, [k / (4e9 if k == MiB else 1e9) for k in SIZES])  # best at 1 MiB
    text = sane(describe_best_pingpong(copies, direct, cache=32 * MiB))
    assert "A copy of 1 MiB, MPI's best size, ran at 5 GB/s (1.00x the 64 MiB copy" in text
    assert "a copy's rate depends on its size" not in text


def test_mpi_far_below_a_copy_is_not_quoted_as_0x_or_0_percent_of_it():
    copies = copy_rows_of(SIZES, [k / 50e9 for k in SIZES])
    slow = pingpong_rows_of(SIZES, [1.0] * len(SIZES))  # a second a message: 64 MiB at 0.0671 GB/s, 0.13% of 50
    text = sane(describe_best_pingpong(copies, slow))
    assert "0.0671 GB/s at 64 MiB, 0.0013x one core's copy of 64 MiB" in text and "at most 0.1% of it" in text


def test_a_formula_too_long_everywhere_names_only_the_size_it_is_furthest_off():
    copies = copy_rows_of(SIZES, [k / 1e9 for k in SIZES])
    direct = pingpong_rows_of(SIZES, [1e-5] * len(SIZES))
    staged = pingpong_rows_of(SIZES, [1e-5] * len(SIZES), staged=True)
    rows = staged_rows(staged, direct, copies, 2e-5, 1e9, 1e9)  # twice the measured time even at 8 B
    text = sane(describe_staged(rows, 1e9, 64 * MiB))
    assert text.count("It predicts most too long") == 1 and "It predicts most too long at 64 MiB" in text
    assert "predicts most too short" not in text
    one = staged_rows(staged[:1], direct, copies, 2e-5, 1e9, 1e9)  # one size: said once, not twice
    assert describe_staged(one, 1e9, 64 * MiB).count("It predicts most too long at 8 B") == 1


def test_the_piece_named_for_a_gap_points_the_way_the_gap_does():
    # at 1 MiB: formula 5 + 110 = 115 us against 209 us staged (too short); the pieces: message 5 - 100, copies
    # 110 - 10, rest (100 + 10) - 209. The copies are the largest piece but overstate: the rest makes the gap
    k = MiB
    copies = copy_rows_of([k], [5e-6])
    direct = pingpong_rows_of([k], [100e-6])
    staged = pingpong_rows_of([k], [209e-6], staged=True)
    rows = staged_rows(staged, direct, copies, 1e-6, k / 4e-6, 2 * k / 110e-6)
    text = sane(describe_staged(rows, 2 * k / 110e-6, 64 * MiB))
    assert "It predicts most too short at 1 MiB" in text
    assert "The rest makes most of it: the staged message took longer than its parts" in text
    assert "The copies make most of it" not in text


def test_a_ping_pong_whose_times_do_not_grow_with_size_fits_with_no_cost_per_byte_and_the_lab_goes_on():
    copies = copy_rows_of(SIZES, [k / 5e9 for k in SIZES])
    flat = [2e-3] + [1e-3] * (len(SIZES) - 1)  # the machine was busy at the small sizes: time does not grow
    direct = pingpong_rows_of(SIZES, flat)
    staged = pingpong_rows_of(SIZES, [t + 2 * k / 5e9 for k, t in zip(SIZES, flat)], staged=True)
    printed, drawn = run_lab(copies, direct, staged)  # the fit cell raised ValueError here
    sane(printed)
    assert "no cost per byte" in printed and "B = " not in printed
    for name, _, _, figure in drawn:
        check_figure(name, figure, None)


def test_which_gpu_pairs_could_have_peer_access_is_not_drawn_or_printed_as_a_bandwidth():
    nbytes = 256 << 20
    rows = [{"what": w, "pinned": p, "Bps": 20e9, "spread_Bps": [19e9, 21e9], "peak_Bps": 31.5e9}
            for p in (True, False) for w in ("host->device", "device->host", "both ways at once")]
    gpu = {"gpus": 2, "host_device": rows, "device_copy_Bps": 1e12, "small_h2d_latency_s": 8e-6,
           "p2p": {"peer_access_possible": [[False, True], [True, False]],  # as gpu_report measures two GPUs
                   "peer_access_on": [[0.0, nbytes / 1e-3], [nbytes / 1e-3, 0.0]],
                   "peer_access_off": [[0.0, nbytes / 1e-2], [nbytes / 1e-2, 0.0]]},
           "source": "measured here"}
    copies = copy_rows_of(SIZES, [k / 5e9 for k in SIZES])
    direct = pingpong_rows_of(SIZES, [2e-6 + k / 5e9 for k in SIZES])
    _, drawn = run_lab(copies, direct, direct, gpu)
    titles = [kwargs["title"] for name, _, kwargs, _ in drawn if name == "bandwidth_heatmap"]
    assert titles == ["peer copies, peer access on, measured here", "peer copies, peer access off, measured here"]
    out = io.StringIO()
    print_gpu_bandwidth(gpu, out)
    assert "possible" not in out.getvalue() and "peer access on" in out.getvalue()


def test_a_gpu_figure_recorded_elsewhere_is_not_hovered_as_measured_here():
    gpu = {"host_device": [{"what": "host->device", "pinned": True, "Bps": 25e9, "peak_Bps": 31.5e9}],
           "p2p": {}, "source": "recorded on gpu-box (1 x NVIDIA H200) on 2026-11-27"}
    copies = copy_rows_of(SIZES, [k / 5e9 for k in SIZES])
    direct = pingpong_rows_of(SIZES, [2e-6 + k / 5e9 for k in SIZES])
    _, drawn = run_lab(copies, direct, direct, gpu)
    for name, _, _, figure in drawn:
        check_figure(name, figure, gpu)
