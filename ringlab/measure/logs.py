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
import stat
import warnings
from pathlib import Path

from .cudatools import (looks_like_bandwidth_test, looks_like_nvbandwidth, looks_like_p2p, read_bandwidth_test,
                        read_nvbandwidth, read_p2p)
from .logformat import LogFormatError
from .nccltests import PROGRAMS, looks_like
from .nccltests import read as read_runs

__all__ = ["LogFormatError", "read_log", "read_logs", "read_folder", "read_text_file", "read_nccl_tests", "read_p2p",
           "read_bandwidth_test", "read_nvbandwidth", "my_logs_folder", "READERS"]

MAX_LOG_BYTES = 64 << 20  # a tool's log is kilobytes; a file this large is not one
_PROGRAMS = PROGRAMS


def looks_like_nccl_tests(text: str) -> bool:
    """Whether ``text`` holds nccl-tests or rccl-tests output (:func:`ringlab.measure.nccltests.looks_like`)."""
    return looks_like(text)


def read_nccl_tests(text: str, collective: str | None = None) -> dict:
    """The rows, ranks, devices and versions of one nccl-tests or rccl-tests run, in any layout the tools have
    printed and however it was pasted (:mod:`ringlab.measure.nccltests`).

    ``collective`` names it where the log does not (versions before 2.14 print no program name, and an excerpt
    may have lost it); otherwise it comes from the log, or from its columns where they leave one answer. The
    last row of a run cut short is not read but listed in ``left_out`` (line, text); any other row that is not
    whole under the log's layout is a LogFormatError naming its line. Text holding several runs is an error
    here: :func:`read_logs` reads each.
    """
    runs = read_runs(text, collective)
    if len(runs) > 1:
        lines = ", ".join(str(r["first_line"]) for r in runs)
        raise LogFormatError(f"this text holds {len(runs)} nccl-tests runs (their rows start on lines {lines}); "
                             "read_logs reads each")
    return runs[0]


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
    one file (two ``*_perf`` outputs one after the other, with or without their headers) are not merged into one
    table."""
    if looks_like_nccl_tests(text):
        return read_runs(text, options.get("collective"))
    return [read_log(text, **options)]
