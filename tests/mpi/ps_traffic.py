"""The parameter server's own counts: argv = out.json servers mode steps. Rank 0 writes every rank's
record (history as [seconds, list] pairs) and the gradient's element count."""
import json
import sys

import torch
from mpi4py import MPI

from ringlab.train import ParameterServer
from ringlab.train.straggler import Straggler
from ringlab.train.task import batches, make_data, make_model

comm = MPI.COMM_WORLD
out, servers, mode, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
workers = comm.Get_size() - servers
x, y, _, _ = make_data(3000)
model = make_model(hidden=16)
ps = ParameterServer(model, servers=servers, mode=mode, lr=0.1, history=True,
                     straggler=Straggler(workers - 1, factor=2.0, extra_seconds=0.002))
record = ps.run(steps, batches(x, y, workers, 8), torch.nn.CrossEntropyLoss())
record["history"] = [[t, flat.tolist()] for t, flat in record.get("history", [])]
record["final"] = [float(v) for v in ps.flat[ps._shard(comm.Get_rank())]] if ps.is_server else None
records = comm.gather(record, root=0)
if comm.Get_rank() == 0:
    with open(out, "w") as fh:
        json.dump({"records": records, "elements": len(ps.flat), "bounds": [int(b) for b in ps.bounds]}, fh)
