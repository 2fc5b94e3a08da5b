"""A rank late to one of a call's collective exchanges (argv[1]: the disagreement's texts, a trace's
starting barrier, the trace's rows) while the others have a 2 s deadline: they raise a StepTimeout
within it, not wait for it (mpi4py's allgather, gather and Barrier would have). Rank 0 prints each rank's
line: what it raised, and after how long."""
import sys
import time

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import plan, private, transports

comm = MPI.COMM_WORLD
rank, last = comm.Get_rank(), comm.Get_size() - 1
mode = sys.argv[1]
LATE = 8.0  # seconds the last rank comes late


def late(function):
    def slowly(*args, **kwargs):
        time.sleep(LATE)
        return function(*args, **kwargs)
    return slowly


rl.allreduce(np.ones(4), timeout=30)  # ringlab's private communicator, with everyone there
comm.Barrier()
if rank == last:
    if mode == "disagreement":
        private.allgather = late(private.allgather)
    elif mode == "trace-start":
        plan._recorder = late(plan._recorder)
    elif mode == "trace-rows":
        moved = transports.Transport.move
        transports.Transport.move = lambda self, *a, **k: (moved(self, *a, **k), time.sleep(LATE))[0]
start = time.monotonic()
try:
    if mode == "disagreement":
        rl.allreduce(np.ones(10 + (rank == last)), timeout=2)
    else:
        rl.allreduce(np.ones(10), trace=True, timeout=2)
    said = "returned"
except Exception as err:
    said = f"{type(err).__name__}: {err}"
took = time.monotonic() - start
for i, line in enumerate(comm.gather(f"{took:.1f} s: {said}", root=0) or []):
    print(f"rank {i}: {line}", flush=True)
