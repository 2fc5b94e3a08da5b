"""ZeroOptimizer at stages 1, 2 and 3 against plain data parallelism (the DistributedOptimizer), SGD with
momentum and Adam, float64, on a model whose modules' parameter counts do not divide by the ranks (one
holds a single parameter, fewer than the ranks). Rank 0 prints one JSON line per (optimizer, stage): the largest relative difference, whether
the ranks agree, the bytes every rank sent and what it holds.

    mpiexec -n N python -m mpi4py tests/mpi/zero_equivalence.py [STEPS]
"""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train import DistributedOptimizer, ZeroOptimizer

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
OPTIMIZERS = {"sgd": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9),
              "adam": lambda params: torch.optim.Adam(params, lr=0.01)}


def make_model(seed):
    torch.manual_seed(seed)  # differs by rank on purpose: both optimizers broadcast rank 0's weights
    return torch.nn.Sequential(torch.nn.Linear(7, 11), torch.nn.PReLU(), torch.nn.Linear(11, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 1)).double()  # units of 88, 1, 60 and 6 parameters


def batch(step):
    gen = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(6, 7, generator=gen, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def train(wrap, passes=1):
    """``passes`` backward passes (micro-batches of 3 samples each) before each step."""
    model = make_model(seed=rank + 10)
    opt = wrap(model)
    for step in range(STEPS):
        opt.zero_grad()
        x, y = batch(step)
        for part in range(passes):
            rows = slice(part * len(x) // passes, (part + 1) * len(x) // passes)
            (torch.nn.functional.mse_loss(model(x[rows]), y[rows]) / passes).backward()
        opt.step()
    return model, opt


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params]).numpy()


for name, make in OPTIMIZERS.items():
    model, opt = train(lambda m: DistributedOptimizer(make(m.parameters()), m.named_parameters(), overlap=False))
    opt.close()
    reference = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
    nparams = reference.size
    for stage in (1, 2, 3):
        model, opt = train(lambda m: ZeroOptimizer(make(m.parameters()), m, stage=stage))
        memory = opt.memory()
        pieces = [int(q.numel()) for q in opt.pieces]
        mine = torch.cat([t.reshape(-1) for t in opt.full_parameters()]).numpy()
        everyone = comm.gather(mine, root=0)
        sent = comm.gather(dict(opt.sent), root=0)
        held = comm.gather({"memory": memory, "pieces": pieces}, root=0)
        opt.close()
        after_close = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        if rank == 0:
            print(json.dumps({
                "optimizer": name, "stage": stage, "ranks": size, "steps": STEPS, "nparams": nparams,
                "difference": float(np.abs(mine - reference).max() / np.abs(reference).max()),
                "ranks_agree": all(np.array_equal(everyone[0], w) for w in everyone),
                "closed_model_equal": bool(np.array_equal(after_close, mine)),
                "sent": sent, "held": held}), flush=True)

# two micro-batches accumulated before each step, against DistributedOptimizer's backward_passes_per_step=2; and
# at stage 1 the model's own zero_grad() (which sets the gradients to None) instead of the optimizer's
make = OPTIMIZERS["adam"]
model, opt = train(lambda m: DistributedOptimizer(make(m.parameters()), m.named_parameters(), overlap=False,
                                                  backward_passes_per_step=2), passes=2)
opt.close()
reference = flat(model.parameters())
for stage in (1, 2, 3):
    model, opt = train(lambda m: ZeroOptimizer(make(m.parameters()), m, stage=stage), passes=2)
    mine = flat(opt.full_parameters())
    opt.close()
    worst = comm.allreduce(float(np.abs(mine - reference).max() / np.abs(reference).max()), op=MPI.MAX)
    if rank == 0:
        print(json.dumps({"case": "accumulated", "stage": stage, "difference": worst}), flush=True)
model, opt = train(lambda m: ZeroOptimizer(make(m.parameters()), m, stage=1))
plain = flat(model.parameters())
opt.close()
model = make_model(seed=rank + 10)
opt = ZeroOptimizer(make(model.parameters()), model, stage=1)
for step in range(STEPS):
    model.zero_grad()  # set_to_none: the optimizer must adopt the new gradient tensors
    x, y = batch(step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
worst = comm.allreduce(float(np.abs(flat(model.parameters()) - plain).max() / np.abs(plain).max()), op=MPI.MAX)
opt.close()
if rank == 0:
    print(json.dumps({"case": "model.zero_grad", "stage": 1, "difference": worst}), flush=True)
