"""Bring a cluster on this machine up, say how it stands, run jobs on it, take it down.

``up`` is idempotent: the same cluster already up is left as it is; anything else carrying the cluster's
prefix (a different cluster of that name, or what a killed run left half-built) is removed first. Jobs
run from the head namespace, with MPI between nodes forced onto TCP over the nodes' ``eth0`` (UCX's tcp
transport; OFI's tcp provider where MPICH uses OFI, as Slurm's tasks do: see ``slurm.TASK_PROLOG``), so that
their bytes cross the shaped links.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from ..mpi.devices import SHARED_CORES
from .launch import YIELDING_MPICH, find_mpiexec
from . import netns, relay, rootless, slurm
from .layout import HEAD, Layout, format_rate, locked, private_folder, read_state, write_state, write_whole

RUN_TAG = "RINGLAB_RUN"  # every process of one `cluster run` inherits RINGLAB_RUN=<its own id>: how it is found
TCP_BETWEEN_NODES = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "eth0", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "eth0",
                     "GLOO_SOCKET_IFNAME": "eth0"}  # torch's gloo too, for DDP across the nodes


class ClusterError(RuntimeError):
    """This machine cannot hold the cluster, or the cluster is not there: says what is missing and what to run."""


def missing(layout: Layout) -> list[str]:
    """What this machine lacks for ``layout``, each with what to run to get it (empty: nothing)."""
    if not sys.platform.startswith("linux"):
        return [f"Linux network namespaces: this is {sys.platform}; try it in a Linux virtual machine"]
    problems = []
    if os.geteuid() != 0:
        sudo = f"`sudo {shutil.which('ringlab') or sys.executable + ' -m ringlab'} cluster ...`"
        instead = rootless.why_not()
        if instead:
            problems.append(f"root: only root may make network namespaces and shape links; run {sudo} (or else "
                            f"{instead})")
        elif layout.slurm:
            problems.append(f"root for Slurm (its daemons want the machine's root): run {sudo}, or leave --slurm "
                            "out to run in user namespaces")
    tools = {"ip": "iproute2", "tc": "iproute2", "nsenter": "util-linux", "unshare": "util-linux",
             "umount": "mount"}
    lacking = sorted({package for tool, package in tools.items() if shutil.which(tool) is None})
    if lacking:
        problems.append(f"the programs {', '.join(t for t, p in tools.items() if p in lacking)}: "
                        f"apt-get install {' '.join(lacking)}")
    if layout.slurm and slurm.missing():
        problems.append(f"Slurm and munge ({'; '.join(slurm.missing())}): apt-get install slurm-wlm munge, "
                        "or leave --slurm out")
    try:
        find_mpiexec()
    except FileNotFoundError as err:
        problems.append(str(err))
    return problems


def up(layout: Layout) -> dict:
    """Build ``layout`` (unless exactly it is already up) and return its state; a ClusterError names what is
    missing."""
    problems = missing(layout)
    if problems:
        raise ClusterError("needs " + "; and ".join(problems))
    layout.folder.parent.mkdir(parents=True, exist_ok=True)
    with locked(layout.name):
        state = read_state(layout.name)
        if state and Layout(**state["layout"]).same_as(layout) and not problems_of(layout, state):
            return {**state, "already": True}
        cleaned = _remove(layout)
        start = time.monotonic()
        try:
            private_folder(layout.folder, 0o755)  # a job's user reads its hostfile and ssh
            netns.build(layout)
            bin_dir = private_folder(layout.folder / "bin", 0o755)
            netns.write_ssh(layout, bin_dir)
            write_whole(layout.hostfile, "".join(f"{h}\n" for h in layout.hosts).encode(), 0o644)
            daemons = {}
            if layout.slurm:
                slurm.write_config(layout)
                daemons = slurm.start(layout)
            write_state(layout, daemons=daemons, seconds=round(time.monotonic() - start, 2),
                        cleaned=list(cleaned["namespaces"]), hostfile=str(layout.hostfile))
        except BaseException:
            _remove(layout)
            raise
        return {**read_state(layout.name), "already": False}


def _remove(layout: Layout) -> dict:
    """Everything of the cluster's prefix, its folder included; what was removed."""
    removed = netns.remove(layout)
    if layout.folder.exists():
        shutil.rmtree(layout.folder)
        removed["folder"] = str(layout.folder)
    return removed


def down(name: str) -> dict:
    """Take the cluster ``name`` down, leftovers of killed runs included: what was removed."""
    layout = Layout(name)
    if os.geteuid() != 0:
        raise ClusterError("needs " + missing(layout)[0])
    with locked(name, remove=True):
        return _remove(layout)


def layout_of(name: str) -> Layout:
    """The layout of the cluster ``name`` that is up, or a ClusterError saying how to bring one up (or that
    only root may enter its namespaces)."""
    if os.geteuid() != 0:
        raise ClusterError("needs " + missing(Layout(name))[0])
    state = read_state(name)
    if state is None:
        named = f" --name {name}" if name != Layout().name else ""
        raise ClusterError(f"no cluster {name!r} is up: start one with `sudo ringlab cluster up --nodes 2{named}`")
    return Layout(**state["layout"])


