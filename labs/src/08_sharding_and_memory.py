# %% [markdown]
# # Lab 08: sharding and memory
#
# **What you'll do:** count where the memory of a training step goes, and work out from the [ZeRO](glossary.md#zero)
# paper's formulas how few GPUs a model needs; measure what a small transformer keeps for its backward pass, layer by
# layer, with and without [recomputation](glossary.md#activation-recomputation), and the peak of a whole step; shard a model's optimizer state, gradients and parameters over MPI ranks
# with ringlab's own reduce-scatter and allgather (ZeRO, and [FSDP](glossary.md#fsdp)'s full sharding); measure what
# each rank then holds and sends, and derive from it what stage 3 sends on other machines; predict, for a
# 7.5-billion-parameter model on 8 and 16 H100s, when sharding pays; and shard inside nodes only, replicating across
# them ([hybrid sharding](glossary.md#hybrid-sharding)), checked equal to data parallelism on simulated nodes and
# predicted for Llama 3 on 32 H100s.
#
# **What you'll learn:** what each ZeRO stage saves and what it sends, checked equal to plain data parallelism on
# real ranks; what recomputation saves and what it costs, and what a step's peak holds beyond the activations; why stages 1 and 2 send what an allreduce sends, and what
# stage 3 adds; and why the same bytes can still take longer on a machine whose switch adds.
#
# **What you need:** labs 03, 05 and 06 ([lab 07](07_hangs_and_crawls.ipynb) comes before this one), and torch.
# Everything runs on this machine's CPU; where this machine's few cores cannot show a principle, the same code runs
# on an emulated machine beside it (`rl.emulate`, lab 02: in virtual time, each message of ringlab's collectives
# taking its links' time on the ranks' clocks), and the lab says which, and how this CPU's own work is counted
# there.
#
# This is the first of three labs beyond data parallelism. Sharding keeps every layer whole on every rank;
# [lab 09](09_model_parallelism.ipynb) splits the model itself (tensor, expert and context parallelism), and
# [lab 10](10_inside_nccl.ipynb) looks inside NCCL, which runs all of their collectives.

# %%
import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab08_sharding_and_memory.checks import check_fewest_gpus, check_stage3_sent
from ringlab.lessons.lab08_sharding_and_memory.hybrid import (CHECK_COLUMNS, HYBRID_COLUMNS, describe_hybrid,
                                                              hybrid_at_scale, hybrid_check_sentence)
from ringlab.lessons.lab08_sharding_and_memory.prefetch import PREFETCH_COLUMNS, prefetch_lesson, prefetch_rows
from ringlab.lessons.lab08_sharding_and_memory.peak import PEAK_COLUMNS, measure_peak, peak_lesson, peak_rows
from ringlab.lessons.lab08_sharding_and_memory.recompute import (PLAN_COLUMNS, RECOMPUTE_COLUMNS, describe_plans,
                                                                 llama_plans, measure_recompute, recompute_lesson,
                                                                 recompute_rows)
from ringlab.lessons.lab08_sharding_and_memory.sharding import (MEMORY_COLUMNS, SCALE_COLUMNS, TRAFFIC_COLUMNS,
                                                                at_scale, describe_at_scale, memory_rows,
                                                                sharding_lesson, traffic_rows)
