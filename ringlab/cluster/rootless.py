"""Without root: the cluster inside a user namespace of its own, where this user is root over what it makes.

Run by an ordinary user on a Linux that allows unprivileged user namespaces, ``ringlab cluster up`` first
starts a keeper: a process holding a user namespace (this user mapped to root in it), a network namespace
and a mount namespace with a private /run (and a private /etc/netns, or an overlay on /etc where there is
none). Every verb then runs inside the keeper's namespaces, where it is root and the code for root works
unchanged; ``down`` ends the keeper, and with it every namespace, link and mount the cluster made. The
machine's own network, /run and /etc are never touched. Slurm is not offered there: its daemons want
the machine's root.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .layout import UnsafePath, check_private, private_folder, write_whole

KEEPER = ("mount -t tmpfs ringlab /run && mkdir /run/netns && "
          "if [ -d /etc/netns ]; then mount -t tmpfs ringlab /etc/netns; else "
          "mkdir /run/etc-upper /run/etc-work && mount -t overlay ringlab "
          "-o lowerdir=/etc,upperdir=/run/etc-upper,workdir=/run/etc-work /etc; fi && echo ready && exec sleep infinity")
UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--mount", "--propagation", "private"]


def folder() -> Path:
    """Where this user's keepers are recorded (``$XDG_RUNTIME_DIR``, else the temporary folder): a folder of this
    user's alone, which it makes (:func:`ringlab.cluster.layout.private_folder` refuses one someone else made)."""
    return Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()) / f"ringlab-cluster-{os.getuid()}"


def why_not() -> str | None:
    """Why this user cannot hold a cluster in user namespaces (None: it can)."""
    try:
        done = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=20)
    except FileNotFoundError:
        return "util-linux's unshare (apt-get install util-linux)"
    if done.returncode != 0:
        return (f"user namespaces, which this system refuses to ordinary users ({done.stderr.strip()}): allow them "
                "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 and later "
                "kernel.apparmor_restrict_unprivileged_userns=0), or run as root with sudo")
    return None


def keeper(name: str) -> int | None:
    """The PID of this user's keeper of cluster ``name``, if it still runs (None: none)."""
    try:
        pid = int((folder() / f"{name}.keeper").read_text())
        with open(f"/proc/{pid}/status") as fh:
            uid = next(int(line.split()[1]) for line in fh if line.startswith("Uid:"))
        mine = uid == os.getuid() and os.readlink(f"/proc/{pid}/ns/user") != os.readlink("/proc/self/ns/user")
        return pid if mine and Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep") else None
    except (OSError, ValueError, StopIteration):
        return None


def start_keeper(name: str) -> int:
    """Start the keeper of cluster ``name`` and record it; a RuntimeError with what it said if it cannot."""
    private_folder(folder())
    child = subprocess.Popen([*UNSHARE, "--", "sh", "-c", KEEPER], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    if child.stdout.readline().strip() != "ready":  # unshare and sh exec in turn: child.pid is the keeper
        child.kill()
        raise RuntimeError(f"could not make the cluster's namespaces as an ordinary user: {child.stderr.read().strip()}")
    child.stdout.close()
    write_whole(folder() / f"{name}.keeper", str(child.pid).encode())
    return child.pid


def stop_keeper(name: str, pid: int) -> None:
    """End the keeper (everything inside its namespaces goes with it) and forget it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:
            os.waitpid(pid, os.WNOHANG)  # ours when up started it in this process
        except ChildProcessError:
            pass
        time.sleep(0.05)
    (folder() / f"{name}.keeper").unlink(missing_ok=True)
    try:
        folder().rmdir()  # when it was the last of this user's clusters
    except OSError:
        pass


def inside(pid: int, argv: list[str]) -> list[str]:
    """``ringlab cluster ARGV`` run inside the keeper's namespaces, as their root, from the current folder."""
    return ["nsenter", f"--target={pid}", "--user", "--mount", "--net", "--preserve-credentials",
            f"--wd={os.getcwd()}", "--", sys.executable, "-m", "ringlab", "cluster", *argv]


def main(args, argv: list[str]) -> int:
    """Carry out ``ringlab cluster VERB`` (``argv``: what follows ``cluster``) for an ordinary user."""
    def error(text: str) -> int:
        print(f"ringlab cluster {args.verb}: error: {text}", file=sys.stderr)
        return 2

    why = why_not()
    if why:
        return error(f"needs root, or else {why}")
    try:
        check_private(folder())  # one another user made first could name a keeper of theirs, or collect ours
    except UnsafePath as err:
        return error(str(err))
    pid = keeper(args.name)
    if args.verb == "up":
        if args.slurm:
            return error("--slurm needs root (slurmd and slurmctld want the machine's root): run with sudo, or "
                         "leave --slurm out")
        started = pid is None
        pid = start_keeper(args.name) if started else pid
        code = subprocess.call(inside(pid, argv))
        if code != 0 and started:
            stop_keeper(args.name, pid)
        return code
    if pid is None:
        if args.verb == "down":
            print(f"ringlab cluster {args.name}: down; nothing of this user's was up")
            return 0
        named = f" --name {args.name}" if args.name != "lab" else ""
        return error(f"no cluster {args.name!r} of this user is up: start one with `ringlab cluster up --nodes 2{named}`")
    code = subprocess.call(inside(pid, argv))
    if args.verb == "down":
        stop_keeper(args.name, pid)
    return code
