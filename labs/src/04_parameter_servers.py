# %% [markdown]
# # Lab 04: parameter servers
#
# **What you'll do:** count what a single parameter server and a sharded one carry, then train a
# small model on five MPI ranks (one server, four workers) synchronously and asynchronously, with
# one worker slowed down, and look at who waits and how stale the gradients get.
#
# **What you'll learn:** why one server is a bottleneck that grows with the number of workers, how
# sharding divides it, and what asynchronous training trades for not waiting.
#
# **What you need:** labs 03 and 02, and torch (installed by `python3 dev.py`).

# %%
import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lab.exercises import check_server_load
from ringlab.viz import staleness_plot, use_renderer

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## The server's links
#
# In `allreduce.ps` with M shards, rank s < M serves shard s: every rank pushes each shard to its
# server, which adds them up and sends the sum back. Counted for 8 ranks and a 1 MiB buffer:

# %%
K, n = 1 << 20, 8
for M in (1, 2, 4, 8):
    counts = rl.traffic(rl.build("allreduce.ps", n, servers=M), K)
    print(f"M={M}: the busiest rank receives {max(counts['received']) / K:.2f} K")
print(f"ring:  every rank receives {max(rl.traffic(rl.build('allreduce.ring', n), K)['received']) / K:.2f} K")

# %% [markdown]
# ## Exercise 1: the server's load
#
# Write how many bytes server rank 0 receives in `allreduce.ps` with n ranks, M shards and a
# K-byte buffer (K divisible by M).

# %% tags=["solution"]
def server_load(n, M, K):
    """Bytes received by a server rank: its shard from every other rank, plus the other shards."""
    # solution
    return (n - 1) * K // M + (M - 1) * K // M


# %%
check_server_load(server_load)

# %% [markdown]
# ## Training with a server
#
# Five ranks: rank 0 serves, ranks 1-4 work. Worker 3 computes four times slower than the others
# (a straggler). First synchronously: the server waits for every push each step. Then
# asynchronously: each push is applied as it arrives.

# %%
ranks = MPICluster(5).start()

# %%
# %%px
import torch
from ringlab.train import ParameterServer
from ringlab.train.task import accuracy, batches, make_data, make_model

x, y, x_test, y_test = make_data()
records = {}
for mode in ("sync", "async"):
    model = make_model()
    ps = ParameterServer(model, servers=1, mode=mode, lr=0.05, straggler=(3, 4.0))
    records[mode] = ps.run(60, batches(x, y, 4, 32), torch.nn.CrossEntropyLoss())
    records[mode]["accuracy"] = accuracy(model, x_test, y_test)

# %%
everyone = ranks.view.pull("records", block=True)
ranks.stop()
for mode in ("sync", "async"):
    workers = [r[mode] for r in everyone[1:]]
    print(f"{mode:>5}: {everyone[0][mode]['seconds']:.2f} s, test accuracy {everyone[0][mode]['accuracy']:.3f}; "
          "waiting / computing per worker: "
          + ", ".join(f"{w['wait_seconds']:.2f}/{w['compute_seconds']:.2f} s" for w in workers))

# %% [markdown]
# Synchronously, the fast workers spend most of their time waiting for the straggler. Asynchronously
# nobody waits, but a push may be computed on parameters that other workers have since moved: its
# staleness. The straggler's pushes are the stalest:

# %%
staleness_plot(everyone[0]["async"]["staleness"])

# %% [markdown]
# ## Summary
#
# - One server's links carry (n-1)·K each way, like a naive allreduce's root; M shards divide that
#   by M.
# - Synchronous servers compute the same average as data-parallel SGD, so everyone waits for the
#   slowest worker.
# - Asynchronous servers never wait, at the price of stale gradients, which can hurt convergence.
#
# ## Exercises
#
# 1. (Above) the server's load.
# 2. Run the training again with `servers=2` on six ranks (two servers, four workers). What changes
#    in the time per step, and what does not?