from ringlab.measure.tables import table
from ringlab.viz import use_renderer
from ringlab.viz.parallelism import memory_bars, scale_bars

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## Where the memory of a training step goes
#
# Data parallelism (lab 06) keeps a whole copy of the model on every rank: its parameters, their
# gradients and the optimizer's state. With Adam in [mixed precision](glossary.md#mixed-precision) (Micikevicius et al.,
# 2018: forward and backward in fp16, while the optimizer updates an fp32 master copy of the weights, so
# that small updates are not rounded away) that is 2 bytes of fp16
# parameter, 2 of fp16 gradient and K = 12 of optimizer state (an fp32 copy of the parameter and two
# moments) for each of the model's Psi parameters: (2 + 2 + K) Psi on every GPU. Rajbhandari et al.
# (2020, the ZeRO paper) shard them instead: every parameter is cut into n pieces and rank r keeps
# piece r of
#
# - **stage 1**, the optimizer state: 2 Psi + 2 Psi + K Psi / n;
# - **stage 2**, also the gradients: 2 Psi + (2 + K) Psi / n;
# - **stage 3**, also the parameters: (2 + 2 + K) Psi / n. PyTorch's FSDP with full sharding is stage 3.
#
# ## Exercise 1: how few GPUs?
#
# A model of `psi` parameters trains with mixed-precision Adam (`k` = 12 bytes of optimizer state a parameter) on
# GPUs of `capacity` bytes each.
# Write `fewest_gpus(psi, stage, capacity, k)`: the least number of GPUs on which every GPU's model states fit at
# `stage` (0 for plain data parallelism), or `None` where no number of GPUs is enough. The checker tries models of
# 1 to 70 billion parameters on GPUs of 24 and 80 GB, and where your count is wrong it says what that many GPUs
# would hold.

# %% tags=["solution"]
import math


def fewest_gpus(psi, stage, capacity=80e9, k=12):
    """The least number of GPUs on which each holds at most ``capacity`` bytes at ``stage``, or None."""
    # solution
    parts = {"parameters": 2 * psi, "gradients": 2 * psi, "optimizer state": k * psi}
    shards = {"optimizer state": stage >= 1, "gradients": stage >= 2, "parameters": stage >= 3}
    whole = sum(b for kind, b in parts.items() if not shards[kind])  # held in full however many GPUs
    sharded = sum(b for kind, b in parts.items() if shards[kind])    # divided by n
    if whole > capacity or (whole == capacity and sharded):
        return None
    n = max(1, math.ceil(sharded / (capacity - whole))) if sharded else 1
    while n > 1 and whole + sharded / (n - 1) <= capacity:  # the float division's last digit
        n -= 1
    return n


# %%
fewest_gpus = check_fewest_gpus(fewest_gpus)  # yours when it is right, else the reference

# %% [markdown]
# ## Activation memory and recomputation, measured
#
# The formulas above count the model's states. A step also keeps **activations**: every tensor the forward pass
# computes that the backward pass will need (a matrix product's input, to form its weight's gradient; a softmax's
# output; the GELU's input). They grow with the tokens of a micro-batch, not with the parameters. Korthikanti et al.
# (2022, "Reducing Activation Recomputation in Large Transformer Models") count them for a transformer layer of
# hidden size h and a heads, for s tokens of b sequences in 16 bits: s b h (34 + 5 a s / h) bytes, of which 2 s b h
# are two dropout masks and 5 a s^2 b the attention's scores (the softmax's output, 2 a s^2 b, and its dropout's).
# `ringlab.train.Transformer.activation_bytes_per_token` makes the same count for FlashAttention and no dropout.
#
# **Full recomputation** (activation checkpointing, `torch.utils.checkpoint`) keeps only each layer's input; in the
# backward pass it runs that layer's forward again to get the rest back, one layer at a time, and then its backward.
#
# Here four of ringlab's transformer layers (`ringlab.train.sequence.TransformerLayer`: pre-norm, causal, attention
# unfused, a GELU feed-forward 4h wide, no dropout) run in bf16 on this CPU, 128 tokens of 4 sequences, h = 64 and 4
# heads. The bytes each layer keeps are measured with `torch.autograd.graph.saved_tensors_hooks`, which sees every
# tensor autograd saves (each storage counted once), without and with `torch.utils.checkpoint`; and a step, forward
# and backward, is timed both ways, beside a forward alone (one thread, the median of nine runs).

# %%
kept = measure_recompute()
table(recompute_rows(kept), RECOMPUTE_COLUMNS)
print(recompute_lesson(kept))

