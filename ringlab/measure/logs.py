"""Reading the standard NVIDIA tools' output into ringlab's own structures (``ringlab import``).

Engineers with GPU machines already have logs from the standard tools; read here, they plot, fit
and compare exactly as ringlab's own measurements do. Each reader takes the text a tool printed
and returns a dict with ``format`` and the numbers; :func:`read_log` detects the format.

Formats read now:

- nccl-tests ``*_perf`` (every collective): the size table with its out-of-place and in-place
  columns, ``#wrong`` (``N/A`` when the run did not check), the per-iteration columns of recent
  versions, the ``[0]`` / ``[1,0]<stdout>:`` prefixes that mpirun adds, the header's ranks,
  devices, versions, threads and GPUs a thread (``-t``, ``-g``), and the average bus bandwidth
  footer. Rows carry ``bytes``, ``count``, ``dtype``, ``time_s``, ``algbw_Bps``, ``busbw_Bps``,
  ``wrong`` and the same with ``inplace_`` (None where the log has nothing), as ringlab's bench rows
  do (GB/s in the log is 1e9 bytes/s).
- cuda-samples ``p2pBandwidthLatencyTest``: the devices, the connectivity matrix, and the
  bandwidth (GB/s) and latency (us) matrices with P2P off and on, as ``matrices`` with keys
  ``unidirectional_disabled``, ``unidirectional_enabled``, ``bidirectional_disabled``,
  ``bidirectional_enabled``, ``latency_gpu_disabled``, ``latency_gpu_enabled``,
  ``latency_cpu_disabled``, ``latency_cpu_enabled`` (row = source GPU); with ``--p2p_read`` the
  enabled ones are the reads' and ``p2p_method`` says so.
- cuda-samples ``bandwidthTest``: host to device, device to host and device to device, pinned or
  pageable, quick, range or shmoo mode, and its ``--csv`` lines; rows of ``direction``, ``memory``,
  ``bytes``, ``Bps`` (MB/s in old versions' logs is read as such).
- ``nvbandwidth``, its text output and its JSON (``-j``): versions, devices, and per test case its
  description, status and matrix in GB/s (None where it printed N/A; rows and columns as the
  description says, e.g. "CPU(row) -> GPU(column)").
"""
from __future__ import annotations

import json
import os
import re
import stat
import warnings
from pathlib import Path

from ..schedule import bus_factor
from .cudatools import (looks_like_bandwidth_test, looks_like_nvbandwidth, looks_like_p2p, read_bandwidth_test,
                        read_nvbandwidth, read_p2p)
from .logformat import GB, LogFormatError, lines_of, number

__all__ = ["LogFormatError", "read_log", "read_logs", "read_folder", "read_text_file", "read_nccl_tests", "read_p2p",
           "read_bandwidth_test", "read_nvbandwidth", "my_logs_folder", "READERS"]

MAX_LOG_BYTES = 64 << 20  # a tool's log is kilobytes; a file this large is not one
_PROGRAMS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
             "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
             "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}

def looks_like_nccl_tests(text: str) -> bool:
    lines = lines_of(text)
    return any(re.match(r"#\s+size\s+count\s+type\s+redop\s+root", line) for line in lines) or any(
        line.startswith("# nThread ") for line in lines)


