"""Starting MPI jobs from Python: find mpiexec (the mpich wheel puts it next to python) and run."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path


def find_mpiexec() -> str:
    """The mpiexec beside this Python (a virtual environment with the mpich wheel), else the one on PATH."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.exists():
        return str(here)
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError("no mpiexec found: install the mpich wheel (pip install mpich) "
                                "or put an MPI's mpiexec on PATH")
    return found


def mpiexec_command(nranks: int, args: list[str]) -> list[str]:
    """``mpiexec -n N python -m mpi4py ARGS``: mpi4py's runner aborts the job when a rank raises."""
    if nranks < 1:
        raise ValueError(f"need at least 1 rank, got {nranks}")
    return [find_mpiexec(), "-n", str(nranks), sys.executable, "-m", "mpi4py", *args]


def run_mpi(nranks: int, args: list[str], timeout: float = 300, env: dict | None = None,
            **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m mpi4py ARGS`` on ``nranks`` ranks; kill the job after ``timeout`` seconds.

    Raises subprocess.TimeoutExpired when it does not finish in time (the job is killed first).
    """
    merged = {**os.environ, "MPIEXEC_TIMEOUT": str(int(timeout) + 5), **(env or {})}
    return subprocess.run(mpiexec_command(nranks, args), capture_output=True, text=True, timeout=timeout,
                          env=merged, **kwargs)