# %% [markdown]
# Those are the bytes autograd *keeps*. What a step needs at its fullest is more: while a layer's backward runs it
# also holds the gradients it computes. The peak of a whole step, forward and backward, measured by the operating
# system: the process's resident high-water mark (Linux's `VmHWM`, reset just before the step), less what the
# process held when the step began. Each way runs in a fresh process of its own, with glibc mapping every
# allocation of 64 KiB or more on its own so that a freed tensor leaves the count at once; a larger stack than
# above, so that activations dwarf the allocator's small change: 1024 tokens of 2 sequences, h = 128, 4 heads, in
# fp32 (the peak is about bytes, whatever their width, and most CPUs have no bf16 arithmetic: on one without it a
# step in bf16 took five times as long). Held against autograd's count of what each way keeps at the peak: every
# layer's activations, or, recomputing, every layer's input and the one layer's activations that its backward brings
# back.

# %%
peak = measure_peak()
table(peak_rows(peak), PEAK_COLUMNS)
print(peak_lesson(peak))

# %% [markdown]
# What does that mean for a real run? The planner of [lab 11](11_plan_a_run.ipynb) (`rl.plan`) counts the same
# bytes for Llama 3 70B on 256 H100s, 512 sequences of 8192 tokens: lab 11's first layout ([tensor parallelism](glossary.md#tensor-parallelism) over a
# node's 8 GPUs, 4 pipeline stages, ZeRO-1) and one with half the tensor group and four sequences a micro-batch,
# each without and with `recompute="full"`. Predictions:

# %%
plans = llama_plans()
table(plans, PLAN_COLUMNS)
print(describe_plans(plans))

# %% [markdown]
# ## ZeRO from ringlab's collectives
#
# `rl.train.ZeroOptimizer(optimizer, model, stage=1|2|3)` wraps any torch optimizer. It cuts the
# parameters each module owns, as one flat buffer (FSDP's unit), into n near-equal pieces (ringlab's
# chunks, so nothing needs to divide by n), and gives the optimizer this rank's pieces only. A step
# then runs ringlab's schedules:
#
# - the gradients are summed with a ring **reduce-scatter** (`reduce_scatter.ring`: rank r ends with
#   the sum of piece r), and the optimizer updates piece r with its state for piece r alone;
# - stages 1 and 2 bring every rank the updated pieces with a ring **allgather** (`allgather.ring`);
# - at stage 2 each unit's gradients are reduce-scattered the moment backward has produced them and then
#   freed; at stage 3 a module's parameters are allgathered just before its forward, freed after it,
#   allgathered again just before its backward, and freed once their gradients are reduce-scattered.
#
# A ring allreduce *is* a reduce-scatter followed by an allgather (lab 03), so stages 1 and 2 send what
# plain data parallelism sends over rings (where a switch adds, it is another story: see "When does
# sharding pay?"); stage 3 allgathers twice. First, on four ranks: does every stage train
# exactly as plain data parallelism (`DistributedOptimizer`) does, with SGD and with Adam, in float64?

# %%
ranks = MPICluster(4).start()

# %%
# %%px
from ringlab.lessons.lab08_sharding_and_memory.sharding import against_data_parallel, measure_sharding

same = against_data_parallel()  # each stage against data parallelism, 3 steps, SGD and Adam

# %%
table(ranks.pull_rank0("same"), {"optimizer": "optimizer", "ZeRO stage": "stage",
                                 "largest difference from data parallelism (relative)": ("difference", ".1e")})

# %% [markdown]
# Now what each rank holds and sends. Four ranks train an MLP of 54,430 parameters with Adam in float64
# (8 bytes of parameter, 8 of gradient and 16 of state a parameter) under plain data parallelism and
# each stage, a few steps each. Every rank reports the bytes of the tensors it holds after a step
# (`ZeroOptimizer.memory()`: measured from its tensors, not computed), and the bytes it sent, counted
# from the schedules it ran. The steps run on an **emulated machine** (`MACHINE` in the lab's room:
# each rank on its own port of 50 MB/s each way into a switch, 20 us a message), timed in virtual time:
# four ranks on a few cores would otherwise time their CPUs, not their traffic. There each rank's own
# work (forward, backward, Adam, the optimizer's Python around its collectives) counts as the CPU
# time it took (`compute="cpu"`), so a step is its collectives on those links plus that work: the
# table sets it beside the cost model's time for the collectives alone, and beside what this machine
# took (wall time).

