# %% [markdown]
# # Lab 04: parameter servers
#
# **What you'll do:** count what a single parameter server and a sharded one carry, then train a
# small model on five MPI ranks (one server, four workers) synchronously and asynchronously, with
# one worker slowed down, and look at who waits and how stale the gradients get. Then race the two
# servers and a ring allreduce against the clock, and measure the server's load as workers join, on
# this machine and on an emulated network where the server's one link is the bottleneck.
#
# **What you'll learn:** why one server is a bottleneck that grows with the number of workers, how
# sharding divides it, and what asynchronous training trades for not waiting.
#
# **What you need:** labs 03 and 02, and torch (installed by `python3 dev.py`).

# %%
import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab04_parameter_servers.serverload import (check_server_load, describe_server_load,
                                                                 server_bottleneck_lesson)
from ringlab.lessons.lab04_parameter_servers.staleness import describe_staleness, describe_waiting
from ringlab.lessons.lab04_parameter_servers.wallclock import common_target, describe_race
from ringlab.measure.tables import table
from ringlab.mpi.devices import cores
from ringlab.viz import staleness_order_plot, staleness_plot, use_renderer
from ringlab.viz.training import emulated_load_plot, loss_against_time_plot, server_load_plot

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
# (a [straggler](glossary.md#straggler)). First synchronously: the server waits for every push each step. Then
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
# ## Convergence against wall-clock time
#
# Staleness is the price of not waiting; what does not waiting buy? On the same five ranks, train the
# same model three ways, 30 steps a worker at learning rate 0.3, with worker 3 sleeping a fixed 20 ms
# more every step (`Straggler(3, extra_seconds=0.02)`, the same slow-down the server's `straggler=`
# makes, so that all three runs are slowed alike):
#
# - the synchronous server and the asynchronous server (rank 0 serves, ranks 1-4 work);
# - a ring allreduce among the four workers (`DistributedOptimizer`, the same plain SGD; rank 0 sits
#   out, asleep).
#
# Each run keeps a copy of the weights after every update, with the seconds since its start
# (measured here); the test loss of every copy is computed afterwards, off the clock.

# %%
# %%px
from ringlab.lessons.lab04_parameter_servers.wallclock import METHODS, race
from ringlab.train.straggler import Straggler

# worker 3 takes 20 ms more every step (a sleep here; on an emulated machine, its virtual clock)
slow = Straggler(3, extra_seconds=0.02)
runs = {method: race(method, steps=30, straggler=slow, lr=0.3) for method in METHODS}

# %%
runs = ranks.pull_rank0("runs")  # each run says how it was slowed: runs["sync"]["straggler"]
loss_against_time_plot(runs, target=common_target(runs))

# %% [markdown]
# Which run reached the dashed target first, and why, read from the runs:

# %%
print(describe_race(runs))

# %% [markdown]
# ## The server's load, measured as well as counted
#
# The table at the top counted the server's bytes from the schedule. Now measure them on the ranks: a
# synchronous server on rank 0 with 1, 2, 3 and 4 workers in turn (the ranks not in use sit out,
# asleep), 20 steps each, with a wider MLP (256 hidden units) so that a push is big enough to take
# time. The server counts the bytes of every message it receives and sends, and times how long it is
# busy each step: receiving and adding the pushes, updating, answering, but not waiting for a push to
# arrive. Beside it, what one rank of a ring allreduce over the same workers sends, counted from the
# schedule: 2(n-1)/n K.

# %%
# %%px
from ringlab.lessons.lab04_parameter_servers.serverload import measure_server_load

load = measure_server_load(steps=20, hidden=256)  # rank 0 returns the rows, the others None

# %%
load = ranks.pull_rank0("load")
server_load_plot(load)

# %%
print(describe_server_load(load, nranks=ranks.n, cores=cores()))

