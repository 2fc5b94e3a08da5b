# %% [markdown]
# # Lab 10: inside NCCL
#
# **What you'll do:** read how NCCL picks an algorithm and a protocol for every call by its own cost model, and
# work out from it the sizes at which NCCL changes protocol; follow its ring search to the channels it runs on four boards of 8 GPUs; hold
# the model's picks against published sweeps that say what NCCL ran; see what the switch buys all-gather and
# reduce-scatter; step through PAT's all-gather and see what
# NCCL's model charges for it; and count and measure one-shot and two-shot allreduce, which read a peer's memory
# instead of sending it messages, and choose between them from what their schedules count.
#
# **What you'll learn:** which algorithm and protocol NCCL runs at which size and scale, and why; where its channel
# count comes from; why the switch speeds up allreduce and not all-gather; why PAT's log2 n steps buy far less than (n-1)/log2 n; and when one synchronisation beats a
# ring's 2(n-1) steps.
#
# **What you need:** labs 03 and 05 (rings, trees, NVLS, bus bandwidth), and [lab 09](09_model_parallelism.ipynb)
# before it, whose allreduces, all-gathers and all-to-alls NCCL runs on GPUs. Every NCCL number here is a
# prediction of NCCL's own cost model (`rl.predict_nccl`) or a published measurement, and says which; the
# symmetric-memory section measures on this machine's CPU, in a short MPI job of two ranks that it starts itself.
#
# After it, [lab 11](11_plan_a_run.ipynb) prices every collective of a real training run with this model.

# %%
import ringlab as rl
from ringlab.lessons.lab10_inside_nccl.nccl import (CHANNEL_COLUMNS, NVLS_COLUMNS, PAT_COLUMNS, PUBLISHED_COLUMNS,
                                                    against_published, channel_rows, choice_rows, describe_channels,
                                                    describe_choices, describe_forced_ring, describe_nvls,
                                                    describe_pat, describe_protocols, describe_published,
                                                    forced_ring_sizes, nvls_rows, nvls_table, pat_refusal, pat_rows,
                                                    protocol_rows)
from ringlab.lessons.lab10_inside_nccl.checks import (check_pick_symmetric, check_switch_size, fastest_protocol,
                                                     protocol_options)
from ringlab.lessons.lab10_inside_nccl.symmetric import (COUNTED_COLUMNS, PREDICTED_COLUMNS, SYMMETRIC_COLUMNS,
                                                         counted_rows, describe_predicted, measure_symmetric,
                                                         predicted_rows, symmetric_lesson, symmetric_plot,
                                                         symmetric_rows)
from ringlab.measure.tables import table
from ringlab.viz import StepThrough, use_renderer
from ringlab.viz.parallelism import choice_map, protocol_plot

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## How NCCL chooses
#
# NCCL runs every collective with one of several algorithms and one of three [protocols](glossary.md#ll-ll128-simple) (LL128
# among them). The algorithms: the ring; the tree (a double binary tree across nodes, chains inside); NVLS
# ([NVLink SHARP](glossary.md#nvls): the NVSwitch adds); [NVLSTree](glossary.md#nvlstree) (NVLS inside each node, a tree of
# nodes across them); [CollNet](glossary.md#collnet) (the network's switches add, InfiniBand's SHARP); and
# [PAT](glossary.md#pat), below, for all-gather and reduce-scatter with one GPU a node. For each call it costs
# every pair with its own model, latency + bytes / bandwidth, from constants in its source
# (`src/graph/tuning.cc`), and runs the
# fastest. `rl.predict_nccl` is that model on ringlab's topologies: every number in this section is its
# prediction, or a published measurement, and says which.
#
# **Protocols** trade latency for bandwidth. LL writes 8 bytes at a time, 4 of data and a 4-byte flag
# the receiver polls, so a message is usable the moment it lands (no fence), at half the bandwidth or
# less; LL128 writes 128-byte lines with a flag in each (120 bytes of data), close to full NVLink
# bandwidth; Simple moves large chunks and synchronises with a fence per chunk, at full bandwidth and
# the highest latency. The ring allreduce of 8 H100s, each protocol forced:

# %%
protocols = protocol_rows()
print(describe_protocols(protocols))
protocol_plot(protocols)

