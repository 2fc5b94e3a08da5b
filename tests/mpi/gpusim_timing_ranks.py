"""The GPU clocks start every rank together (cupy stand-in, 2 ranks): device work a rank's warm-up left
queued is finished before the timed calls begin, so it is not counted, neither on that rank (whose first
timed call would wait for it) nor on the other (which would wait for that rank inside its timed calls).
Prints 'ok' when it holds."""
import os

import cupy as cp
from mpi4py import MPI

import ringlab as rl
from ringlab.measure.timing import time_collective

comm = MPI.COMM_WORLD
buffer = cp.ones(1000)
calls = []


def allreduce_then_leave_work_on_rank_1():
    """ringlab's allreduce (it waits for the stream); rank 1's warm-up then queues 0.5 s more and returns."""
    rl.allreduce(buffer, "ring", timeout=60)
    calls.append(1)
    if comm.Get_rank() == 1 and len(calls) == 1:
        os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0.5"
        buffer[...] = 1  # a kernel, queued on the current stream, left running
        os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0"


for back_to_back in (True, False):
    calls.clear()
    seconds = time_collective(allreduce_then_leave_work_on_rank_1, comm, warmup=1, iters=3, buffer=buffer,
                              back_to_back=back_to_back)
    assert seconds < 0.15, (back_to_back, seconds)  # 0.5 s left by a warm-up is no timed call's
if comm.Get_rank() == 0:
    print("ok")
