"""Run on every rank: allreduce in a loop, each with a 5 s deadline, after writing this rank's PID and host to
argv[1]/rank-R.pid (so that the test can kill one rank from outside). A rank whose allreduce fails prints what
it raised and leaves (os._exit: no MPI abort, so that every surviving rank gets to say its own error)."""
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
x = np.ones(1 << 16)
rl.allreduce(x, "ring")
with open(f"{sys.argv[1]}/rank-{rank}.pid", "w") as fh:
    fh.write(f"{os.getpid()} {socket.gethostname()}")
end = time.monotonic() + 60
while time.monotonic() < end:
    try:
        rl.allreduce(x, "ring", timeout=5)
    except Exception as err:
        print(f"rank {rank} on {socket.gethostname()}: {type(err).__name__}: {err}", flush=True)
        os._exit(3)