def read_nccl_tests(text: str, collective: str | None = None) -> dict:
    """The rows, ranks, devices and versions of an nccl-tests ``*_perf`` log.

    ``collective`` names it when the log does not (versions before 2.14 print no program name);
    otherwise it comes from the log, or from the bus factor the log's own columns show. A result row
    cut short or garbled (a run killed mid-line) is not read but listed in ``left_out`` (line, text).
    """
    lines = lines_of(text)
    result = {"format": "nccl-tests", "collective": collective, "ranks": None, "devices": [], "nccl_version": None,
              "nccl_tests_version": None, "threads": None, "gpus_per_thread": None, "avg_busbw_Bps": None,
              "out_of_bounds": None, "network": None, "rows": [], "left_out": []}
    per_iteration = False
    for line_number, line in enumerate(lines, 1):
        if m := re.match(r"# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", line):
            result["nccl_tests_version"] = m.group(1)
            result["nccl_version"] = _nccl_code(int(m.group(3)))
        elif m := re.match(r"# nThread (\d+) nGpus (\d+)", line):
            result["threads"], result["gpus_per_thread"] = int(m.group(1)), int(m.group(2))
        elif m := re.search(r"NCCL version (\d+\.\d+\.\d+\S*)", line):
            result["nccl_version"] = result["nccl_version"] or m.group(1)
        elif network := _network(line):
            result["network"] = result["network"] or network
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
            try:
                row = _nccl_row(line, per_iteration)
            except (ValueError, IndexError):
                row = None
                result["left_out"].append({"line": line_number, "text": line.strip()[:120]})
            if row is not None:
                result["rows"].append(row)
    if not result["rows"]:
        raise LogFormatError("an nccl-tests log without a single result row (was the run cut short?)")
    result["ranks"] = len({d["rank"] for d in result["devices"]}) or None
    if result["collective"] is None:
        result["collective"] = _collective_from_columns(result)
    return result


def _network(line: str) -> str | None:
    """The fabric an NCCL_DEBUG=INFO line says NCCL's network runs on: efa (AWS's plugin, aws-ofi-nccl, on EFA),
    ib or roce (NCCL's own IB transport, by the link layer of the devices it lists); None for other lines."""
    if re.search(r"NET/OFI Selected [Pp]rovider is efa\b|Using network AWS Libfabric", line):
        return "efa"
    if m := re.search(r"NET/IB : Using\b.*?/(IB|RoCE)\b", line):
        return "ib" if m.group(1) == "IB" else "roce"
    return None