# %% [markdown]
# ## The server's link as the bottleneck, on an emulated network
#
# Ranks that share a few cores and talk through memory, as on a laptop, time mostly the CPU (the
# sentences above say whether yours shared cores): that cannot show the lesson of the table at the top,
# that the server's *link* carries every worker's gradient. So run the same synchronous server on an emulated network
# (`serverload.EMULATED`, `uniform:0.125:50`: every rank on its own 1 Gb/s Ethernet port to a switch, 50 us a
# message) in **virtual time**. Every push and every answer really moves and is really added, but each rank
# keeps a clock of its own: a message arrives its links' time after its sender posted it (pushes that
# arrive together share the server's one port), and computing adds this CPU's time for it (the thread's
# CPU time, so ranks sharing your cores do not lengthen it); nobody sleeps. Beside it, a ring allreduce of
# the same gradients among the same workers on the same network, and the cost model's prediction of both
# for that network. What is measured is real code on links of known speed, with this CPU's compute
# counted as CPU time: not your network. The wall time your machine took is printed beside it.

# %%
# %%px
from ringlab.lessons.lab04_parameter_servers.serverload import measure_emulated_load

emulated = measure_emulated_load()  # 1, 2, 3, 4 workers on the emulated network; rank 0 returns the rows

# %%
emulated = ranks.pull_rank0("emulated")
ranks.stop()
emulated_load_plot(emulated)

# %%
server_bottleneck_lesson(emulated)  # the sentences are computed from the rows above

# %% [markdown]
# ## Summary
#
# - One server's links carry (n-1)·K each way, like a naive allreduce's root; M shards cut the busiest
#   rank's to (n+M-2)·K/M: (n-1)·K/M as a server and (M-1)·K/M as a worker, the ring's 2(n-1)/n·K at M = n.
# - Synchronous servers compute the same average as data-parallel SGD, so everyone waits for the
#   slowest worker.
# - Asynchronous servers never wait, at the price of stale gradients, which can hurt convergence.
# - Staleness counts the updates between a worker's pull and its push: a slow worker's pushes are
#   stale while the fast ones run and fresh once it runs alone; what it hands the others are
#   gradients of old weights.
# - Against the clock, a synchronous server and a ring allreduce both go at the straggler's pace (they
#   compute the same average, step for step); an asynchronous server's fast workers run ahead on
#   stale weights.
# - A server receives and sends one gradient per worker every step, so its bytes and its busy time
#   grow with the workers; a ring rank's bytes, 2(n-1)/n K, stay under 2K.
# - On a network where every rank has one port, the server's port carries all 2·W·K of a step: its
#   step grows with the workers and soon takes longer than a ring allreduce of the same gradients.
#
# ## Exercises
#
# 1. (Above) the server's load.
# 2. Run the training again with `servers=2` on six ranks (two servers, four workers). What changes
#    in the time per step, and what does not?

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out, a figure to read, a choice to make. Run the
# cell that shows a question, write your answer in the cell under it (`answer = ...`: a number in the
# unit asked, or one of the choices as a string), then run the check. The worked answer is folded
# under **Answer**: open it once you have tried. ringlab computes every expected answer when the check
# runs, from its schedules, its cost model, the published measurements it ships or this machine, and
# the worked answer says which.

# %%
from ringlab.lessons.lab04_parameter_servers.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number, in GB
# solution
answer = (16 - 1) * 100 / 1000  # (n-1) x K

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number, in GB
# solution
answer = ((16 - 1) + (4 - 1)) * 100 / 4 / 1000  # (n-1)K/M + (M-1)K/M

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of times
# solution
answer = 16 / 2  # (n-1)K over 2(n-1)K/n

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4, pushes=pushes)

# %% tags=["solution"]
answer = None  # the worker's number
# solution
from ringlab.lessons.lab04_parameter_servers.staleness import by_worker

answer = max(by_worker(pushes).items(), key=lambda item: item[1]["mean"])[0]

# %%
QUIZ.check(4, answer, pushes=pushes)
