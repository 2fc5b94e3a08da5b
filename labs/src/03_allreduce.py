# %% [markdown]
# # Lab 03: allreduce, naive against ring
#
# **What you'll do:** count what a naive allreduce and a ring allreduce send, write the ring's
# chunk-index rule yourself and see the checker's verdict, then run both on real MPI ranks and
# measure them against MPI's own `Allreduce`, with the cost model fitted through your measurements.
#
# **What you'll learn:** why the ring's per-rank traffic, 2(n-1)/n of the buffer, hardly grows with
# the number of ranks while the naive root's grows as n-1; what "bus bandwidth" measures; and where,
# on your machine, the ring overtakes naive.
#
# **What you need:** nothing but this notebook (labs 00 to 02 help). Everything runs on this
# machine's CPU: four MPI ranks as ipyparallel engines, on numpy buffers.

# %%
import numpy as np
import ringlab as rl
from ringlab.lessons.lab03_allreduce import (MACHINE, OPTIMAL, OVER_RANKS, RANKS, bandwidth_optimal,
                                             busbw_over_ranks, check_bus_factor, check_reduce_scatter_rule, links_of,
                                             scaling_lesson, scaling_rows, sweep_lesson)
from ringlab.measure.bench import in_machine_units
from ringlab.measure.tables import table
from ringlab.mpi.devices import cores
from ringlab.predict.fitting import fit_rows
from ringlab.viz.terminal import walkthrough
from ringlab.viz import StepThrough, algbw_busbw_plot, fitted_busbw_plot, step_figure, use_renderer

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## Counting bytes
#
# The naive allreduce sends every buffer to one root, which adds them up and sends the sum back.
# The ring cuts the buffer into n chunks and passes them around. Here are the bytes that the
# busiest rank sends and receives for a 1 MiB buffer. These are counted from the schedules; nothing
# is measured yet.

# %%
K = 1 << 20
rows = [{"ranks": n, "ring": max(rl.traffic(rl.build("allreduce.ring", n), K)["received"]) / K,
         "naive": max(rl.traffic(rl.build("allreduce.naive", n), K)["received"]) / K} for n in (2, 4, 8, 16)]
table(rows, {"ranks": "ranks", "ring: a rank receives (K)": ("ring", ".3f"),
             "naive: the root receives (K)": ("naive", ".0f")})

# %% [markdown]
# ## Exercise 1: the ring's reduce-scatter
#
# At step i of the reduce-scatter, rank j sends one chunk to rank j+1, which adds it to its own
# copy. Write `send_chunk(j, i, n)`, which returns which chunk that is, so that after n-1 steps every
# chunk has been summed over all ranks. The check builds a ring with your rule, runs it through
# ringlab's checker for several rank counts, and tells you where it goes wrong.

# %% tags=["solution"]
def send_chunk(j, i, n):
    """The chunk rank j sends to rank j+1 at reduce-scatter step i."""
    # solution
    return (j - i) % n


# %%
send_chunk = check_reduce_scatter_rule(send_chunk)  # yours when it is right, else the reference

# %% [markdown]
# What does a wrong rule look like? Here every rank always sends its own chunk, so the same
# contribution arrives twice:

# %%
def send_own_chunk(j, i, n):
    return j


_ = check_reduce_scatter_rule(send_own_chunk)  # the verdict is printed; the reference comes back

# %% [markdown]
# Step through the correct ring. After the reduce-scatter each rank holds one complete (green)
# chunk, and the allgather then passes those around:

# %%
ring = rl.build("allreduce.ring", 4)
StepThrough(ring)

# %% [markdown]
# The same steps as text. Each cell says whose inputs a rank's copy of a chunk holds: `r0+r1` is
# rank 0's data plus rank 1's. A chunk grows by one contribution per step during the reduce-scatter,
# then travels around the ring unchanged during the allgather.

# %%
print(walkthrough(ring))

# %% [markdown]
# On real numbers: give rank *r* the value 10<sup>r</sup> everywhere, so the digits of a result say
# which ranks it contains (1111 is everybody). `rl.simulate` plays all four ranks in this process.

# %%
inputs = [np.full(8, 10.0 ** rank) for rank in range(4)]
outputs = rl.simulate(ring, inputs)
print(outputs[2])
assert all(np.array_equal(out, sum(inputs)) for out in outputs)

# %% [markdown]
# A widget needs a running kernel. This figure plays without one, for example in this notebook
# exported to HTML:

# %%
step_figure(ring)