# %%
# %%px
sharded = measure_sharding()

# %%
sharded = ranks.pull_rank0("sharded")
ranks.stop()
table(memory_rows(sharded), MEMORY_COLUMNS)
memory_bars(sharded)

# %%
table(traffic_rows(sharded), TRAFFIC_COLUMNS)
print(sharding_lesson(sharded))

# %% [markdown]
# ## Exercise 2: what stage 3 sends elsewhere
#
# The table gives what each rank sent a step on these 4 ranks. Write `stage3_sent(sent, ranks, new_ranks)`: from
# `sent` (bytes a rank sent a step, by variant as the table names them, `"data parallel"`, `"ZeRO stage 1"` to
# `"ZeRO stage 3"`, measured here on `ranks` ranks), the bytes a rank sends a step at stage 3 for the same model on
# `new_ranks` ranks. Derive it from the measurements and what you know of rings (lab 03), not from a formula you
# look up; the checker compares your answer with what ringlab's schedules send on 2 to 16 ranks.

# %% tags=["solution"]
def stage3_sent(sent, ranks, new_ranks):
    """Bytes a rank sends a step at stage 3 on ``new_ranks``, from what each variant sent on ``ranks``."""
    # solution
    extra = sent["ZeRO stage 3"] / sent["ZeRO stage 1"]  # measured: one more ring over the model
    model = sent["ZeRO stage 1"] / (2 * (ranks - 1) / ranks)  # a reduce-scatter and an allgather, (n-1)/n each
    return extra * 2 * (new_ranks - 1) / new_ranks * model


# %%
stage3_sent = check_stage3_sent(stage3_sent)  # yours when it is right, else the reference

# %%
measured = {row["variant"]: row["sent"] for row in traffic_rows(sharded)}
print(f"At stage 3 a rank would send {stage3_sent(measured, 4, 64) / 1e6:.2f} MB a step on 64 ranks, "
      f"{stage3_sent(measured, 4, 1024) / 1e6:.2f} MB on 1024 (this MLP, float64)")

# %% [markdown]
# ## When does sharding pay?
#
# When the model does not fit otherwise. The ZeRO paper's example is 7.5 billion parameters; here it is
# on the 8 H100s of one HGX board and on two such nodes over InfiniBand (presets from published figures):
# memory a GPU by the paper's formulas, set against an H100's 80 GB (its published size), and the time of
# a step's collectives by NCCL's own cost model (`rl.predict_nccl`, fp16, each collective over the
# whole model in one call). Both are predictions.

# %%
scaled = at_scale()
table(scaled, SCALE_COLUMNS)
print(describe_at_scale(scaled))
scale_bars(scaled)

# %% [markdown]
# Stages 1 and 2 send what a *ring* allreduce sends, 2(n-1)/n of the gradient from every GPU. But on
# NVSwitch of the Hopper generation NCCL does not run a large allreduce as a ring: the switch adds
# ([NVLS](glossary.md#nvls)), and each GPU's port carries K(n+1)/n each way instead of 2K(n-1)/n, at NCCL's
# NVLS efficiency of 0.85. On 8 GPUs that is 2(n-1)/(n+1) x 0.85 = 14/9 x 0.85 = 1.32 in the allreduce's
# favour, the ratio the model prints. NCCL has NVLS all-gather and reduce-scatter kernels too
# (`src/device/all_gather.h` and `reduce_scatter.h` in NVIDIA/nccl, since 2.17), but its tuner
# (`src/graph/tuning.cc`) prices them without the allreduce's doubling and turns them off across nodes
# without CollNet, and a node runs them as rings: 8 H200s at 16 GiB (stas00/ml-engineering's table,
# ringlab's published sweep A19) gave 480 GB/s of bus bandwidth for the NVLS allreduce against 361 and
# 363 GB/s for the ring all-gather and reduce-scatter, 1.33x. ringlab's NCCL model prices NVLS for all
# three, and picks the ring for both, as NCCL did there: [lab 10](10_inside_nccl.ipynb) counts why.

