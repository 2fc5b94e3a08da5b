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
from ringlab.lab.staleness import describe_staleness, describe_waiting
from ringlab.lab.tables import table
from ringlab.viz import staleness_order_plot, staleness_plot, use_renderer

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## The server's links
#
# In `allreduce.ps` with M shards, rank s < M serves shard s: every rank pushes each shard to its
# server, which adds them up and sends the sum back. Counted for 8 ranks and a 1 MiB buffer:

# %%
K, n = 1 << 20, 8
schedules = {f"ps, M={M}": rl.build("allreduce.ps", n, servers=M) for M in (1, 2, 4, 8)}
schedules["ring"] = rl.build("allreduce.ring", n)
table([{"algorithm": name, "received": max(rl.traffic(s, K)["received"]) / K} for name, s in schedules.items()],
      {"algorithm": "algorithm", "the busiest rank receives (K)": "received"})

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
server_load = check_server_load(server_load)  # yours when it is right, else the reference

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
everyone = ranks.view.pull("records", block=True)  # every rank's: rank 0 serves, ranks 1-4 are workers 0-3
ranks.stop()
table([{"mode": mode, **everyone[0][mode]} for mode in ("sync", "async")],
      {"mode": "mode", "time (s)": "seconds", "test accuracy": ("accuracy", ".3f")})
table([{"mode": mode, "worker": w, **everyone[w + 1][mode]} for mode in ("sync", "async") for w in range(4)],
      {"mode": "mode", "worker": "worker", "waiting (s)": "wait_seconds", "computing (s)": "compute_seconds"})

# %% [markdown]
# How much of its time did each worker spend waiting, from the same records?

# %%
print(describe_waiting({mode: [everyone[w + 1][mode] for w in range(4)] for mode in ("sync", "async")},
                       straggler=3))

# %% [markdown]
# An asynchronous server does not wait for the slowest worker, but a push may be computed on
# parameters that other workers have since moved: its staleness, the number of updates the server
# applied between the worker's pull and its push. The server recorded every push in the order it
# applied them. Which worker's pushes were the stalest?

# %%
pushes = everyone[0]["async"]["staleness"]  # (worker, staleness) of every push, in the order applied
# worker 3 is the straggler, as in ParameterServer(..., straggler=(3, 4.0)) above
staleness_plot(pushes, straggler=3)

# %% [markdown]
# The same pushes in the order the server applied them show when each worker pushed:

# %%
staleness_order_plot(pushes, straggler=3)

# %% [markdown]
# Read back from the pushes (a push of staleness s missed exactly the s updates applied just before
# it, so the order says whose updates each worker missed):

# %%
print(describe_staleness(pushes, straggler=3))

# %% [markdown]
# ## Summary
#
# - One server's links carry (n-1)·K each way, like a naive allreduce's root; M shards divide that
#   by M.
# - Synchronous servers compute the same average as data-parallel SGD, so everyone waits for the
#   slowest worker.
# - Asynchronous servers never wait, at the price of stale gradients, which can hurt convergence.
# - Staleness counts the updates between a worker's pull and its push: a slow worker's pushes are
#   stale while the fast ones run and fresh once it runs alone; what it hands the others are
#   gradients of old weights.
#
# ## Exercises
#
# 1. (Above) the server's load.
# 2. Run the training again with `servers=2` on six ranks (two servers, four workers). What changes
#    in the time per step, and what does not?
