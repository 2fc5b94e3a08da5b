"""Failure cases, one per mode (argv[1]); each rank prints what it saw. Run under mpiexec."""
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
mode = sys.argv[1]


def write_mapped(path: str) -> None:
    """The names of the shared memory MPICH mapped into this rank, one a line, to ``path``.``rank``."""
    from ringlab.cluster.runner import MPICH_SEGMENT
    with open("/proc/self/maps") as fh:
        mapped = sorted(set(MPICH_SEGMENT.findall(fh.read())))
    with open(f"{path}.{rank}", "w") as fh:
        fh.write("\n".join(mapped))


def write_topology_files(path: str) -> None:
    """What this rank's parent (mpiexec's proxy) holds open of hydra's topology files, one a line, to ``path``.``rank``
    (a name already removed reads "... (deleted)")."""
    parent = f"/proc/{os.getppid()}/fd"
    held = []
    for fd in os.listdir(parent):
        try:
            target = os.readlink(f"{parent}/{fd}")
        except OSError:
            continue
        if "hydra_hwloc_xmlfile_" in target:
            held.append(target)
    with open(f"{path}.{rank}", "w") as fh:
        fh.write("\n".join(held))


def report(text: str) -> None:
    """Rank 0 prints every rank's line (output of several processes would interleave)."""
    for i, line in enumerate(comm.gather(text, root=0) or []):
        print(f"rank {i}: {line}", flush=True)


if mode == "sizes":  # rank 1 brings a different size: everyone raises the same error
    x = np.ones(10 if rank != 1 else 11)
    try:
        rl.allreduce(x, "ring", timeout=30)
    except ValueError as err:
        report(str(err))
elif mode == "dtypes":
    x = np.ones(10, dtype=np.float32 if rank == 0 else np.float64)
    try:
        rl.broadcast(x, 0, "tree", timeout=30)
    except ValueError as err:
        report(str(err))
elif mode == "root":  # an impossible root: every rank says so
    try:
        rl.reduce(np.ones(4), root=comm.Get_size(), timeout=30)
    except ValueError as err:
        report(str(err))
elif mode == "raise":  # one rank fails before the collective: the job must end, not hang
    if rank == 1:
        raise RuntimeError("boom on rank 1")
    rl.allreduce(np.ones(1000), "ring")
elif mode in ("segments", "segments-after-call"):  # the shared memory MPICH mapped, written down; then an abort
    if mode == "segments-after-call":  # started by hand (no runner): ringlab's first call comes first
        rl.allreduce(np.ones(3), "ring", timeout=30)  # makes ringlab's private communicator over COMM_WORLD
    write_mapped(sys.argv[2])
    write_topology_files(f"{sys.argv[2]}-topology")
    comm.Barrier()
    if rank == 1:
        raise RuntimeError("boom on rank 1")
    rl.allreduce(np.ones(1000), "ring")
elif mode in ("stuck", "absent", "first", "bad-timeout"):  # rank 2 never joins: a timeout names the step and peer
    if mode == "first":  # also started by hand, without ringlab's runner: the test removes what the abort leaves
        write_mapped(f"{sys.argv[2]}.mapped")
        write_topology_files(f"{sys.argv[2]}.topology")
    if mode != "first":  # ringlab's private communicator is made by the first call, with every rank there
        rl.allreduce(np.ones(3), "ring", timeout=30)
    if rank != 2:
        try:  # bad-timeout: NaN, inf or a negative number stands for the job's default deadline (RINGLAB_TIMEOUT)
            timeout = float(sys.argv[3]) if mode == "bad-timeout" else 1.0
            rl.allreduce(np.ones(30), "ring", timeout=timeout, agree=(mode in ("absent", "bad-timeout")))
        except rl.StepTimeout as err:
            if rank == 0:  # to a file: what a rank prints just before an abort may never reach mpiexec
                with open(sys.argv[2], "w") as fh:
                    fh.write(f"rank {rank}: {err}\n")
            with open(f"{sys.argv[2]}.peers-{rank}", "w") as fh:  # the peers it was still waiting for
                fh.write(" ".join(map(str, err.peers)))
    elif mode == "stuck":  # the notices that the ranks which gave up left for rank 2 on ringlab's duplicate
        time.sleep(4)
        from ringlab.mpi.private import NOTICE_TAG
        dup = rl.mpi.private.state(comm)._dup
        found = [source for source in (0, 1)  # (MPICH: a first Iprobe may only move messages along)
                 if dup.Iprobe(source, NOTICE_TAG) or dup.Iprobe(source, NOTICE_TAG)]
        with open(f"{sys.argv[2]}.notices", "w") as fh:
            fh.write(" ".join(map(str, found)))
    if rank == 0:  # only rank 0 ends the job, after it has written (and rank 2 has looked)
        end = time.monotonic() + 30
        while mode == "stuck" and not os.path.exists(f"{sys.argv[2]}.notices") and time.monotonic() < end:
            time.sleep(0.1)
        comm.Abort(3)
    time.sleep(60)
