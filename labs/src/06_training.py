# %% [markdown]
# # Lab 06: data-parallel training
#
# **What you'll do:** train one small model three ways on MPI ranks: with ringlab's allreduce behind
# a Horovod-style `DistributedOptimizer`, with a synchronous parameter server, and with torch's own
# DistributedDataParallel. You'll check that the weights come out the same, then measure the
# speed-up against ranks.
#
# **What you'll learn:** what "averaging gradients" means in practice, why the three agree, and the
# linear learning-rate scaling rule (more ranks, bigger batch, larger learning rate, with warm-up).
#
# **What you need:** labs 03 and 04, and torch.

# %%
import numpy as np
from ringlab.lab.cluster import MPICluster
from ringlab.lab.exercises import check_scaled_lr
from ringlab.lab.tables import table
from ringlab.train.scaling import COLUMNS, measure_scaling

# %% [markdown]
# ## Three trainers, one result
#
# Three ranks each take their slice of every global batch. The DistributedOptimizer averages
# gradients with `rl.allreduce` (ring) after every backward pass. DDP does the same with gloo. So
# after 30 steps of plain SGD their weights agree up to float rounding.

# %%
ranks = MPICluster(3).start()

# %%
# %%px
import torch
from mpi4py import MPI
from ringlab.train import DistributedOptimizer
from ringlab.train.reference import ddp_weights
from ringlab.train.task import batches, make_data, make_model, weights

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
x, y, _, _ = make_data()
batch = batches(x, y, size, 32)
loss_fn = torch.nn.CrossEntropyLoss()

model = make_model(seed=rank)  # on purpose: the optimizer broadcasts rank 0's weights first
opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model.named_parameters())
for step in range(30):
    opt.zero_grad()
    inputs, targets = batch(rank, step)
    loss_fn(model(inputs), targets).backward()
    opt.step()
opt.close()
ours = weights(model)
theirs = ddp_weights(make_model(seed=0), batch, steps=30, lr=0.05)  # torch DDP on the same batches

# %%
ours, theirs = ranks.pull_rank0("ours", "theirs")
ranks.stop()
print(f"largest difference, relative to the largest weight: {np.abs(ours - theirs).max() / np.abs(theirs).max():.1e}")
assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()

# %% [markdown]
# The synchronous parameter server of lab 04 computes the same average, so it lands on the same
# weights too (`tests/test_train.py` checks all three after 50 steps).
#
# ## Exercise 1: scaling the learning rate
#
# With one GPU a model trains well at batch 100 and learning rate 0.001. With k GPUs the global
# batch is k times larger, and the linear scaling rule multiplies the learning rate by k, reached
# gradually over a warm-up. Write the learning rate at step `step` for `k` ranks, growing linearly
# from the single-GPU rate to k times it over `warmup` steps, then staying there.

# %% tags=["solution"]
def scaled_lr(base_lr, k, step, warmup):
    """Linear scaling with linear warm-up."""
    # solution
    if step >= warmup:
        return base_lr * k
    return base_lr * (1 + (k - 1) * step / warmup)


# %%
scaled_lr = check_scaled_lr(scaled_lr)  # yours when it is right, else the reference

# %% [markdown]
# ## Speed-up against ranks
#
# Measured here: samples per second with 1, 2 and 4 ranks, the share of each step spent
# communicating, and the test accuracy reached. Remember that this machine's ranks share two CPU
# cores.

# %%
table(measure_scaling([1, 2, 4], steps=300), COLUMNS)

# %% [markdown]
# ## Summary
#
# - Data parallelism: every rank holds the model, computes gradients on its slice of the batch, and
#   the gradients are averaged. A ring allreduce, a synchronous parameter server and DDP give the
#   same weights.
# - Fusing gradients into buckets and starting each bucket's allreduce as soon as backward has
#   filled it hides communication behind computation.
# - k times the batch calls for about k times the learning rate, reached over a warm-up.
#
# ## Exercises
#
# 1. (Above) linear scaling with warm-up.
# 2. Pass `algorithm="naive"` or `"rhd"` to the DistributedOptimizer. Do the weights change? Does the time?
