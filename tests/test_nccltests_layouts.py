"""Every table layout nccl-tests and rccl-tests have printed, mangled as people paste logs, read exactly or refused.

The logs are printed here with each release's own printf formats (nccl-tests' src/common.cu, src/util.cu and
each test's print_header at 2017's first release, at 2019-2022's 2.0-2.12, and since 2.13; rccl-tests'
``-O 0``), from numbers made up to be self-consistent. A property test (hypothesis) then mangles them as logs
are mangled on their way into an issue: indented, fenced, prefixed by a launcher, the '#' eaten by markdown,
several runs in one file, the last row cut. What keeps every fact must import exactly; what loses one (grep to
the rows: the program line, the devices and the header gone) must import exactly or be refused, never misread.
"""
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ringlab.measure.logs import LogFormatError, read_logs
from ringlab.measure.nccltests import FACTORS, PROGRAMS

PROGRAM_OF = {collective: program for program, collective in PROGRAMS.items()}
OLD_EXTRA = {"allreduce": ("redop",), "reduce_scatter": ("redop",), "alltoall": ("redop",), "allgather": (),
             "sendrecv": (), "hypercube": (), "broadcast": ("root",), "scatter": ("root",), "gather": ("root",),
             "reduce": ("redop", "root")}
LAYOUTS = ("2017", "2019", "2.13", "2.17", "2.19-per-iteration", "2.17-timestamps", "rccl-in-place")
FIRST_RELEASE = ("allreduce", "allgather", "broadcast", "reduce", "reduce_scatter")


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr (2.17 on): the most decimals that fit the width."""
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        if len(fmt % value) <= width:
            return fmt % value
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def time_str(us: float) -> str:
    """2019-2.16's timeStr: fewer decimals as the time grows."""
    return "%7.0f" % us if us > 10000 else "%7.1f" % us if us > 100 else "%7.2f" % us


def factor(kind: str, n: int) -> float:
    return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[FACTORS[kind]]


