#!/usr/bin/env python3
"""Set up ringlab on a fresh machine and run it: the only two commands a newcomer needs.

    python3 dev.py lab     # set everything up, then open your copies of the labs (my_labs/) in JupyterLab
    python3 dev.py test    # set everything up, then run every test (notebooks included)
    python3 dev.py gpu     # on a machine with an NVIDIA GPU: add cupy, NCCL and NVML for its driver

Everything goes into ./.venv (made on first use): ringlab itself, editable, with the extras
named in pyproject.toml (MPI from the `mpich` wheel, so no system MPI is needed). Running a
command again reinstalls only when pyproject.toml has changed since the last install, so both
commands are safe to repeat. Extra arguments go to the tool underneath:

    python3 dev.py test -k ring -x       # arguments for pytest
    python3 dev.py lab --no-browser      # arguments for jupyter lab

`dev.py test` without arguments runs the suite in two parts: first everything but the tests marked
`quiet` on several workers at once (pytest-xdist, one file per worker at a time, one worker per
core), then the `quiet` tests alone, whose numbers are timings (deadlines, links shaped by the kernel)
that another worker's load would disturb. Emulated machines run in virtual time, which no load
disturbs, so their tests run with the rest. It fails if either part fails; both run.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
EXTRAS = "mpi,lab,test,train,gpu-check"  # not a GPU extra: `dev.py gpu` adds the one for this machine's driver
TORCH = "torch==2.13.0"  # pinned: the CPU build; an open range pulls gigabytes of CUDA packages
STAMP = VENV / ".ringlab-installed"
GPU_STAMP = VENV / ".ringlab-gpu"  # the GPU extra `dev.py gpu` installed: it replaces gpu-check from then on
CUPY_WHEELS = {"gpu-cuda12": "cupy-cuda12x", "gpu-cuda13": "cupy-cuda13x"}
NCCL_WHEELS = {"gpu-cuda12": "nvidia-nccl-cu12", "gpu-cuda13": "nvidia-nccl-cu13"}


def extras() -> str:
    """The extras to install: the GPU one that `dev.py gpu` chose, in place of gpu-check (the CUDA 12 wheels,
    which would clash with another major's cupy)."""
    if GPU_STAMP.exists():
        return EXTRAS.replace("gpu-check", GPU_STAMP.read_text().strip())
    return EXTRAS


def venv_bin(name: str) -> Path:
    """Path of an executable inside the virtual environment."""
    sub = "Scripts" if os.name == "nt" else "bin"
    suffix = ".exe" if os.name == "nt" else ""
    return VENV / sub / f"{name}{suffix}"


def wanted_stamp() -> str:
    """What the install depends on: the package metadata, the extras and the Python version."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes())
    digest.update(f"{extras()} {TORCH} {sys.version_info[:2]}".encode())
    return digest.hexdigest()


def ensure_env() -> None:
    """Create .venv and install ringlab into it, unless that is already done."""
    if sys.version_info < (3, 10):
        sys.exit(f"ringlab needs Python >= 3.10; this is {sys.version.split()[0]}")
    python = venv_bin("python")
    if not python.exists():
        print(f"[dev] creating a virtual environment in {VENV}", flush=True)
        try:
            venv.create(VENV, with_pip=True)
        except Exception as err:  # Debian ships venv without ensurepip unless python3-venv is installed
            sys.exit(f"[dev] could not create {VENV}: {err}\n"
                     "      On Debian/Ubuntu install the python3-venv package first.")
    stamp = wanted_stamp()
    if STAMP.exists() and STAMP.read_text() == stamp:
        return
    print(f"[dev] installing ringlab[{extras()}] into {VENV} (first run: a few minutes)", flush=True)
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", TORCH])
    run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         "-e", f"{ROOT}[{extras()}]"])
    # saved notebooks keep their widgets (JupyterLab's saveState), so a reopened lab shows them
    run([str(python), "-m", "ringlab.lab", "settings"])
    STAMP.write_text(stamp)


def compile_sources(python: str) -> None:
    """Write the bytecode of ringlab's own modules (and the tests' helpers) next to them, where it is stale or
    missing. Python writes it on first import, but not where PYTHONDONTWRITEBYTECODE is set (as it is on some
    machines and containers): there every process, every MPI rank, compiled every module it imported again, a
    third of a rank's start-up (0.52 s to 0.36 s here), and the suite starts thousands of them."""
    run([python, "-m", "compileall", "-q", "-j", "0", str(ROOT / "ringlab"), str(ROOT / "tests"),
         str(ROOT / "benchmarks")])


