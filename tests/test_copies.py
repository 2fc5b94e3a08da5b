"""Copies against MPI, size for size, and the staged ping-pong taken apart: the rows' arithmetic and the
sentences chosen by the numbers (MPI below, level with or above a copy of its size; which piece makes
the staged formula's gap; whether the parts add up)."""
import pytest

from ringlab.measure.copies import (copy_against_mpi, copy_rows, describe_best_pingpong, describe_staged, format_rate,
                                    last_level_cache, staged_rows)

MiB = 1 << 20
SIZES = [16 << 10, 256 << 10, MiB, 4 * MiB, 16 * MiB, 64 * MiB]
CACHE = 32 * MiB


def copies_at(rates: dict) -> list[dict]:
    """copy_rows-like rows from {bytes: rate (B/s)}."""
    return [{"bytes": k, "copy_s": k / rate, "copy_Bps": rate} for k, rate in rates.items()]


def pingpong_at(seconds: dict) -> list[dict]:
    """pingpong-like rows from {bytes: one-way seconds}."""
    return [{"bytes": k, "one_way_s": t, "bandwidth_Bps": k / t} for k, t in seconds.items()]


# as a learner measured it: one core copies 64 MiB at 2.55 GB/s (out of cache), smaller copies at 46;
# MPI's best is 6.1 GB/s at 4 MiB
FAST_SMALL_COPIES = {k: (2.55e9 if k == 64 * MiB else 46e9) for k in SIZES}
MPI_RATES = {16 << 10: 2.4e9, 256 << 10: 5.0e9, MiB: 5.8e9, 4 * MiB: 6.1e9, 16 * MiB: 4.0e9, 64 * MiB: 2.3e9}
DIRECT = {k: 4e-6 + k / rate for k, rate in MPI_RATES.items()}


def test_copy_rows_time_one_core_copies_at_each_size():
    rows = copy_rows([1024, MiB], repeats=3)
    assert [r["bytes"] for r in rows] == [1024, MiB]
    for row in rows:
        assert row["copy_s"] > 0 and row["copy_Bps"] == pytest.approx(row["bytes"] / row["copy_s"])
    with pytest.raises(ValueError, match="at least 1 byte"):
        copy_rows([0])


