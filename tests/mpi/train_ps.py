"""Train with the parameter server: argv = out.npz servers mode [straggler_factor]. Rank 0 saves the
final weights, every push's staleness and every worker's losses and timings."""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train import ParameterServer
from ringlab.train.task import batches, make_data, make_model, weights

comm = MPI.COMM_WORLD
out, servers, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
factor = float(sys.argv[4]) if len(sys.argv) > 4 else None
STEPS, PER_WORKER, LR = 50, 32, 0.05
x, y, _, _ = make_data()
workers = comm.Get_size() - servers
model = make_model(seed=0)
ps = ParameterServer(model, servers=servers, mode=mode, lr=LR, straggler=(workers - 1, factor) if factor else None)
record = ps.run(STEPS, batches(x, y, workers, PER_WORKER), torch.nn.CrossEntropyLoss())
records = comm.gather(record, root=0)
if comm.Get_rank() == 0:
    np.savez(out, weights=weights(model))
    with open(out + ".json", "w") as fh:
        json.dump(records, fh)
