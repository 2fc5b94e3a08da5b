"""Train the same model 50 steps with ringlab's DistributedOptimizer and with torch DDP (gloo) on the
same ranks and data; rank 0 saves both final weight vectors to argv[1] (.npz)."""
import sys

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train import DistributedOptimizer
from ringlab.train.reference import ddp_weights
from ringlab.train.task import batches, make_data, make_model, weights

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
algorithm = sys.argv[2] if len(sys.argv) > 2 else "ring"
STEPS, PER_RANK, LR = 50, 32, 0.05
x, y, _, _ = make_data()
batch = batches(x, y, size, PER_RANK)
loss_fn = torch.nn.CrossEntropyLoss()

model = make_model(seed=rank)  # different on purpose: the initial broadcast must fix it
opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                           algorithm=algorithm, bucket_bytes=8 << 10)
for step in range(STEPS):
    opt.zero_grad()
    inputs, targets = batch(rank, step)
    loss_fn(model(inputs), targets).backward()
    opt.step()
opt.close()
ours = weights(model)

theirs = ddp_weights(make_model(seed=0), batch, STEPS, LR)
everyone = comm.gather(ours, root=0)
if rank == 0:
    assert all(np.array_equal(everyone[0], w) for w in everyone), "ranks ended with different weights"
    np.savez(sys.argv[1], ringlab=ours, ddp=theirs, initial=weights(make_model(seed=0)))
    print(f"max relative difference {np.abs(ours - theirs).max() / np.abs(theirs).max():.2e}")
