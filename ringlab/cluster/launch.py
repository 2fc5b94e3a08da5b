"""Starting MPI jobs from Python (find mpiexec, run, run again on N ranks) and torch process groups on MPI ranks."""
from __future__ import annotations

import ipaddress
import os
import socket
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from ..mpi import devices


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


# What makes MPICH's own waiting give the core away when ranks outnumber cores: it polls in a busy
# loop and calls sched_yield every MPIR_CVAR_POLLS_BEFORE_YIELD polls (default 1000); with
# MPIR_CVAR_CH4_PROGRESS_THROTTLE it also sleeps (usleep(1)) after that many polls without progress.
YIELDING_MPICH = {"MPIR_CVAR_POLLS_BEFORE_YIELD": "1", "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1",
                  "MPIR_CVAR_CH4_PROGRESS_THROTTLE_NO_PROGRESS_COUNT": "64"}

RANKS_PER_CORE = 16  # more ranks than this on one core is refused: they would only wait for each other


def check_nranks(nranks, cores: int | None = None) -> str | None:
    """``nranks`` for a job on this machine: a ValueError when it cannot be, a warning (text) when
    there are more ranks than cores, else None."""
    cores = cores or devices.cores()
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"need at least 1 rank, got {nranks!r}")
    if nranks > RANKS_PER_CORE * cores:
        raise ValueError(f"{nranks} ranks on {cores} cores is more than {RANKS_PER_CORE} a core: they would spend "
                         f"their time waiting for each other; use at most {RANKS_PER_CORE * cores}")
    if nranks > cores:
        return (f"{nranks} ranks share {cores} cores (oversubscribed): timings measure the scheduler as much as "
                "the algorithm")
    return None


def local_env(base: dict | None = None, nranks: int | None = None) -> dict:
    """The environment for a job on this machine only: the mpich wheel's ranks talk over loopback
    (UCX_NET_DEVICES=lo) instead of listening on the machine's network addresses; with more
    ``nranks`` than cores, or where ``RINGLAB_YIELD=1`` says the cores run other work too, MPICH's
    waiting yields the core (:data:`YIELDING_MPICH`). A value the user set stays."""
    env = dict(os.environ if base is None else base)
    env.setdefault("UCX_NET_DEVICES", "lo")
    if (nranks is not None and nranks > devices.cores()) or devices.cores_shared(env):
        for name, value in YIELDING_MPICH.items():
            env.setdefault(name, value)
    return env


def mpiexec_command(nranks: int, args: list[str]) -> list[str]:
    """``mpiexec -n N python -m ringlab.cluster.runner ARGS``: mpi4py's runner, which aborts the job when a rank
    raises, after ringlab's private communicator is made while every rank is there (:mod:`ringlab.cluster.runner`)."""
    check_nranks(nranks)
    return [find_mpiexec(), "-n", str(nranks), sys.executable, "-m", "ringlab.cluster.runner", *args]


