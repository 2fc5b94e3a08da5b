# %% [markdown]
# # Lab 02: reduce and broadcast
#
# **What you'll do:** see what MPI's reduce and broadcast promise, build them three ways (direct,
# binomial tree, pipelined chain), work out how long a chain takes when the buffer is cut into S
# segments, then measure a chain broadcast on four MPI ranks for several segment counts S and find
# the best one, measured and predicted.
#
# **What you'll learn:** why passing a buffer down a chain of ranks in pieces, instead of whole,
# changes how its time grows with the number of ranks, and how latency sets the best segment count.
#
# **What you need:** lab 00, and lab 01 for latency and bandwidth. Everything runs on this machine's
# CPU.

# %%
import numpy as np
import ringlab as rl
from ringlab.lessons.lab02_reduce_broadcast import (check_chain_time, describe_emulated_fit, fit_chain,
                                                    fitted_chain_times, pipelining, predicted_chain, run_machine)
from ringlab.measure.latency import describe_alpha
from ringlab.measure.tables import table
from ringlab.mpi.devices import cores
from ringlab.viz import StepThrough, segments_plot, use_renderer

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## What they promise
#
# Reduce: every rank contributes, and the root ends with the sum. Broadcast: the root's buffer
# ends up on every rank. Here is a binomial-tree reduce to root 2 on five ranks, played in one
# process: the root holds 1+2+3+4+5 = 15, while the other ranks keep whatever partial sums the tree
# left them.

# %%
inputs = [np.full(4, rank + 1.0) for rank in range(5)]
outputs = rl.simulate(rl.build("reduce.tree", 5, root=2), inputs)
[out[0] for out in outputs]

# %% [markdown]
# ## Three ways, counted
#
# For 8 ranks and a 1 MiB buffer: how many steps each takes, and what the root's links carry. The
# chains cut the buffer into S = n segments (ringlab's default), so a chain takes S + n - 2 steps.

# %%
K, n = 1 << 20, 8
rows = []
for name in ("reduce.direct", "reduce.tree", "reduce.chain", "broadcast.direct", "broadcast.tree", "broadcast.chain"):
    schedule = rl.build(name, n)
    counts = rl.traffic(schedule, K)
    rows.append({"algorithm": name, "steps": len(schedule.steps), "received": counts["received"][0] / K,
                 "sent": counts["sent"][0] / K})
table(rows, {"algorithm": "algorithm", "steps": "steps", "root receives (K)": "received", "root sends (K)": "sent"})

# %% [markdown]
# A chain broadcast cut into S = 4 segments: a rank passes on segment s on the step after it arrived,
# so the segments flow down the chain like a pipeline.

# %%
StepThrough(rl.build("broadcast.chain", 4, segments=4))

# %% [markdown]
# ## Exercise 1: the pipelined chain's time
#
# With bandwidth B and no latency, write the time a chain broadcast of K bytes takes over n ranks
# when it is cut into S segments. The check compares your formula with ringlab's cost model.

# %% tags=["solution"]
def chain_time(K, n, S, B):
    """Seconds for a pipelined chain broadcast of K bytes, n ranks, S segments, B bytes/s."""
    # solution
    return K * (S + n - 2) / (S * B)


# %%
chain_time = check_chain_time(chain_time)  # yours when it is right, else the reference

# %% [markdown]
# As S grows the time tends to K/B, the time to send the buffer once, whatever n is. But each
# step also pays a latency, so too many segments cost more than they save. On four real ranks, first
# on this machine as it is, then on an emulated machine beside it (`rl.emulate`, here `MACHINE` from
# the lab's room: 100 MB/s each way per rank and 2 ms a message).
#
# The emulated run is the same code moving the same data, timed in **virtual time**: each rank keeps
# a clock, a message arrives on it its links' time after it was sent (the latency, plus its bytes
# over the bandwidth), a receive completes at the later of the rank's clock and the arrival, and the
# rank's own work (here, the copy that lands each segment) counts as the CPU time it took
# (`compute="cpu"`, the default; `compute="model"` prices it by the cost model instead). Nobody
# sleeps: the run takes as long as this machine's work, and four ranks sharing a laptop's cores, or a
# busy machine, still give the links' times. It measures real code on modelled links, not a network.
# (A machine's SPEC may end in `@SCALE`, as in `uniform:0.1:2000@4`: links that many times slower,
# this CPU's work unchanged. In virtual time no lab needs it.)
#
# On this machine the ranks share a few cores and copy through memory, so the CPU, not a link, may
# set its times; the cell says so from its own numbers, and shows beside the emulated times what this
# machine took to run them (wall time).