def problems_of(layout: Layout, state: dict) -> list[str]:
    """What is wrong with a cluster that claims to be up (empty: nothing)."""
    have = set(netns.namespaces(layout.prefix))
    problems = [f"namespace {layout.namespace(h)} is gone" for h in [HEAD, "switch", *layout.hosts]
                if layout.namespace(h) not in have]
    problems += [f"{daemon} (PID {pid}) is not running" for daemon, pid in state.get("daemons", {}).items()
                 if not netns.alive(pid)]
    return problems


def environment(layout: Layout, base: dict | None = None, tag: str | None = None) -> dict:
    """The environment of jobs launched from the head: its ``ssh`` first on PATH, MPI on TCP between nodes,
    Slurm's configuration, and MPICH's waiting that yields the core (the nodes share this machine's cores); with
    ``tag``, the run's id (``RINGLAB_RUN``) and its Slurm jobs' name."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = os.pathsep.join([str(layout.folder / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(TCP_BETWEEN_NODES)
    for name, value in YIELDING_MPICH.items():
        env.setdefault(name, value)
    env.setdefault(SHARED_CORES, "1")  # and ringlab's own waiting, though each node's ranks fit its cores
    env["RINGLAB_CLUSTER"] = layout.name
    if layout.slurm:
        env.update(slurm.env(layout))
    if tag is not None:
        env[RUN_TAG] = tag
        if layout.slurm:  # srun and sbatch take a job's name from these, unless -J says otherwise
            env["SLURM_JOB_NAME"] = env["SBATCH_JOB_NAME"] = job_name(tag)
    return env


def job_command(layout: Layout, nranks: int, argv: list[str], nodes: int | None = None,
                launcher: str | None = None) -> list[str]:
    """``argv`` as an MPI job of ``nranks`` ranks on the first ``nodes`` nodes, in consecutive blocks per node:
    mpiexec with the cluster's hostfile, or srun when the cluster has Slurm (or ``launcher`` says which)."""
    nodes = layout.nodes if nodes is None else nodes
    if not 1 <= nodes <= layout.nodes:
        raise ClusterError(f"--nodes wants 1 to {layout.nodes} (the cluster's nodes), got {nodes}")
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < nodes:
        raise ClusterError(f"-n wants at least one rank per node ({nodes} nodes), got {nranks!r}")
    launcher = launcher or ("srun" if layout.slurm else "mpiexec")
    per_node = math.ceil(nranks / nodes)
    if launcher == "srun":
        if not layout.slurm:
            raise ClusterError(f"cluster {layout.name!r} has no Slurm: bring it up with --slurm, or use mpiexec")
        even = [f"--ntasks-per-node={per_node}"] if nranks % nodes == 0 else []
        # --kill-on-bad-exit: a rank that ends with an error ends the job (mpiexec does so only for a rank a signal
        # killed). Without it srun waits for the other ranks, which wait on the dead one; MPI_Abort is no help
        # where Slurm 22.05's PMI-2 cannot parse its message, which has happened here.
        return ["srun", "-N", str(nodes), "-n", str(nranks), *even, "--distribution=block", "--mpi=pmi2",
                "--kill-on-bad-exit=1", *argv]
    if launcher != "mpiexec":
        raise ClusterError(f"--launcher is mpiexec or srun, got {launcher!r}")
    return [find_mpiexec(), "-f", str(layout.hostfile), "-ppn", str(per_node), "-n", str(nranks), *argv]


def run(name: str, argv: list[str], nranks: int | None = None, nodes: int | None = None,
        launcher: str | None = None, timeout: float | None = None) -> int:
    """Run ``argv`` in the head (with ``nranks``: as an MPI job across the nodes); its exit status.

    Every process of the run inherits ``RINGLAB_RUN=<an id of its own>``, and every Slurm job it submits is
    named ``ringlab-<id>``. Past ``timeout`` (124), interrupted (KeyboardInterrupt, SIGTERM, SIGHUP) or on any
    other exception, exactly those processes and jobs are ended, on every node: another run on the same
    cluster, and the daemons, are left alone.
    """
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not 0 < timeout < math.inf):
        raise ClusterError(f"--timeout wants a number of seconds > 0, got {timeout!r}")
    layout = layout_of(name)
    if not argv:
        raise ClusterError("nothing to run: give a command after --, e.g. ringlab cluster run -n 4 -- python -m "
                           "mpi4py mine.py")
    command = argv if nranks is None else job_command(layout, nranks, argv, nodes, launcher)
    tag = uuid.uuid4().hex
    env = environment(layout, tag=tag)
    user = relay.user_of(env)
    ended, process, listener, folder = False, None, None, None
    try:
        if user:  # under sudo: the job runs as the user who ran it; the run enters the nodes for its ssh
            folder = tempfile.mkdtemp(prefix="run-", dir=layout.folder)
            os.chown(folder, *user)
            env[relay.ADDRESS] = os.path.join(folder, "ssh.sock")
            env.update(relay.home_of(user[0]))
            listener = relay.serve(env[relay.ADDRESS], user[0], _starter(layout, tag, user))
            command = relay.as_user(*user, command)
        with _stopping_signals_raise():
            process = subprocess.Popen(netns.node_command(layout, HEAD, command), env=env)
            code = process.wait(timeout)
        ended = True
        return code
    except subprocess.TimeoutExpired:
        print(f"ringlab cluster run: {' '.join(argv)} did not end within {timeout:g} s: ended, with everything it "
              "started on the nodes", file=sys.stderr)
        return 124
    except KeyboardInterrupt:
        print(f"ringlab cluster run: {' '.join(argv)} interrupted: ended, with everything it started on the nodes",
              file=sys.stderr)
        raise
    finally:
        if not ended:  # a run that ended by itself keeps what it left on purpose (an sbatch job, a server)
            end_run(layout, tag, env)
            if process is not None:
                process.wait(10)  # ended with the rest: reaped
        if listener is not None:
            listener.close()
            shutil.rmtree(folder, ignore_errors=True)