# %% [markdown]
# ## Exercise 1: where NCCL changes protocol
#
# The printout says which protocol is fastest at each size it tried, in steps of 4x; not where, between them, one
# overtakes another. Each protocol's latency and bandwidth in NCCL's model, the ring allreduce of 8 H100s
# (`protocol_options()`, at 1 GiB, where no channel is narrowed for a small call):

# %%
options = protocol_options()
for protocol, (latency, bandwidth) in options.items():
    print(f"{protocol}: {latency * 1e6:.1f} us a call, {bandwidth / 1e9:.1f} GB/s")

# %% [markdown]
# Write `switch_size(small, large)`: given two protocols' `(latency in seconds, bandwidth in bytes/s)`, the first
# with the lower latency, the message size in bytes from which the second is the faster. The checker tries every pair
# of protocols on four machines' rings, and where your size is wrong it says which protocol NCCL's model has faster
# there.

# %% tags=["solution"]
def switch_size(small, large):
    """Bytes from which protocol ``large`` (latency, bandwidth) is faster than ``small``."""
    # solution
    (small_latency, small_bandwidth), (large_latency, large_bandwidth) = small, large
    # latency_s + x / bandwidth_s = latency_l + x / bandwidth_l, solved for x
    return (large_latency - small_latency) / (1 / small_bandwidth - 1 / large_bandwidth)


# %%
switch_size = check_switch_size(switch_size)  # yours when it is right, else the reference

# %% [markdown]
# NCCL's own rule, the least latency + bytes / bandwidth (`fastest_protocol(nbytes, options)`), on either side of
# your sizes:

# %%
for small, large in (("LL", "LL128"), ("LL128", "Simple")):
    size = switch_size(options[small], options[large])
    print(f"{large} from {size / 2 ** 20:.2f} MiB: {fastest_protocol(0.99 * size, options)} at 0.99x, "
          f"{fastest_protocol(1.01 * size, options)} at 1.01x")

# %% [markdown]
# **Channels.** One ring is a chain of copies driven by one block of GPU threads, and a channel (one such
# ring) moves only so fast, so NCCL runs several rings side by side, each over part of the buffer (lab 05's
# `allreduce.rings`). How many is not the port's rate divided by some rate per channel. NCCL's topology rates
# one NVLink at 20.6 GB/s on Hopper (`SM90_NVLINK_BW` in `src/graph/topo.h`, published) and a GPU's NVLink
# bandwidth at that times its count of links (`src/graph/topo.cc`). Its ring search (`src/graph/search.cc`,
# `ncclTopoCompute`) then tries channel speeds from a table, fastest first, fits as many channels of each speed as
# that bandwidth holds, and keeps the speed whose channels carry the most; `ncclTopoDupChannels` doubles fast
# channels at half the speed, and `ncclTopoPostset` doubles them all again. `ringlab.predict.channels` follows
# that search (and `rl.predict_nccl` narrows a small call's channels from its count, as NCCL does). Four boards of
# 8 GPUs, the rule's count against what `NCCL_DEBUG=INFO` printed where a log is published:

# %%
channels = channel_rows()
table(channels, CHANNEL_COLUMNS)
print(describe_channels(channels))

# %% [markdown]
# **Algorithms by size and scale.** What the model picks for allreduce, all-gather and reduce-scatter
# from 1 KiB to 8 GiB, on one [HGX](glossary.md#hgx) H100 board (NVIDIA's 8-GPU baseboard, its GPUs joined by
# NVSwitch), and on two and sixteen such nodes joined by [InfiniBand](glossary.md#infiniband) (one 400 Gbit/s card a GPU):

# %%
choices = choice_rows()
print(describe_choices(choices))
choice_map(choices)

# %% [markdown]
# Held against published sweeps that say what NCCL ran: 8 H200s at 8 GiB with 4 to 8 GPUs (NCCL chose
# between NVLS and the ring) and at 16 GiB for three collectives (ml-engineering, A17 and A19 of ringlab's
# data set); and 2 x 8 H100 with NCCL choosing against `NCCL_ALGO=Ring` forced, size by size
# (nccl-tests#290, A02 and A03). Published busbw beside the model's:

# %%
published_runs = against_published()
table(published_runs, PUBLISHED_COLUMNS)
print(describe_published(published_runs))
print(describe_forced_ring(forced_ring_sizes()))

