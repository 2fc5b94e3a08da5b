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
from pathlib import Path

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
              "nccl_tests_version": None, "threads": None, "gpus_per_thread": None, "avg_busbw_Bps": None,
              "out_of_bounds": None, "rows": []}
    per_iteration = False
    for line in lines:
        if m := re.match(r"# nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)", line):
            result["nccl_tests_version"] = m.group(1)
            result["nccl_version"] = _nccl_code(int(m.group(3)))
        elif m := re.match(r"# nThread (\d+) nGpus (\d+)", line):
            result["threads"], result["gpus_per_thread"] = int(m.group(1)), int(m.group(2))
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


_P2P_SECTIONS = [  # title (regex) -> the key of the matrix, or of its GPU and CPU parts
    (r"P2P Connectivity Matrix", "connectivity"),
    (r"Unidirectional P2P=Disabled Bandwidth", "unidirectional_disabled"),
    (r"Unidirectional P2P=Enabled Bandwidth( \(P2P Writes\))? Matrix", "unidirectional_enabled"),
    (r"Unidirectional P2P=Enabled Bandwidth \(P2P Reads\)", "unidirectional_enabled_reads"),
    (r"Bidirectional P2P=Disabled Bandwidth", "bidirectional_disabled"),
    (r"Bidirectional P2P=Enabled Bandwidth", "bidirectional_enabled"),
    (r"P2P=Disabled Latency", "latency_{}_disabled"),
    (r"P2P=Enabled Latency( \(P2P Writes\))? Matrix", "latency_{}_enabled"),
    (r"P2P=Enabled Latency \(P2P Reads\)", "latency_{}_enabled_reads"),
]


def looks_like_p2p(text: str) -> bool:
    return "P2P Connectivity Matrix" in text or "Unidirectional P2P=Disabled Bandwidth" in text


def read_p2p(text: str, **_) -> dict:
    """The devices and matrices of a ``p2pBandwidthLatencyTest`` log."""
    result = {"format": "p2pBandwidthLatencyTest", "devices": [], "p2p_method": "writes", "matrices": {}}
    section, key = None, None
    for line in _lines(text):
        if m := re.match(r"Device: (\d+), (.*), pciBusID: (\w+), pciDeviceID: (\w+), pciDomainID:\s*(\w+)", line):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2).strip(),
                                      "bus": f"{int(m.group(5), 16):04x}:{int(m.group(3), 16):02x}:{int(m.group(4), 16):02x}"})
            continue
        titles = [name for pattern, name in _P2P_SECTIONS if re.match(pattern, line.strip())]
        if titles:
            section, key = titles[-1], None
            continue
        fields = line.split()
        if section is None or not fields:
            continue
        if fields[0] in ("D\\D", "GPU", "CPU"):  # a matrix's header row
            key = section.format(fields[0].lower()) if "{}" in section else section
            result["matrices"][key] = []
        elif key is not None and fields[0].isdigit() and len(fields) > 1:
            result["matrices"][key].append([float(v) for v in fields[1:]])
    reads = {k: v for k, v in result["matrices"].items() if k.endswith("_reads")}
    if reads:  # --p2p_read: the reads are what P2P=Enabled means in this run
        result["p2p_method"] = "reads"
        for k, v in reads.items():
            result["matrices"][k.removesuffix("_reads")] = v
            del result["matrices"][k]
    for name, matrix in result["matrices"].items():
        if any(len(row) != len(matrix) for row in matrix):
            raise LogFormatError(f"p2pBandwidthLatencyTest: the {name} matrix is not square (a cut log?)")
    if not result["matrices"]:
        raise LogFormatError("a p2pBandwidthLatencyTest log without a single matrix (was the run cut short?)")
    return result


_DIRECTIONS = {"Host to Device": "host_to_device", "Device to Host": "device_to_host",
               "Device to Device": "device_to_device", "H2D": "host_to_device", "D2H": "device_to_host",
               "D2D": "device_to_device"}


def looks_like_bandwidth_test(text: str) -> bool:
    return bool(re.search(r"Transfer Size \(Bytes\)\s+Bandwidth\((GB|MB)/s\)", text)) or "bandwidthTest-" in text


def read_bandwidth_test(text: str, **_) -> dict:
    """The rows of a cuda-samples ``bandwidthTest`` log (its table, or its ``--csv`` lines)."""
    result = {"format": "bandwidthTest", "devices": [], "mode": None, "rows": []}
    direction = memory = None
    scale = GB
    for line in _lines(text):
        stripped = line.strip()
        if m := re.match(r"Device (\d+): (.+)$", stripped):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2).strip()})
        elif m := re.match(r"(Quick|Range|Shmoo) Mode", stripped):
            result["mode"] = m.group(1).lower()
        elif m := re.match(r"(Host to Device|Device to Host|Device to Device) Bandwidth, (\d+) Device", stripped):
            direction = _DIRECTIONS[m.group(1)]
        elif m := re.match(r"(PINNED|PAGEABLE) Memory Transfers", stripped):
            memory = m.group(1).lower()
        elif m := re.match(r"Transfer Size \(Bytes\)\s+Bandwidth\((GB|MB)/s\)", stripped):
            scale = GB if m.group(1) == "GB" else 1e6
        elif m := re.match(r"bandwidthTest-(\w+)-(\w+), Bandwidth = ([\d.]+) (GB|MB)/s, Time = [\d.e-]+ s, "
                           r"Size = (\d+) bytes", stripped):
            result["rows"].append({"direction": _DIRECTIONS.get(m.group(1), m.group(1)), "memory": m.group(2).lower(),
                                   "bytes": int(m.group(5)),
                                   "Bps": float(m.group(3)) * (GB if m.group(4) == "GB" else 1e6)})
        elif direction and (m := re.match(r"(\d+)\s+([\d.]+)$", stripped)):
            result["rows"].append({"direction": direction, "memory": memory, "bytes": int(m.group(1)),
                                   "Bps": float(m.group(2)) * scale})
    if not result["rows"]:
        raise LogFormatError("a bandwidthTest log without a single measurement (was the run cut short?)")
    return result


