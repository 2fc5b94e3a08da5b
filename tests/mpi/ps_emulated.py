"""A parameter server on an emulated machine, in virtual time: argv = out.json steps compute. A synchronous
server trains the same model twice, on the raw machine and on uniform links slow enough that a push of the
gradient (K bytes) alone takes 1 ms + 200 ms, then an asynchronous one on those links, and an asynchronous
one whose last worker (when there are two or more) waits 0.3 s more every step, on its virtual clock; the
emulated runs count compute as ``compute`` says ("cpu" or "model"). Rank 0 writes the virtual and wall
seconds of each run, what the links take for one round of pushes and one of answers (message_times), the
workers' compute and the server's busy time, the staleness of the straggler's pushes, and whether the
emulated run's weights equal the raw run's bit for bit (they must: only the timing changes)."""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import emulate
from ringlab.train import ParameterServer
from ringlab.train.straggler import Straggler
from ringlab.train.task import batches, make_data, make_model

comm = MPI.COMM_WORLD
out, steps, compute = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n = comm.Get_size()
workers = n - 1
x, y, _, _ = make_data(2000)


def train(mode: str, straggler=None) -> tuple[np.ndarray, dict]:
    torch.manual_seed(0)
    model = make_model(hidden=16)
    ps = ParameterServer(model, servers=1, mode=mode, lr=0.1, straggler=straggler)
    record = ps.run(steps, batches(x, y, workers, 8), torch.nn.CrossEntropyLoss())
    ps.close()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().numpy().copy(), record


raw, _ = train("sync")
K = raw.nbytes
links = rl.topology.uniform(n, bandwidth=K / 0.2, latency=1e-3)  # a push of K bytes alone: 1 ms + 200 ms
slow = Straggler(workers - 1, extra_seconds=0.3) if workers > 1 else None
with rl.emulate(links, compute=compute):
    paced, record = train("sync")
    lonely, async_record = train("async")
    _, stale_record = train("async", slow)
    pushes = emulate.message_times([(w, 0, K) for w in range(1, n)], comm)
    answers = emulate.message_times([(0, w, K) for w in range(1, n)], comm)
records = comm.gather({k: v for k, v in record.items() if k != "staleness"}, root=0)
if comm.Get_rank() == 0:
    with open(out, "w") as fh:
        json.dump({"workers": workers, "K": K, "steps": steps, "compute": compute,
                   "equal": bool(np.array_equal(raw, paced)), "clock": record["clock"],
                   "seconds": max(r["seconds"] for r in records),
                   "wall_seconds": max(r["wall_seconds"] for r in records),
                   "push": max(pushes.values()), "answer": max(answers.values()),
                   "compute_seconds": max(r["compute_seconds"] for r in records[1:]),
                   "busy_seconds": sum(records[0]["busy_seconds"]),
                   "async_finite": bool(np.isfinite(lonely).all()), "async_seconds": async_record["seconds"],
                   "async_wall_seconds": async_record["wall_seconds"],
                   "straggler_staleness": [s for w, s in stale_record["staleness"] if slow and w == slow.worker],
                   "straggler_seconds": stale_record["seconds"]}, fh)