def _die_with_parent() -> None:
    """In a child, before it runs: the kernel sends it SIGTERM when the process that started it dies, however
    it dies (Linux's PR_SET_PDEATHSIG), so an mpiexec never outlives the command that started it."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def start(command: list[str], **kwargs) -> subprocess.Popen:
    """Popen ``command`` (an mpiexec) so that it ends when this process does (:func:`_die_with_parent`)."""
    return subprocess.Popen(command, preexec_fn=_die_with_parent, **kwargs)


def stop(process: subprocess.Popen, grace: float = 5.0) -> None:
    """End ``process`` (ours, by PID): SIGTERM first, which mpiexec passes on to its ranks, SIGKILL after ``grace``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_mpi(nranks: int, args: list[str], timeout: float = 300, env: dict | None = None,
            **kwargs) -> subprocess.CompletedProcess:
    """Run ``python -m ringlab.cluster.runner ARGS`` (mpi4py's runner) on ``nranks`` ranks; end the job after
    ``timeout`` seconds.

    Raises subprocess.TimeoutExpired when it does not finish in time (the job is ended first: SIGTERM, which
    mpiexec passes to its ranks, then SIGKILL).
    """
    merged = {**local_env(nranks=nranks), "MPIEXEC_TIMEOUT": str(int(timeout) + 5), **(env or {})}
    command = mpiexec_command(nranks, args)
    process = start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=merged, **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        stop(process)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def without_nranks(argv: list[str]) -> list[str]:
    """``argv`` less its rank count: ``-n N``, ``--nranks N``, ``-nN`` and ``--nranks=N`` all go."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("-n", "--nranks"):
            skip = True  # and the count after it
        elif not (arg.startswith("--nranks=") or (arg.startswith("-n") and arg[2:].isdigit())):
            out.append(arg)
    return out


def relaunch(nranks: int, argv: list[str], target: list[str]) -> int:
    """Run ``python -m ringlab.cluster.runner TARGET ARGV`` (mpi4py's runner) as an MPI job of ``nranks`` ranks,
    ``argv`` without its -n.

    For commands that take ``-n N`` to start their own job: ``target`` is ``["-m", "ringlab"]`` or a
    script's path. Output goes to this process's; returns the job's exit status.
    """
    warning = check_nranks(nranks)
    if warning:
        print(f"ringlab: {warning}", file=sys.stderr, flush=True)
    job = start(mpiexec_command(nranks, [*target, *without_nranks(argv)]), env=local_env(nranks=nranks))
    try:
        return job.wait()
    finally:  # interrupted, or ended by a signal Python sees: the job goes too (killed outright: the kernel sees to it)
        stop(job)


@contextmanager
def torch_process_group(comm=None, backend: str = "gloo"):
    """torch.distributed's default group over the ranks of ``comm`` (default COMM_WORLD).

    Rank 0 opens torch's TCP store on a port of 127.0.0.1 the system picks, listening on loopback only (a port
    probed first and bound later can be taken in between), and broadcasts the port; every rank joins with its
    MPI rank; gloo connects over loopback (``GLOO_SOCKET_IFNAME=lo`` unless set). When the ranks span several
    hosts (a cluster), rank 0 listens on an address of its host the other nodes reach instead (:func:`store_address`:
    ``MASTER_ADDR``, else its host name's, else that of its route to another node). On leaving,
    a barrier, then the group is destroyed: without the barrier rank 0's store may go away while
    another rank still talks to it, and torch aborts that rank at exit. A group that is already
    running is used as it is and left running. Call on every rank of ``comm``, and let go of what
    holds the group (a DistributedDataParallel wrapper) inside the block: freed after the teardown,
    it may wait forever on rank 0's store.
    """
    import torch.distributed as dist
    from mpi4py import MPI

    if dist.is_initialized():
        yield dist
        return
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = comm.allgather(MPI.Get_processor_name())
    one_node = len(set(hosts)) == 1
    if one_node:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo's own connections, on loopback too
    # on one node everything stays on loopback; across nodes (a cluster the user asked for) rank 0 listens on
    # an address of its host that the other nodes reach, and tells them which (or why there is none)
    address = "127.0.0.1" if one_node else comm.bcast(_reachable_or_why(hosts) if rank == 0 else None, root=0)
    if isinstance(address, Exception):
        raise address
    listener = _listener(address) if rank == 0 else None
    server = (dist.TCPStore(address, listener.getsockname()[1], size, is_master=True, wait_for_workers=False,
                            master_listen_fd=listener.fileno()) if rank == 0 else None)
    port = comm.bcast(server.port if rank == 0 else None, root=0)
    store = server if rank == 0 else dist.TCPStore(address, port, size, is_master=False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=size)
    yield dist  # an exception skips the teardown: its barrier would wait for ranks that may never come
    dist.barrier()
    dist.destroy_process_group()
    if listener is not None:
        listener.close()


def store_address(hosts: list[str]) -> str:
    """Where rank 0 (on ``hosts[0]``) opens torch's store for ranks on other hosts: ``MASTER_ADDR`` if set, else
    its host name's address, unless that is a loopback one (Debian maps the host name to 127.0.1.1), then the
    address of its interface with the route to another rank's host; a RuntimeError if none reaches them."""
    if os.environ.get("MASTER_ADDR"):
        return os.environ["MASTER_ADDR"]
    address = socket.gethostbyname(hosts[0])
    if not ipaddress.ip_address(address).is_loopback:
        return address
    peer = next(host for host in hosts if host != hosts[0])
    try:
        address = _route_to(socket.gethostbyname(peer))
    except OSError as error:
        raise RuntimeError(f"rank 0's host {hosts[0]} resolves to {address}, a loopback address the other hosts "
                           f"cannot reach, and there is no route to {peer} ({error}): set MASTER_ADDR to an address "
                           f"of {hosts[0]} that the other hosts reach") from None
    if ipaddress.ip_address(address).is_loopback:
        raise RuntimeError(f"rank 0's host {hosts[0]} resolves to a loopback address, and so does the way to {peer}: "
                           f"set MASTER_ADDR to an address of {hosts[0]} that the other hosts reach")
    return address


def _route_to(peer: str) -> str:
    """This host's address on the interface that routes to ``peer`` (a UDP connect sends nothing: it picks the route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((peer, 9))
        return probe.getsockname()[0]


def _reachable_or_why(hosts: list[str]):
    """:func:`store_address`, or the error that says why there is none (sent to every rank, which raise it)."""
    try:
        return store_address(hosts)
    except (RuntimeError, OSError) as error:  # OSError: a host name that does not resolve
        return RuntimeError(str(error))


def _listener(address: str = "127.0.0.1"):
    """A listening socket on ``address`` at a port the system picks: torch's TCP store, given its descriptor,
    listens there instead of on every interface (as it does when it opens its own)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((address, 0))
    listener.listen(128)
    return listener
