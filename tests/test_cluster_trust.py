"""What `ringlab cluster` may be trusted with (issue 47): a run ends exactly its own processes and jobs, on every
way out, and leaves another run on the same cluster alone.

The tests that need a cluster bring up one of their own, ``trust`` (2 nodes, with Slurm where this machine has
it), and take it down again; without root they skip, saying why."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringlab.cluster import control, netns, slurm
from ringlab.cluster.layout import Layout

ROOT = Path(__file__).resolve().parent.parent
NAME = "trust"
WITH_SLURM = not slurm.missing()
LAUNCHERS = ["mpiexec", "srun"] if WITH_SLURM else ["mpiexec"]


def cluster(*args: str, timeout: float = 180, **kwargs) -> subprocess.CompletedProcess:
    """`ringlab cluster VERB --name trust ARGS`, its output captured."""
    command = [sys.executable, "-m", "ringlab", "cluster", args[0], "--name", NAME, *args[1:]]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)


def started(*args: str) -> subprocess.Popen:
    """`ringlab cluster run --name trust ARGS`, started and left running."""
    return subprocess.Popen([sys.executable, "-m", "ringlab", "cluster", "run", "--name", NAME, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def up():
    layout = Layout(NAME, nodes=2, slurm=WITH_SLURM)
    lacking = control.missing(layout)
    if lacking or os.geteuid() != 0:
        pytest.skip("ringlab cluster needs " + "; and ".join(lacking or ["root, for these tests"]))
    try:
        done = cluster("up", "--nodes", "2", *(["--slurm"] if WITH_SLURM else []), timeout=240)
        assert done.returncode == 0, done.stderr
        yield control.layout_of(NAME)
    finally:
        cluster("down", timeout=120)


def running(layout: Layout, command: str) -> list[int]:
    """The processes in the cluster's namespaces whose command line is ``command`` (``sleep 12.5``)."""
    found = []
    for ns in netns.namespaces(layout.prefix):
        for pid in netns.pids_in(ns):
            try:
                if Path(f"/proc/{pid}/cmdline").read_text().split("\0")[:-1] == command.split() and netns.alive(pid):
                    found.append(pid)
            except OSError:
                pass
    return found


def wait_for(ready, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def slurm_jobs(layout: Layout) -> str:
    done = subprocess.run(netns.node_command(layout, "head", ["squeue", "-h", "-o", "%i %j"]), capture_output=True,
                          text=True, env=control.environment(layout), timeout=30)
    return done.stdout.strip()


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_run_past_its_timeout_leaves_another_run_on_the_cluster_alone(up, launcher):
    other = started("-n", "2", "--launcher", launcher, "--timeout", "90", "--", "sh", "-c",
                    "sleep 12.5; echo survived")
    try:
        wait_for(lambda: len(running(up, "sleep 12.5")) == 2, 60, "the other run's ranks did not start")
        late = cluster("run", "-n", "2", "--launcher", launcher, "--timeout", "3", "--", "sleep", "77.5")
        assert late.returncode == 124 and "did not end within 3 s" in late.stderr, late.stderr
        assert running(up, "sleep 77.5") == []  # its own ranks were ended
        output, errors = other.communicate(timeout=90)
        assert other.returncode == 0 and output.split() == ["survived", "survived"], errors
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()


@pytest.mark.parametrize("launcher", [None, *LAUNCHERS])
def test_a_run_interrupted_leaves_none_of_its_processes_or_jobs(up, launcher):
    """Ctrl-C (SIGINT to `ringlab cluster run` alone): the command, what it started in the background, and on the
    nodes its ranks (and under srun its Slurm job) all end."""
    spread = [] if launcher is None else ["-n", "2", "--launcher", launcher]
    run = started(*spread, "--", "sh", "-c", "sleep 88.5 & sleep 99.5; wait")
    try:
        ranks = 1 if launcher is None else 2
        wait_for(lambda: len(running(up, "sleep 88.5")) == ranks, 60, "the run did not start")
        run.send_signal(signal.SIGINT)
        _, errors = run.communicate(timeout=60)
        assert run.returncode == 130 and "interrupted: ended" in errors, errors
        assert running(up, "sleep 88.5") == [] and running(up, "sleep 99.5") == []
        if launcher == "srun":
            wait_for(lambda: slurm_jobs(up) == "", 30, f"Slurm still holds the job: {slurm_jobs(up)}")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        netns.end_processes(running(up, "sleep 88.5") + running(up, "sleep 99.5"))
