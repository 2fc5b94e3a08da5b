"""What `ringlab cluster` may be trusted with (issue 47): a run ends exactly its own processes and jobs, on every
way out, and leaves another run on the same cluster alone; under sudo, the job runs as the user who ran it.

The tests that need a cluster bring up one of their own, ``trust`` (2 nodes, with Slurm where this machine has
it), and take it down again; without root they skip, saying why."""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import sys
import threading
import time
from pathlib import Path

import pytest

from ringlab.cluster import control, netns, slurm
from ringlab.cluster.layout import Layout

ROOT = Path(__file__).resolve().parent.parent
NAME = "trust"
NOBODY = "65534"
WITH_SLURM = not slurm.missing()
LAUNCHERS = ["mpiexec", "srun"] if WITH_SLURM else ["mpiexec"]


def cluster(*args: str, timeout: float = 180, **kwargs) -> subprocess.CompletedProcess:
    """`ringlab cluster VERB --name trust ARGS`, its output captured."""
    command = [sys.executable, "-m", "ringlab", "cluster", args[0], "--name", NAME, *args[1:]]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kwargs)


def started(*args: str, env: dict | None = None) -> subprocess.Popen:
    """`ringlab cluster run --name trust ARGS`, started and left running."""
    return subprocess.Popen([sys.executable, "-m", "ringlab", "cluster", "run", "--name", NAME, *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=_as_from_a_terminal)


def _as_from_a_terminal() -> None:
    """Ctrl-C's signal as a command typed in a terminal gets it: pytest-xdist's workers ignore SIGINT, and a
    process started ignoring it keeps ignoring it (Python installs its KeyboardInterrupt handler only where
    SIGINT was not ignored), so a SIGINT sent to the run would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def up():
    layout = Layout(NAME, nodes=2, slurm=WITH_SLURM)
    lacking = control.missing(layout)
    if lacking or os.geteuid() != 0:
        pytest.skip("ringlab cluster needs " + "; and ".join(lacking or ["root, for these tests"]))
    try:
        done = cluster("up", "--nodes", "2", *(["--slurm"] if WITH_SLURM else []), timeout=240,
                       preexec_fn=lambda: os.umask(0o077))  # a strict umask: what the job's user reads is readable
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


@pytest.mark.parametrize("launcher, sudo", [(None, False), *[(launcher, False) for launcher in LAUNCHERS],
                                             ("mpiexec", True)])
def test_a_run_interrupted_leaves_none_of_its_processes_or_jobs(up, launcher, sudo):
    """Ctrl-C (SIGINT to `ringlab cluster run` alone): the command, what it started in the background, and on the
    nodes its ranks (and under srun its Slurm job) all end; under sudo too, where the ranks run as the user."""
    spread = [] if launcher is None else ["-n", "2", "--launcher", launcher]
    run = started(*spread, "--", "sh", "-c", "sleep 88.5 & sleep 99.5; wait",
                  env={**os.environ, "SUDO_UID": NOBODY, "SUDO_GID": NOBODY} if sudo else None)
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


AS_USER = [("head", []), ("mpiexec", ["-n", "2", "--launcher", "mpiexec"]),
           ("typed mpiexec", ["--", "sh", "-c", "mpiexec -f /run/ringlab-trust/hosts -n 2 id -u"])]
AS_USER += [("srun", ["-n", "2", "--launcher", "srun"])] if WITH_SLURM else []


@pytest.mark.parametrize("how, spread", AS_USER, ids=[how for how, _ in AS_USER])
def test_under_sudo_the_job_runs_as_the_user_who_ran_it_and_as_root_without(up, how, spread):
    """SUDO_UID and SUDO_GID (as sudo sets them): the command, and every rank on the nodes, run as that user;
    without them (root itself), as root, as before."""
    argv = [*spread, "--timeout", "90", "--", "id", "-u"] if how != "typed mpiexec" else ["--timeout", "90", *spread]
    ranks = 1 if how == "head" else 2
    root = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    done = cluster("run", *argv, env={**root, "SUDO_UID": NOBODY, "SUDO_GID": NOBODY, "SUDO_USER": "nobody"})
    assert done.returncode == 0 and done.stdout.split() == [NOBODY] * ranks, done.stdout + done.stderr
    done = cluster("run", *argv, env=root)
    assert done.returncode == 0 and done.stdout.split() == ["0"] * ranks, done.stdout + done.stderr
    if how == "head":  # and its home is the user's, not root's (which sudo leaves)
        home = cluster("run", "--", "sh", "-c", "echo $HOME", env={**root, "SUDO_UID": NOBODY, "SUDO_GID": NOBODY})
        assert home.stdout.strip() == pwd.getpwuid(int(NOBODY)).pw_dir, home.stdout + home.stderr


def others_can_read(path: Path, top: Path) -> bool:
    """Whether a user other than its owner may read ``path``: it and every folder between it and ``top`` allow them."""
    if not path.stat().st_mode & 0o004:
        return False
    return all(folder.stat().st_mode & 0o001 for folder in path.parents if folder.is_relative_to(top))


def test_munges_key_and_slurms_state_and_logs_are_roots_alone_and_what_jobs_read_is_not(up):
    if not WITH_SLURM:
        pytest.skip("this machine has no Slurm")
    top = up.folder / "slurm"
    secret = [p for p in top.rglob("*") if p.is_file() and (p.suffix in (".log", ".key", ".out", ".seed", ".pid")
                                                           or "state" in p.parts or "spool" in str(p))]
    assert any(p.name == "munge.key" for p in secret) and any(p.name == "slurmctld.log" for p in secret)
    assert [p for p in secret if others_can_read(p, top)] == []
    key = next(p for p in secret if p.name == "munge.key")
    assert key.stat().st_mode & 0o077 == 0
    assert others_can_read(top / "slurm.conf", up.folder) and others_can_read(up.hostfile, up.folder)


def test_a_folder_or_file_someone_else_made_first_or_a_symbolic_link_is_refused_saying_which(tmp_path, monkeypatch):
    from ringlab.cluster import layout, rootless
    from ringlab.lessons.lab05_scaling import realcluster

    if os.geteuid() != 0:
        pytest.skip("making a folder of another user's needs root")
    mine = f"ringlab-cluster-{os.getuid()}"
    theirs = tmp_path / "theirs" / mine
    theirs.mkdir(parents=True)
    os.chown(theirs, int(NOBODY), int(NOBODY))
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / mine).symlink_to(theirs)
    monkeypatch.setattr(rootless.subprocess, "Popen", lambda *a, **k: pytest.fail("a keeper was started"))
    for where, why in ((theirs.parent, "belongs to user 65534, not to this user"), (linked, "is a symbolic link")):
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(where))
        with pytest.raises(RuntimeError, match=f"{where / mine} {why}.*remove it"):
            rootless.start_keeper("lab")
    assert not (theirs / "lab.keeper").exists()

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    lock = tmp_path / f"ringlab-cluster-lab05-{os.getuid()}.lock"
    target = tmp_path / "precious"
    target.write_text("keep me")
    lock.symlink_to(target)
    with pytest.raises(RuntimeError, match="is a symbolic link"):
        with realcluster._one_at_a_time("lab05"):
            pass
    assert target.read_text() == "keep me"
    lock.unlink()
    lock.write_text("")
    os.chown(lock, int(NOBODY), int(NOBODY))
    with pytest.raises(RuntimeError, match="belongs to user 65534"):
        with realcluster._one_at_a_time("lab05"):
            pass


def test_down_deleting_the_lock_never_lets_two_hold_it(tmp_path, monkeypatch):
    """down deletes the lock while it holds it: one who waited on that file meanwhile takes the new one in turn,
    instead of holding the deleted file while a third holds the new one."""
    from ringlab.cluster import layout

    monkeypatch.setattr(layout, "RUN", tmp_path)
    held, seen = [], []

    def hold(who: str) -> None:
        with layout.locked("x"):
            held.append(who)
            seen.append(len(held))
            time.sleep(0.5)
            held.remove(who)

    with layout.locked("x", remove=True):
        waiting = threading.Thread(target=hold, args=("waited",))
        waiting.start()
        time.sleep(0.3)  # it has opened the file and waits on it
    hold("came after")
    waiting.join(10)
    assert seen == [1, 1]  # never both at once


def test_the_state_file_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from ringlab.cluster import layout

    monkeypatch.setattr(layout, "RUN", tmp_path)
    ours = Layout("state")
    ours.folder.mkdir()
    layout.write_state(ours, seconds=1)

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(layout.os, "replace", full)
    with pytest.raises(OSError, match="No space"):
        layout.write_state(ours, seconds=2)
    assert layout.read_state("state")["seconds"] == 1
    assert [p.name for p in ours.folder.iterdir()] == ["cluster.json"]  # nothing half-written left beside it


def test_root_runs_the_systems_ip_and_nsenter_never_ones_from_the_jobs_path(up, tmp_path):
    """The job's PATH leads with the cluster's ssh and the venv, and carries the user's: what root runs to enter
    the nodes (ip, nsenter, setpriv) is the system's, found apart from it."""
    marker = tmp_path / "ran-as-root"
    for program in ("ip", "nsenter", "setpriv"):
        fake = tmp_path / program
        real = shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin")
        fake.write_text(f"#!/bin/sh\necho {program} >> {marker}\nexec {real} \"$@\"\n")
        fake.chmod(0o755)
    path = f"{tmp_path}{os.pathsep}{os.environ['PATH']}"
    root = {k: v for k, v in os.environ.items() if not k.startswith("SUDO_")}
    for env in ({**root, "PATH": path}, {**root, "PATH": path, "SUDO_UID": NOBODY, "SUDO_GID": NOBODY}):
        done = cluster("run", "-n", "2", "--launcher", "mpiexec", "--timeout", "90", "--", "true", env=env)
        assert done.returncode == 0, done.stderr
    assert not marker.exists(), marker.read_text()