# %% [markdown]
# ## Prefetch: the next unit's all-gather while this one computes
#
# At stage 3 every unit's all-gather above sits on the critical path: the forward of a layer cannot start until its
# parameters have arrived. FSDP hides them by [prefetching](glossary.md#prefetch): it issues the next unit's
# all-gather before the current unit computes, on a stream of its own. PyTorch's FSDP (`FullyShardedDataParallel`)
# has `forward_prefetch=True` for the forward pass (the PyTorch docs' "FSDP Notes", "FSDP Prefetch Nuances": only for
# models whose order of execution is fixed, since the next unit is the one that came next in the first iteration)
# and `backward_prefetch=BackwardPrefetch.BACKWARD_PRE` for the backward pass, which its documentation says "enables
# the most overlap but increases memory usage the most": the next unit's parameters are gathered before the current
# unit's gradients are computed, so two units' full parameters are held at once. `limit_all_gathers=True` (the
# default) holds the CPU back so that no more than those two units' all-gathers are in memory
# at once (the FSDP documentation).
#
# FSDP2 (`torch.distributed.fsdp.fully_shard`, the PyTorch docs' page of that name) shards each parameter on its
# first dimension as a DTensor instead of FSDP1's one flat parameter a unit, and prefetches without being asked: in
# forward it issues the all-gathers on their own stream and lets two all-gather outputs be alive at once, in backward
# it prefetches in the reverse of the forward order (PyTorch pull request 128884, which added
# `set_modules_to_forward_prefetch` and `set_modules_to_backward_prefetch` for prefetching more).
#
# `ZeroOptimizer(..., stage=3, prefetch=True)` does the same with ringlab's collectives: a communication thread, as
# lab 06's overlap used for the allreduces, takes unit i+1's all-gather when unit i's forward begins, unit i-1's when
# unit i's backward begins, and the reduce-scatters as their gradients are ready; `step()` waits for the last one.
# Four ranks train four 256 x 256 layers (float64) a few steps without and with it on the emulated machine, with the
# compute modelled (`compute="model"`: 8 ms a layer forward, 16 ms backward, so that a step's time is the links' and
# the model's, whatever this CPU does). The prediction is a timeline of the two streams with each collective priced
# by the cost model: without prefetch every collective adds to the step; with it only what compute cannot hide
# does. `ZeroOptimizer.peak_parameters` is the most parameter bytes a rank held at once during a step, from its
# tensors.

# %%
ranks = MPICluster(4).start()

# %%
# %%px
from ringlab.lessons.lab08_sharding_and_memory.prefetch import measure_prefetch

prefetched = measure_prefetch()  # a ZeRO-3 step without and with prefetch, on the emulated links

# %%
prefetched = ranks.pull_rank0("prefetched")
ranks.stop()
table(prefetch_rows(prefetched), PREFETCH_COLUMNS)
print(prefetch_lesson(prefetched))

