# %% [markdown]
# # A first look: ring allreduce, one chunk at a time
#
# **What you'll do:** build the schedule of a ring allreduce on 4 ranks, follow every chunk as it moves,
# run it on real numbers, and count the bytes each rank sends.
#
# **What you'll learn:** why the ring splits the buffer into *n* chunks, what each rank holds after each
# step, and why every rank sends 2(n-1)/n of the buffer however many ranks there are.
#
# **What you need:** nothing but this notebook. Everything here runs in one process: ringlab plays all
# the ranks itself. Later labs run the same schedules on real MPI ranks and GPUs.

# %%
import numpy as np
import ringlab as rl
from ringlab.demo import walkthrough

# %% [markdown]
# ## A collective is data
#
# In ringlab every algorithm is a *schedule*: a list of steps, each a set of chunk transfers
# `(src, dst, chunk, reduce-or-copy)` that happen at the same time. Here is the ring on 4 ranks.

# %%
ring = rl.build("allreduce.ring", 4)
ring

# %%
ring.steps[0]   # step 0: rank j sends chunk j to rank j+1, which adds it in

# %% [markdown]
# ## Every step, every chunk
#
# Each cell below says whose inputs a rank's copy of a chunk holds: `r0+r1` is rank 0's data plus
# rank 1's. Watch a chunk grow by one contribution per step during the reduce-scatter, then travel
# around the ring unchanged during the allgather.

# %%
print(walkthrough(ring))

# %% [markdown]
# ## Step through it
#
# The same schedule as a picture. Press play, or move one step at a time. Orange arrows add into the
# receiver's copy and blue ones replace it. A cell turns green when it holds everything the
# collective needs there, and under each rank you can see how many bytes it has sent so far.

# %%
from ringlab.viz import StepThrough, step_figure, use_renderer
use_renderer()
StepThrough(ring)

# %% [markdown]
# A widget needs a running kernel. This figure plays without one, for example in this
# notebook exported to HTML:

# %%
step_figure(ring)

# %% [markdown]
# ## Real numbers
#
# Give rank *r* the value 10<sup>r</sup> everywhere, so the digits of a result say which ranks it
# contains: 1111 is everybody.

# %%
inputs = [np.full(8, 10.0 ** rank) for rank in range(4)]
outputs = rl.simulate(ring, inputs)
outputs[2]

# %%
assert all(np.array_equal(out, sum(inputs)) for out in outputs)

# %% [markdown]
# ## Counting bytes: ring against naive
#
# The naive allreduce sends everything to one root and back. Its root handles (n-1)·K bytes each way;
# a ring rank sends 2(n-1)/n·K, which approaches 2K. These numbers are counted from the schedules,
# not measured: measuring comes in the later labs.

# %%
K = 1 << 20
print(" n   ring rank sends   naive root receives")
for n in (2, 4, 8, 16):
    ring_sent = rl.traffic(rl.build("allreduce.ring", n), K)["sent"][0] / K
    root_in = rl.traffic(rl.build("allreduce.naive", n), K)["received"][0] / K
    print(f"{n:>2}   {ring_sent:>10.3f} K      {root_in:>10.0f} K")

# %% [markdown]
# ## The checker
#
# Schedules you write yourself go through the same checker. Here the allgather is one step short:
# the checker names the rank and chunk that end up without the full sum.

# %%
short = rl.make_schedule("allreduce", 4, 4, ring.steps[:-1])
try:
    rl.check(short)
except rl.ScheduleError as err:
    print(err)

# %% [markdown]
# ## Summary
#
# - A ring allreduce is a reduce-scatter (n-1 steps, each adding one contribution to each chunk in
#   flight) followed by an allgather (n-1 steps passing the finished chunks on).
# - At step *i* rank *j* sends chunk (j-i) mod n, then (j-i+1) mod n in the allgather.
# - Every rank sends and receives 2(n-1)/n of the buffer; a naive root carries (n-1) times it.
#
# **Try:** `print(walkthrough(rl.build("allreduce.rhd", 5)))` for halving-doubling on a rank count that
# is not a power of two, or `python -m ringlab demo --help` in a terminal for every algorithm.
