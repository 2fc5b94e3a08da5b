"""A sweep read back: crossovers measured and fitted against the closed forms, and sentences that follow
the numbers (oversubscribed or not, which side of the range a missing crossover lies, the verdict)."""
import re

import numpy as np
import pytest

from ringlab.measure.sweep import Crossover, busiest_rank_bytes, describe_sweep, fitted_crossover, measured_crossover
from ringlab.predict.fitting import fit_rows

N = 4
SIZES = [1 << k for k in range(10, 27)]  # 1 KiB to 64 MiB, factor 2


def closed_form_seconds(algorithm: str, nbytes: int, alpha: float, bandwidth: float, n: int = N) -> float:
    """The alpha-beta closed forms: both send 2(n-1) messages one after another; a ring rank moves
    2(n-1)/n of the buffer, naive's root 2(n-1) buffers (in, then out). ``mpi`` stands in as a ring."""
    moved = {"ring": 2 * (n - 1) / n, "mpi": 2 * (n - 1) / n, "naive": 2 * (n - 1)}[algorithm] * nbytes
    return 2 * (n - 1) * alpha + moved / bandwidth


def sweep_rows(truth: dict, sizes=SIZES, n: int = N, noise: float = 0.0) -> list[dict]:
    """bench-like rows for {algorithm: (alpha, bandwidth)}, times off by up to +-noise (deterministic)."""
    rows = []
    for name, (alpha, bandwidth) in truth.items():
        for i, k in enumerate(sizes):
            seconds = closed_form_seconds(name, k, alpha, bandwidth, n) * (1 + noise * np.cos(i))
            rows.append({"algorithm": name, "bytes": k, "time_s": seconds, "busbw_Bps": k / seconds * 2 * (n - 1) / n})
    return rows


def fits_of(rows, names=("ring", "naive"), n: int = N) -> dict:
    return {name: fit_rows(rows, name, n) for name in names}


# the ring pays more per message, naive more per byte: equal times where 6*20us = (6 - 1.5) K / 2 GB/s
TRUTH = {"ring": (30e-6, 2e9), "naive": (10e-6, 2e9), "mpi": (5e-6, 3e9)}
CROSSING = 6 * 20e-6 / (4.5 / 2e9)  # 53.3 kB


def test_the_closed_forms_hold_where_the_crossing_is():
    assert closed_form_seconds("ring", CROSSING, *TRUTH["ring"]) == pytest.approx(
        closed_form_seconds("naive", CROSSING, *TRUTH["naive"]))


def test_crossover_measured_and_fitted_come_back_from_known_alpha_and_beta():
    rows = sweep_rows(TRUTH, noise=0.02)
    measured = measured_crossover(rows)
    assert measured.within and measured.size == 64 << 10  # the first size of the grid past 53.3 kB
    assert (measured.lo, measured.hi) == (1 << 10, 64 << 20)
    fitted = fitted_crossover(fits_of(rows))
    assert fitted.within and fitted.size == pytest.approx(CROSSING, rel=0.05)
    assert (fitted.lo, fitted.hi) == (256, 256 << 20)  # the measured sizes widened 4 times each way
    assert str(measured) == "ring overtakes naive at 64 KiB"


def test_a_ring_ahead_everywhere_has_its_crossover_below_the_sizes_measured():
    rows = sweep_rows({"ring": (5e-6, 2e9), "naive": (10e-6, 2e9)})
    measured, fitted = measured_crossover(rows), fitted_crossover(fits_of(rows))
    assert measured.size == measured.lo and not measured.within
    assert fitted.size == fitted.lo and not fitted.within
    assert "ahead of naive all along" in str(measured)
    text = describe_sweep(rows, fits_of(rows), N, cores=8)
    assert "not within the sizes measured: it lies at or below 1 KiB" in text
    assert "the fits cross below that range, if at all" in text


def test_a_ring_behind_at_the_largest_size_does_not_overtake_within_the_sizes_measured():
    rows = sweep_rows({"ring": (30e-6, 0.2e9), "naive": (10e-6, 2e9)})  # ring's links 10x slower: never ahead
    measured, fitted = measured_crossover(rows), fitted_crossover(fits_of(rows))
    assert measured.size is None and not measured.within
    assert fitted.size is None and not fitted.within
    assert "is not ahead of naive at 64 MiB" in str(measured)
    text = describe_sweep(rows, fits_of(rows), N, cores=8)
    assert "ring does not overtake naive within the sizes measured (1 KiB to 64 MiB)" in text
    assert "the fits give no crossover from 256 B to 256 MiB" in text


def test_a_ring_ahead_only_at_the_top_after_falling_behind_names_the_size_before():
    rows = sweep_rows(TRUTH, sizes=[1 << 20, 4 << 20, 16 << 20])
    for row in rows:  # ring ahead at 1 MiB, behind at 4 MiB, ahead again at 16 MiB
        if row["algorithm"] == "ring" and row["bytes"] == 4 << 20:
            row["busbw_Bps"] /= 10
    cross = measured_crossover(rows)
    assert cross.size == 16 << 20 and cross.within
    assert "above naive's at the largest size, 16 MiB, but not at the size before it (at 4 MiB naive was ahead" in \
        describe_sweep(rows, fits_of(rows), N, cores=8)


