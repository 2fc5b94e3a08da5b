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


def ringlab_source() -> dict:
    """This ringlab's version and, when it runs from a git checkout, its commit (with ``dirty`` when
    files differ from it); ``RINGLAB_COMMIT`` names the commit of a copy whose own git is missing or
    stale (a tree sent to another machine), and wins. A result says which code measured it, installed or not."""
    import subprocess
    from pathlib import Path

    from .. import __version__

    info = {"version": _version("ringlab") or __version__, "commit": None, "dirty": None}
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10)
        if commit.returncode == 0:
            info["commit"] = commit.stdout.strip()
            status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10)
            info["dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    if os.environ.get("RINGLAB_COMMIT", "").strip():  # a copy says where it came from (its own git may be stale)
        info.update(commit=os.environ["RINGLAB_COMMIT"].strip(), dirty=None)
    return info


def cuda_versions() -> dict:
    """The CUDA runtime cupy uses, the newest CUDA the driver takes, and NCCL's version (as cupy and then
    torch report them), each as text like "13.0" / "2.27.7", None where unknown."""
    def cuda(number: int) -> str:  # CUDA writes 13000 for 13.0
        return f"{number // 1000}.{number % 1000 // 10}"

    def nccl_text(number: int) -> str:  # NCCL >= 2.9 writes 22707 for 2.27.7
        return f"{number // 10000}.{number % 10000 // 100}.{number % 100}" if number >= 10000 else \
            f"{number // 1000}.{number % 1000 // 100}.{number % 100}"

    info = {"cuda_runtime": None, "cuda_driver": None, "nccl": None}
    from ..mpi.devices import cupy_module

    cp = cupy_module()
    if cp is not None:
        for key, read in (("cuda_runtime", lambda: cp.cuda.runtime.runtimeGetVersion()),
                          ("cuda_driver", lambda: cp.cuda.runtime.driverGetVersion())):
            try:
                info[key] = cuda(int(read()))
            except Exception:
                pass
        try:
            from cupy.cuda import nccl
            info["nccl"] = nccl_text(int(nccl.get_version()))
        except Exception:
            pass
    if info["nccl"] is None and "torch" in sys.modules:  # only when already imported: torch takes seconds
        try:
            version = sys.modules["torch"].cuda.nccl.version()
            info["nccl"] = ".".join(map(str, version)) if isinstance(version, tuple) else nccl_text(int(version))
        except Exception:
            pass
    return info


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
    """CPU, GPUs (names and bus ids), driver, CUDA runtime, NCCL, MPI library, package versions, ringlab's
    version and commit, the command and the date (UTC)."""
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(command if command is not None else sys.argv),
        "host": platform.node(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in ("ringlab", "numpy", "mpi4py", "mpich", "cupy", "cupy-cuda12x",
                                               "cupy-cuda13x", "torch")},
        "ringlab": ringlab_source(),
        "mpi": None,
        "gpus": [],
        "driver": None,
    }
    try:
        from mpi4py import MPI
        info["mpi"] = MPI.Get_library_version().strip().splitlines()[0]
        from ..mpi.devices import cuda_aware_conflict, forget_singleton_files, mpi_is_cuda_aware
        forget_singleton_files()
        # RINGLAB_CUDA_AWARE=1 against the library's own no: it cannot read GPU memory (calls on GPU buffers refuse)
        info["mpi_cuda_aware"] = False if cuda_aware_conflict() else mpi_is_cuda_aware()
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
        info.update(cuda_versions())
        from ..mpi.devices import mps_running
        info["mps"] = mps_running()  # ranks sharing a GPU take turns without it: their timings differ
    return info
