"""Where the ranks' GPUs are (the cupy stand-in, or real GPUs): the job's runner has bound every rank before this script runs.

Rank 0 prints a JSON list, a row per rank: its device, the bus id of the GPU a plain ``cp.asarray`` lands on, what a
second ``rl.bind_device()`` returns, how many ranks share the busiest GPU, and why NCCL would not run.
"""
import json
import os

import cupy as cp
from mpi4py import MPI

import ringlab as rl
from ringlab.measure.bench import _nccl_here
from ringlab.mpi.devices import ranks_per_gpu

comm = MPI.COMM_WORLD
x = cp.asarray([1.0, 2.0])  # a learner's own array, made before calling anything of ringlab's
mine = {"rank": comm.Get_rank(), "device": x.device.id, "bus": cp.cuda.runtime.deviceGetPCIBusId(x.device.id),
        "again": rl.bind_device(), "again_other_comm": rl.bind_device(comm.Dup()), "per_gpu": ranks_per_gpu(),
        "nccl_refused": _nccl_here(comm)[1], "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
# a collective on an array of another GPU leaves the caller's current GPU current
with cp.cuda.Device((comm.Get_rank() + 1) % cp.cuda.runtime.getDeviceCount()):
    y = cp.arange(4.0)
cp.cuda.Device(0).use()
total = rl.allreduce(y, "ring", timeout=60)
after = [cp.cuda.Device().id]
rl.gather(y, 0, timeout=60)
after.append(cp.cuda.Device().id)
mine.update(current_after=after, total_device=total.device.id, total=total.get().tolist())
rl.bind_device()
rows = comm.gather(mine)
if comm.Get_rank() == 0:
    print(json.dumps(rows), flush=True)