def test_the_last_level_cache_is_the_largest_level_linux_reports(tmp_path):
    for index, (level, size) in enumerate([(1, "32K"), (1, "32K"), (2, "1024K"), (3, "32768K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "size").write_text(f"{size}\n")
    (tmp_path / "index9").mkdir()  # unreadable: skipped
    assert last_level_cache(tmp_path) == CACHE
    assert last_level_cache(tmp_path / "missing") is None


def test_copy_against_mpi_sets_each_size_against_a_copy_of_its_own_size():
    rows = copy_against_mpi(copies_at(FAST_SMALL_COPIES), pingpong_at(DIRECT))
    four = next(r for r in rows if r["bytes"] == 4 * MiB)
    assert four["copy_Bps"] == 46e9 and four["ratio"] == pytest.approx(four["mpi_Bps"] / 46e9)
    with pytest.raises(ValueError, match="no size in common"):
        copy_against_mpi(copies_at({8: 1e9}), pingpong_at(DIRECT))


def test_mpi_beats_the_64_mib_copy_only_because_it_was_measured_at_another_size():
    text = describe_best_pingpong(copies_at(FAST_SMALL_COPIES), pingpong_at(DIRECT), cache=CACHE)
    best = 4 * MiB / DIRECT[4 * MiB]
    assert f"{best / 1e9:.3g} GB/s at 4 MiB, {best / 2.55e9:.2f}x one core's copy of 64 MiB" in text
    assert "(2.55 GB/s; source and destination 128 MiB, more than the 32 MiB last-level cache)" in text
    assert "A copy of 4 MiB, MPI's best size, ran at 46 GB/s (18x the 64 MiB copy; " in text
    assert "source and destination 8 MiB, within the 32 MiB last-level cache): a copy's rate depends" in text
    assert "MPI stayed below one core's copy at every size" in text
    assert "only because it was measured at another size" in text
    assert "level with" not in text and "faster than one core" not in text
    assert "last-level cache" not in describe_best_pingpong(copies_at(FAST_SMALL_COPIES), pingpong_at(DIRECT))


def test_mpi_level_with_a_copy_of_its_size_is_not_called_a_win():
    copies = copies_at({k: 13e9 for k in SIZES})
    direct = pingpong_at({k: k / (13.9e9 if k == 64 * MiB else 8e9) for k in SIZES})  # 1.07x at 64 MiB
    text = describe_best_pingpong(copies, direct, cache=CACHE)
    assert "At 64 MiB, MPI came out level with or slightly above" in text and "same size (1.07x):" in text  # one size
    assert "only because" not in text and "A copy of" not in text  # best and largest size are the same


def test_mpi_well_above_a_copy_of_its_size_says_the_numbers_cannot_tell_why():
    copies = copies_at({k: 5e9 for k in SIZES})
    direct = pingpong_at({k: k / (10e9 if k >= 4 * MiB else 2e9) for k in SIZES})
    text = describe_best_pingpong(copies, direct)
    assert "At 4 MiB, 16 MiB, 64 MiB, MPI moved bytes faster" in text and "2.00x" in text
    assert "do not say which" in text and "stayed below" not in text


def test_staged_rows_split_the_formula_and_the_measurement_into_parts():
    alpha, bandwidth, copy_rate = 4e-6, 6e9, 2.55e9
    copies = copies_at(FAST_SMALL_COPIES)
    staged = pingpong_at({k: t + 2 * k / FAST_SMALL_COPIES[k] for k, t in DIRECT.items()})
    rows = staged_rows(staged, pingpong_at(DIRECT), copies, alpha, bandwidth, copy_rate)
    for row in rows:
        k = row["bytes"]
        assert row["formula_s"] == pytest.approx(alpha + k / bandwidth + 2 * k / copy_rate)
        assert row["link_s"] + row["formula_copies_s"] == pytest.approx(row["formula_s"])
        assert row["copies_s"] == pytest.approx(2 * k / FAST_SMALL_COPIES[k])
        assert row["parts_s"] == pytest.approx(row["staged_s"]) and row["parts_ratio"] == pytest.approx(1)
        assert row["formula_ratio"] == pytest.approx(row["formula_s"] / row["staged_s"])
    with pytest.raises(ValueError, match="staged but not measured direct"):
        staged_rows(pingpong_at({8: 1e-6}), pingpong_at(DIRECT), copies, alpha, bandwidth, copy_rate)


def test_a_formula_fed_the_out_of_cache_copy_rate_over_predicts_because_of_the_copies():
    copies = copies_at(FAST_SMALL_COPIES)
    staged = pingpong_at({k: t + 2 * k / FAST_SMALL_COPIES[k] for k, t in DIRECT.items()})
    rows = staged_rows(staged, pingpong_at(DIRECT), copies, 4e-6, 6e9, 2.55e9)
    high = max(rows, key=lambda r: r["formula_ratio"])
    assert high["formula_ratio"] > 3  # as the learner saw
    text = describe_staged(rows, 2.55e9, 64 * MiB)
    assert f"It predicts most too long at {high['bytes'] >> 20} MiB" in text
    assert "The copies make most of it" in text and "faster than the 64 MiB copy" in text
    assert "costs its parts one after the other" in text and "do not add up" not in text


def test_a_formula_close_everywhere_says_so():
    copies = copies_at({k: 10e9 for k in SIZES})
    direct = {k: 4e-6 + k / 6e9 for k in SIZES}
    staged = pingpong_at({k: t + 2 * k / 10e9 for k, t in direct.items()})
    text = describe_staged(staged_rows(staged, pingpong_at(direct), copies, 4e-6, 6e9, 10e9), 10e9, 64 * MiB)
    assert "within a factor 1.25 of the measurement at every size" in text
    assert "predicts most" not in text


def test_a_staged_time_beyond_its_parts_is_reported_not_explained_away():
    copies = copies_at({k: 10e9 for k in SIZES})
    direct = {k: 4e-6 + k / 6e9 for k in SIZES}
    staged = pingpong_at({k: (t + 2 * k / 10e9) * (3 if k == MiB else 1) for k, t in direct.items()})
    text = describe_staged(staged_rows(staged, pingpong_at(direct), copies, 4e-6, 6e9, 10e9), 10e9, 64 * MiB)
    assert "It predicts most too short at 1 MiB" in text
    assert "The rest makes most of it: the staged message took longer than its parts" in text
    assert "at 1 MiB the parts, timed apart, do not add up" in text


def test_a_fit_off_for_the_message_is_named_as_the_piece():
    copies = copies_at({k: 10e9 for k in SIZES})
    direct = {k: (40e-6 if k == 16 << 10 else 4e-6) + k / 6e9 for k in SIZES}  # a slow small message
    staged = pingpong_at({k: t + 2 * k / 10e9 for k, t in direct.items()})
    text = describe_staged(staged_rows(staged, pingpong_at(direct), copies, 4e-6, 6e9, 10e9), 10e9, 64 * MiB)
    assert "It predicts most too short at 16 KiB" in text
    assert "The message makes most of it" in text


def test_slow_small_copies_are_named_with_their_start_up():
    copies = copies_at({k: (0.5e9 if k == 16 << 10 else 10e9) for k in SIZES})
    direct = {k: 4e-6 + k / 6e9 for k in SIZES}
    staged = pingpong_at({k: t + 2 * k / (0.5e9 if k == 16 << 10 else 10e9) for k, t in direct.items()})
    text = describe_staged(staged_rows(staged, pingpong_at(direct), copies, 4e-6, 6e9, 10e9), 10e9, 64 * MiB)
    assert "The copies make most of it: a copy of 16 KiB ran at 0.5 GB/s, slower than the 64 MiB copy" in text
    assert "fixed start-up" in text


def test_lab_01_prints_its_copy_rate_as_its_sentences_give_it():
    """One copy rate, one figure: the lab's own line once said 10.75 GB/s above sentences that said 10.7."""
    from pathlib import Path

    assert format_rate(10.749e9) == "10.7 GB/s" and format_rate(4e9) == "4 GB/s" and format_rate(2.05e9) == "2.05 GB/s"
    source = Path(__file__).parents[1].joinpath("labs", "src", "01_moving_bytes.py").read_text()
    assert "memory copy rate {format_rate(copy_rate)}" in source