def driver_cuda_major() -> int | None:
    """The CUDA major version this machine's NVIDIA driver takes, from `nvidia-smi` ("CUDA Version: 13.0")."""
    import re
    import shutil

    if shutil.which("nvidia-smi") is None:
        return None
    text = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
    found = re.search(r"CUDA Version:\s*(\d+)\.", text)
    return int(found.group(1)) if found else None


def install_gpu(major: int | None) -> None:
    """Install ringlab's GPU extra for a CUDA ``major`` driver into .venv, removing the other major's cupy and
    NCCL first (two cupy wheels in one environment break each other)."""
    if major is None:
        sys.exit("[dev] no NVIDIA driver here (nvidia-smi is missing or prints no CUDA version): "
                 "the labs run on numpy buffers without one")
    if major < 12:
        sys.exit(f"[dev] this driver takes CUDA {major}; ringlab's GPU packages need a driver for CUDA 12 or 13")
    extra = "gpu-cuda13" if major >= 13 else "gpu-cuda12"
    python = str(venv_bin("python"))
    others = [wheel for wheels in (CUPY_WHEELS, NCCL_WHEELS) for name, wheel in wheels.items() if name != extra]
    print(f"[dev] CUDA {major} driver: installing ringlab[{extra}]", flush=True)
    run([python, "-m", "pip", "uninstall", "-y", "-q", *others])
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", "-e", f"{ROOT}[{extra}]"])
    GPU_STAMP.write_text(extra)
    STAMP.write_text(wanted_stamp())


def run(cmd: list[str]) -> None:
    """Run a command from the repository root; stop with its exit code if it fails."""
    code = subprocess.call(cmd, cwd=ROOT)
    if code != 0:
        sys.exit(code)


def workers() -> int:
    """How many pytest workers the first part of the suite gets: one per core, 2 to 4. (Three on 2 cores was
    tried: lab 05's simulated nodes and a %%px deadline test then failed under the load.)"""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
    return max(2, min(4, cores))


def test_in_two_parts(python: str) -> int:
    """The whole suite: the non-quiet tests on several workers, then the quiet ones alone; the worse exit code."""
    parts = [("everything but the quiet tests", ["-n", str(workers()), "--dist", "loadfile", "-m", "not quiet"]),
             ("the quiet tests, alone", ["-m", "quiet"])]
    codes = []
    for what, options in parts:
        start = time.monotonic()
        print(f"[dev] running {what}", flush=True)
        codes.append(subprocess.call([python, "-m", "pytest", *options, "--durations=15"], cwd=ROOT))
        print(f"[dev] {what}: exit {codes[-1]} after {time.monotonic() - start:.0f} s", flush=True)
    return next((code for code in codes if code != 0), 0)


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("lab", "test", "setup", "gpu"):
        sys.exit(__doc__)
    command, rest = argv[0], argv[1:]
    ensure_env()
    if command == "gpu":
        install_gpu(int(rest[0]) if rest else driver_cuda_major())  # `dev.py gpu 13` for another driver than this one
        return
    env_bin = str(venv_bin("python").parent)
    os.environ["PATH"] = env_bin + os.pathsep + os.environ.get("PATH", "")  # mpiexec of the mpich wheel
    os.environ["VIRTUAL_ENV"] = str(VENV)
    compile_sources(str(venv_bin("python")))
    if command == "test":
        if rest:
            run([str(venv_bin("python")), "-m", "pytest", *rest])
        else:
            sys.exit(test_in_two_parts(str(venv_bin("python"))))
    elif command == "lab":
        as_root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers
        # the learner's own copies (git-ignored): saving a lab never touches labs/, which `git pull` updates
        run([str(venv_bin("python")), "-m", "ringlab.lab", "copy"])
        run([str(venv_bin("jupyter")), "lab", str(ROOT / "my_labs"), *as_root, *rest])


if __name__ == "__main__":
    main(sys.argv[1:])