# %% [markdown]
# ## On real ranks
#
# Start four MPI ranks. Cells that begin with `%%px` run on all four at once. A mistake every rank
# makes alike (a typo, a name not defined yet) just fails the cell, and the ranks keep what they
# hold. If one rank raises while the others wait for it in a collective, the whole job is aborted
# instead of hanging; `ranks.restart(replay=True)` brings fresh ranks and runs your earlier `%%px`
# cells again.
#
# Nothing here is special to notebooks: in a terminal, `python -m ringlab.lab script 03 > ranks.py`
# writes this lab's `%%px` cells as one script, and `mpiexec -n 4 python -m mpi4py ranks.py` runs it.
#
# The first cell checks three allreduces against MPI's own: the ring, naive, and [`rhd`](glossary.md#rhd)
# (recursive halving and doubling: 2 log2(n) steps that move as many bytes per rank as the ring).

# %%
from ringlab.lab.cluster import MPICluster

ranks = MPICluster(4).start()

# %%
# %%px
import numpy as np
import ringlab as rl
from mpi4py import MPI

comm = MPI.COMM_WORLD
x = np.random.default_rng(comm.Get_rank()).standard_normal(1 << 18).astype(np.float32)
want = np.empty_like(x)
comm.Allreduce(x, want)
for name in ("ring", "naive", "rhd"):
    assert np.allclose(rl.allreduce(x, name), want, atol=1e-4), name
print(f"rank {comm.Get_rank()}: ring, naive and rhd agree with MPI's Allreduce")

# %% [markdown]
# Now time them, from 64 KiB to 64 MiB, against MPI's own `Allreduce`. Every result is checked
# first. Bus bandwidth is bytes/time x 2(n-1)/n: what each rank's link carries, so that a
# bandwidth-optimal allreduce shows the link's speed whatever n is. Then the same sweep on an
# emulated machine (`MACHINE` of the lab's room: each rank on its own port of 200 MB/s each way
# into a switch, 0.5 ms a message, `rl.emulate`, met in lab 02), because four ranks on a laptop's cores copy
# through memory and the CPU may set their pace. There the same code moves the same data in
# virtual time: each message takes its links' time on the ranks' clocks, and each rank's additions
# count as the CPU time they took (`compute="cpu"`), a few percent of a step on these links. Nobody
# sleeps, so the emulated sweep takes this machine only as long as its work; the text below sets
# the two clocks side by side.

# %%
# %%px
from ringlab.lessons.lab03_allreduce import EMULATED_SIZES, MACHINE
from ringlab.measure.bench import run

result = run("allreduce", ["ring", "naive", "mpi"], [1 << k for k in range(16, 27, 2)], iters=5, warmup=1)
emulated = run("allreduce", ["ring", "naive"], EMULATED_SIZES, iters=5, warmup=1, emulate=MACHINE)

# %%
result, emulated = ranks.pull_rank0("result", "emulated")  # rank 0 holds the tables
rows, nranks = result["rows"], result["ranks"]
ranks.stop()

# %% [markdown]
# Fit the alpha-beta cost model (lab 05 predicts with it) to each algorithm's times: alpha is
# what every message costs, and every byte on the busiest link costs 1/bandwidth. The markers are
# your measurements, the line of the same colour the fit drawn through them; where a marker sits
# far from its line, the model leaves out something this machine does. A fit that misses a
# measurement by more than 25% says so and is not used to predict.

# %%
fits = {name: fit_rows(rows, name, nranks) for name in ("ring", "naive")}
fitted_busbw_plot(rows, fits, title=f"markers: allreduce busbw measured here on {nranks} CPU ranks; "
                                    "lines: the cost model fitted to them").show()
emulated_rows = in_machine_units(emulated)  # the emulated machine's times (virtual; over its scale, if any)
emulated_fits = {name: fit_rows(emulated_rows, name, nranks) for name in ("ring", "naive")}
fitted_busbw_plot(emulated_rows, emulated_fits, title=f"markers: measured on {emulated['emulation']['label']}, in "
                                                      "virtual time; lines: the cost model fitted to them").show()

# %% [markdown]
# What your numbers say. Every sentence below is computed from the measurements above: where
# the ring overtakes naive (measured, and where the two fits cross), by how much it wins at the
# largest size, and whether that is as much as the byte counts of the first section predict, on
# this machine and on the emulated one. On another machine, or on another run, this machine's part
# may say something else; the emulated machine's should not.

# %%
print(sweep_lesson(result, emulated, cores()))  # the ranks run on this machine: its cores are theirs

# %% [markdown]
# ## [algbw](glossary.md#algbw) against [busbw](glossary.md#busbw)
#
# nccl-tests prints two rates for every collective: algbw, the size over the time, and busbw, algbw
# times a factor of its own per collective: 2(n-1)/n for allreduce, 1 for broadcast. Where do the
# factors come from? Each is the number of bytes the busiest rank's link carries, in units of the
# size, when the collective runs its bandwidth-optimal algorithm; so busbw is what the link carried
# per second, comparable across collectives and rank counts. `bandwidth_optimal(kind, n)` builds
# that schedule for six collectives (the ring for allreduce, reduce-scatter and allgather, the
# pipelined chain for broadcast and reduce, the pairwise exchange for alltoall).
#
# ## Exercise 2: bus factors from the bytes
#
# Write `bus_factor(kind, n)`: build `bandwidth_optimal(kind, n)`, count its bytes with
# `rl.traffic(schedule, nbytes)` (any nbytes, say 1 MiB), take the most bytes any rank receives,
# and divide by the size nccl-tests prints. That size is one rank's buffer: `nbytes`, except for
# alltoall, whose schedule holds all n x n blocks (chunk s·n+d goes from rank s to rank d), so one
# rank's buffer is `nbytes / n`. The checker compares your factors with nccl-tests' definitions.

