"""Run on every rank: allreduce in a loop, each with a 5 s deadline, after writing this rank's PID and host to
argv[1]/rank-R.pid (so that the test can kill one rank from outside), with the shared memory and topology file
MPICH made for the job, whose names it removes first, as ringlab's runner does (a killed job leaves them behind).
A rank whose allreduce fails prints what it raised and leaves (os._exit: no MPI abort, so that every surviving
rank gets to say its own error)."""
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.cluster.runner import HYDRA_TOPOLOGY, MPICH_SEGMENT, unname_shared_memory, unname_topology_file

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
x = np.ones(1 << 16)
rl.allreduce(x, "ring")  # every rank has finished MPI_Init
with open("/proc/self/maps") as fh:
    made = set(MPICH_SEGMENT.findall(fh.read()))
parent = f"/proc/{os.getppid()}/fd"
for fd in os.listdir(parent):
    try:
        target = os.readlink(f"{parent}/{fd}")
    except OSError:
        continue
    if HYDRA_TOPOLOGY.match(target.removesuffix(" (deleted)")):
        made.add(target.removesuffix(" (deleted)"))
unname_shared_memory()
unname_topology_file()
with open(f"{sys.argv[1]}/.rank-{rank}.pid", "w") as fh:  # then renamed: the test never reads half a file
    fh.write(f"{os.getpid()} {socket.gethostname()}\n" + "\n".join(sorted(made)))
os.rename(f"{sys.argv[1]}/.rank-{rank}.pid", f"{sys.argv[1]}/rank-{rank}.pid")
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        rl.allreduce(x, "ring", timeout=5)
    except Exception as err:
        print(f"rank {rank} on {socket.gethostname()}: {type(err).__name__}: {err}", flush=True)
        os._exit(3)