# %% [markdown]
# ## Hybrid sharding: ZeRO-3 inside a node, replicas across nodes
#
# ZeRO-3 over every GPU of a cluster runs its all-gathers and its reduce-scatter over all of them, so each one
# crosses the network between the nodes. **Hybrid sharding** shards inside each node only and keeps a whole
# (sharded) replica of the model on every node. PyTorch's FSDP calls it `ShardingStrategy.HYBRID_SHARD` ("apply
# FULL_SHARD within a node, and replicate parameters across nodes", the FSDP documentation; FSDP2 takes a 2-D device
# mesh for it, "HSDP"). DeepSpeed's ZeRO++ (Wang et al., 2023) does the same for the weights with its hpZ: a second
# copy of them sharded inside each node, so that the backward pass's all-gather never leaves the node. On m nodes of
# g GPUs a step
#
# - reduce-scatters each unit's gradient over the node's g GPUs: GPU r of the node holds the node's sum of piece r;
# - allreduces piece r across the m nodes, between the m GPUs that hold piece r (its *replica group*);
# - updates piece r, and all-gathers the parameters inside the node only, before forward and before backward.
#
# Only the allreduce leaves the node: 2(m-1)/m of a piece of 1/g of the gradient, a GPU. Each GPU holds
# (2 + 2 + K) Psi / g, m times what ZeRO-3 over all N = m g GPUs holds.
#
# `HybridShardOptimizer` (the lab's room, `hybrid.py`) is `ZeroOptimizer(stage=3)` on the node's communicator with
# that allreduce on the replica group's; the two groups are lab 09's [device mesh](glossary.md#device-mesh) with its
# "tensor" groups inside the nodes. Four ranks run as two simulated nodes of two (`simulated_nodes(2)`, as
# `RINGLAB_RANKS_PER_NODE=2` would: consecutive pairs of ranks count as a node, on this one machine). Does it train
# as plain data parallelism does?

# %%
ranks = MPICluster(4).start()

# %%
# %%px
from ringlab.lessons.lab08_sharding_and_memory.hybrid import hybrid_against_data_parallel
from ringlab.mpi.nodes import simulated_nodes

with simulated_nodes(2):  # ranks 0 and 1 are node 0, ranks 2 and 3 node 1
    hybrid = hybrid_against_data_parallel()  # against data parallelism, 3 steps, SGD and Adam, float64

# %%
hybrid = ranks.pull_rank0("hybrid")
ranks.stop()
table(hybrid, CHECK_COLUMNS)
print(hybrid_check_sentence(hybrid))

# %% [markdown]
# At real sizes: Llama 3 8B and 70B (`rl.train.Transformer.preset`'s parameter counts) on 4 nodes of 8 H100s,
# one NIC a GPU, at 400 Gbit/s and at 100 Gbit/s, all predictions. Memory a GPU by the paper's formulas; the bytes a
# GPU sends to other nodes a step counted from ringlab's ring schedules (a node's ring traffic spread over its 8
# NICs, as NCCL's channels spread it); each collective's time by NCCL's model (`rl.predict_nccl`, fp16, each over
# the whole model, or the piece, in one call, priced alone: no overlap with computation or with each other). A
# replica group's allreduce runs on one rail: one GPU of each node, each on its own NIC, the g groups at once.

# %%
hybrid_rows = hybrid_at_scale() + hybrid_at_scale(nic_gbps=100)
table(hybrid_rows, HYBRID_COLUMNS)
print(describe_hybrid(hybrid_rows))


