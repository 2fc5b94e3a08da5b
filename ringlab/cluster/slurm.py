"""Slurm on the cluster's nodes: munged and slurmctld in the head, one slurmd per node, all of them its own.

Debian's ``slurm-wlm`` and ``munge`` packages supply the programs; the cluster gives them their own
key, socket, configuration, spool folders and logs under its folder, so the machine's own munge and
Slurm (if any) are neither used nor touched. The partition ``ringlab`` holds every node and is the
default; ``srun`` and ``sbatch`` use Slurm's PMI-2 (``MpiDefault=pmi2``), which MPICH's ranks speak, and
MPICH's OFI netmod (see ``TASK_PROLOG``).
"""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from pathlib import Path

from .layout import HEAD, SLOTS, Layout, private_folder, write_whole
from .netns import node_command

PARTITION = "ringlab"
PROGRAMS = {"munged": "munge", "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "srun": "slurm-wlm",
            "sbatch": "slurm-wlm", "sinfo": "slurm-wlm"}  # program -> the Debian package that has it


# What every Slurm task of the cluster runs before the job (its "export" lines set the task's environment): MPICH's
# OFI netmod unless the job chose one. A node root's UCX business card is a fixed 4096 bytes (MPID_MAX_BC_SIZE,
# read past the end of UCX's address), sent over PMI as nine hex segments of up to 1022 characters. Slurm's
# PMI-2 plugin serves the mpich wheel's PMI-1 requests and takes one read() of at most 1024 bytes as one request
# ("TODO: read until newline", src/plugins/mpi/pmi2/pmi1.c): a segment whose bytes are mostly non-zero overflows
# it, "value not properly terminated in client request", and MPI_Init fails on every rank. Whether it does
# depends on the heap behind the address: one program never, another four times in a row. OFI's card is its tcp
# address, 16 bytes. mpiexec's own PMI server reads whole lines, and its jobs keep MPICH's default, UCX.
TASK_PROLOG = """# MPICH's OFI netmod under srun: Slurm's PMI-2 cannot take UCX's address in whole lines (ringlab.cluster.slurm)
[ -n "$MPIR_CVAR_CH4_NETMOD" ] || echo export MPIR_CVAR_CH4_NETMOD=ofi
"""


def missing() -> list[str]:
    """The Slurm and munge programs this machine lacks, each with its Debian package."""
    return [f"{program} (Debian package {package})" for program, package in PROGRAMS.items()
            if shutil.which(program) is None and not Path("/usr/sbin", program).exists()]


def folder(layout: Layout) -> Path:
    return layout.folder / "slurm"


def private(layout: Layout) -> Path:
    """munge's key, Slurm's state and spool folders, the daemons' logs and PIDs: root's alone (0700). The folder
    above holds only what a job's user reads: slurm.conf and munge's socket."""
    return folder(layout) / "private"


def conf(layout: Layout) -> Path:
    return folder(layout) / "slurm.conf"


def socket(layout: Layout) -> Path:
    return folder(layout) / "munge.socket"


def env(layout: Layout) -> dict:
    """What srun, sbatch and sinfo need to find this cluster's Slurm."""
    return {"SLURM_CONF": str(conf(layout))}