def looks_like_nvbandwidth(text: str) -> bool:
    return "nvbandwidth Version:" in text or bool(re.search(r'"nvbandwidth"\s*:', text))


def read_nvbandwidth(text: str, **_) -> dict:
    """Test cases of an ``nvbandwidth`` run, from its text output or its JSON (``-j``)."""
    result = {"format": "nvbandwidth", "version": None, "driver": None, "cuda_runtime": None, "devices": [],
              "testcases": {}}
    if text.lstrip().startswith("{"):
        try:
            root = json.loads(text)["nvbandwidth"]
        except (ValueError, KeyError) as err:
            raise LogFormatError(f"not nvbandwidth's JSON ({err})") from None
        result.update(version=root.get("version"), driver=root.get("Driver Version"),
                      cuda_runtime=root.get("CUDA Runtime Version"))
        for entry in root.get("GPU Device list", []):
            if m := re.match(r"(\d+): (.+) \((\w+:\w+:\w+)\)", entry):
                result["devices"].append({"device": int(m.group(1)), "name": m.group(2), "bus": m.group(3)})
        for case in root.get("testcases", []):
            matrix = case.get("bandwidth_matrix")
            result["testcases"][case["name"]] = {
                "status": case.get("status"), "description": case.get("bandwidth_description"),
                "matrix": None if matrix is None else [[_number(v) for v in row] for row in matrix],
                "sum": case.get("sum")}
        return _checked_nvbandwidth(result)
    name = None
    matrix: list | None = None
    for line in _lines(text):
        stripped = line.strip()
        if m := re.match(r"nvbandwidth Version: (\S+)", stripped):
            result["version"] = m.group(1)
        elif m := re.match(r"Driver Version: (\S+)", stripped):
            result["driver"] = m.group(1)
        elif m := re.match(r"CUDA Runtime Version: (\d+)", stripped):
            result["cuda_runtime"] = int(m.group(1))
        elif m := re.match(r"Device (\d+): (.+) \((\w+:\w+:\w+)\)$", stripped):
            result["devices"].append({"device": int(m.group(1)), "name": m.group(2), "bus": m.group(3)})
        elif m := re.match(r"Running (\S+)\.$", stripped):
            name, matrix = m.group(1), None
            result["testcases"][name] = {"status": "Running", "description": None, "matrix": None, "sum": None}
        elif name and (m := re.match(r"(Waived|Error|Not Found): ?(.*)$", stripped)):
            result["testcases"][name]["status"] = m.group(1)
        elif name and re.search(r"bandwidth \(GB/s\)$", stripped):
            result["testcases"][name]["description"] = stripped
            matrix = []
        elif name and (m := re.match(r"SUM (\S+) ([\d.]+)", stripped)):
            result["testcases"][m.group(1)].update(status="Passed", sum=float(m.group(2)), matrix=matrix)
            matrix = None
        elif matrix is not None and stripped:
            fields = stripped.split()
            if len(matrix) or not all(f.isdigit() for f in fields):  # the first line is the columns' labels
                matrix.append([_number(v) for v in fields[1:]])
    return _checked_nvbandwidth(result)


def _checked_nvbandwidth(result: dict) -> dict:
    if not any(case["matrix"] for case in result["testcases"].values()):
        raise LogFormatError("an nvbandwidth log without a single finished test case (was the run cut short?)")
    return result


READERS = {"nccl-tests": (looks_like_nccl_tests, read_nccl_tests),
           "nvbandwidth": (looks_like_nvbandwidth, read_nvbandwidth),
           "p2pBandwidthLatencyTest": (looks_like_p2p, read_p2p),
           "bandwidthTest": (looks_like_bandwidth_test, read_bandwidth_test)}


# Where the labs look for a learner's own logs: my_logs/ beside results/, or $RINGLAB_LOGS.
MY_LOGS = Path(__file__).resolve().parents[2] / "my_logs"


def my_logs_folder() -> Path:
    return Path(os.environ.get("RINGLAB_LOGS") or MY_LOGS)


def read_folder(folder: str | Path | None = None, format: str | None = None) -> list[dict]:
    """Every log in ``folder`` (default: ``my_logs/`` at the top of the project, or the folder named by
    ``$RINGLAB_LOGS``) that ringlab can read, each as :func:`read_log` gives it with ``file`` and a
    ``label`` ("your log, <file name>"), optionally only those of one ``format``. A tool's own output
    and the JSON that ``ringlab import --json`` writes (one log or a list) are both read; files in no
    known format are skipped; an absent folder gives []."""
    folder = my_logs_folder() if folder is None else Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder of logs (give its folder, or read it with read_log)")
    found = []
    for path in sorted(p for p in folder.glob("*") if p.is_file()) if folder.is_dir() else []:
        text = path.read_text(encoding="utf-8", errors="replace")
        results = _imported(text)
        if results is None:
            try:
                results = [read_log(text)]
            except ValueError:
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
    """Read ``text`` in whichever format it is; a LogFormatError names the formats tried."""
    for name, (looks, read) in READERS.items():
        if looks(text):
            return read(text, **options)
    raise LogFormatError(f"not a log ringlab can read (tried: {', '.join(READERS)}); the first line is "
                         f"{text.strip().splitlines()[0][:80]!r}" if text.strip() else "the log is empty")
