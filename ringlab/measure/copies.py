"""One core's memory copy set against MPI's messages size for size, and the staged ping-pong taken
apart: what lab 01 measures and the sentences it prints, each worded from the numbers it quotes.

A copy's rate depends on its size (a copy whose source and destination fit in the CPU's caches
does not wait for main memory), so a copy rate bounds an MPI transport only at the size it was
measured at. :func:`copy_rows` times one core's ``np.copyto`` at every ping-pong size;
:func:`describe_best_pingpong` sets MPI's best rate against a copy of the largest size and a copy
of its own size; :func:`fit_direct` and :func:`describe_fit` fit alpha and B to the direct ping-pong
and say them (a fit that finds no cost per byte included); :func:`staged_rows` and
:func:`describe_staged` set exercise 2's formula against the staged measurements and against the
staged message's parts timed alone.

Rows are ``pingpong`` rows (``bytes``, ``one_way_s``, ``bandwidth_Bps``) and ``copy_rows`` rows.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..predict.fitting import USABLE, Fit, fit_pingpong
from .bandwidth import REPEATS, memcpy_rate
from .units import format_bytes, parse_size

CACHES = Path("/sys/devices/system/cpu/cpu0/cache")  # where Linux describes cpu0's caches
CLOSE = 1.25  # two timings within this factor of each other, either way, count as close


def copy_rows(sizes: list[int], repeats: int = REPEATS) -> list[dict]:
    """One core's ``np.copyto`` at each size: rows of ``bytes``, ``copy_s`` (median seconds of
    ``repeats``) and ``copy_Bps`` (bytes copied per second)."""
    rows = []
    for nbytes in sizes:
        if nbytes < 1:
            raise ValueError(f"a copy needs at least 1 byte, got {nbytes}")
        rate = memcpy_rate(nbytes, repeats)
        rows.append({"bytes": nbytes, "copy_s": nbytes / rate, "copy_Bps": rate})
    return rows


def last_level_cache(folder: Path = CACHES) -> int | None:
    """Bytes of the largest-level CPU cache Linux reports for cpu0, or None where it reports none."""
    levels = {}
    for index in Path(folder).glob("index*"):
        try:
            level = int((index / "level").read_text())
            size = parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        levels[level] = max(size, levels.get(level, 0))
    return levels[max(levels)] if levels else None


def _by_size(rows: list[dict], key: str) -> dict[int, float]:
    return {r["bytes"]: r[key] for r in rows}


def _sizes(rows: list[dict]) -> str:
    return ", ".join(format_bytes(r["bytes"]) for r in rows)


def _sig(value: float) -> str:
    """Three significant digits, never in e-notation ("8e-06 GB/s" and "6.71e+04 GB/s" read as neither)."""
    return np.format_float_positional(value, precision=3, unique=False, fractional=False, trim="-")


def format_rate(bps: float) -> str:
    """A rate in bytes per second as every sentence here gives it: "10.7 GB/s" (three significant digits)."""
    return f"{_sig(bps / 1e9)} GB/s"


def _time(seconds: float) -> str:
    return f"{_sig(seconds * 1e6)} us" if seconds < 1e-3 else f"{_sig(seconds * 1e3)} ms"


def _x(ratio: float) -> str:
    """A ratio to two decimals, or to two significant digits where two decimals would print a positive one as 0.00x."""
    if ratio >= 0.005 or ratio <= 0:
        return f"{ratio:.2f}x"
    return f"{ratio:.{1 - int(np.floor(np.log10(ratio)))}f}x"


def _times(ratio: float) -> str:
    return _x(ratio) if ratio < 10 else f"{ratio:.0f}x"


def _percent(share: float) -> str:
    """A share as a whole percentage, with more digits where that would round a positive share to 0% or one
    below 1 to 100%."""
    for digits in range(8):
        text = f"{share:.{digits}%}"
        if (share <= 0 or float(text[:-1]) > 0) and (share >= 1 or float(text[:-1]) < 100):
            break
    return text


def copy_against_mpi(copies: list[dict], direct: list[dict]) -> list[dict]:
    """Size for size, where both were measured: ``bytes``, ``copy_Bps``, ``mpi_Bps`` and ``ratio`` (MPI over copy)."""
    copy = _by_size(copies, "copy_Bps")
    rows = [{"bytes": r["bytes"], "copy_Bps": copy[r["bytes"]], "mpi_Bps": r["bandwidth_Bps"],
             "ratio": r["bandwidth_Bps"] / copy[r["bytes"]]} for r in direct if r["bytes"] in copy]
    if not rows:
        raise ValueError("the copies and the ping-pong have no size in common")
    return rows


def _fits(nbytes: int, cache: int | None) -> str:
    """'source and destination 8 MiB, within the 32 MiB last-level cache', or '' when the cache is unknown."""
    if cache is None:
        return ""
    return (f"source and destination {format_bytes(2 * nbytes)}, "
            f"{'within' if 2 * nbytes <= cache else 'more than'} the {format_bytes(cache)} last-level cache")


def describe_best_pingpong(copies: list[dict], direct: list[dict], cache: int | None = None) -> str:
    """MPI's best ping-pong rate against one core's copy of the largest size, then against copies of the
    same sizes; ``cache`` (bytes of the last-level cache, or None) says which copies fit in it."""
    rows = copy_against_mpi(copies, direct)
    best = max(rows, key=lambda r: r["mpi_Bps"])
    ref = max(rows, key=lambda r: r["bytes"])
    ref_fits, best_fits = (f"; {_fits(r['bytes'], cache)}" if cache else "" for r in (ref, best))
    lines = [f"MPI's best ping-pong: {format_rate(best['mpi_Bps'])} at {format_bytes(best['bytes'])}, "
             f"{_times(best['mpi_Bps'] / ref['copy_Bps'])} one core's copy of {format_bytes(ref['bytes'])} "
             f"({format_rate(ref['copy_Bps'])}{ref_fits})."]
    if best["bytes"] != ref["bytes"]:
        against = best["copy_Bps"] / ref["copy_Bps"]
        why = ("here copies of the two sizes ran at about the same rate" if _close(against) else
               "a copy's rate depends on its size")
        lines.append(f"A copy of {format_bytes(best['bytes'])}, MPI's best size, ran at "
                     f"{format_rate(best['copy_Bps'])} "
                     f"({_times(against)} the {format_bytes(ref['bytes'])} copy{best_fits}): {why}.")
    above = [r for r in rows if round(r["ratio"], 2) >= 1]  # 1.00x as quoted: a tie is level with the copy, not below
    top = max(rows, key=lambda r: r["ratio"])
    at = (f"up to {_x(top['ratio'])}, at {format_bytes(top['bytes'])}" if len(above) > 1  # one size: its ratio alone
          else _x(top["ratio"]))
    if not above:
        lines.append(f"Size for size, MPI stayed below one core's copy at every size measured (at most "
                     f"{_percent(top['ratio'])} of it, at {format_bytes(top['bytes'])}): a copy of the same size "
                     f"bounds it here.")
    elif top["ratio"] <= CLOSE:
        lines.append(f"At {_sizes(above)}, MPI came out level with or slightly above one core's np.copyto of the "
                     f"same size ({at}): MPI's copy is not numpy's, and the two were timed at different moments, "
                     f"so they need not agree exactly; a message still costs about one copy.")
    else:
        lines.append(f"At {_sizes(above)}, MPI moved bytes faster than one core's np.copyto of the same size ("
                     f"{at}): more than one core copied, or the copy was timed while the machine was busier. "
                     f"These numbers do not say which; run the measurement again to see whether it stays.")
    if best["bytes"] != ref["bytes"] and best["mpi_Bps"] > ref["copy_Bps"] and best["ratio"] <= 1:
        lines.append(f"So MPI's best beats the {format_bytes(ref['bytes'])} copy rate only because it was measured "
                     f"at another size: against a copy of its own size it reached {_percent(best['ratio'])}.")
    return "\n".join(lines)


def fit_direct(direct: list[dict]) -> Fit:
    """alpha (s) and B (B/s) of t = alpha + K/B fitted to the direct ping-pong rows, kept where the fit finds no
    cost per byte (B = inf: times that did not grow with size, on a busy machine): the lab goes on with alpha alone
    (alpha + K/inf is alpha), and :func:`describe_fit` says so."""
    return fit_pingpong(direct, no_cost_per_byte="keep")


def describe_fit(fitted: Fit) -> str:
    """The fitted alpha and B in a line, or alpha and 'no cost per byte' where the fit found none; then, where the
    fit misses a measurement by more than ``USABLE``, by how much and at which size, and that the model is rough."""
    if np.isfinite(fitted.bandwidth):
        text = f"fitted to the measurements: alpha = {_time(fitted.alpha)}, B = {format_rate(fitted.bandwidth)}"
    else:
        text = (f"fitted to the measurements: alpha = {_time(fitted.alpha)} and no cost per byte: the times did not "
                f"grow with the sizes (the machine was busy while they were measured), so there is no B to fit and "
                f"the model below is alpha alone. Run the measurement again to see a bandwidth.")
    return text + _misses(fitted)


def _misses(fitted: Fit) -> str:
    """'' for a fit within ``USABLE`` of every measurement; else a sentence naming the measurement it misses most."""
    if not fitted.worst_residual > USABLE:
        return ""
    worst = int(np.argmax(np.abs(fitted.relative_residuals)))
    share = f"{fitted.worst_residual:.0%}"
    if float(share[:-1]) <= round(USABLE * 100):  # 25.3% would print as 25%, "more than 25%"
        share = f"just over {USABLE:.0%}"
    return (f"\nThe fit misses the {format_bytes(int(fitted.sizes[worst]))} measurement by {share} (the model gives "
            f"{_time(float(fitted.predicted[worst]))} where {_time(float(fitted.measured[worst]))} was measured), "
            f"more than the {USABLE:.0%} a usable fit may: the model below is rough, a least-squares compromise over "
            f"every size, and so is what exercises 2 and 3 work out from this alpha and B.")


def staged_rows(staged: list[dict], direct: list[dict], copies: list[dict], alpha: float, bandwidth: float,
                copy_rate: float) -> list[dict]:
    """Per size, exercise 2's formula alpha + K/B + 2K/copy_rate against the staged measurement and its parts.

    Keys: ``bytes``; ``staged_s`` (measured); ``formula_s`` and its parts ``link_s`` (alpha + K/B) and
    ``formula_copies_s`` (2K/copy_rate); ``direct_s`` (the direct message measured), ``copies_s`` (two
    copies of K timed alone) and ``parts_s`` (their sum); ``formula_ratio`` and ``parts_ratio``, each
    over the staged measurement; ``per_byte`` (False where ``bandwidth`` is infinite: no cost per byte fitted).
    """
    direct_s, copy_s = _by_size(direct, "one_way_s"), _by_size(copies, "copy_s")
    rows = []
    for row in staged:
        nbytes = row["bytes"]
        if nbytes not in direct_s or nbytes not in copy_s:
            raise ValueError(f"{format_bytes(nbytes)} was staged but not measured direct and copied alone")
        link, formula_copies = alpha + nbytes / bandwidth, 2 * nbytes / copy_rate
        parts = direct_s[nbytes] + 2 * copy_s[nbytes]
        rows.append({"bytes": nbytes, "staged_s": row["one_way_s"], "formula_s": link + formula_copies,
                     "link_s": link, "formula_copies_s": formula_copies, "direct_s": direct_s[nbytes],
                     "copies_s": 2 * copy_s[nbytes], "parts_s": parts,
                     "formula_ratio": (link + formula_copies) / row["one_way_s"],
                     "parts_ratio": parts / row["one_way_s"], "per_byte": bool(np.isfinite(bandwidth))})
    return rows


def _close(ratio: float) -> bool:
    return 1 / CLOSE <= ratio <= CLOSE


def _furthest_off(row: dict, copy_rate: float, copy_nbytes: int) -> list[str]:
    """Where the formula is furthest off one way: its difference from the staged time in three pieces
    (the message, the copies, the rest) and the piece that makes most of it: the largest of those that point the
    way the formula is off (a piece that points the other way cannot make the gap, however large)."""
    size, ref = format_bytes(row["bytes"]), format_bytes(copy_nbytes)
    copy_rate_here = 2 * row["bytes"] / row["copies_s"]
    way = "long" if row["formula_ratio"] > 1 else "short"
    per_byte = row.get("per_byte", True)  # False where the fit found no cost per byte: the message is alpha alone
    message = "alpha + K/B" if per_byte else "alpha alone, no cost per byte fitted:"
    lines = [f"It predicts most too {way} at {size}: {_time(row['formula_s'])} predicted, {_time(row['staged_s'])} "
             f"measured ({_x(row['formula_ratio'])}). "
             f"The difference is in three pieces: the message ({message} {_time(row['link_s'])}, measured direct "
             f"{_time(row['direct_s'])}); the two copies (at the {ref} copy rate, {format_rate(copy_rate)}: "
             f"{_time(row['formula_copies_s'])}; timed alone at {size}: {_time(row['copies_s'])}, "
             f"{format_rate(copy_rate_here)}); the rest (direct + copies alone {_time(row['parts_s'])}, staged "
             f"{_time(row['staged_s'])})."]
    pieces = {"message": row["link_s"] - row["direct_s"], "copies": row["formula_copies_s"] - row["copies_s"],
              "rest": row["parts_s"] - row["staged_s"]}  # they add up to formula - staged
    gap = row["formula_s"] - row["staged_s"]
    piece = max((name for name in pieces if pieces[name] * gap > 0), key=lambda name: abs(pieces[name]))
    if piece == "copies" and pieces[piece] > 0:
        lines.append(f"The copies make most of it: a copy of {size} ran at {format_rate(copy_rate_here)}, faster than "
                     f"the {ref} copy, so charging it at the {ref} rate overstates it.")
    elif piece == "copies":
        startup = " (at this size, each np.copyto call's fixed start-up weighs)" if row["bytes"] < 64 << 10 else ""
        lines.append(f"The copies make most of it: a copy of {size} ran at {format_rate(copy_rate_here)}, slower than "
                     f"the {ref} copy{startup}, so the {ref} rate understates it.")
    elif piece == "message":
        fitted = "one alpha and one B fitted over all sizes" if per_byte else "alpha alone, fitted over all sizes,"
        lines.append(f"The message makes most of it: {fitted} put it at "
                     f"{_time(row['link_s'])} where it measured {_time(row['direct_s'])}.")
    else:
        lines.append(f"The rest makes most of it: the staged message took {'longer' if pieces[piece] < 0 else 'less'} "
                     f"than its parts timed alone. These numbers do not say why; run the measurement again to see "
                     f"whether it stays.")
    return lines


def describe_staged(rows: list[dict], copy_rate: float, copy_nbytes: int) -> str:
    """What :func:`staged_rows` say: how far the formula is off; where it is furthest off (too long, too
    short, each when off by more than :data:`CLOSE`), which piece makes the gap; and whether the parts
    timed alone add up to the staged time. ``copy_rate`` is the rate the formula was given, measured
    with copies of ``copy_nbytes``."""
    if not rows:
        raise ValueError("no staged rows to describe")
    low = min(rows, key=lambda r: r["formula_ratio"])
    high = max(rows, key=lambda r: r["formula_ratio"])
    lines = [f"Your formula over the staged measurement: from {_x(low['formula_ratio'])} "
             f"(at {format_bytes(low['bytes'])}) to {_x(high['formula_ratio'])} (at {format_bytes(high['bytes'])}); "
             f"above 1 it predicts too long, below 1 too short."]
    if _close(low["formula_ratio"]) and _close(high["formula_ratio"]):
        lines.append(f"It is within a factor {CLOSE} of the measurement at every size.")
    if high["formula_ratio"] > CLOSE:
        lines += _furthest_off(high, copy_rate, copy_nbytes)
    if low["formula_ratio"] < 1 / CLOSE:
        lines += _furthest_off(low, copy_rate, copy_nbytes)
    parts_low = min(r["parts_ratio"] for r in rows)
    parts_high = max(r["parts_ratio"] for r in rows)
    span = f"{_x(parts_low)} to {_x(parts_high)} the staged time"
    if all(_close(r["parts_ratio"]) for r in rows):
        lines.append(f"The direct message measured plus two copies timed alone at each size comes to {span}: "
                     f"the staged message costs its parts one after the other, each copy at the rate of its own "
                     f"size.")
    else:
        off = _sizes([r for r in rows if not _close(r["parts_ratio"])])
        lines.append(f"The direct message measured plus two copies timed alone at each size comes to {span}: "
                     f"at {off} the parts, timed apart, do not add up to the staged time within a factor {CLOSE}. "
                     f"These numbers do not say why; run the measurement again to see whether it stays.")
    return "\n".join(lines)
