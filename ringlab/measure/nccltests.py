"""nccl-tests and rccl-tests output, in every layout they have printed, as people paste it.

The tables nccl-tests printed changed three times (its source, ``src/common.cu`` and ``src/util.cu``,
and each test's ``print_header`` before 2.13; rccl-tests, a fork, followed with a lag):

- **2017** (the first release): columns ``bytes N type [op] [root]``, then ``time algbw busbw res``
  out of place and in place; time in **milliseconds**, ``res`` the largest error. broadcast printed
  out of place only. Device lines ``#   Rank  0 on host device  0 [0x1b] Tesla P100``; the footer
  without ``#``.
- **2019 to 2022** (nccl-tests 2.0 to 2.12; rccl-tests until late 2022): each test printed its own
  columns: ``size count type`` and then ``redop`` (all_reduce, reduce_scatter, alltoall), nothing
  (all_gather, sendrecv, hypercube), ``root`` (broadcast, scatter, gather) or ``redop root``
  (reduce); time in microseconds; ``error`` (the largest error) until 2.12, ``#wrong`` after.
  Device lines with ``Pid``, without ``Group``.
- **2.13 on**: every test prints ``size count type redop root`` (``none`` / ``-1`` where they do not
  apply; hypercube prints an empty redop); ``#wrong``. 2.14 added the program line
  (``# Collective test starting: all_reduce_perf``), 2.17.4 the version line, 2.17.6 an optional
  timestamp after each row (``-T``), 2.19.2 per-iteration columns (``i_min i_max i_p99 i_cv%``);
  ``-C 1`` names the time column ``cputime``. rccl-tests can print in place only (``-O 0``).

Every row is read whole under one of these layouts, and checked: its algbw must be its size over its
time, and its busbw / algbw the collective's factor. A row that is neither is refused with its line
number, never half read. The last row of a run cut short (a run killed mid-line) is left out and said.

What people do to logs before they share them is undone: indentation and fences (markdown), a
launcher's prefix on every line (``[1,0]<stdout>:``, ``[0]``, ``0:``, Ray's ``(head, rank=0,
pid=...)``, timestamps), markdown tables, a header whose ``#`` markdown ate, rows grepped out of
their header, several runs one after the other. What the text no longer says is not guessed: the
collective comes from the program line or from ``collective=``, and from the columns only when they
leave one answer; the number of ranks from the device lines when every rank's line is there, else
from busbw / algbw.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from .logformat import GB, LogFormatError

# nccl-tests' program names (src/*.cu) and the collective each runs, in ringlab's names
PROGRAMS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
            "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "alltoallv": "alltoallv",
            "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
# busbw / algbw as each test's getBw computes it
FACTORS = {"allreduce": "2(n-1)/n", "allgather": "(n-1)/n", "reduce_scatter": "(n-1)/n", "alltoall": "(n-1)/n",
           "alltoallv": "(n-1)/n", "gather": "(n-1)/n", "scatter": "(n-1)/n", "broadcast": "1", "reduce": "1",
           "sendrecv": "1", "hypercube": "1"}
# what each collective prints in redop and root since 2.13 (sendrecv prints the reduction it was given)
_REDUCES = {"allreduce", "reduce_scatter", "reduce", "sendrecv"}
_ROOTED = {"broadcast", "reduce", "gather", "scatter"}
# the columns before the times, per collective, in the layouts before 2.13 (each test's own print_header)
_OLD_PREFIX = {"allreduce": ("redop",), "reduce_scatter": ("redop",), "alltoall": ("redop",), "allgather": (),
               "sendrecv": (), "hypercube": (), "broadcast": ("root",), "scatter": ("root",), "gather": ("root",),
               "reduce": ("redop", "root")}
OPS = {"sum", "prod", "max", "min", "avg", "mulsum", "premulsum", "none"}
_DTYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_INT = re.compile(r"-?\d+$")
_NUMBER = re.compile(r"-?((\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|inf|nan)$")
_STAMP = re.compile(r"\s+\d{4}-\d{2}-\d{2}(T|\s+)\d{2}:\d{2}:\d{2}\s*$")
# a line that starts like a result row: size, count, a type name
_ROW_START = re.compile(r"(?:^|[\s|:>\]\)])(\d+)\s*\|?\s+(\d+)\s*\|?\s+([A-Za-z_][A-Za-z0-9_]*)(?:\s|\||$)")
_NCCL_LINE = re.compile(r"\bNCCL (INFO|WARN|TRACE)\b|\bRCCL (INFO|WARN)\b")
# where NCCL's own line starts ("host:pid:tid [dev] NCCL INFO ..."), with a launcher's rank prefix glued before it
_NCCL_START = re.compile(r"(\[\d+(,\d+)?\](<std\w+>:)?)?\s*\S+:\d+:\d+ \[\d+\] [NR]CCL (INFO|WARN|TRACE)")
# the last field of a row's start glued to the host name NCCL's line begins with: a root, a reduction, a data type
_GLUED = re.compile(r"\s*(-?\d+|sum|prod|max|min|avg|mulsum|none|u?int(?:8|32|64)|half|float|double|bfloat16|f8e4m3|"
                    r"f8e5m2|char|int)(?=[A-Za-z][\w.-]*:\d+:\d+ \[)")
# a line of a row's later fields alone (time algbw busbw #wrong ...), as they follow NCCL's lines
_CONTINUES = re.compile(r"\s*((-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?|N/A|inf|nan)\*?\s*)+"
                        r"(\d{4}-\d{2}-\d{2}(T|\s+)\d{2}:\d{2}:\d{2}\s*)?$")  # (-T's timestamp ends a row)
_NAMES = {"bytes": "size", "N": "count", "op": "redop", "res": "wrong", "error": "wrong", "#wrong": "wrong",
          "cputime": "time"}
_SIDE_NAMES = ("time", "algbw", "busbw", "wrong", "i_min", "i_max", "i_p99", "i_cv%")


@dataclass(frozen=True)
class Layout:
    """One table layout: the columns before the times (``prefix``), one side's columns (``side``), which sides
    the table has (``sides``: out of place and in place, or one of them), the time's unit in seconds, whether
    the wrong column counts elements (``#wrong``) or is the largest error (``res``, ``error``), and whether a
    timestamp may follow."""

    name: str
    prefix: tuple = ("size", "count", "type", "redop", "root")
    side: tuple = ("time", "algbw", "busbw", "wrong")
    sides: tuple = ("", "inplace_")
    time_unit: float = 1e-6
    counts_wrong: bool = True
    blank_redop: bool = False  # a redop column printed blank (hypercube; alltoall before 2.13): one field fewer

    @property
    def width(self) -> int:
        return len(self.prefix) + len(self.side) * len(self.sides)


def layouts_for(collective: str | None) -> list[Layout]:
    """Every layout a log of ``collective`` (None: any) may be in, newest first."""
    kinds = [collective] if collective else list(_OLD_PREFIX)
    found = []
    for side, name in ((("time", "algbw", "busbw", "wrong"), "2.13+"), (_SIDE_NAMES, "2.19+ per-iteration")):
        for sides, how in ((("", "inplace_"), ""), (("inplace_",), ", in place only (rccl-tests -O 0)")):
            if len(side) > 4 and len(sides) == 1:
                continue  # per-iteration columns are nccl-tests' (2.19.2); in place only is rccl-tests'
            found.append(Layout(name + how, side=side, sides=sides))
    for kind in kinds:
        if kind not in _OLD_PREFIX:
            continue
        prefix = ("size", "count", "type") + _OLD_PREFIX[kind]
        found.append(Layout("2.0-2.12", prefix=prefix, counts_wrong=False))
        if kind in ("allreduce", "allgather", "broadcast", "reduce", "reduce_scatter"):
            found.append(Layout("2017", prefix=prefix, sides=("",) if kind == "broadcast" else ("", "inplace_"),
                                time_unit=1e-3, counts_wrong=False))
    found += [blank(layout) for layout in found if "redop" in layout.prefix]
    unique = []
    for layout in found:
        if all((layout.prefix, layout.side, layout.sides, layout.time_unit, layout.blank_redop) !=
               (u.prefix, u.side, u.sides, u.time_unit, u.blank_redop) for u in unique):
            unique.append(layout)
    return unique


def blank(layout: Layout) -> Layout:
    """``layout`` with its redop column printed blank (hypercube prints ""; alltoall did before 2.13)."""
    return Layout(layout.name + ", blank reduction", prefix=tuple(n for n in layout.prefix if n != "redop"),
                  side=layout.side, sides=layout.sides, time_unit=layout.time_unit, counts_wrong=layout.counts_wrong,
                  blank_redop=True)


def layout_of_header(names: list[str], above: str = "") -> Layout:
    """The layout a column header line names (``size count type redop root time algbw busbw #wrong ...``);
    ``above`` is the line over it (``out-of-place ... in-place``: which sides a one-sided table has)."""
    printed = [n for n in names if n != "timestamp"]
    names = [_NAMES.get(n, n) for n in printed]
    if "time" not in names:
        raise LogFormatError(f"a column header without a time column: {' '.join(printed)!r}")
    first = names.index("time")
    prefix, rest = tuple(names[:first]), names[first:]
    starts = [i for i, n in enumerate(rest) if n == "time"] + [len(rest)]
    sides = [tuple(rest[a:b]) for a, b in zip(starts, starts[1:])]
    if prefix[:3] != ("size", "count", "type") or any(n not in ("redop", "root") for n in prefix[3:]) \
            or not 1 <= len(sides) <= 2 or len(set(sides)) != 1 or sides[0][:4] != ("time", "algbw", "busbw", "wrong") \
            or any(n not in _SIDE_NAMES for n in sides[0]):
        raise LogFormatError(f"a column header ringlab does not know: {' '.join(printed)!r}")
    if len(sides) == 2:
        which = ("", "inplace_")
    else:
        which = ("inplace_",) if "in-place" in above and "out-of-place" not in above else ("",)
    first_release = printed[:2] == ["bytes", "N"]  # 2017: time in ms, "res" the largest error
    name = ("2017" if first_release else "2.0-2.12" if "#wrong" not in printed or prefix[3:] != ("redop", "root")
            else "2.19+ per-iteration" if "i_min" in names else "2.13+" + (
                ", in place only (rccl-tests -O 0)" if which == ("inplace_",) else ""))
    return Layout(name, prefix=prefix, side=sides[0], sides=which,
                  time_unit=1e-3 if first_release else 1e-6, counts_wrong="#wrong" in printed)


@dataclass
class Run:
    """What one run's lines said, as they are read."""

    header: dict = field(default_factory=dict)
    devices: list = field(default_factory=list)
    layout: Layout | None = None
    header_line: int | None = None
    rows: list = field(default_factory=list)   # (line number, fields)
    broken: list = field(default_factory=list)  # (line number, text)
    hash_stripped: bool = False
    elided: bool = False  # a "..." where someone cut lines out of the header

    @property
    def started(self) -> bool:
        return bool(self.rows or self.broken)


def payload(line: str) -> str:
    """A line without what people and launchers put around nccl-tests' own: markdown's quote, list and table
    marks, fences; mpirun's ``[1,0]<stdout>:``, mpiexec's ``[0]``, srun's ``0:``, Ray's ``(name, rank=0,
    pid=1)``, a leading timestamp. What is left may still carry a prefix a row's fields are read past."""
    text = line.rstrip("\r\n")
    text = re.sub(r"^\s*(>\s*)+", "", text)
    text = re.sub(r"^\s*\[\d+(,\d+)?\](<stdout>|<stderr>)?:?\s?", "", text)
    text = re.sub(r"^\s*\([^()]*\b(pid|rank)=\d+[^()]*\)\s?", "", text)
    text = re.sub(r"^\s*\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?\s+", "", text)
    text = re.sub(r"^\s*\d+:\s", "", text)
    if text.count("|") >= 5:  # a markdown table
        text = " ".join(cell.strip() for cell in text.strip().strip("|").split("|"))
    return text


def _value(text: str) -> float | None:
    if text in ("N/A", "-", "nan"):
        return None
    text = text.rstrip("*")  # rccl-tests marks errors over its threshold with an asterisk
    if not _NUMBER.match(text):
        raise ValueError(f"{text!r} is not a number")
    return float(text)


def parse_row(fields: list[str], layout: Layout) -> dict:
    """One row's fields (the last ``layout.width`` of them) read under ``layout``; ValueError if they are not
    such a row. What came before them on the line (a launcher's prefix) is ignored."""
    if len(fields) < layout.width:
        raise ValueError(f"{len(fields)} fields where the layout has {layout.width}")
    fields = fields[len(fields) - layout.width:]
    head = dict(zip(layout.prefix, fields))
    if not (head["size"].isdigit() and head["count"].isdigit() and _DTYPE.match(head["type"])):
        raise ValueError("no size, count and type where they belong")
    if "redop" in head and head["redop"] not in OPS:
        raise ValueError(f"{head['redop']!r} is no reduction nccl-tests names")
    if "root" in head and not _INT.match(head["root"]):
        raise ValueError(f"root {head['root']!r} is no integer")
    row = {"bytes": int(head["size"]), "count": int(head["count"]), "dtype": head["type"],
           "redop": "" if layout.blank_redop else head.get("redop", "none"), "root": int(head.get("root", -1))}
    body = fields[len(layout.prefix):]
    width = len(layout.side)
    for prefix in ("", "inplace_"):
        for key in ("time_s", "algbw_Bps", "busbw_Bps", "wrong"):
            row[prefix + key] = None
    for i, prefix in enumerate(layout.sides):
        side = dict(zip(layout.side, body[i * width:(i + 1) * width]))
        time, algbw, busbw = (_value(side[k]) for k in ("time", "algbw", "busbw"))
        if time is None or algbw is None or busbw is None:
            raise ValueError("a time or bandwidth printed as N/A")
        if "i_min" in side:
            low, high, p99 = (_value(side[k]) for k in ("i_min", "i_max", "i_p99"))
            _value(side["i_cv%"])
            if None not in (low, high, p99) and not low <= p99 <= high:
                raise ValueError(f"per-iteration times out of order (i_min {low:g}, i_p99 {p99:g}, i_max {high:g})")
        wrong = _value(side["wrong"])
        row[prefix + "time_s"] = time * layout.time_unit
        row[prefix + "algbw_Bps"] = algbw * GB
        row[prefix + "busbw_Bps"] = busbw * GB
        if layout.counts_wrong:
            row[prefix + "wrong"] = None if wrong is None else int(wrong)
        else:
            row[prefix + "wrong"] = None
            row[prefix + "max_error"] = wrong
        _check_algbw(row, prefix, side["time"], side["algbw"], layout)
    return row


def _decimals(text: str) -> int:
    mantissa = text.lower().split("e")[0]
    return len(mantissa.split(".")[1]) if "." in mantissa else 0


def _check_algbw(row: dict, prefix: str, time_text: str, algbw_text: str, layout: Layout) -> None:
    """algbw is size / time as nccl-tests printed both: a row whose columns are not what the layout says
    (a misread) fails here."""
    time = row[prefix + "time_s"]
    if time <= 0:
        if row[prefix + "algbw_Bps"] == float("inf") or row["bytes"] == 0:
            return  # nothing measurable: printf's inf (or nan for 0 bytes)
        raise ValueError("a time of zero beside a finite algbw")
    if "e" in time_text.lower() or "e" in algbw_text.lower():
        return  # %.1e: too few digits to check
    half = 0.5 * 10 ** -_decimals(time_text) * (time / float(time_text))  # half the last digit, in seconds
    algbw = row[prefix + "algbw_Bps"] / GB
    slack = 0.5 * 10 ** -_decimals(algbw_text)
    low = row["bytes"] / (time + half) / GB * (1 - 1e-6)
    high = row["bytes"] / (time - half) / GB * (1 + 1e-6) if time > half else math.inf
    if not low - slack <= algbw <= high + slack:
        unit = "us" if layout.time_unit == 1e-6 else "ms"
        raise ValueError(f"algbw {algbw:g} GB/s is not size / time ({row['bytes']} B / {float(time_text):g} {unit} "
                         f"= {row['bytes'] / time / GB:.4g} GB/s)")


def row_fields(text: str) -> list[str]:
    """The whitespace-separated fields of a row's line, a trailing timestamp (``-T``) taken off."""
    return _STAMP.sub("", text).split()


def starts_a_row(text: str) -> bool:
    return bool(_ROW_START.search(text)) and not _NCCL_LINE.search(text)


def factor(collective: str, n: int) -> float:
    return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[FACTORS[collective]]


def ranks_from_ratio(collective: str, ratio: float, tolerance: float) -> range:
    """The rank counts (1 to 65536) whose busbw / algbw for ``collective`` is ``ratio`` within ``tolerance``
    (for a factor of 1, every count: ``range(0, 65537)`` when ``ratio`` is 1, else none)."""
    kind = FACTORS[collective]
    if kind == "1":
        return range(0, 65537) if abs(ratio - 1) <= tolerance else range(0)
    top = 2 if kind == "2(n-1)/n" else 1  # factor = top * (1 - 1/n)
    low, high = (ratio - tolerance) / top, (ratio + tolerance) / top  # bounds on 1 - 1/n
    first = 1 if low <= 0 else math.ceil(1 / (1 - low) - 1e-9) if low < 1 else 65537
    last = 65536 if high >= 1 else math.floor(1 / (1 - high) + 1e-9)
    return range(max(first, 1), min(last, 65536) + 1)


_VERSION = re.compile(r"nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
_PROGRAM = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"Collective test concluded:")
_THREADS = re.compile(r"\bnThread\s+(\d+)\s+nGpus\s+(\d+)\s+minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_LIBRARY = re.compile(r"\b(NCCL|RCCL) version\s*:?\s*(\d+\.\d+\.\d+[^\s,]*)")
_ELISION = re.compile(r"\s*(#\s*)?(\.\.\.+|…|\[\.\.\.\]|\(\.\.\.\)|<snip>|\[snip\])\s*$")
_DEVICE = re.compile(r"(?:^|#|\s)\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+"
                     r"\[([^\]]*)\]\s*(.*?)\s*$")
_COLUMNS = re.compile(r"(?:^|#|\s)\s*((?:size|bytes)\s+(?:count|N)\s+type\b.*?\b(?:time|cputime)\b.*)$")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_BOUNDS = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_CYCLE = re.compile(r"#\s*Testing \d+ cycle")
# a shell line that starts a test: "./build/all_reduce_perf -b 8 ...", "mpirun -np 16 ... all_gather_perf_mpi ..."
_COMMAND = re.compile(r"(?:^|[\s/=])((?:%s)_perf(?:_mpi)?)(?:\.exe)?(?=\s|$)" % "|".join(PROGRAMS))


def program_collective(program: str) -> str | None:
    """The collective a program name runs: ``/opt/nccl-tests/build/all_reduce_perf_mpi`` -> allreduce."""
    name = re.split(r"[/\\]", program)[-1].removesuffix(".exe")
    name = re.sub(r"(_perf)?(_mpi)?$", "", name)
    return PROGRAMS.get(name)


def split_runs(text: str) -> list[Run]:
    """The runs in ``text``, each with its header items and its rows' fields (not yet read)."""
    runs = [Run()]
    previous = ""
    pending: list = []  # [(line, fields), run]: a row NCCL's INFO lines broke into, its fields still coming
    for number, raw in enumerate(text.splitlines(), 1):
        line = payload(raw)
        run = runs[-1]
        hashed = "#" in line

        def fresh(copy: bool = False) -> Run:
            kept = {k: v for k, v in run.header.items() if k not in ("closed", "avg_busbw", "out_of_bounds")}
            new = Run(header=kept, devices=list(run.devices), layout=run.layout, hash_stripped=run.hash_stripped,
                      elided=run.elided) if copy else Run()
            runs.append(new)
            return new

        if pending and not (_NCCL_LINE.search(line) or _CONTINUES.match(line)):
            pending.pop().rows.append(pending.pop())  # the broken row is whole, or as whole as it gets
        if _NCCL_LINE.search(line):
            start = _NCCL_START.search(line)
            head = line[:start.start()] if start else ""
            if start and (glued := _GLUED.match(start.group(0))):
                head += " " + glued.group(1)  # "-1node1:40:40 [0] NCCL INFO": the row's last field, NCCL's line
            if head.strip() and starts_a_row(head):  # a row NCCL's own output broke into: its fields follow later
                if pending:
                    pending.pop().rows.append(pending.pop())
                pending[:] = [(number, row_fields(head)), run]
            if m := _LIBRARY.search(line):
                run.header.setdefault("library", m.group(1))
                run.header.setdefault("library_version", m.group(2))
            if network := _network(line):
                run.header.setdefault("network", network)
            if m := re.search(r"\bnranks\s+(\d+)", line):
                run.header.setdefault("nranks_info", int(m.group(1)))
            continue
        if pending and _CONTINUES.match(line):
            pending[0][1].extend(row_fields(line))
            continue
        if m := _VERSION.search(line):
            run = fresh() if run.started or "tests_version" in run.header else run
            run.header.update(tests_version=m.group(1), library_code=int(m.group(3)))
        elif m := _PROGRAM.search(line):
            run = fresh() if run.started or "program" in run.header else run
            run.header["program"] = m.group(1)
        elif m := _THREADS.search(line):
            run = fresh() if run.started or "threads" in run.header else run
            run.header.update(threads=int(m.group(1)), gpus_per_thread=int(m.group(2)), min_bytes=int(m.group(3)),
                              max_bytes=int(m.group(4)))
        elif m := _LIBRARY.search(line):
            run.header.setdefault("library", m.group(1))
            run.header.setdefault("library_version", m.group(2))
        elif m := _DEVICE.search(line):
            if run.started:
                run = fresh()
            run.devices.append({"rank": int(m.group(1)), "host": m.group(4), "device": int(m.group(5)),
                                "bus": m.group(6), "name": m.group(7).strip()})
        elif m := _COLUMNS.search(line):
            if run.started:
                run = fresh(copy=True)
            run.layout = layout_of_header(m.group(1).split(), above=previous)
            run.header_line = number
        elif m := _AVG.search(line):
            run.header["avg_busbw"] = float(m.group(1)) if _NUMBER.match(m.group(1)) else None
        elif m := _BOUNDS.search(line):
            run.header["out_of_bounds"] = int(m.group(1))
        elif _CONCLUDED.search(line) or _CYCLE.search(line):
            if run.started or _CONCLUDED.search(line):
                run.header["closed"] = True
        elif _ELISION.match(line):
            run.elided = run.elided or not run.started  # "..." where lines were cut: before the rows, device lines
        elif m := _COMMAND.search(line):
            program = m.group(1)
            if run.started or run.header.get("program") or run.header.get("command"):
                run = fresh()
            run.header["command"] = program
        elif starts_a_row(line):
            if run.header.get("closed"):
                run = fresh(copy=_CYCLE.search(previous) is not None)
            run.rows.append((number, row_fields(line)))
            hashed = True
        else:
            hashed = True
        if not hashed and line.strip():
            run.hash_stripped = True
        previous = line
    if pending:
        pending.pop().rows.append(pending.pop())
    return [run for run in runs if run.rows or run.broken or run.header]


def _network(line: str) -> str | None:
    """The fabric an NCCL_DEBUG=INFO line says NCCL's network runs on: efa (AWS's plugin, aws-ofi-nccl, on EFA),
    ib or roce (NCCL's own IB transport, by the link layer of the devices it lists); None for other lines."""
    if re.search(r"NET/OFI Selected [Pp]rovider is efa\b|Using network AWS Libfabric", line):
        return "efa"
    if re.search(r"NET/OFI Selected [Pp]rovider is cxi\b", line):
        return "slingshot"  # libfabric's cxi provider: HPE Slingshot (aws-ofi-nccl on Cray EX systems)
    if m := re.search(r"NET/IB : Using\b.*?/(IB|RoCE)\b", line):
        return "ib" if m.group(1) == "IB" else "roce"
    return None


def nccl_code(code: int) -> str:
    """NCCL's version code as its release name: 22703 -> 2.27.3 (2.9 and later), 2708 -> 2.7.8."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _read_rows(run: Run, layouts: list[Layout]) -> tuple[list[Layout], list[tuple[int, dict]], list[dict]]:
    """(the layouts that read all of a run's rows, and read them alike; (line, row) for every row; rows left
    out); a LogFormatError naming the line where none does, or where two read them differently."""
    readings = []
    for layout in layouts:
        rows, left, why = [], [], None
        for i, (number, fields) in enumerate(run.rows):
            try:
                rows.append((number, parse_row(fields, layout)))
            except ValueError as err:
                last = i == len(run.rows) - 1
                if last and len(fields) < layout.width:
                    left.append({"line": number, "text": " ".join(fields)[:120]})
                else:
                    why = (number, fields, str(err))
                    break
        readings.append((layout, rows, left, why))
    good = [r for r in readings if r[3] is None and r[1]]
    if not good:
        layout, rows, left, (number, fields, err) = max(readings, key=lambda r: (len(r[1]), -readings.index(r)))
        said = " ".join(fields)
        how = (f"the {layout.name} layout ({' '.join(layout.prefix)} + {len(layout.sides)} x "
               f"{' '.join(layout.side)})")
        raise LogFormatError(f"line {number}: {said[:100]!r} is no result row of {how}: {err}. "
                             + ("Is the line garbled? The log is not read rather than read in part."
                                if run.layout else "Without the column header line (size count type ...), the "
                                "rows' layout is guessed from its fields; paste the log with its header."))
    keyed = {}
    for layout, rows, left, _ in good:
        key = tuple((n, r["bytes"], r["time_s"], r["busbw_Bps"], r["inplace_time_s"], r["inplace_busbw_Bps"])
                    for n, r in rows)
        keyed.setdefault(key, ([], rows, left))[0].append(layout)
    if len(keyed) > 1:
        names = ", ".join(group[0][0].name for group in keyed.values())
        raise LogFormatError(f"these rows read differently under the layouts of nccl-tests {names}, and the log has "
                             "no column header to tell which; paste the log with its header (size count type ...)")
    return next(iter(keyed.values()))


def _segments(rows: list[tuple[int, dict]]) -> list[list[tuple[int, dict]]]:
    """Rows cut where sizes start again within one series (a second run pasted without its header, or
    rccl-tests' stress cycles); a new data type, reduction or root in the same table is the same run."""
    out = [[]]
    for number, row in rows:
        if out[-1]:
            last = out[-1][-1][1]
            same = (last["dtype"], last["redop"], last["root"]) == (row["dtype"], row["redop"], row["root"])
            if same and row["bytes"] < last["bytes"]:  # equal sizes repeat where -b is below a type's size
                out.append([])
        out[-1].append((number, row))
    return out


def _rounding(value: float) -> float:
    """How far printing may have moved a bandwidth: getFloatStr's half of a last digit (two decimals below
    1000, one below 10000; older versions printed two always)."""
    return 0.005 if value < 999.995 else 0.05 if value < 9999.95 else 0.5


def _ratio(rows: list[dict]) -> tuple[float, float] | None:
    """(busbw / algbw, how far printing's rounding may move it) from the row that has the most digits to say."""
    best = None
    for r in rows:
        for prefix in ("", "inplace_"):
            algbw, busbw = r[prefix + "algbw_Bps"], r[prefix + "busbw_Bps"]
            if algbw is None or busbw is None or not (math.isfinite(algbw) and math.isfinite(busbw)) or algbw <= 0:
                continue
            a, b = algbw / GB, busbw / GB
            da, db = _rounding(a) * 1.01, _rounding(b) * 1.01
            high = (b + db) / (a - da) if a > da else math.inf
            slack = max(b / a - max(b - db, 0) / (a + da), high - b / a)
            if best is None or slack < best[1]:
                best = (b / a, slack)
    return best


def _ranks_of_devices(devices: list[dict]) -> int | None:
    """How many ranks the device lines show: every rank 0..n-1 once each, or None where some are missing."""
    ranks = sorted({d["rank"] for d in devices})
    return len(ranks) if ranks and ranks == list(range(len(ranks))) else None


def _candidates(layouts: list[Layout], rows: list[dict]) -> set[str]:
    """The collectives a run's columns and values leave possible, before busbw / algbw is looked at: since 2.13
    the reduction and root say which family (``none``: no reduction; ``-1``: no root; blank: hypercube);
    before, the columns each test printed. The union over ``layouts``, which all read the rows alike."""
    roots = {r["root"] for r in rows}
    found = set()
    for layout in layouts:
        prefix = layout.prefix[3:]
        if layout.blank_redop:
            found |= {"hypercube"} if "root" in prefix else {"alltoall"}
        elif prefix == ("redop", "root"):
            reduces = bool({r["redop"] for r in rows} - {"none"})
            found |= ((_ROOTED if roots != {-1} else set(FACTORS) - _ROOTED)
                      & (_REDUCES if reduces else set(FACTORS) - _REDUCES)) - {"hypercube"}
        else:
            old = {k for k, p in _OLD_PREFIX.items() if p == prefix}
            found |= old - _ROOTED if roots == {-1} else old & _ROOTED
    return found


def read_run(run: Run, collective: str | None = None) -> list[dict]:
    """One run's results: usually one, more where its sizes start again (see :func:`_segments`)."""
    program = run.header.get("program") or run.header.get("command")
    named = program_collective(program) if program else None
    if program and named is None:
        raise LogFormatError(f"the log's program {program!r} is no nccl-tests or rccl-tests program ringlab knows "
                             f"({', '.join(p + '_perf' for p in PROGRAMS)})")
    if collective and named and collective != named:
        raise LogFormatError(f"the log says it ran {program}, which is {named}, not the {collective} given")
    kind = collective or named
    if collective and collective not in FACTORS:
        raise LogFormatError(f"unknown collective {collective!r}; nccl-tests runs {', '.join(FACTORS)}")
    if not run.rows:
        raise LogFormatError("an nccl-tests log without a single result row (was the run cut short?)")
    layouts = [run.layout] if run.layout else layouts_for(kind)
    if run.layout and "redop" in run.layout.prefix:
        layouts.append(blank(run.layout))  # one field fewer than the header's names: a blank reduction
    if run.layout and len(run.layout.sides) == 2:  # trace replay: the out-of-place columns printed blank
        layouts.append(Layout(run.layout.name + ", in place only (trace replay)", prefix=run.layout.prefix,
                              side=run.layout.side, sides=("inplace_",), time_unit=run.layout.time_unit,
                              counts_wrong=run.layout.counts_wrong))
    found, rows, left = _read_rows(run, layouts)
    segments = _segments(rows)
    out = [_result(run, found, segment, left if i == len(segments) - 1 else [], kind,
                   "given" if collective else "program line" if run.header.get("program") else
                   "command line" if named else None) for i, segment in enumerate(segments)]
    if left and out:
        out[-1]["left_out"] = left
    return out


def _result(run: Run, layouts: list[Layout], numbered: list, left: list, kind: str | None, source: str | None) -> dict:
    rows = [r for _, r in numbered]
    header = run.header
    devices_ranks = None if run.elided else _ranks_of_devices(run.devices)
    ratio = _ratio(rows)
    notes = []
    if run.devices and run.elided:
        notes.append(f"the header was cut ('...'): its {len(run.devices)} device lines do not say how many ranks ran")
    elif run.devices and devices_ranks is None:
        shown = sorted({d["rank"] for d in run.devices})
        notes.append(f"the device lines show ranks {_span(shown)}, not every rank from 0: some were lost "
                     "(a header whose '#' markdown ate?), so they do not say how many ranks ran")
    if kind is None:
        possible = _candidates(layouts, rows)
        if ratio is not None:
            possible = {k for k in possible if _fits(k, ratio, devices_ranks)}
        if len(possible) != 1:
            said = " or ".join(sorted(possible)) if possible else "no collective nccl-tests runs"
            seen = f"busbw / algbw = {ratio[0]:.3f}" if ratio else "no busbw / algbw with the digits to tell"
            raise LogFormatError(f"this log does not name its program, and its rows fit {said} ({seen}"
                                 + (f" on {devices_ranks} ranks" if devices_ranks else "")
                                 + "); give the collective (--collective)")
        kind, source = possible.pop(), "columns"
    ranks, ranks_from = devices_ranks, "device lines" if devices_ranks else None
    if ratio is not None and FACTORS[kind] != "1":
        fits = ranks_from_ratio(kind, ratio[0], ratio[1])
        if devices_ranks and devices_ranks not in fits:
            raise LogFormatError(f"the device lines show {devices_ranks} ranks, but busbw / algbw = {ratio[0]:.3f} "
                                 f"is {kind}'s factor {FACTORS[kind]} on {_span(list(fits)[:64]) or 'no number of'} ranks: "
                                 "the rows are not this run's, or the collective is not " + kind)
        if not devices_ranks and len(fits) == 1:
            ranks, ranks_from = fits[0], "busbw / algbw"
    if ranks is None and header.get("nranks_info"):
        ranks, ranks_from = header["nranks_info"], "NCCL's INFO lines"
    for number, row in numbered:
        _check_factor(number, row, kind, ranks)
    library = header.get("library_version")
    if library is None and header.get("library_code"):
        library = nccl_code(header["library_code"])
    amd = header.get("library") == "RCCL" or any(re.search(r"Instinct|\bMI\d{3}|gfx\d", d["name"])
                                                  for d in run.devices) or "rccl" in (header.get("program") or "")
    return {"format": "nccl-tests", "tool": "rccl-tests" if amd else "nccl-tests", "collective": kind,
            "collective_from": source, "program": header.get("program"), "ranks": ranks, "ranks_from": ranks_from,
            "devices": run.devices, "nccl_version": library, "nccl_tests_version": header.get("tests_version"),
            "threads": header.get("threads"), "gpus_per_thread": header.get("gpus_per_thread"),
            "avg_busbw_Bps": None if header.get("avg_busbw") is None else header["avg_busbw"] * GB,
            "out_of_bounds": header.get("out_of_bounds"), "network": header.get("network"),
            "layout": layouts[0].name, "rows": rows, "left_out": left, "notes": notes,
            "first_line": numbered[0][0] if numbered else None}


def _span(ranks: list[int]) -> str:
    if not ranks:
        return ""
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]} to {ranks[-1]}" if ranks == list(
        range(ranks[0], ranks[-1] + 1)) else ", ".join(map(str, ranks))


def _fits(kind: str, ratio: tuple[float, float], ranks: int | None) -> bool:
    if FACTORS[kind] == "1":
        return abs(ratio[0] - 1) <= ratio[1]
    fits = ranks_from_ratio(kind, *ratio)
    return bool(fits) and (ranks is None or ranks in fits)


def _check_factor(number: int, row: dict, kind: str, ranks: int | None) -> None:
    """busbw is algbw x the collective's factor (on the run's ranks, where known), as printed: else the columns
    are not what they seem."""
    if FACTORS[kind] != "1" and ranks is None:
        return
    want = factor(kind, ranks) if ranks else 1.0
    for prefix in ("", "inplace_"):
        algbw, busbw = row[prefix + "algbw_Bps"], row[prefix + "busbw_Bps"]
        if algbw is None or not (math.isfinite(algbw) and math.isfinite(busbw)):
            continue
        a, b = algbw / GB, busbw / GB
        if abs(b - a * want) > (_rounding(b) + want * _rounding(a)) * 1.01 + 1e-9:
            raise LogFormatError(f"line {number}: busbw {b:g} GB/s is not algbw {a:g} x {kind}'s factor "
                                 f"{FACTORS[kind]} = {a * want:.4g}" + (f" on {ranks} ranks" if ranks else "")
                                 + ": the columns are not what they seem, or the log's collective is another")


def read_json(text: str, collective: str | None = None) -> list[dict]:
    """The JSON file nccl-tests 2.17+ writes with ``-J FILE`` (src/util.cu: version, args, nccl_version, config
    with its devices, results, out_of_bounds, average_bus_bandwidth), as one result like a log's."""
    import json

    try:
        data = json.loads(text)
    except ValueError as err:
        raise LogFormatError(f"an nccl-tests JSON file that is not JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise LogFormatError("an nccl-tests JSON file without its results list")
    args = data.get("args") or []
    program = args[0] if args and isinstance(args[0], str) else None
    named = program_collective(program) if program else None
    if collective and named and collective != named:
        raise LogFormatError(f"the file says it ran {program}, which is {named}, not the {collective} given")
    kind = collective or named
    if kind not in FACTORS:
        raise LogFormatError(f"this nccl-tests JSON does not say which collective it ran (args: {args[:1]}); give it "
                             "(--collective)")
    config = data.get("config") or {}
    devices = [{"rank": d.get("rank"), "host": d.get("hostname"), "device": d.get("device"),
                "bus": d.get("device_hex"), "name": (d.get("device_info") or "").strip()}
               for d in config.get("devices") or [] if isinstance(d, dict)]
    ranks = _ranks_of_devices(devices)
    rows = []
    for i, r in enumerate(data["results"]):
        try:
            row = {"bytes": int(r["size"]), "count": int(r["count"]), "dtype": r["type"], "redop": r["redop"],
                   "root": int(str(r["root"]).strip())}
            for prefix, key in (("", "out_of_place"), ("inplace_", "in_place")):
                side = r.get(key) or {}
                time = side.get("time", side.get("cpu_time"))
                row[prefix + "time_s"] = None if time is None else float(time) * 1e-6
                for name, field_ in (("algbw_Bps", "alg_bw"), ("busbw_Bps", "bus_bw")):
                    row[prefix + name] = None if side.get(field_) is None else float(side[field_]) * GB
                row[prefix + "wrong"] = None if side.get("nwrong") is None else int(side["nwrong"])
        except (KeyError, TypeError, ValueError) as err:
            raise LogFormatError(f"result {i + 1} of this nccl-tests JSON is not as nccl-tests writes it "
                                 f"({type(err).__name__}: {err})") from None
        _check_factor(i + 1, row, kind, ranks)
        rows.append(row)
    if not rows:
        raise LogFormatError("an nccl-tests JSON file without a single result (was the run cut short?)")
    code = data.get("nccl_version")
    average = (data.get("average_bus_bandwidth") or {}).get("bandwidth")
    return [{"format": "nccl-tests", "tool": "nccl-tests", "collective": kind,
             "collective_from": "given" if collective else "program line", "program": program, "ranks": ranks,
             "ranks_from": "device lines" if ranks else None, "devices": devices,
             "nccl_version": nccl_code(code) if isinstance(code, int) else None, "nccl_tests_version": None,
             "threads": config.get("nthreads"), "gpus_per_thread": config.get("ngpus"),
             "avg_busbw_Bps": None if average is None else float(average) * GB,
             "out_of_bounds": (data.get("out_of_bounds") or {}).get("count"), "network": None,
             "layout": f"JSON (-J), version {data.get('version')}", "rows": rows, "left_out": [], "notes": [],
             "first_line": 1}]


def is_json(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith("{") and '"args"' in text[:1 << 20] and '"results"' in text


def read(text: str, collective: str | None = None) -> list[dict]:
    """Every run in ``text`` (nccl-tests or rccl-tests output, as pasted, or nccl-tests' ``-J`` JSON), one
    result each."""
    if is_json(text):
        return read_json(text, collective)
    runs = split_runs(text)
    if not any(run.rows for run in runs):
        raise LogFormatError("an nccl-tests log without a single result row (was the run cut short?)")
    runs = [run for run in runs if run.rows]
    given = collective.split(",") if isinstance(collective, str) and "," in collective else (
        list(collective) if isinstance(collective, (list, tuple)) else [collective] * len(runs))
    if len(given) != len(runs):
        raise LogFormatError(f"{len(given)} collectives given for the {len(runs)} runs this log holds (their rows start "
                             f"on lines {', '.join(str(run.rows[0][0]) for run in runs)}); give one per run, in order")
    found = []
    for i, (run, kind) in enumerate(zip(runs, given)):
        try:
            found += read_run(run, kind.strip() if kind else None)
        except LogFormatError as err:
            if len(runs) == 1:
                raise
            raise LogFormatError(f"run {i + 1} of {len(runs)} (rows from line {run.rows[0][0]}): {err}"
                                 + ("" if "--collective" not in str(err) else
                                    "; for several runs give one each, in order: --collective A,B,...")) from None
    return found


def looks_like(text: str) -> bool:
    """Whether ``text`` holds nccl-tests output: its header, or rows in one of its layouts."""
    head = text[:200000]
    if is_json(text):
        return True
    if re.search(r"#?\s*(nThread\s+\d+\s+nGpus|Collective test starting|nccl-tests version)", head):
        return True
    if _COLUMNS.search(head.replace("\r", "")) or re.search(r"(?m)(size|bytes)\s+(count|N)\s+type\b.*\btime\b", head):
        return True
    lines = [payload(line) for line in head.splitlines()]
    starts = [line for line in lines if starts_a_row(line)]
    return len(starts) >= 2 and any(_parses(row_fields(line)) for line in starts[:5])


def _parses(fields: list[str]) -> bool:
    for layout in layouts_for(None):
        try:
            parse_row(fields, layout)
            return True
        except ValueError:
            continue
    return False