# %% [markdown]
# ## Summary
#
# - Data parallelism with mixed-precision Adam holds (2 + 2 + K) Psi bytes on every GPU: 2 of parameter, 2 of
#   gradient and K = 12 of optimizer state a parameter.
# - A step also keeps activations, which grow with the tokens: measured layer by layer, they are Korthikanti et al.'s
#   count. Full recomputation keeps only each layer's input and pays for it with one more forward; by the planner,
#   worth it only where a layout does not fit without it.
# - A whole step's peak, measured by the operating system, is what autograd keeps plus what a layer's backward
#   works with while it runs; recomputation cuts the first and leaves the second.
# - ZeRO shards what data parallelism replicates: stage 1 the optimizer state, stage 2 the gradients,
#   stage 3 the parameters. Built from a reduce-scatter and an allgather, stages 1 and 2 send what an
#   allreduce sends (2 Psi) and stage 3 half as much again (3 Psi); each trains exactly as data
#   parallelism does. It pays when the model does not fit otherwise. On an H100 board the same bytes
#   still cost stages 1 and 2 about 1.3x the time: NCCL adds the allreduce in the switch (NVLS) and runs
#   the reduce-scatter and all-gather as rings.
# - Prefetch (FSDP's `forward_prefetch` and `BACKWARD_PRE`) hands the next unit's all-gather to a communication
#   stream while the current unit computes. On the emulated machine it made a ZeRO-3 step 37% shorter: compute plus
#   every collective without it, compute plus only the first all-gather of each pass and the last reduce-scatter
#   with it, as the two-stream timeline predicts; it trains bit for bit as without it. The price, measured from the
#   tensors, is one more unit's full parameters held at the peak.
# - Hybrid sharding (FSDP's `HYBRID_SHARD`) is ZeRO-3 inside each node and whole replicas across the nodes: built
#   from the same reduce-scatter and all-gather on the node's ranks and an allreduce on the replica group's, it
#   trains as data parallelism does. Only that allreduce of a 1/g piece leaves the node, 2(m-1)/m of it a GPU: on 4
#   nodes of 8, 0.52x what ZeRO-3 over all 32 sends across, for m = 4 times its memory (Llama 3 70B then no longer
#   fits in 80 GB). By NCCL's model the bytes it saves are time saved only where the network is the slow link: with
#   400 Gbit/s NICs ZeRO-3's collectives are quicker for Llama 3 8B, with 100 Gbit/s hybrid sharding's.
#
# Next, [lab 09](09_model_parallelism.ipynb) splits the layers themselves over the ranks, and
# [lab 11](11_plan_a_run.ipynb) weighs ZeRO-3 against the other ways of splitting a real run.
#
# ## Exercises
#
# 1. (Above) how few GPUs, and what stage 3 sends on other machines.
# 2. From the measured bytes a layer keeps without and with recomputation (the table above), work out how many such
#    layers fit in 64 MiB of activations each way, counting, with recomputation, the one layer whose activations
#    the backward pass brings back at a time. Then run `measure_recompute(dict(SHAPE, seq=256))` (SHAPE from
#    `ringlab.lessons.lab08_sharding_and_memory.recompute`): which part of a layer grew 4x, and which 2x?
# 3. Train with `ZeroOptimizer(..., stage=3)` and print `memory()` between backward and `step()`, and
#    after `step()`: which gradients exist when? Predict the numbers from the memory table before you run it.

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out or a choice to make. Run the cell that shows a
# question, write your answer in the cell under it (`answer = ...`: a number in the unit asked, or one of
# the choices as a string), then run the check. The worked answer is folded under **Answer**: open it once
# you have tried. ringlab computes every expected answer when the check runs, from its schedules, its cost
# models and the paper's formulas, and the worked answer says which.

# %%
from ringlab.lessons.lab08_sharding_and_memory.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your GB
# solution
answer = (2 * 13e9 + (2 + 12) * 13e9 / 16) / 1e9  # 2 Psi + (2 + K) Psi / N

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your GB
# solution
answer = 3 * (8 - 1) / 8 * 1e9 * 2 / 1e9  # two allgathers and a reduce-scatter, (n-1)/n of the model each

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # one of the choices
# solution
GB = 1e9
held = {"data parallel": 16 * 20e9 / GB, "stage 1": (4 * 20e9 + 12 * 20e9 / 8) / GB,  # the paper's formulas
        "stage 2": (2 * 20e9 + 14 * 20e9 / 8) / GB, "stage 3": 16 * 20e9 / 8 / GB}
answer = next(stage for stage, gb in held.items() if gb <= 80)  # the first that fits in 80 GB

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your GB
# solution
answer = 2 * (4 - 1) / 4 * (8e9 * 2 / 8) / 1e9  # the piece's allreduce alone leaves the node: 2(m-1)/m of 2 Psi / g

# %%
QUIZ.check(4, answer)
