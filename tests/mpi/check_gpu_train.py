"""On a GPU machine: the DistributedOptimizer training a CUDA model, against torch DDP (gloo, CPU) on the
same ranks, batches and initial weights. argv[1]: transport; argv[2]: "overlap" or "no-overlap".
Several ranks may share one GPU. Rank 0 prints the largest relative difference of the final weights."""
import sys

import numpy as np
import torch
from mpi4py import MPI

from ringlab.mpi.devices import bind_device
from ringlab.train import DistributedOptimizer
from ringlab.train.reference import ddp_weights
from ringlab.train.task import batches, make_data, make_model, weights

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
transport, overlap = sys.argv[1], sys.argv[2] == "overlap"
gpu = bind_device(comm)
torch.cuda.set_device(gpu)
torch.backends.cuda.matmul.allow_tf32 = False  # float32 products as on the CPU, to compare weights
STEPS, PER_RANK, LR = 20, 32, 0.05
x, y, _, _ = make_data()
batch = batches(x, y, size, PER_RANK)
loss_fn = torch.nn.CrossEntropyLoss()

model = make_model(seed=rank).cuda()  # different on purpose: the initial broadcast must fix it
opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                           algorithm="ring", transport=transport, bucket_bytes=4 << 10, overlap=overlap)
assert opt._gpu, "the buckets should be on the GPU"
for step in range(STEPS):
    opt.zero_grad()
    inputs, targets = batch(rank, step)
    loss_fn(model(inputs.cuda()), targets.cuda()).backward()
    opt.step()
opt.close()
ours = weights(model.cpu())

theirs = ddp_weights(make_model(seed=0), batch, STEPS, LR)
initial = weights(make_model(seed=0))
everyone = comm.gather(ours, root=0)
if rank == 0:
    assert all(np.array_equal(everyone[0], w) for w in everyone), "ranks ended with different weights"
    moved = np.abs(theirs - initial).max()
    off = np.abs(ours - theirs).max()
    assert moved > 1e-3, f"training did not move the weights ({moved})"
    assert off <= 1e-4 * np.abs(theirs).max() + 1e-3 * moved, f"GPU training differs from DDP by {off:.3e}"
    print(f"ok {size} ranks, transport {transport}, overlap {overlap}: max relative difference "
          f"{off / np.abs(theirs).max():.2e} from DDP (weights moved {moved:.3f})")
