"""The DistributedOptimizer's trace, overlap off and on, at one bucket size; rank 0 saves every rank's rows.

argv[1]: output .npz; argv[2]: bucket_bytes. The model's first layer sleeps 0.2 s in its backward (a slow
first layer, as a big convolution would be): whatever the machine's load, a bucket handed over by an
earlier hook has time to start its allreduce before the backward pass ends.
"""
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train import DistributedOptimizer
from ringlab.train.task import FEATURES, batches, make_data

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
bucket_bytes = int(sys.argv[2])
STEPS, SLOW = 3, 0.2
torch.set_num_threads(1)


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(SLOW)
        return grad


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(FEATURES, 64)
        self.layers = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                          torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    def forward(self, x):
        return self.layers(SlowBackward.apply(self.first(x)))


x, y, _, _ = make_data()
batch = batches(x, y, size, 16)
loss_fn = torch.nn.CrossEntropyLoss()
saved = {}
for overlap in (False, True):
    model = Model()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), model.named_parameters(),
                               bucket_bytes=bucket_bytes, overlap=overlap, trace=True)
    forward_ends = []
    for step in range(STEPS):
        opt.zero_grad()
        inputs, targets = batch(rank, step)
        loss = loss_fn(model(inputs), targets)
        forward_ends.append(opt._tracer.clock())
        if step == 0:
            loss.backward()  # the first row then starts where construction's barrier did
        else:
            opt.backward(loss)
        opt.step()
    opt.close()
    rows = comm.gather(opt.trace_records(), root=0)
    if rank == 0:
        tag = "overlap" if overlap else "no_overlap"
        saved[tag] = np.concatenate(rows)
        saved[tag + "_forward_ends"] = np.array(forward_ends)
        saved[tag + "_buckets"] = np.array([len(b.params) for b in opt.buckets])

plain = Model()
silent = DistributedOptimizer(torch.optim.SGD(plain.parameters(), lr=0.01), plain.named_parameters(), overlap=False)
# one hook a parameter, tracing or not: the end of each backward pass finishes the averaging (DDP's contract)
hooked = sum(len(p._post_accumulate_grad_hooks or {}) for p in plain.parameters()) - len(list(plain.parameters()))
try:
    silent.trace_records()
    refused = ""
except ValueError as err:
    refused = str(err)
if rank == 0:
    names = [name for name, _ in Model().named_parameters()]
    grad_bytes = sum(p.numel() * p.element_size() for p in Model().parameters())
    np.savez(sys.argv[1], **saved, names=np.array(names), grad_bytes=grad_bytes, steps=STEPS, ranks=size,
             slow=SLOW, untraced_hooks=hooked, refused=refused)
