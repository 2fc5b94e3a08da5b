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
from ringlab.lab.cluster import MPICluster
from ringlab.lab.exercises import check_scaled_lr
from ringlab.lab.tables import table
from ringlab.lab.training import compare_trainers, describe_accuracy, describe_speedup, describe_trainers
from ringlab.mpi.launch import cores
from ringlab.train.scaling import RECIPE_COLUMNS, measure_scaling, train_in_one_process
from ringlab.viz import use_renderer
from ringlab.viz.training import speedup_plot

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## Three trainers, one result
#
# Three workers each take their slice of every global batch of 96. The parameter server needs a rank
# of its own to serve, so we start four ranks: rank 0 serves, ranks 1-3 are the three workers of all
# three trainers. The DistributedOptimizer averages gradients with `rl.allreduce` (ring) after every
# backward pass; DDP does the same with gloo; both run on a communicator of ranks 1-3 (`Split`) while
# rank 0 waits. Then the synchronous parameter server of lab 04 averages the same gradients on rank 0.
# After 30 steps of plain SGD, are the three sets of weights the same?

# %%
ranks = MPICluster(4).start()

# %%
# %%px
import torch
from mpi4py import MPI
from ringlab.train import DistributedOptimizer, ParameterServer
from ringlab.train.reference import ddp_weights
from ringlab.train.task import batches, make_data, make_model, weights

world = MPI.COMM_WORLD
workers = world.Split(0 if world.Get_rank() > 0 else MPI.UNDEFINED)  # ranks 1-3; rank 0 gets COMM_NULL
x, y, _, _ = make_data()
batch = batches(x, y, 3, 32)  # batch(worker, step): worker's 32 of step's 96
loss_fn = torch.nn.CrossEntropyLoss()
trained = {}

if workers != MPI.COMM_NULL:
    worker = workers.Get_rank()
    model = make_model(seed=worker)  # on purpose: the optimizer broadcasts worker 0's weights first
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model.named_parameters(), comm=workers)
    for step in range(30):
        opt.zero_grad()
        inputs, targets = batch(worker, step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    opt.close()
    trained["DistributedOptimizer (ring)"] = weights(model)
    trained["DDP"] = ddp_weights(make_model(seed=0), batch, steps=30, lr=0.05, comm=workers)

model = make_model(seed=0)
ParameterServer(model, servers=1, lr=0.05).run(30, batch, loss_fn)  # rank 0 serves, ranks 1-3 work
trained["parameter server (sync)"] = weights(model)

# %%
trained = ranks.view.pull("trained", block=True)[1]  # rank 1, worker 0, took part in all three
ranks.stop()
compared = compare_trainers(trained, reference="DDP")
table(compared, {"trainer": "trainer", "largest difference from DDP (relative)": ("difference", ".1e")})
print(describe_trainers(compared))
assert all(row["difference"] <= 1e-5 for row in compared)

# %% [markdown]
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
# Now one MPI job each for 1, 2 and 4 ranks, every rank taking 32 samples a step with the linear
# scaling rule (learning rate 0.05 per 32 samples, momentum 0.9). Every run trains on the same
# number of samples, so n ranks take n times fewer steps of n times the batch: with the same number
# of steps instead, n ranks would see n times the samples, and their accuracies would compare
# different amounts of training. Measured here: samples per second, the share of each step spent
# communicating, and the test accuracy reached.

# %%
rows = measure_scaling([1, 2, 4], samples=38400)
table(rows, RECIPE_COLUMNS)

# %%
speedup_plot(rows, cores=cores())

# %%
print(describe_speedup(rows, cores()))

# %% [markdown]
# ## Accuracy: what differs between the runs
#
# The runs differ in batch size, learning rate and number of steps. Does averaging gradients over
# ranks change what is learned as well? Check it: train in this one process on the largest run's
# global batches (all its ranks' slices together) with its learning rate and number of steps.

# %%
one_process = train_in_one_process(nranks=rows[-1]["ranks"], steps=rows[-1]["steps"])
print(describe_accuracy(rows, one_process))

# %% [markdown]
# ## Summary
#
# - Data parallelism: every rank holds the model, computes gradients on its slice of the batch, and
#   the gradients are averaged. A ring allreduce, a synchronous parameter server and DDP give the
#   same weights.
# - Fusing gradients into buckets and starting each bucket's allreduce as soon as backward has
#   filled it hides communication behind computation.
# - k times the batch calls for about k times the learning rate, reached over a warm-up.
# - n ranks averaging gradients compute what one process computes on their slices together: what
#   is learned depends on the global batch, the learning rate and the number of steps, not on the
#   ranks. Compare accuracies at equal samples.
#
# ## Exercises
#
# 1. (Above) linear scaling with warm-up.
# 2. Pass `algorithm="naive"` or `"rhd"` to the DistributedOptimizer. Do the weights change? Does the time?
# 3. Run `measure_scaling([1, 2, 4], steps=300)`: the same steps at every rank count. How many samples
#   does each run see, and how do the accuracies compare now?
