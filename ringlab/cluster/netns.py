"""Namespaces, links and their shaping: the nodes of a cluster on this machine, and running things on them.

A node is a network namespace (its own interfaces and addresses) plus a UTS namespace (its own host
name), kept alive by a bind mount so no process has to hold it. Its ``eth0`` is one end of a veth pair
whose other end sits on a bridge inside the cluster's switch namespace. The kernel's token bucket
filter (``tc qdisc ... tbf``) shapes both ends, so each node has a full-duplex link of the declared
rate, as a network card would; ``--latency`` needs netem, which some kernels lack (then it is refused).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import relay
from .layout import ETC_NETNS, HEAD, Layout, private_folder, write_whole

SHAPED_QUEUE_MS = 50  # how long a packet may wait in the token bucket before the kernel drops it


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a system command; a RuntimeError with its own error text when it fails."""
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {(done.stderr or done.stdout).strip()}")
    return done


def namespaces(prefix: str) -> list[str]:
    """The network namespaces whose names start with ``prefix`` (``ip netns list``)."""
    listed = sh("ip", "netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.strip() and line.split()[0].startswith(prefix)]


def pids_in(namespace: str) -> list[int]:
    """The processes whose network namespace is ``namespace``."""
    done = sh("ip", "netns", "pids", namespace, check=False)
    return [int(p) for p in done.stdout.split() if p.isdigit()]


def end_processes(pids: list[int], grace: float = 3.0) -> list[int]:
    """SIGTERM each of ``pids`` (never this process or its parents), SIGKILL whatever is left after ``grace``
    seconds; returns the PIDs that were ended."""
    spare, pid = set(), os.getpid()
    while pid > 1:  # this process and its ancestors: a `down` run from inside the head must not end itself
        spare.add(pid)
        pid = _parent(pid)
    targets = [p for p in pids if p not in spare]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in targets:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline and any(alive(p) for p in targets):
            time.sleep(0.05)
        if not any(alive(p) for p in targets):
            break
    return targets


def tagged(layout: Layout, entry: str) -> list[int]:
    """The processes in the cluster's namespaces whose environment holds ``entry`` (``NAME=VALUE``): those of one
    run, which inherit it from the command the run started."""
    wanted = entry.encode()
    return [p for ns in namespaces(layout.prefix) for p in pids_in(ns) if wanted in _environment(p)]


def _environment(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def build(layout: Layout) -> None:
    """Make the switch, the head and every node, link them, name them and shape the nodes' links."""
    switch = layout.switch
    sh("ip", "netns", "add", switch)
    sh("ip", "-n", switch, "link", "set", "lo", "up")
    sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
    sh("ip", "-n", switch, "link", "set", "br0", "up")
    for host in [HEAD, *layout.hosts]:
        ns = layout.namespace(host)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", switch, "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "-n", switch, "link", "set", host, "master", "br0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", ns, "addr", "add", f"{layout.address(host)}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        name_host(layout, host)
        if host != HEAD:  # the head's link carries only control traffic: left as fast as the machine
            shape(ns, "eth0", layout.link_bps, layout.latency_ms)  # what the node sends
            shape(switch, host, layout.link_bps, layout.latency_ms)  # what the node receives


def name_host(layout: Layout, host: str) -> None:
    """Give ``host`` its own host name (a UTS namespace kept by a bind mount) and the cluster's /etc/hosts."""
    keep = layout.uts_file(host)
    keep.parent.mkdir(parents=True, exist_ok=True)
    keep.touch()
    sh("unshare", f"--uts={keep}", "hostname", host)
    private_folder(ETC_NETNS, 0o755)  # every user of the node reads its hosts, whatever root's umask
    private_folder(layout.etc(host), 0o755)
    write_whole(layout.etc(host) / "hosts", layout.hosts_text().encode(), 0o644)


def shape(namespace: str, device: str, bits_per_s: float, latency_ms: float = 0.0) -> None:
    """Limit what leaves ``device`` to ``bits_per_s`` (tbf), after ``latency_ms`` of delay (netem) if asked."""
    rate = f"{int(bits_per_s)}bit"
    burst = max(int(bits_per_s / 8 * 0.001), 32 * 1024)  # a millisecond of the rate, and room for a TSO burst
    tbf = ["rate", rate, "burst", str(burst), "latency", f"{SHAPED_QUEUE_MS}ms"]
    if latency_ms:
        done = sh("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "handle", "1:", "netem",
                  "delay", f"{latency_ms}ms", check=False)
        if done.returncode != 0:
            raise RuntimeError(f"--latency needs the kernel's netem (sch_netem), which this kernel lacks "
                               f"({done.stderr.strip()}): load it (modprobe sch_netem; on Ubuntu the package "
                               "linux-modules-extra-$(uname -r)) or leave --latency out; rl.emulate() adds "
                               "latency without the kernel")
        sh("tc", "-n", namespace, "qdisc", "add", "dev", device, "parent", "1:", "handle", "2:", "tbf", *tbf)
    else:
        sh("tc", "-n", namespace, "qdisc", "add", "dev", device, "root", "tbf", *tbf)


def node_command(layout: Layout, host: str, argv: list[str]) -> list[str]:
    """``argv`` run on ``host``: inside its network namespace (with its /etc/hosts) and its host name."""
    return [system("ip"), "netns", "exec", layout.namespace(host), system("nsenter"), f"--uts={layout.uts_file(host)}",
            "--", *argv]


def system(program: str) -> str:
    """Where the system keeps ``program`` (root runs it: never one from a job's PATH, which leads with the venv)."""
    return shutil.which(program, path=relay.SYSTEM_PATH) or program


def write_ssh(layout: Layout, folder: Path) -> Path:
    """An ``ssh`` for the cluster's nodes, put first on PATH in the head: ``ssh node2 COMMAND`` runs COMMAND on
    node2 as ssh would (mpiexec's hydra and ipyparallel's ssh launchers start their proxies with it). Run by a user
    other than root (a job under sudo), it asks the run to start COMMAND, as that user (:mod:`.relay`)."""
    path = folder / "ssh"
    known = " ".join([HEAD, *layout.hosts])
    gpus = "".join(f"[ \"$host\" = {h} ] && export CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-{layout.gpus_of(h)}}}\n"
                   for h in layout.hosts if layout.gpus_of(h) is not None)
    path.write_text(f"""#!/bin/sh
# ssh HOST COMMAND, for the nodes of ringlab cluster {layout.name!r} (written by `ringlab cluster up`):
# runs COMMAND on HOST's namespaces, as ssh would on a real host.
while [ $# -gt 0 ]; do
    case "$1" in
        -[1246AaCfGgKkMNnqsTtVvXxYy]*) shift ;;
        -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host=${{1#*@}}
[ $# -gt 0 ] && shift
case " {known} " in
    *" $host "*) ;;
    *) echo "ssh: $host is not a node of ringlab cluster {layout.name} ({known})" >&2; exit 255 ;;
esac
{gpus}if [ -n "$RINGLAB_RELAY" ] && [ "$(id -u)" != 0 ]; then  # a user's job under sudo: the run enters the node
    exec {sys.executable} -I {relay.__file__} "$host" "$*"
fi
exec {system("ip")} netns exec {layout.prefix}$host {system("nsenter")} --uts={layout.folder}/uts/$host -- sh -c "$*"
""")
    path.chmod(0o755)
    return path


def link_bytes(layout: Layout, host: str) -> dict:
    """Bytes the node's link has carried so far: ``sent`` by the node and ``received`` by it (the switch's
    counters of its port)."""
    done = sh("ip", "-n", layout.switch, "-j", "-s", "link", "show", host)
    stats = json.loads(done.stdout)[0]["stats64"]
    return {"sent": stats["rx"]["bytes"], "received": stats["tx"]["bytes"]}


def shaping(layout: Layout, host: str) -> str:
    """The node's queueing disciplines as tc prints them (the proof that the link is shaped)."""
    return sh("tc", "-n", layout.namespace(host), "qdisc", "show", "dev", "eth0").stdout.strip()


def remove(layout: Layout) -> dict:
    """Take down everything of the cluster's prefix: end its processes (by PID), unmount its host names,
    delete its namespaces (links go with them) and /etc/netns entries. Returns what was removed."""
    found = namespaces(layout.prefix)
    ended = []
    for ns in found:
        ended += end_processes(pids_in(ns))
    uts = layout.folder / "uts"
    if uts.is_dir():
        for keep in uts.iterdir():
            sh("umount", str(keep), check=False)
    for ns in found:
        sh("ip", "netns", "delete", ns, check=False)
    etc = sorted(ETC_NETNS.glob(layout.prefix + "*")) if ETC_NETNS.is_dir() else []
    for folder in etc:
        for item in folder.iterdir():
            item.unlink()
        folder.rmdir()
    return {"namespaces": found, "processes": ended, "etc": [str(p) for p in etc]}