def _starter(layout: Layout, tag: str, user: tuple[int, int]):
    """What the run's relay does when the cluster's ssh asks: start COMMAND on HOST as ``user``, in the run (its
    tag), with the caller's environment given to the command only (ip and nsenter, root's, get a clean one)."""
    def start(host: str, command: str, env: dict, cwd: str, fds: list[int]) -> subprocess.Popen:
        if host not in [HEAD, *layout.hosts]:
            raise ValueError(f"{host} is not a node of ringlab cluster {layout.name}")
        job_env = [f"{k}={v}" for k, v in {**env, RUN_TAG: tag}.items() if "=" not in k]
        argv = relay.as_user(*user, ["env", "-i", f"--chdir={cwd}", *job_env, "sh", "-c", command])  # as the user
        return subprocess.Popen(netns.node_command(layout, host, argv), stdin=fds[0], stdout=fds[1], stderr=fds[2],
                                cwd="/", env={"PATH": relay.SYSTEM_PATH, RUN_TAG: tag})
    return start


def end_run(layout: Layout, tag: str, env: dict | None = None) -> list[int]:
    """End the run ``tag``: its Slurm jobs (by name) and its processes on every node (by their environment),
    nothing else; the PIDs ended."""
    if layout.slurm:  # the cluster's Slurm forgets the jobs, as well as their processes ending
        subprocess.run(netns.node_command(layout, HEAD, ["scancel", "--quiet", f"--name={job_name(tag)}"]),
                       env=env or environment(layout), capture_output=True, timeout=30)
    ended = []
    for _ in range(3):  # a launcher may start a process while the others end: look again
        found = netns.tagged(layout, f"{RUN_TAG}={tag}")
        if not found:
            break
        ended += netns.end_processes(found)
    return ended


def job_name(tag: str) -> str:
    """The name of the Slurm jobs of the run ``tag`` (srun and sbatch take it from the environment)."""
    return f"ringlab-{tag}"


@contextlib.contextmanager
def _stopping_signals_raise():
    """SIGTERM and SIGHUP raise SystemExit while inside (as Ctrl-C raises KeyboardInterrupt), so a run that is
    told to stop ends its processes first; outside the main thread, where Python cannot catch signals, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def status(name: str) -> list[str]:
    """How the cluster ``name`` stands, in lines: nodes, addresses, links and their shaping, Slurm, problems."""
    layout = layout_of(name)
    state = read_state(name)
    lines = [f"ringlab cluster {name}: {layout.nodes} node{'s' * (layout.nodes != 1)} on this machine, "
             f"each a network and host-name namespace; links shaped by the kernel (tc tbf) to "
             f"{format_rate(layout.link_bps)}" + (f", {layout.latency_ms:g} ms latency (netem)" if layout.latency_ms
                                                   else "") + ": not a real network",
             f"  hostfile: {layout.hostfile}",
             f"  {HEAD:<8} {layout.address(HEAD):<12} launch from here: ringlab cluster run -- COMMAND"]
    for host in layout.hosts:
        carried = netns.link_bytes(layout, host)
        gpus = f", GPUs {layout.gpus_of(host)}" if layout.gpus_per_node else ""
        lines.append(f"  {host:<8} {layout.address(host):<12} {len(netns.pids_in(layout.namespace(host)))} processes, "
                     f"link carried {carried['sent']} B out, {carried['received']} B in{gpus}")
    if layout.slurm:
        lines.append(f"  Slurm: partition {slurm.PARTITION}, SLURM_CONF={slurm.conf(layout)}; "
                     + "; ".join(slurm.sinfo(layout).splitlines()))
    problems = problems_of(layout, state)
    lines += [f"  problem: {p} (ringlab cluster up again rebuilds it)" for p in problems] or ["  healthy"]
    return lines
