"""Reading the standard NVIDIA tools' output into ringlab's own structures (``ringlab import``).

Engineers with GPU machines already have logs from the standard tools; read here, they plot, fit
and compare exactly as ringlab's own measurements do. Each reader takes the text a tool printed
and returns a dict with ``format`` and the numbers; :func:`read_log` detects the format.

Formats read now:

- nccl-tests ``*_perf`` (every collective): the size table with its out-of-place and in-place
  columns, ``#wrong`` (``N/A`` when the run did not check), the per-iteration columns of recent
  versions, the ``[0]`` / ``[1,0]<stdout>:`` prefixes that mpirun adds, the header's ranks,
  devices and versions, and the average bus bandwidth footer. Rows carry ``bytes``, ``count``,
  ``dtype``, ``time_s``, ``algbw_Bps``, ``busbw_Bps``, ``wrong`` and the same with ``inplace_``
  (None where the log has nothing), as ringlab's bench rows do (GB/s in the log is 1e9 bytes/s).
"""
from __future__ import annotations

import re

from ..schedule import bus_factor

GB = 1e9

# mpirun --tag-output ("[1,0]<stdout>:"), mpiexec -prepend-rank ("[0] "), srun --label ("0: ")
_RANK_PREFIX = re.compile(r"^(\[\d+(,\d+)?\](<stdout>|<stderr>)?:?\s?|\d+:\s)")
_PROGRAMS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
             "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
             "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}


class LogFormatError(ValueError):
    """The text is in none of the formats ringlab reads, or is broken within one."""


def _lines(text: str) -> list[str]:
    return [_RANK_PREFIX.sub("", line.rstrip("\n")) for line in text.splitlines()]


def _number(field: str) -> float | None:
    return None if field in ("N/A", "-", "nan") else float(field)


def looks_like_nccl_tests(text: str) -> bool:
    lines = _lines(text)
    return any(re.match(r"#\s+size\s+count\s+type\s+redop\s+root", line) for line in lines) or any(
        line.startswith("# nThread ") for line in lines)


def read_nccl_tests(text: str, collective: str | None = None) -> dict:
    """The rows, ranks, devices and versions of an nccl-tests ``*_perf`` log.

    ``collective`` names it when the log does not (versions before 2.14 print no program name);
    otherwise it comes from the log, or from the bus factor the log's own columns show.
    """
    lines = _lines(text)
    result = {"format": "nccl-tests", "collective": collective, "ranks": None, "devices": [], "nccl_version": None,
              "nccl_tests_version": None, "avg_busbw_Bps": None, "out_of_bounds": None, "rows": []}
    per_iteration = False
    for line in lines:
        if m := re.match(r"# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", line):
            result["nccl_tests_version"] = m.group(1)
            result["nccl_version"] = _nccl_code(int(m.group(3)))
        elif m := re.search(r"NCCL version (\d+\.\d+\.\d+\S*)", line):
            result["nccl_version"] = result["nccl_version"] or m.group(1)
        elif m := re.match(r"# Collective test starting: (\S+)", line):
            program = m.group(1).split("/")[-1].removesuffix("_perf").removesuffix("_mpi")
            result["collective"] = result["collective"] or _PROGRAMS.get(program, program)
        elif m := re.match(r"#\s+Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]+)\]\s+(.*)$",
                           line):
            result["devices"].append({"rank": int(m.group(1)), "host": m.group(4), "device": int(m.group(5)),
                                      "bus": m.group(6), "name": m.group(7).strip()})
        elif re.match(r"#\s+size\s+count\s+type\s+redop\s+root", line):
            per_iteration = "i_min" in line
        elif m := re.match(r"#\s*Avg bus bandwidth\s*:\s*(\S+)", line):
            result["avg_busbw_Bps"] = float(m.group(1)) * GB
        elif m := re.match(r"#\s*Out of bounds values\s*:\s*(\d+)", line):
            result["out_of_bounds"] = int(m.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            row = _nccl_row(line, per_iteration)
            if row is not None:
                result["rows"].append(row)
    if not result["rows"]:
        raise LogFormatError("an nccl-tests log without a single result row (was the run cut short?)")
    result["ranks"] = len({d["rank"] for d in result["devices"]}) or None
    if result["collective"] is None:
        result["collective"] = _collective_from_columns(result)
    return result


def _nccl_code(code: int) -> str:
    """NCCL's version code as its release name: 22703 -> 2.27.3 (2.9 and later), 2708 -> 2.7.8."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _nccl_row(line: str, per_iteration: bool) -> dict | None:
    fields = line.split()
    if len(fields) < 9 or not fields[0].isdigit() or not fields[1].isdigit():
        return None  # NCCL's own INFO/WARN lines, a timestamp, anything else
    size, count, dtype, redop, root = int(fields[0]), int(fields[1]), fields[2], fields[3], fields[4]
    rest = fields[5:]
    width = 8 if per_iteration else 4  # time algbw busbw #wrong (+ i_min i_max i_p99 i_cv%)
    sides = [rest[:4]] + ([rest[width:width + 4]] if len(rest) >= width + 4 else [])
    if len(sides) == 1 and len(rest) == 4:
        sides = [None, rest[:4]]  # trace replay: in place only, the out-of-place columns blank
    row = {"bytes": size, "count": count, "dtype": dtype, "redop": redop, "root": int(root)}
    for prefix, side in zip(("", "inplace_"), sides + [None] * (2 - len(sides))):
        time_us, algbw, busbw, wrong = (side or [None] * 4)
        row[f"{prefix}time_s"] = None if time_us is None else _number(time_us) * 1e-6
        row[f"{prefix}algbw_Bps"] = None if algbw is None else _number(algbw) * GB
        row[f"{prefix}busbw_Bps"] = None if busbw is None else _number(busbw) * GB
        row[f"{prefix}wrong"] = None if wrong in (None, "N/A") else int(float(wrong))
    return row


def _collective_from_columns(result: dict) -> str:
    """Which collective the rows are, from what the log shows: the reduction, the root, and busbw/algbw."""
    rows = [r for r in result["rows"] if r["algbw_Bps"] and r["busbw_Bps"]]
    n = result["ranks"]
    first = result["rows"][0]
    reduces = first["redop"] not in ("none", "-")
    rooted = first["root"] >= 0
    if rooted:
        return "reduce" if reduces else "broadcast"
    if not rows or n is None:
        raise LogFormatError("this nccl-tests log does not say which collective it ran; give it (--collective)")
    ratio = rows[-1]["busbw_Bps"] / rows[-1]["algbw_Bps"]
    candidates = ["allreduce", "reduce_scatter"] if reduces else ["allgather"]
    for kind in candidates:
        if abs(bus_factor(kind, n) - ratio) < 0.02 * max(ratio, 1):
            return kind
    raise LogFormatError(f"this nccl-tests log's busbw/algbw ({ratio:.3f}) fits no collective on {n} ranks; "
                         "give it (--collective)")


READERS = {"nccl-tests": (looks_like_nccl_tests, read_nccl_tests)}


def read_log(text: str, **options) -> dict:
    """Read ``text`` in whichever format it is; a LogFormatError names the formats tried."""
    for name, (looks, read) in READERS.items():
        if looks(text):
            return read(text, **options)
    raise LogFormatError(f"not a log ringlab can read (tried: {', '.join(READERS)}); the first line is "
                         f"{text.strip().splitlines()[0][:80]!r}" if text.strip() else "the log is empty")
