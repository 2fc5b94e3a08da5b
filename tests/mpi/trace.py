"""A traced ring allreduce on every rank; rank 0 prints the gathered trace as JSON, then the
measured time of each step next to the cost model's prediction on a fitted-looking network."""
import json

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.predict.fitting import compare_trace

comm = MPI.COMM_WORLD
out, trace = rl.allreduce(np.ones(1250), "ring", trace=True, timeout=30)
assert np.all(out == comm.Get_size())
if comm.Get_rank() == 0:
    print(json.dumps(trace.to_dicts()))
    table = compare_trace(trace, 1250 * 8, rl.topology.uniform(comm.Get_size(), bandwidth=5e9, latency=20e-6))
    print(json.dumps([[int(s), float(m), float(p)] for s, m, p in table]))