def test_the_description_says_oversubscribed_only_when_ranks_outnumber_cores():
    rows = sweep_rows(TRUTH)
    fits = fits_of(rows)
    crowded = describe_sweep(rows, fits, N, cores=2)
    assert crowded.startswith("4 ranks ran on 2 cores: oversubscribed.") and "small messages" in crowded
    for cores in (4, 64):
        roomy = describe_sweep(rows, fits, N, cores=cores)
        assert roomy.startswith(f"4 ranks ran on {cores} cores") and "oversubscribed" not in roomy
        assert "cores shared by" not in roomy


def test_the_description_quotes_the_ratios_and_the_fit_it_was_given():
    rows = sweep_rows(TRUTH)
    text = describe_sweep(rows, fits_of(rows), N, cores=8)
    top = {r["algorithm"]: r["busbw_Bps"] for r in rows if r["bytes"] == 64 << 20}
    assert f"ring's busbw was {top['ring'] / top['naive']:.2f}x naive's and {top['ring'] / top['mpi']:.2f}x mpi's" in text
    assert "Fitted to ring's times: alpha 30 us per message and a bandwidth of 2.00 GB/s per link" in text
    assert "Fitted to naive's times: alpha 10 us" in text
    said = re.search(r"Fitted: the two fits predict equal times at ([\d.]+) KiB", text)
    assert float(said.group(1)) * 1024 == pytest.approx(CROSSING, rel=0.015)  # bisection stops within 1%
    without_mpi = [r for r in rows if r["algorithm"] != "mpi"]
    assert "mpi" not in describe_sweep(without_mpi, fits_of(without_mpi), N, cores=8)


def test_a_fit_that_misses_by_more_than_a_quarter_is_shown_as_such_and_not_used():
    rows = sweep_rows(TRUTH)
    noisy = [dict(r, time_s=r["time_s"] * (1.6 if r["algorithm"] == "naive" and r["bytes"] == 1 << 16 else 1))
             for r in rows]
    fits = fits_of(noisy)
    assert fits["ring"].usable and not fits["naive"].usable
    text = describe_sweep(noisy, fits, N, cores=8)
    assert "predict equal times" not in text
    assert re.search(r"Fitted: no crossover from the fits, because naive's misses a measurement by \d+%, more than the "
                     r"25% a usable fit may miss by", text), text
    assert re.search(r"Fitted to naive's times: .* off it, more than the 25% a usable fit may: too loose to use\.", text)
    assert re.search(r"Fitted to ring's times: .* off it\.$", text, re.M)


def test_bandwidth_optimal_is_judged_against_the_byte_counts():
    assert busiest_rank_bytes("naive", N) / busiest_rank_bytes("ring", N) == pytest.approx(N / 2)
    # equal links: at 64 MiB the ring wins by nearly the cost model's 4x, more than the byte counts' 2x
    rows = sweep_rows(TRUTH)
    assert "at least that, so ring behaved as bandwidth-optimal here" in describe_sweep(rows, fits_of(rows), N, 8)
    # the ring's links 3x slower: it still wins (4/3x), by less than 2x
    rows = sweep_rows({"ring": (30e-6, 2e9 / 3), "naive": (10e-6, 2e9)})
    text = describe_sweep(rows, fits_of(rows), N, cores=2)
    assert "At 64 MiB it was 1.33x: less than that, so ring did not behave as fully bandwidth-optimal" in text
    assert "2 cores shared by 4 ranks" in text
    rows = sweep_rows({"ring": (30e-6, 0.2e9), "naive": (10e-6, 2e9)})
    assert "no faster at all, so ring did not behave" in describe_sweep(rows, fits_of(rows), N, cores=8)


def test_a_crossover_needs_two_sizes_measured_by_both():
    rows = sweep_rows(TRUTH, sizes=[1 << 20])
    with pytest.raises(ValueError, match="two sizes or more, got 1 in common"):
        measured_crossover(rows)
    rows = sweep_rows(TRUTH)
    with pytest.raises(ValueError, match="the ring fit is of 2 ranks, the sweep of 4"):
        describe_sweep(rows, fits_of(rows, n=2), N, cores=8)
    assert not Crossover("naive", "ring", 1, 8, 1).within and Crossover("naive", "ring", 1, 8, 2).within


def test_a_fitted_bandwidth_keeps_three_digits():
    """"4.00 GB/s" beside "2.05 GB/s" (it said "4"), and a value that rounds up loses a digit, not gains one."""
    from ringlab.measure.sweep import _gbps

    assert [_gbps(x * 1e9) for x in (4, 3.9996, 2.05, 0.635, 12.34, 99.96, 9.996, 123.4)] == \
        ["4.00", "4.00", "2.05", "0.635", "12.3", "100", "10.0", "123"]