# %% tags=["solution"]
def bus_factor(kind, n):
    """Bytes on the busiest rank's link in the bandwidth-optimal schedule, over nccl-tests' size."""
    # solution
    nbytes = 1 << 20
    received = max(rl.traffic(bandwidth_optimal(kind, n), nbytes)["received"])
    return received / (nbytes / n if kind == "alltoall" else nbytes)


# %%
bus_factor = check_bus_factor(bus_factor)  # yours when it is right, else the reference

# %%
table([{"kind": kind, **{n: bus_factor(kind, n) for n in (2, 4, 8)}} for kind in OPTIMAL],
      {"collective": "kind", "2 ranks": (2, ".3f"), "4 ranks": (4, ".3f"), "8 ranks": (8, ".3f")})

# %% [markdown]
# Why report busbw at all? As ranks are added, each rank's link carries 2(n-1)/n of the buffer, so the
# same link takes longer per byte of result: algbw falls even on a perfect network, while busbw stays
# at the link's rate. Measured on an emulated machine at 2, 4, 8 and 16 ranks (one MPI job each,
# `ringlab bench --emulate OVER_RANKS --emulate-compute model`), beside the cost model's lines for the
# same links. `OVER_RANKS` has links of 200 MB/s and 20 us a message, so that at 4 MiB the ring's
# 2(n-1) latencies stay under 2% of a call even on 16 ranks. It runs with `compute="model"`: this
# CPU's work never counts (sixteen ranks share this machine's few cores, and a reduction costs
# nothing on these links), so the times are the links' alone, message by message, as the cost model prices
# them. With `compute="cpu"` each rank's additions would add their CPU time, a few percent at
# every rank count. Beside the virtual times, the text says what this machine took (wall time).

# %%
over_ranks = busbw_over_ranks(OVER_RANKS, RANKS)
alpha, bandwidth = links_of(OVER_RANKS, max(RANKS))
algbw_busbw_plot(scaling_rows(alpha, bandwidth, ranks=RANKS), measured=over_ranks,
                 title=f"lines: predicted (cost model) for the links of {OVER_RANKS.split('@')[0]}; markers: ring "
                       "allreduce measured on those emulated links, in virtual time").show()

# %%
print(scaling_lesson(over_ranks, OVER_RANKS))

# %% [markdown]
# ## Summary
#
# - The naive allreduce funnels (n-1)·K bytes into one root and (n-1)·K out of it. A ring rank sends
#   and receives 2(n-1)/n·K, which tends to 2K: the ring is bandwidth-optimal.
# - At reduce-scatter step i, rank j sends chunk (j-i) mod n. The allgather passes the finished
#   chunks on, starting one chunk later.
# - Bus bandwidth puts algorithms and rank counts on one scale: its factor is the bytes on the busiest
#   link over the size, counted from the bandwidth-optimal schedule (2(n-1)/n for allreduce, (n-1)/n for
#   reduce-scatter, allgather and alltoall, 1 for broadcast and reduce), so it stays at the link's rate
#   as ranks are added while algbw falls.
# - Where the ring overtakes naive, and
#   by how much it wins, depends on the machine: the text printed under the figure says it for yours,
#   from your own numbers (ranks against cores, the crossover measured and fitted, the ratios at the
#   largest size). Lab 05 predicts the same sweep on machines you may not have.
#
# ## Exercises
#
# 1. (Above) exercises 1 and 2: the reduce-scatter index rule, and the bus factors.
# 2. Run the measurement again with `"rhd"` and `"ps"` added. Which one wins at 64 MiB, and why does
#    `ps` (one server) behave like `naive`?
# 3. Fit `"rhd"` too and find whether and where the ring overtakes it: `measured_crossover(rows, "rhd", "ring")`
#    and `fitted_crossover(fits, "rhd", "ring")` (both in `ringlab.measure.sweep`).

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
from ringlab.lessons.lab03_allreduce import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number, in GiB
# solution
answer = 2 * (8 - 1) / 8 * 1  # 2(n-1)/n x K

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number, in MiB
# solution
answer = (16 - 1) * 256  # (n-1) x K

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your chunk index
# solution
answer = (1 - 3) % 5  # (j - i) mod n

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your number, in GB/s
# solution
answer = (256 << 20) / 20e-3 * 2 * (8 - 1) / 8 / 1e9  # algbw x 2(n-1)/n

# %%
QUIZ.check(4, answer)