def write_config(layout: Layout) -> None:
    """munge's key, slurm.conf, cgroup.conf and a task prolog that deals out GPUs, in the cluster's folder."""
    where = private_folder(folder(layout), 0o755)
    own = private_folder(private(layout))
    write_whole(own / "munge.key", secrets.token_bytes(1024), 0o400)  # never readable by others, not for a moment
    for host in layout.hosts:
        private_folder(own / f"spool-{host}")
    private_folder(own / "state")
    prolog = where / "task_prolog"
    cases = "".join(f"    {h}) echo export CUDA_VISIBLE_DEVICES={layout.gpus_of(h)} ;;\n" for h in layout.hosts
                    if layout.gpus_of(h) is not None)
    prolog.write_text(f"#!/bin/sh\n# each node's share of this machine's GPUs (--gpus-per-node)\ncase \"$(hostname)\" in\n"
                      f"{cases}esac\n{TASK_PROLOG}")
    prolog.chmod(0o755)
    nodes = ",".join(layout.hosts)
    addresses = ",".join(layout.address(h) for h in layout.hosts)
    write_whole(conf(layout), f"""# ringlab cluster {layout.name}: written by `ringlab cluster up`, removed by `ringlab cluster down`
ClusterName=ringlab{layout.name}
SlurmctldHost={HEAD}({layout.address(HEAD)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket(layout)}
StateSaveLocation={own}/state
SlurmdSpoolDir={own}/spool-%n
SlurmctldPidFile={own}/slurmctld.pid
SlurmdPidFile={own}/slurmd-%n.pid
SlurmctldLogFile={own}/slurmctld.log
SlurmdLogFile={own}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog={prolog}
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=5
NodeName={nodes} NodeAddr={addresses} CPUs={SLOTS} State=UNKNOWN
PartitionName={PARTITION} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
""".encode(), 0o644)  # srun and sbatch read it, as the job's user too
    write_whole(where / "cgroup.conf", cgroup_conf().encode(), 0o644)


def cgroup_conf(root: Path = Path("/sys/fs/cgroup")) -> str:
    """cgroup.conf for slurmd. Tasks are tracked without cgroups (linuxproc), but slurmd still opens them:
    on a machine with cgroup v1 (or v1 and v2 side by side, which slurmd refuses to guess between) it is
    told v1, and mounts them itself, since ``ip netns exec`` gives it a fresh /sys; on v2 alone it finds v2."""
    if (root / "cgroup.controllers").exists():
        return "# cgroup v2 alone: slurmd finds it\nCgroupPlugin=autodetect\n"
    return "# cgroup v1 here (perhaps beside v2): say so; ip netns exec gives a fresh /sys to mount them in\n" \
           "CgroupPlugin=cgroup/v1\nCgroupAutomount=yes\n"


def _daemon(argv: list[str], log: Path, layout: Layout) -> int:
    """Start one daemon in the foreground of its own session, its output to ``log``; its PID."""
    with open(log, "ab") as out:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, close_fds=True, env={**os.environ, **env(layout)})
    return child.pid


def start(layout: Layout, timeout: float = 60) -> dict:
    """munged and slurmctld in the head, slurmd on every node; waits until Slurm calls every node idle.
    Returns the daemons' PIDs by name."""
    where = private(layout)
    pids = {"munged": _daemon(node_command(layout, HEAD, [
        "munged", "--foreground", "--force", f"--socket={socket(layout)}", f"--key-file={where / 'munge.key'}",
        f"--pid-file={where / 'munged.pid'}", f"--log-file={where / 'munged.log'}",
        f"--seed-file={where / 'munged.seed'}"]), where / "munged.out", layout)}
    _wait_for(lambda: socket(layout).exists(), 10, "munged did not open its socket", where / "munged.log")
    pids["slurmctld"] = _daemon(node_command(layout, HEAD, ["slurmctld", "-D", "-i"]), where / "slurmctld.out",
                                layout)
    for host in layout.hosts:
        pids[f"slurmd@{host}"] = _daemon(node_command(layout, host, ["slurmd", "-D", "-N", host]),
                                         where / f"slurmd-{host}.out", layout)
    _wait_for(lambda: idle(layout), timeout, f"Slurm's nodes did not become idle within {timeout:g} s",
              where / "slurmctld.log")
    return pids


def sinfo(layout: Layout) -> str:
    """``sinfo``'s node list (name and state), asked from the head."""
    done = subprocess.run(node_command(layout, HEAD, ["sinfo", "-h", "-N", "-o", "%N %T"]), capture_output=True,
                          text=True, env={**os.environ, **env(layout)}, timeout=20)
    return done.stdout.strip()


def idle(layout: Layout) -> bool:
    """Whether Slurm reports every node of the cluster idle."""
    states = dict(line.split() for line in sinfo(layout).splitlines() if len(line.split()) == 2)
    return sorted(states) == sorted(layout.hosts) and all(s == "idle" for s in states.values())


def _wait_for(ready, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
            raise RuntimeError(f"{what}; the end of {log}:\n{tail}")
        time.sleep(0.2)
