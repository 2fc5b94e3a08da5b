"""Running ringlab's GPU paths on the CPU stand-in for cupy (tests/gpusim): environments and jobs.

A process sees the stand-in when ``tests/gpusim`` comes first on its Python path; the package
ringlab does not know about it. Everything measured on the stand-in is CPU time: tests check
structure and correctness, never speed.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ringlab.cluster.launch import run_mpi

TESTS = Path(__file__).resolve().parent
GPUSIM = TESTS / "gpusim"
SCRIPTS = TESTS / "mpi"


def gpusim_env(machine: str | None = None, cuda_aware: bool | None = None, ringlab_from: str | None = None,
               **extra: str) -> dict:
    """Environment variables that put the stand-in first: ``machine`` from tests/gpusim/machines.py,
    ``cuda_aware`` to tell ringlab the MPI library takes device buffers (``RINGLAB_CUDA_AWARE=force``: MPICH
    says it cannot read GPU memory, which the stand-in's device memory, host memory, does not need),
    ``ringlab_from`` a folder whose ``ringlab`` package is imported instead of this checkout's."""
    first = [ringlab_from] if ringlab_from else []
    path = os.pathsep.join(first + [str(GPUSIM)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    env = {"PYTHONPATH": path, **extra}
    if machine is not None:
        env["RINGLAB_GPUSIM_MACHINE"] = machine
    if cuda_aware is not None:
        env["RINGLAB_CUDA_AWARE"] = "force" if cuda_aware else "0"
    return env


def run_gpusim(nranks: int, args: list[str], timeout: float = 240, **env_options) -> subprocess.CompletedProcess:
    """``args`` under mpiexec on ``nranks`` ranks, with the stand-in for cupy, started in tests/mpi: the
    ranks run ``python -m ringlab.cluster.runner``, which imports ringlab from the working directory first, so
    from the checkout's root a ``ringlab_from`` package would never be the one imported."""
    return run_mpi(nranks, args, timeout=timeout, env=gpusim_env(**env_options), cwd=SCRIPTS)


def run_gpusim_own_gpu(nranks: int, args: list[str], first: int = 0, timeout: float = 240,
                       **env_options) -> subprocess.CompletedProcess:
    """Like :func:`run_gpusim`, with each rank shown only its own GPU, ``first + rank``, in
    ``CUDA_VISIBLE_DEVICES`` before its process starts (as Slurm and many launchers do)."""
    from ringlab.cluster.launch import find_mpiexec, local_env

    env = {**os.environ, **local_env(nranks=nranks), **gpusim_env(**env_options)}
    command = [find_mpiexec(), "-n", str(nranks), "sh", "-c",
               f'CUDA_VISIBLE_DEVICES=$((PMI_RANK + {int(first)})) exec "$0" -m ringlab.cluster.runner "$@"',
               sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=SCRIPTS)


def run_python(code_or_args: list[str], timeout: float = 120, **env_options) -> subprocess.CompletedProcess:
    """One Python process (no mpiexec) with the stand-in, started in tests/mpi (as the jobs' scripts
    are), so that ``python -c`` does not import the checkout's ringlab from the working directory."""
    return subprocess.run([sys.executable, *code_or_args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **gpusim_env(**env_options)}, cwd=SCRIPTS)
