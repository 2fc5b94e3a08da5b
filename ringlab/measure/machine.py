"""What machine a measurement was taken on: recorded with every result, so numbers travel with their context."""
from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
from importlib import metadata


SCHEMA = 1  # the version of the JSON that ringlab bench and ringlab bandwidth write


def json_ready(data):
    """``data`` with every NaN or infinite number as None: JSON has no NaN or Infinity (Python writes them, but no
    other reader takes them)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: json_ready(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_ready(v) for v in data]
    if hasattr(data, "item") and getattr(data, "ndim", None) == 0:  # numpy scalars
        return json_ready(data.item())
    return data


def save_json(path: str, data) -> None:
    """Write ``data`` to ``path`` as strict JSON (non-finite numbers as null)."""
    with open(path, "w") as fh:
        json.dump(json_ready(data), fh, indent=1, allow_nan=False)


def available_memory() -> int | None:
    """Bytes of memory available to new allocations on this machine (Linux's MemAvailable), None if unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None

def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe_machine(command: list[str] | None = None) -> dict:
    """CPU, GPUs, driver, MPI library, package versions, the command and the date (UTC)."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(command if command is not None else sys.argv),
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in ("ringlab", "numpy", "mpi4py", "mpich", "cupy", "cupy-cuda12x",
                                               "cupy-cuda13x", "torch")},
        "mpi": None,
        "gpus": [],
        "driver": None,
    }
    try:
        from mpi4py import MPI
        info["mpi"] = MPI.Get_library_version().strip().splitlines()[0]
        from ..mpi.transports import mpi_is_cuda_aware
        info["mpi_cuda_aware"] = mpi_is_cuda_aware()
    except Exception as err:
        info["mpi"] = f"unavailable ({type(err).__name__})"
    try:
        from ..topology.nvml import read_nvml
        _, facts = read_nvml()
        info["gpus"], info["driver"] = facts["gpus"], facts["driver"]
    except Exception:
        from ..mpi.devices import cupy_module
        cp = cupy_module()
        if cp is not None:
            info["gpus"] = [{"name": cp.cuda.runtime.getDeviceProperties(i)["name"].decode()}
                            for i in range(cp.cuda.runtime.getDeviceCount())]
    if info["gpus"]:
        from ..mpi.devices import mps_running
        info["mps"] = mps_running()  # ranks sharing a GPU take turns without it: their timings differ
    return info
