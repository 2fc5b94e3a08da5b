"""``python -m ringlab.cluster.runner ARGS``: mpi4py's runner (``python -m mpi4py ARGS``: an exception on one rank
aborts the job), with ringlab's private communicator for COMM_WORLD made first, while every rank is there,
and, where there are GPUs, every rank bound to its own (:func:`ringlab.mpi.devices.bind_device`).

The jobs ringlab starts (``-n``, :func:`ringlab.cluster.launch.run_mpi`) run through it, so that even the first
ringlab call of a job names a rank that never comes; by hand, ``mpiexec -n 4 python -m mpi4py script.py``
works as well, with that first call's timeout unable to say which rank is missing.

Once every rank has started, the names of MPICH's shared-memory segments are removed from /dev/shm, and the
topology file mpiexec's proxy wrote for the ranks from /tmp (:func:`ringlab.mpi.devices.forget_job_files`, which
the private communicator over COMM_WORLD calls once made): a job that aborts leaves neither behind.

Each rank's stdout and stderr are line-buffered here: a line goes out whole, and at once. mpiexec forwards the
ranks' output as it comes, so with ``PYTHONUNBUFFERED`` set, ``print`` wrote a line's text and its newline
separately, and two ranks printing together came out as ``rank 0: ... 1.0 srank 1: ...`` on one line.
"""
from __future__ import annotations

from ..mpi.devices import (HYDRA_TOPOLOGY, MPICH_SEGMENT, forget_job_files, unname_shared_memory,
                           unname_topology_file)

__all__ = ["main", "whole_lines", "forget_job_files", "unname_shared_memory", "unname_topology_file",
           "MPICH_SEGMENT", "HYDRA_TOPOLOGY"]  # the last five from ringlab.mpi.devices, named here as before


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
    # collective over COMM_WORLD: every rank has finished MPI_Init, and the names of the files MPICH made for
    # them go (forget_job_files): an aborted job leaves nothing in /dev/shm nor in /tmp
    state(MPI.COMM_WORLD).comm("ringlab's start of the job", limit)
    from ..mpi.devices import bind_device
    bind_device(MPI.COMM_WORLD)  # with GPUs, each rank on its own before the script runs (no-op without)
    run()


if __name__ == "__main__":
    main()