# %% [markdown]
# The model predicts healthy hardware of each description. Where a published busbw sits well below it,
# the choice can still agree; lab 05's section "Is my number normal?" asks which fault such a number matches.
#
# ## NVLS for all-gather and reduce-scatter
#
# [NVLS](glossary.md#nvls) wins a large allreduce because the switch adds: each GPU's port carries K(n+1)/n
# each way where a ring's carries 2K(n-1)/n. NCCL has NVLS kernels for all-gather and reduce-scatter too
# (`src/device/all_gather.h` and `reduce_scatter.h` in NVIDIA/nccl). In all-gather the switch copies each GPU's
# stored shard to all n GPUs; in reduce-scatter each GPU loads its shard through the switch, which fetches it from
# all n GPUs and adds. Either way every GPU's port carries the whole buffer K one way, its own shard included,
# where a ring's skips its own: K(n-1)/n. NCCL's tuner prices them so (`src/graph/tuning.cc`: the NVLS rate times
# (ppn-1)/ppn, ppn the GPUs of a node, without the allreduce's doubling), and turns them off across nodes unless a CollNet plugin
# gathers and scatters for every GPU. `rl.predict_nccl(..., algorithm="nvls")` prices all three on one node;
# against the ring at its best protocol, on 8 H100s (predicted):

# %%
nvls = nvls_rows()
table(nvls_table(nvls), NVLS_COLUMNS)
print(describe_nvls(nvls))

# %% [markdown]
# The published table above says the same of a real node: at 16 GiB, 8 H200s ran the allreduce as NVLS and
# all-gather and reduce-scatter as rings (A19), where the model picks the same. This is why, in lab 08,
# ZeRO's all-gathers and reduce-scatters take longer than data parallelism's allreduce of the same bytes on such a
# node: the switch speeds up the one collective in which it has something to add.
#
# ## PAT: all-gather in log2 n steps, and what NCCL's model charges for it
#
# A ring all-gather takes n-1 steps, each paying latency: at a thousand nodes that dominates. NCCL 2.23
# added PAT (Parallel Aggregated Trees) for all-gather and reduce-scatter with one GPU a node (NCCL turns it
# off otherwise: `ncclPatEnable` in `src/graph/tuning.cc`, "PAT only supports 1 GPU per node"): each
# rank's block is broadcast along a binomial tree, the n trees run side by side, and at each step a rank
# sends everything it has to forward as one message, farthest distance first. ringlab builds it as a
# schedule (`allgather.pat`, `reduce_scatter.pat`: the uncapped form, without the cap NCCL puts on how
# much one message aggregates), so the simulator checks it and the widget steps through it. 8 ranks:
# 3 steps, and every rank still sends 7 blocks, as in a ring.

# %%
StepThrough(rl.build("allgather.pat", 8))

# %% [markdown]
# The steps are log-depth; NCCL's own latency model of PAT is not quite. `src/graph/tuning.cc` charges a PAT
# call its base latency, plus log2(nodes) times the network's latency / 3.5, plus 2.8 us for every rank: a
# term linear in the ranks, which its comment means to remove ("Still a linear part;
# hopefully we'll manage to remove it at some point"). `rl.predict_nccl` keeps all three terms. Where NCCL's
# model picks PAT, all-gather on H100 clusters of one GPU a node, how much its steps buy against the ring, and
# what it says of nodes of eight GPUs, predicted:

# %%
pats = pat_rows()
table(pats, PAT_COLUMNS)
print(describe_pat(pats, pat_refusal()))

