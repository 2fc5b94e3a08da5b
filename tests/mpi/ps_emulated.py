"""A parameter server on an emulated machine: argv = out.json steps. A synchronous server trains the same
model twice, on the raw machine and on uniform links slow enough that a push of the gradient (K bytes)
takes 20 ms, then an asynchronous one on those links. Rank 0 writes, per run, the seconds and whether
the emulated run's weights equal the raw run's bit for bit (they must: only the timing changes)."""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import ringlab as rl
from ringlab.train import ParameterServer
from ringlab.train.task import batches, make_data, make_model

comm = MPI.COMM_WORLD
out, steps = sys.argv[1], int(sys.argv[2])
n = comm.Get_size()
workers = n - 1
x, y, _, _ = make_data(2000)


def train(mode: str) -> tuple[np.ndarray, dict]:
    torch.manual_seed(0)
    model = make_model(hidden=16)
    ps = ParameterServer(model, servers=1, mode=mode, lr=0.1)
    record = ps.run(steps, batches(x, y, workers, 8), torch.nn.CrossEntropyLoss())
    ps.close()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy(), record


raw, _ = train("sync")
K = raw.nbytes
links = rl.topology.uniform(n, bandwidth=K / 0.02, latency=1e-3)  # a push of K bytes alone: 1 ms + 20 ms
with rl.emulate(links):
    paced, record = train("sync")
    lonely, async_record = train("async")
seconds = comm.gather(record["seconds"], root=0)
if comm.Get_rank() == 0:
    with open(out, "w") as fh:
        json.dump({"workers": workers, "K": K, "steps": steps, "equal": bool(np.array_equal(raw, paced)),
                   "seconds": max(seconds), "async_finite": bool(np.isfinite(lonely).all()),
                   "async_seconds": async_record["seconds"]}, fh)