def _nccl_code(code: int) -> str:
    """NCCL's version code as its release name: 22703 -> 2.27.3 (2.9 and later), 2708 -> 2.7.8."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def _nccl_row(line: str, per_iteration: bool) -> dict | None:
    fields = line.split()
    if len(fields) < 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None  # NCCL's own INFO/WARN lines, a timestamp, anything else
    if len(fields) < 9:
        raise ValueError("a result row cut short")
    size, count, dtype, redop, root = int(fields[0]), int(fields[1]), fields[2], fields[3], fields[4]
    rest = fields[5:]
    width = 8 if per_iteration else 4  # time algbw busbw #wrong (+ i_min i_max i_p99 i_cv%)
    sides = [rest[:4]] + ([rest[width:width + 4]] if len(rest) >= width + 4 else [])
    if len(sides) == 1 and len(rest) == 4:
        sides = [None, rest[:4]]  # trace replay: in place only, the out-of-place columns blank
    row = {"bytes": size, "count": count, "dtype": dtype, "redop": redop, "root": int(root)}
    for prefix, side in zip(("", "inplace_"), sides + [None] * (2 - len(sides))):
        time_us, algbw, busbw, wrong = (side or [None] * 4)
        row[f"{prefix}time_s"] = None if time_us is None else number(time_us) * 1e-6
        row[f"{prefix}algbw_Bps"] = None if algbw is None else number(algbw) * GB
        row[f"{prefix}busbw_Bps"] = None if busbw is None else number(busbw) * GB
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


READERS = {"nccl-tests": (looks_like_nccl_tests, read_nccl_tests),
           "nvbandwidth": (looks_like_nvbandwidth, read_nvbandwidth),
           "p2pBandwidthLatencyTest": (looks_like_p2p, read_p2p),
           "bandwidthTest": (looks_like_bandwidth_test, read_bandwidth_test)}


# Where the labs look for a learner's own logs: my_logs/ beside results/, or $RINGLAB_LOGS.
MY_LOGS = Path(__file__).resolve().parents[2] / "my_logs"


def my_logs_folder() -> Path:
    return Path(os.environ.get("RINGLAB_LOGS") or MY_LOGS)


def read_text_file(path: str | Path, limit: int = MAX_LOG_BYTES) -> str:
    """The text of the regular file at ``path``; a ValueError for what is no log: a FIFO, a device (``/dev/zero``
    would be read forever), a folder, or a file larger than ``limit`` bytes."""
    try:
        info = os.stat(path)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = ("a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(info.st_mode)
                else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "a socket"
                if stat.S_ISSOCK(info.st_mode) else "not a regular file")
        raise ValueError(f"{path} is {kind}, not a log file: give the file a tool's output was saved to")
    if info.st_size > limit:
        raise ValueError(f"{path} holds {info.st_size / 2**20:.0f} MiB: more than a tool's log ({limit >> 20} MiB at "
                         "most); is it the right file?")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit + 1)[:limit]
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None


def read_folder(folder: str | Path | None = None, format: str | None = None) -> list[dict]:
    """Every log in ``folder`` (default: ``my_logs/`` at the top of the project, or the folder named by
    ``$RINGLAB_LOGS``) that ringlab can read, each as :func:`read_logs` gives it with ``file`` and a
    ``label`` ("your log, <file name>"), optionally only those of one ``format``. A tool's own output
    and the JSON that ``ringlab import --json`` writes (one log or a list) are both read; files in no
    known format are skipped; a file that looks like a known format but is broken, or is no regular
    file, is left out with a warning saying why; an absent folder gives []."""
    folder = my_logs_folder() if folder is None else Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder of logs (give its folder, or read it with read_log)")
    found = []
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.is_dir():
            continue
        try:
            text = read_text_file(path)
        except ValueError as err:
            warnings.warn(f"{err}; left out", stacklevel=2)
            continue
        results = _imported(text)
        if results is None:
            try:
                results = read_logs(text)
            except LogFormatError as err:
                if any(looks(text) for looks, _ in READERS.values()):
                    warnings.warn(f"{path.name}: {err}; left out", stacklevel=2)
                continue
        for i, result in enumerate(results):
            if format is None or result["format"] == format:
                where = path.name if len(results) == 1 else f"{path.name}, log {i + 1}"
                found.append({**result, "file": str(path), "label": f"your log, {where}"})
    return found


def _imported(text: str) -> list[dict] | None:
    """The logs in a ``ringlab import --json`` file, or None if ``text`` is not one."""
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    logs = data if isinstance(data, list) else [data]
    if logs and all(isinstance(log, dict) and log.get("format") in READERS for log in logs):
        return logs
    return None


def read_log(text: str, **options) -> dict:
    """Read ``text`` in whichever format it is; a LogFormatError names the formats tried, or what is broken."""
    for name, (looks, read) in READERS.items():
        if looks(text):
            try:
                return read(text, **options)
            except LogFormatError:
                raise
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as err:
                raise LogFormatError(f"{name}: not as the tool prints it ({type(err).__name__}: {err})") from None
    raise LogFormatError(f"not a log ringlab can read (tried: {', '.join(READERS)}); the first line is "
                         f"{text.strip().splitlines()[0][:80]!r}" if text.strip() else "the log is empty")


def read_logs(text: str, **options) -> list[dict]:
    """Every run in ``text``: one :func:`read_log` result per run, so that several nccl-tests runs saved into
    one file (two ``*_perf`` outputs one after the other) are not merged into one table."""
    runs = _nccl_runs(text) if looks_like_nccl_tests(text) else [text]
    return [read_log(run, **options) for run in runs]


_RUN_HEADER = re.compile(r"#\s*(nccl-tests version|Collective test starting|nThread )")


def _nccl_runs(text: str) -> list[str]:
    """``text`` cut where each nccl-tests run starts: its header lines (version, program, ``# nThread``)."""
    lines = text.splitlines(keepends=True)
    bare = lines_of(text)
    starts = []
    for i, line in enumerate(bare):
        if line.startswith("# nThread "):
            first = i
            while first > 0 and _RUN_HEADER.match(bare[first - 1]):
                first -= 1
            starts.append(first)
    if len(starts) < 2:
        return [text]
    starts[0] = 0
    return ["".join(lines[a:b]) for a, b in zip(starts, starts[1:] + [len(lines)])]