# %% [markdown]
# ## Symmetric memory: one-shot and two-shot
#
# Every allreduce so far moves data in messages, and a ring pays a latency at each of its 2(n-1) steps. Inside
# one node a GPU can instead read and write its peers' memory directly. NCCL 2.27 added kernels for buffers that
# every GPU has registered as a [symmetric memory](glossary.md#symmetric-memory) window, "allowing buffers with identical virtual
# addresses across GPUs to benefit from optimized collective operations" (NVIDIA's blog on NCCL 2.27,
# published). A flag or a barrier in memory, not a message, tells a peer that the data is there, so an allreduce
# needs one or two synchronisations in all:
#
# - **[one-shot allreduce](glossary.md#one-shot-allreduce)**: every rank makes its whole buffer visible to the others, and each
#   adds up all n buffers itself. One synchronisation; each rank reads n-1 whole buffers and adds them in.
#   NCCL's kernel is `AllReduce_AGxLL_R`: each GPU stores its whole buffer into every peer with LL's flags, then
#   reduces all the copies locally.
# - **[two-shot allreduce](glossary.md#two-shot-allreduce)**: rank r adds up chunk r of every buffer (a reduce-scatter in one
#   step), then every rank copies the others' finished chunks (an all-gather in one step). Two
#   synchronisations; each rank reads 2(n-1)/n of the buffer, as in a ring, and adds 1/n of what one-shot adds.
#   NCCL's kernel is `AllReduce_RSxLD_AGxST`: each GPU loads its slice from every peer and reduces it, then
#   stores the result into every peer.
#
# The kernels are in NCCL's `src/symmetric.cc` and `src/device/symmetric/all_reduce.cuh` (v2.27.3; from 2.28
# `src/sym_kernels.cc`). NVIDIA reports "up to 9x reduction in latency for small message sizes" with them
# (published: https://developer.nvidia.com/blog/enabling-fast-inference-and-resilient-training-with-nccl-2-27/),
# inside a node only: the first release "supports non-network communicators only (P2P and NVLS transports)".
# PyTorch's `SymmetricMemory` has the same pair (`one_shot_all_reduce`, `two_shot_all_reduce`), and its
# intra-node allreduce picks by size: one-shot up to 256 KiB, two-shot up to 10 MiB, NCCL above
# (`kOneShotThreshBytes` and `kTwoShotThreshBytes` in `torch/csrc/distributed/c10d/symm_mem/intra_node_comm.cu`,
# published).
#
# ringlab has both as schedules (`allreduce.oneshot`, `allreduce.twoshot`), so the simulator checks them and
# the widget steps through them: two-shot on 4 ranks, and then what each costs a rank, counted from the
# schedules, on this lab's 2 ranks and on the 8 GPUs of a node.

# %%
StepThrough(rl.build("allreduce.twoshot", 4))

# %%
table(counted_rows(), COUNTED_COLUMNS)

# %% [markdown]
# ## Exercise 2: one-shot or two-shot?
#
# Suppose a rank's time is its waits and its reads: each wait for its peers costs `sync_s` seconds, and it reads
# its peers' memory at `read_Bps` bytes a second. Write `pick_symmetric(nbytes, nranks, sync_s, read_Bps)`: return
# `"one-shot"` or `"two-shot"`, whichever then takes less for an allreduce of `nbytes` on `nranks` ranks. Take what
# each costs from the table above (`counted_rows((nranks,))` counts it for any number of ranks), not from the text.
# The checker tries 2, 4 and 8 ranks from 4 KiB to 16 MiB, with a 2 us wait and 100 GB/s of reads, and where you
# pick wrong it gives both costs.

# %% tags=["solution"]
def pick_symmetric(nbytes, nranks, sync_s, read_Bps):
    """Which of "one-shot" and "two-shot" takes fewer seconds of waits (sync_s each) and reads (at read_Bps)."""
    # solution
    cost = {}
    for row in counted_rows((nranks,)):
        if row["algorithm"] in ("one-shot", "two-shot"):
            cost[row["algorithm"]] = row["steps"] * sync_s + row["read"] * nbytes / read_Bps
    return min(cost, key=cost.get)


# %%
pick_symmetric = check_pick_symmetric(pick_symmetric)  # yours when it is right, else the reference

# %% [markdown]
# On ranks of one node, `rl.allreduce(x, "oneshot")` and `"twoshot"` run through a shared MPI window
# (`MPI.Win.Allocate_shared`, 1 MiB a rank unless `RINGLAB_SYMMETRIC_BYTES` says otherwise): a rank copies its
# buffer into its own slot and sets its flag to the call's number, and the others, watching the flags, read the
# slots in place. No message is sent: the CPU's analogue of the kernels above. Measured on this machine on 2 ranks
# against ringlab's ring and MPI's own allreduce, 8 B to 1 MiB: every algorithm and size is timed in 20 short
# bursts spread over the run and keeps its best burst's median, so that other work on a shared machine spoils a
# burst rather than the result; every result is checked against MPI's (a second or two on a quiet machine):