def print_log(layout: str, kind: str, n: int, sizes: list[int], gbps: float, host: str = "node1") -> tuple[str, list]:
    """(a log of ``kind`` on ``n`` ranks as nccl-tests of ``layout`` printed it, the rows it holds as read from
    what it printed: bytes, time_s and busbw_Bps out of place and in place)."""
    program = PROGRAM_OF[kind] + "_perf"
    redop = "sum" if kind in ("allreduce", "reduce_scatter", "reduce", "sendrecv") else (
        "" if kind == "hypercube" else "none")
    root = 0 if kind in ("broadcast", "reduce", "gather", "scatter") else -1
    out, rows = [], []
    sides = ("",) if layout == "rccl-in-place" or (layout == "2017" and kind == "broadcast") else ("", "inplace_")
    if layout == "rccl-in-place":
        sides = ("inplace_",)
    if layout.startswith(("2.17", "2.19")):
        out += ["# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
                f"# Collective test starting: {program}"]
    if layout != "2017":
        out.append(f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 "
                   "iters: 20 agg iters: 1 validation: 1 graph: 0")
    out += ["#", "# Using devices"]
    for rank in range(n):
        if layout == "2017":
            out.append("#   Rank %2d on %10s device %2d [0x%02x] %s" % (rank, host, rank % 8, 0x19 + rank % 8, "Tesla P100"))
        elif layout in ("2019", "2.13"):
            out.append("#   Rank %2d Pid %6d on %10s device %2d [0x%02x] %s"
                       % (rank, 4000 + rank, host, rank % 8, 0x19 + rank % 8, "Tesla V100-SXM2-32GB"))
        elif layout == "rccl-in-place":
            out.append("#   Rank %2d Pid %6d on %10s device %2d [0000:%02x:00.0] %s"
                       % (rank, 4000 + rank, host, rank % 8, 0x19 + rank % 8, "AMD Instinct MI300X"))
        else:
            out.append("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s"
                       % (rank, 0, 4000 + rank, host, rank % 8, 0, 0x19 + rank % 8, 0, "NVIDIA H100 80GB HBM3"))
    out.append("#")
    if layout == "2017":
        extra = OLD_EXTRA[kind]
        names = ["bytes", "N", "type"] + ["op" if e == "redop" else e for e in extra]
        side = ["time", "algbw", "busbw", "res"]
    elif layout == "2019":
        names, side = ["size", "count", "type"] + list(OLD_EXTRA[kind]), ["time", "algbw", "busbw", "error"]
    else:
        names, side = ["size", "count", "type", "redop", "root"], ["time", "algbw", "busbw", "#wrong"]
        if layout == "2.19-per-iteration":
            side += ["i_min", "i_max", "i_p99", "i_cv%"]
    over = "in-place" if sides == ("inplace_",) else "out-of-place" if len(sides) == 1 else "out-of-place   in-place"
    out.append("# " + " " * 40 + over)
    header = "# " + "  ".join("%10s" % name for name in names + side * len(sides))
    if layout == "2.17-timestamps":
        header += "  timestamp"
    out.append(header)
    if layout != "2017":
        out.append("# " + "  ".join(["(B)", "(elements)"] + [""] * (len(names) - 2) + ["(us)", "(GB/s)", "(GB/s)", ""]
                                    * len(sides)))
    for size in sizes:
        count = size // 4
        line = "%12li  %12li  %8s" % (size, count, "float")
        extra = OLD_EXTRA[kind] if layout in ("2017", "2019") else ("redop", "root")
        for e in extra:
            line += "  %6s" % redop if e == "redop" else "  %6i" % root
        row = {"bytes": size}
        for place in ("", "inplace_"):
            row[place + "time_s"] = row[place + "busbw_Bps"] = None
        for place in sides:
            us = 4.0 + (0.5 if place else 0.0) + size / (gbps * 1e3)
            algbw = size / us / 1e3
            busbw = algbw * factor(kind, n)
            if layout == "2017":
                body = "  %7.3f  %5.2f  %5.2f  %7.0le" % (us / 1e3, algbw, busbw, 0.0)
                t, b = float("%7.3f" % (us / 1e3)) * 1e-3, float("%5.2f" % busbw)
            elif layout in ("2019", "2.13", "rccl-in-place"):
                body = "  %7s  %6.2f  %6.2f  %5.0le" % (time_str(us), algbw, busbw, 0.0) if layout == "2019" else \
                    "  %7s  %6.2f  %6.2f  %5g" % (time_str(us), algbw, busbw, 0)
                t, b = float(time_str(us)) * 1e-6, float("%6.2f" % busbw)
            else:
                body = "  %7s  %6s  %6s  %6g" % (float_str(us, 7), float_str(algbw, 6), float_str(busbw, 6), 0)
                if layout == "2.19-per-iteration":
                    body += "  %7s  %7s  %7s  %7s" % (float_str(us * .9, 7), float_str(us * 1.2, 7),
                                                      float_str(us * 1.1, 7), float_str(2.5, 7))
                t, b = float(float_str(us, 7)) * 1e-6, float(float_str(busbw, 6))
            line += body
            row[place + "time_s"], row[place + "busbw_Bps"] = t, b * 1e9
        if layout == "2.17-timestamps":
            line += "  2025-11-03 10:%02d:%02d" % (len(rows) // 60, len(rows) % 60)
        out.append(line)
        rows.append(row)
    if layout == "2017":
        out += [" Out of bounds values : 0 OK", " Avg bus bandwidth    : 12.5 ", ""]
    else:
        out += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 12.5 ", "#"]
        if layout.startswith(("2.17", "2.19")):
            out.append(f"# Collective test concluded: {program}")
    return "\n".join(out) + "\n", rows


def kinds_of(layout: str) -> list[str]:
    if layout == "2017":
        return list(FIRST_RELEASE)
    return [k for k in FACTORS if k != "alltoallv"] if layout != "2019" else list(OLD_EXTRA)


MANGLES = {
    "indented": lambda text: "\n".join("    " + line for line in text.splitlines()),
    "fenced": lambda text: "```\n" + text + "```\n",
    "ompi": lambda text: "\n".join(f"[1,0]<stdout>:{line}" for line in text.splitlines()),
    "mpich": lambda text: "\n".join(f"[0] {line}" for line in text.splitlines()),
    "srun": lambda text: "\n".join(f"0: {line}" for line in text.splitlines()),
    "ray": lambda text: "\n".join(f"(RayTrainWorker pid=3081, ip=10.0.0.5) {line}" for line in text.splitlines()),
    "timestamped": lambda text: "\n".join(f"2024-05-01T10:00:{i % 60:02d}.123Z {line}"
                                          for i, line in enumerate(text.splitlines())),
    "hash_eaten": lambda text: "\n".join(re.sub(r"^#+\s*", "", line) for line in text.splitlines()),
    # NCCL_DEBUG=INFO output breaking into rows: nccl-tests prints a row's size columns, NCCL prints its INFO
    # lines from inside the call (glued to the row), then nccl-tests prints the rest of the row
    "info_interleaved": lambda text: "\n".join(interleave(line) for line in text.splitlines()),
    "markdown_table": lambda text: "\n".join(("| " + " | ".join(line.split()) + " |")
                                             if re.match(r"\s*\d+\s+\d+\s", line) else line
                                             for line in text.splitlines()),
}


def interleave(line: str) -> str:
    if not re.match(r"\s+\d+\s+\d+\s", line) or len(line.split()) < 9:
        return line
    fields = line.split()
    cut = next(i for i, f in enumerate(fields) if "." in f)  # the first time column
    info = "node1:4000:4000 [0] NCCL INFO 512 Bytes -> Algo 1 proto 2 time 25.229528"
    return ("  ".join(fields[:cut]) + info + "\n" + info + "\n    " + "  ".join(fields[cut:cut + 4]) + "\n" + info
            + "\n    " + "  ".join(fields[cut + 4:]))


def grep_rows(text: str) -> str:
    """What ``grep -E '^ +[0-9]'`` keeps: the rows, nothing of the header."""
    return "\n".join(line for line in text.splitlines() if re.match(r"\s+\d+\s+\d+\s", line)) + "\n"


def cut_last_row(text: str) -> str:
    """A run killed while it printed its last row: that row half written, no footer."""
    lines = text.splitlines()
    last = max(i for i, line in enumerate(lines) if re.match(r"\s+\d+\s+\d+\s", line))
    fields = lines[last].split()
    return "\n".join(lines[:last] + ["  ".join(fields[:len(fields) // 2])]) + "\n"


def same_rows(got: list[dict], want: list[dict]) -> None:
    assert [r["bytes"] for r in got] == [r["bytes"] for r in want]
    for g, w in zip(got, want):
        for key, value in w.items():
            if key != "bytes":
                assert g[key] == (None if value is None else pytest.approx(value, rel=1e-12)), key


@st.composite
def logs(draw):
    layout = draw(st.sampled_from(LAYOUTS))
    kind = draw(st.sampled_from(kinds_of(layout)))
    n = draw(st.integers(2, 24))
    first = draw(st.integers(3, 12))
    sizes = [1 << e for e in range(first, first + draw(st.integers(4, 16)))]
    gbps = draw(st.sampled_from([3.0, 12.0, 48.0, 190.0, 450.0, 2000.0]))
    return layout, kind, n, sizes, gbps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.lists(st.sampled_from(sorted(MANGLES)), max_size=2, unique=True), st.booleans(), st.booleans())
def test_a_log_that_keeps_its_facts_imports_exactly(log, mangles, cut, twice):
    layout, kind, n, sizes, gbps = log
    text, rows = print_log(layout, kind, n, sizes, gbps)
    if cut:
        text = cut_last_row(text)
    named = layout.startswith(("2.17", "2.19"))
    if twice:  # a second run in the same file: another collective where the program line names it
        other = kind if not named else "allgather" if kind != "allgather" else "allreduce"
        second, second_rows = print_log(layout, other, n, sizes[:4], gbps * 2)
        text += second
    for mangle in mangles:
        text = MANGLES[mangle](text)
    try:
        got = read_logs(text, collective=None if named else kind)
    except LogFormatError as err:
        raise AssertionError(f"{layout} {kind} on {n} ranks, {mangles}, cut={cut}: refused: {err}\n{text[:3000]}")
    assert len(got) == (2 if twice else 1)
    assert (got[0]["collective"], got[0]["ranks"]) == (kind, n)
    same_rows(got[0]["rows"], rows[:-1] if cut else rows)
    assert len(got[0]["left_out"]) == (1 if cut else 0)
    if twice:
        assert (got[1]["collective"], got[1]["ranks"]) == (other, n)
        same_rows(got[1]["rows"], second_rows)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logs(), st.sampled_from([None, "indented", "ompi", "srun", "markdown_table"]), st.booleans())
def test_a_log_that_lost_its_header_imports_exactly_or_is_refused(log, mangle, given_collective):
    """Grepped to the rows: the program, devices and column header gone. Read only where the rows leave one
    answer; otherwise refused with what to give."""
    layout, kind, n, sizes, gbps = log
    text, rows = print_log(layout, kind, n, sizes, gbps)
    text = grep_rows(text)
    if mangle:
        text = MANGLES[mangle](text)
    try:
        got = read_logs(text, collective=kind if given_collective else None)
    except LogFormatError as err:
        assert "--collective" in str(err) or "header" in str(err), str(err)
        return
    assert len(got) == 1 and got[0]["collective"] == kind
    assert got[0]["ranks"] in (None, n) or FACTORS[kind] == "1"
    same_rows(got[0]["rows"], rows)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_and_collective_it_printed_imports_exactly(layout):
    for kind in kinds_of(layout):
        text, rows = print_log(layout, kind, 8, [1 << e for e in range(10, 28)], 190.0)
        named = layout.startswith(("2.17", "2.19"))
        got, = read_logs(text, collective=None if named else kind)
        assert (got["collective"], got["ranks"], got["layout"] != "") == (kind, 8, True), (layout, kind)
        same_rows(got["rows"], rows)


def test_without_a_program_line_the_columns_name_the_collective_only_when_they_leave_one_answer():
    # on 8 ranks (8 device lines): a reduction without a root and busbw = algbw is sendrecv (allreduce's factor
    # would be 1.75); no reduction, a root and a factor of 1 is broadcast (gather's and scatter's are 7/8); no
    # reduction nor root and 7/8 is allgather, alltoall or alltoallv: not said
    for kind, answer in (("allreduce", "allreduce"), ("reduce_scatter", "reduce_scatter"), ("reduce", "reduce"),
                         ("sendrecv", "sendrecv"), ("allgather", None), ("broadcast", "broadcast"),
                         ("scatter", None), ("hypercube", "hypercube")):
        text, _ = print_log("2.13", kind, 8, [1 << e for e in range(10, 28)], 190.0)
        if answer is None:
            with pytest.raises(LogFormatError, match="does not name its program.*--collective"):
                read_logs(text)
        else:
            assert read_logs(text)[0]["collective"] == answer
    # on 2 ranks allreduce's factor is 1, sendrecv's too: both fit, so neither is said
    text, _ = print_log("2.13", "allreduce", 2, [1 << e for e in range(10, 28)], 190.0)
    with pytest.raises(LogFormatError, match="fit allreduce or sendrecv"):
        read_logs(text)


def test_a_garbled_row_in_the_middle_is_refused_with_its_line():
    text, _ = print_log("2.17", "allreduce", 8, [1 << e for e in range(10, 20)], 190.0)
    lines = text.splitlines()
    row = next(i for i, line in enumerate(lines) if line.strip().startswith("4096"))
    lines[row] = lines[row][:60] + lines[row][75:]  # a column lost mid-run
    with pytest.raises(LogFormatError, match=f"line {row + 1}: .*not read rather than read in part"):
        read_logs("\n".join(lines))


def test_busbw_read_from_another_column_is_refused_not_read():
    """The misread issue 50 found: a 2.0-2.12 log read as if it had the root column, busbw taken from the error
    column. Each row's algbw must be its size over its time, and its busbw algbw x the factor."""
    text, _ = print_log("2019", "allreduce", 8, [1 << e for e in range(10, 28)], 190.0)
    broken = re.sub(r"redop(\s+)time", r"redop  root\1time", text, count=1)  # a header that is not the rows'
    assert broken != text
    with pytest.raises(LogFormatError):
        read_logs(broken)
    fields_swapped = re.sub(r"(?m)^(\s+\d+\s+\d+\s+float\s+sum\s+)(\S+)\s+(\S+)\s+(\S+)",
                            lambda m: f"{m.group(1)}{m.group(2)}  {m.group(4)}  {m.group(3)}", text)
    with pytest.raises(LogFormatError, match="algbw .* is not size / time"):
        read_logs(fields_swapped, collective="allreduce")


def test_a_header_whose_hash_markdown_ate_and_lost_rank_zero_reads_ranks_from_busbw():
    text, rows = print_log("2.17", "allreduce", 16, [1 << e for e in range(10, 28)], 190.0)
    text = re.sub(r"(?m)^#  Rank  0 .*\n", "", text)
    text = MANGLES["hash_eaten"](text)
    got, = read_logs(text)
    assert (got["ranks"], got["ranks_from"]) == (16, "busbw / algbw")
    assert "ranks 1 to 15" in got["notes"][0]
    same_rows(got["rows"], rows)


def test_the_json_file_of_dash_J_reads_like_the_log():
    """nccl-tests 2.17+ writes its results as JSON with -J (src/util.cu: args, nccl_version, config.devices,
    results with out_of_place / in_place, average_bus_bandwidth)."""
    import json

    text, rows = print_log("2.17", "allgather", 4, [1 << e for e in range(10, 20)], 190.0)
    got_text, = read_logs(text)
    results = [{"size": r["bytes"], "count": r["count"], "type": r["dtype"], "redop": r["redop"],
                "root": "%6i" % r["root"],
                "out_of_place": {"time": r["time_s"] * 1e6, "alg_bw": r["algbw_Bps"] / 1e9,
                                 "bus_bw": r["busbw_Bps"] / 1e9, "nwrong": 0.0},
                "in_place": {"time": r["inplace_time_s"] * 1e6, "alg_bw": r["inplace_algbw_Bps"] / 1e9,
                             "bus_bw": r["inplace_busbw_Bps"] / 1e9, "nwrong": None},
                "actual_iterations": 20, "experiment_name": ""} for r in got_text["rows"]]
    data = {"version": 3, "start_time": "2025-11-03 10:00:00", "args": ["./build/all_gather_perf", "-b", "1K"],
            "env": [], "nccl_version": 22807,
            "config": {"nthreads": 1, "ngpus": 1, "devices": [
                {"rank": i, "group": 0, "pid": 4000 + i, "hostname": "node1", "device": i, "device_hex": "0000:19:00",
                 "device_info": "NVIDIA H100 80GB HBM3"} for i in range(4)]},
            "results": results, "out_of_bounds": {"count": 0, "okay": True},
            "average_bus_bandwidth": {"bandwidth": 12.5, "okay": "unchecked"}, "end_time": "2025-11-03 10:00:09"}
    got, = read_logs(json.dumps(data))
    assert (got["collective"], got["ranks"], got["nccl_version"]) == ("allgather", 4, "2.28.7")
    same_rows(got["rows"], rows)
    assert all(r["wrong"] == 0 and r["inplace_wrong"] is None for r in got["rows"])
    data["results"][3]["out_of_place"]["bus_bw"] *= 2  # busbw that is not algbw x 3/4
    with pytest.raises(LogFormatError, match="line 4: busbw"):
        read_logs(json.dumps(data))


def test_a_trace_replay_row_in_place_only_and_a_header_nccl_tests_itself_cut():
    """Trace replay prints in-place columns only, the out-of-place ones blank (writeBenchMarkLineNullBody); a
    process whose device lines pass 2048 characters has them cut with '...' (writeDeviceReport)."""
    text, rows = print_log("2.17", "allreduce", 8, [1 << e for e in range(10, 16)], 190.0)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s+\d+\s+\d+\s+float", line):
            fields = line.split()
            lines[i] = "  ".join(fields[:5]) + " " * 32 + "  ".join(fields[9:])
    lines.insert(next(j for j, line in enumerate(lines) if "Rank  5" in line), "...")
    got, = read_logs("\n".join(lines))
    row = next(r for r in got["rows"] if r["bytes"] == 4096)
    assert row["time_s"] is None and row["inplace_busbw_Bps"] == pytest.approx(rows[2]["inplace_busbw_Bps"])
    assert (got["ranks"], got["ranks_from"]) == (8, "busbw / algbw") and "cut" in got["notes"][0]
