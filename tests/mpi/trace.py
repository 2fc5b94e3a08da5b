"""A traced ring allreduce on every rank; rank 0 prints the gathered trace as JSON."""
import json

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
out, trace = rl.allreduce(np.ones(1250), "ring", trace=True, timeout=30)
assert np.all(out == comm.Get_size())
if comm.Get_rank() == 0:
    print(json.dumps(trace.to_dicts()))