# %%
symmetric = measure_symmetric()
table(symmetric_rows(symmetric), SYMMETRIC_COLUMNS)
print(symmetric_lesson(symmetric))
symmetric_plot(symmetric)

# %% [markdown]
# These are CPU processes sharing memory, not GPUs on NVLink: what carries over is the count of
# synchronisations and of bytes each rank reads and adds, not the sizes at which one overtakes another. For
# GPUs, NCCL's own model of these kernels (`queryModel` in `src/symmetric.cc`, re-implemented in
# `ringlab.predict.symmetric`, fitted to nothing) predicts on 8 H100s, beside what NCCL's tuner picks without
# symmetric memory:

# %%
predicted = predicted_rows()
table(predicted, PREDICTED_COLUMNS)
print(describe_predicted(predicted))


# %% [markdown]
# ## Summary
#
# - NCCL picks algorithm and protocol per call by latency + bytes / bandwidth: LL for small messages,
#   LL128 and Simple for large ones, each taking over where the two times are equal; trees and NVLS where they beat the ring; PAT for all-gather and
#   reduce-scatter at many nodes of one GPU each (never on nodes of several GPUs), in log2 n steps but, by
#   NCCL's own model, with a latency term linear in the ranks, so its gain is far short of (n-1)/log2 n.
# - The channels NCCL runs come from its ring search, not from an NVLink port's rate: the speed whose channels
#   carry the most, doubled twice; 24 on 8 A100s or 8 H100s and 16 on 8 H800s, as published logs show, and 32
#   predicted on 8 B200s (no published log).
# - Inside a node, symmetric memory lets a rank read its peers' buffers: one-shot synchronises once and has
#   every rank add all n buffers, two-shot synchronises twice and splits the additions n ways, the ring takes
#   2(n-1) steps. For small messages the count of synchronisations sets the time; as messages grow, two-shot's
#   split additions pay for its second one. NCCL (from 2.27) and PyTorch's SymmetricMemory pick between the two
#   by size; across nodes, where no GPU reads another's memory, the ring and the tree take over.
#
# Next, [lab 11](11_plan_a_run.ipynb): a real training run planned, every collective in it priced by NCCL's model.
#
# ## Exercises
#
# 1. (Above) where NCCL changes protocol, and one-shot or two-shot.
# 2. From the PAT table, work out NCCL's latency a rank and a log2 step (divide its two terms by the ranks and by
#    log2 of the nodes). The linear term is the larger from the first row on: at how many nodes is it ten times
#    the log2 term? Check your answer with `pat_rows(nodes=(...,))`.
# 3. From the channel table, work out the bandwidth one channel of the 8 H800s carries, and the port the 8 H100s
#    would need for NCCL's search to give them 32 channels. Check the second with
#    `ringlab.predict.channels.communicator_channels("hopper", port_gbps)`.
# 4. Run `symmetric_lesson(measure_symmetric(nranks=4))`, and before it, predict with your `pick_symmetric` (a wait
#    and a read rate fitted to the 2-rank measurement above) where two-shot should overtake one-shot on 4 ranks.
#    (Four ranks share this machine's cores: the times include the scheduler.)

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out or a choice to make. Run the cell that shows a
# question, write your answer in the cell under it (`answer = ...`: a number in the unit asked, or one of
# the choices as a string), then run the check. The worked answer is folded under **Answer**: open it once
# you have tried. ringlab computes every expected answer when the check runs, from its schedules, NCCL's
# cost model and its ring search, and the worked answer says which.


# %%
from ringlab.lessons.lab10_inside_nccl.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number of channels
# solution
from ringlab.predict.channels import communicator_channels

answer = communicator_channels("hopper", 8 * 20.6)  # 4 of 40 GB/s, doubled twice

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # one of the choices
# solution
import ringlab as rl

answer = rl.predict_nccl("allreduce", 64 << 20, rl.topology.preset("ib-2x8-h100")).algorithm  # NCCL's model

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of steps
# solution
import math

answer = math.ceil(math.log2(1000))  # one step per power of two below 1000

# %%
QUIZ.check(3, answer)
