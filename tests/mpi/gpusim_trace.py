"""A trace on device arrays counts the kernels that land each receive (cupy stand-in).

Every piece of stand-in device work sleeps RINGLAB_GPUSIM_WORK_SECONDS when it runs; each receive of a reduce
step lands through at least one kernel, so its row must last at least that long. argv[1]: transport.
"""
import os
import sys

import cupy as cp
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi.devices import bind_device

os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0.02"
comm = MPI.COMM_WORLD
bind_device(comm)
out, trace = rl.allreduce(cp.ones(4096), "ring", transport=sys.argv[1], trace=True, timeout=60)
assert float(out[0]) == comm.Get_size()
if comm.Get_rank() == 0:
    n = comm.Get_size()
    reduce_steps = range(n - 1)  # the ring's reduce-scatter half
    rows = [r for r in trace.to_dicts() if r["side"] == "recv" and r["step"] in reduce_steps]
    assert rows, trace
    short = [r for r in rows if r["end"] - r["start"] < 0.02]
    assert not short, f"{len(short)} of {len(rows)} receives ended before their kernel ran: {short[:2]}"
    print(f"ok: {len(rows)} reduce receives, each at least 20 ms with its kernel")
