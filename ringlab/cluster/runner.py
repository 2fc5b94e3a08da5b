"""``python -m ringlab.cluster.runner ARGS``: mpi4py's runner (``python -m mpi4py ARGS``: an exception on one rank
aborts the job), with ringlab's private communicator for COMM_WORLD made first, while every rank is there,
and, where there are GPUs, every rank bound to its own (:func:`ringlab.mpi.devices.bind_device`).

The jobs ringlab starts (``-n``, :func:`ringlab.cluster.launch.run_mpi`) run through it, so that even the first
ringlab call of a job names a rank that never comes; by hand, ``mpiexec -n 4 python -m mpi4py script.py``
works as well, with that first call's timeout unable to say which rank is missing.

Once every rank has started, the names of MPICH's shared-memory segments are removed from /dev/shm
(:func:`unname_shared_memory`), and the topology file mpiexec's proxy wrote for the ranks from /tmp
(:func:`unname_topology_file`): a job that aborts leaves neither behind.

Each rank's stdout and stderr are line-buffered here: a line goes out whole, and at once. mpiexec forwards the
ranks' output as it comes, so with ``PYTHONUNBUFFERED`` set, ``print`` wrote a line's text and its newline
separately, and two ranks printing together came out as ``rank 0: ... 1.0 srank 1: ...`` on one line.
"""
from __future__ import annotations

import os
import re

MPICH_SEGMENT = re.compile(r"(/dev/shm/mpich_shm_[^\s]+)")  # how MPICH names a host's shared memory in /dev/shm
HYDRA_TOPOLOGY = re.compile(r"^/.*/hydra_hwloc_xmlfile_[A-Za-z0-9]+$")  # the hwloc file MPICH's hydra proxy writes


def unname_shared_memory(maps: str = "/proc/self/maps") -> list[str]:
    """Remove from /dev/shm the names of the shared-memory segments MPICH mapped into this rank at MPI_Init, and
    return those this rank removed (another rank of the host may have been first).

    MPICH removes them only in MPI_Finalize, so every job that ended without it (a rank's exception aborting the
    job, a timeout, a kill) left its segment behind, 2-4 MB a job of memory the machine got back only when someone
    deleted the file (thousands had gathered on a machine that ran this project's tests). The memory stays mapped,
    and the ranks share it as before, for as long as they run; the name is needed only while they attach, so call
    this once every rank of the host has finished MPI_Init (after a collective over COMM_WORLD). MPICH's own
    finalize does not mind the name gone. Nothing to do where there is no /proc (not Linux)."""
    try:
        with open(maps) as f:
            names = sorted(set(MPICH_SEGMENT.findall(f.read())))
    except OSError:
        return []
    removed = []
    for name in names:
        try:
            os.unlink(name)
            removed.append(name)
        except OSError:  # removed by another rank of this host first, or not this user's
            pass
    return removed


def unname_topology_file(proc: str = "/proc") -> list[str]:
    """Remove the hwloc topology file (``/tmp/hydra_hwloc_xmlfile_XXXXXX``) that this rank's parent, mpiexec's
    ``hydra_pmi_proxy``, wrote for its ranks to read in MPI_Init, and return what this rank removed.

    The proxy removes it when the job ends well; a job that aborts has its proxy killed, and the file stayed in
    /tmp (5 KB each: a run of this project's tests, which abort jobs on purpose, left 235). Call this once every
    rank of the host has finished MPI_Init; the proxy keeps the file open, and does not mind its name gone when it
    ends. Nothing to do where the parent is not hydra's proxy (Slurm's srun, a singleton) or there is no /proc."""
    parent = f"{proc}/{os.getppid()}"
    try:
        with open(f"{parent}/comm") as f:
            if f.read().strip() != "hydra_pmi_proxy":
                return []
        fds = os.listdir(f"{parent}/fd")
    except OSError:
        return []
    removed = []
    for fd in fds:
        try:
            target = os.readlink(f"{parent}/fd/{fd}")  # a removed file reads "... (deleted)", which does not match
            if HYDRA_TOPOLOGY.match(target):
                os.unlink(target)
                removed.append(target)
        except OSError:  # closed meanwhile, or removed by another rank of this host first
            pass
    return removed


def whole_lines() -> None:
    """stdout and stderr line-buffered: each line in one write, written when it ends."""
    import sys
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # (a replaced stream may not have it)
        if reconfigure is not None:
            reconfigure(line_buffering=True, write_through=False)


def main() -> None:
    whole_lines()
    from mpi4py import MPI
    from mpi4py.run import main as run

    from ..mpi.deadlines import DEFAULT, DEFAULT_SECONDS, seconds
    from ..mpi.private import state

    try:
        limit = seconds(DEFAULT)
    except ValueError:  # a bad RINGLAB_TIMEOUT: ringlab's calls in the job say so, on every rank
        limit = DEFAULT_SECONDS
    state(MPI.COMM_WORLD).comm("ringlab's start of the job", limit)  # collective: every rank has finished MPI_Init
    unname_shared_memory()  # an aborted job leaves nothing in /dev/shm
    unname_topology_file()  # nor in /tmp
    from ..mpi.devices import bind_device
    bind_device(MPI.COMM_WORLD)  # with GPUs, each rank on its own before the script runs (no-op without)
    run()


if __name__ == "__main__":
    main()