# %%
from ringlab.lab.cluster import MPICluster

ranks = MPICluster(4).start()

# %%
# %%px
from mpi4py import MPI
from ringlab.lessons.lab02_reduce_broadcast import MACHINE, measure_chain
from ringlab.measure.bandwidth import pingpong

comm = MPI.COMM_WORLD
raw = measure_chain(comm, 1 << 22)                        # 4 MiB, this machine
emulated = measure_chain(comm, 1 << 22, machine=MACHINE)  # the same, on the emulated links
message = pingpong(comm, [8])  # one raw 8-byte MPI message, rank 0 to rank 1 (rows on rank 0 only)

# %%
raw, emulated, message = ranks.pull_rank0("raw", "emulated", "message")
ranks.stop()
print(pipelining(raw, emulated))
for run in (raw, emulated):
    print(f"{run_machine(run)}: tree {run['tree'] * 1e3:.1f} ms; chain by S:",
          ", ".join(f"{S}: {t * 1e3:.1f} ms" for S, t in zip(run["segments"], run["chain"])))
print("this machine's wall time for the emulated calls: tree", f"{emulated['tree_wall'] * 1e3:.1f} ms; chain by S:",
      ", ".join(f"{S}: {t * 1e3:.1f} ms" for S, t in zip(emulated["segments"], emulated["chain_wall"])))

# %% [markdown]
# The emulated machine's links are known, so the cost model predicts it directly (the printout's best
# S is the best of the grid measured; `best_segments(n, K, topology)` of `ringlab.predict.costmodel`
# searches every S); this machine's are not, so fit the model's latency and bandwidth to its
# measurements instead. Lab 01 fitted its alpha
# to a raw MPI ping-pong; this alpha is the cost of one step of ringlab's chain, which the cell sets
# beside a raw message measured on the same ranks. A fit shows how far it misses each measurement.

# %%
fitted = fit_chain(raw)
print(f"this machine: {fitted}")
print(describe_alpha(fitted, message[0]["one_way_s"], "chain broadcast", nranks=4, cores=cores()))
print(describe_emulated_fit(emulated, fit_chain(emulated)))
segments_plot(raw["segments"], raw["chain"], fitted_chain_times(raw, fitted),
              title="this machine: measured (points) and the fitted model (dashed; none when the fit misses a point "
                    "by more than 25%), 4 MiB over 4 ranks").show()
segments_plot(emulated["segments"], emulated["chain"], predicted_chain(emulated),
              title=f"{run_machine(emulated)}: measured (points) and predicted for those links (dashed)").show()

# %% [markdown]
# ## Summary
#
# - Direct reduce and broadcast load the root's link with (n-1)·K; a binomial tree takes
#   ceil(log2 n) steps of the whole buffer; a pipelined chain takes S+n-2 steps of K/S.
# - The chain's time K(S+n-2)/(S·B) tends to K/B as S grows; latency per step sets the best S,
#   near sqrt((n-2)·K/(alpha·B)).
#
# ## Exercises
#
# 1. (Above) the chain's time.
# 2. Repeat the measurement with a 64 KiB buffer. Where does the best S move, and why?

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
from ringlab.lessons.lab02_reduce_broadcast import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number of steps
# solution
import math

answer = math.ceil(math.log2(13))

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number, in ms
# solution
answer = (64 << 20) * (16 + 8 - 2) / (16 * 10e9) * 1e3  # K(S+n-2)/(S B)

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of segments
# solution
import math

answer = math.sqrt((4 - 2) * (4096 << 10) / (20e-6 * 5e9))  # the minimum of (n+S-2)(alpha + K/(S B))

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # "up", "down" or "same"
# solution
answer = "down"  # the best S grows as sqrt(K): 64 times less data, 8 times fewer segments

# %%
QUIZ.check(4, answer)
