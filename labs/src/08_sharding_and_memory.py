# %% [markdown]
# # Lab 08: beyond data parallelism
#
# **What you'll do:** shard a model's optimizer state, gradients and parameters over MPI ranks with
# ringlab's own reduce-scatter and allgather ([ZeRO](glossary.md), and [FSDP](glossary.md)'s full sharding); split an MLP's
# matrices over ranks ([tensor parallelism](glossary.md)) on a 2-D [device mesh](glossary.md); send tokens to experts
# and back with an [all-to-all](glossary.md) ([mixture of experts](glossary.md)); compute attention over a sequence
# split across ranks ([ring attention](glossary.md)); read how NCCL picks its algorithm and protocol; and
# measure one-shot and two-shot allreduce, which read a peer's memory instead of sending it messages.
#
# **What you'll learn:** what each of these saves and what it sends, checked equal to the unsplit model
# on real ranks; where the memory of a training step goes and what sharding it costs in traffic; why a
# mesh puts its tensor dimension on a node's fast links and its data dimension on the network; what an
# unbalanced router costs; which algorithm and protocol NCCL runs at which size, and why; and when one
# synchronisation beats a ring's 2(n-1) steps.
#
# **What you need:** labs 03, 05 and 06, and torch. Everything runs on this machine's CPU; where the
# laptop's two cores cannot show a principle, the same code runs on an emulated machine beside it
# (`rl.emulate`, lab 02: in virtual time, each message of ringlab's collectives taking its links' time
# on the ranks' clocks), and the lab says which, and how this CPU's own work is counted there.

# %%
import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab08_beyond_data_parallelism.attention import attention_lesson, check_merge
from ringlab.lessons.lab08_beyond_data_parallelism.experts import (IMBALANCE_COLUMNS, check_padded_bytes,
                                                                   imbalance_lesson)
from ringlab.lessons.lab08_beyond_data_parallelism.mesh import (MAPPING_COLUMNS, MEGATRON_COLUMNS, check_mesh_groups,
                                                                mapping_lesson, mapping_rows, megatron_lesson,
                                                                megatron_mesh, megatron_rows)
from ringlab.lessons.lab08_beyond_data_parallelism.nccl import (PAT_COLUMNS, PUBLISHED_COLUMNS, against_published,
                                                                check_fastest_protocol, choice_rows, describe_choices,
                                                                describe_forced_ring, describe_nvlink_port,
                                                                describe_pat, describe_protocols, describe_published,
                                                                forced_ring_sizes, nvlink_port, pat_refusal, pat_rows,
                                                                protocol_rows)
from ringlab.lessons.lab08_beyond_data_parallelism.sharding import (MEMORY_COLUMNS, SCALE_COLUMNS, TRAFFIC_COLUMNS,
                                                                    at_scale, check_zero_bytes, describe_at_scale,
                                                                    memory_rows, sharding_lesson, traffic_rows)
from ringlab.lessons.lab08_beyond_data_parallelism.symmetric import (COUNTED_COLUMNS, PREDICTED_COLUMNS,
                                                                     SYMMETRIC_COLUMNS, counted_rows, describe_predicted,
                                                                     measure_symmetric, predicted_rows, symmetric_lesson,
                                                                     symmetric_plot, symmetric_rows)
from ringlab.measure.tables import table
from ringlab.viz import StepThrough, use_renderer
from ringlab.viz.parallelism import (choice_map, expert_load_bars, mapping_bars, memory_bars, protocol_plot,
                                     scale_bars)

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## Where the memory of a training step goes
#
# Data parallelism (lab 06) keeps a whole copy of the model on every rank: its parameters, their
# gradients and the optimizer's state. With Adam in [mixed precision](glossary.md) (Micikevicius et al.,
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
# ## Exercise 1: the paper's formulas
#
# Write the bytes a GPU holds for a model of `psi` parameters on `n` GPUs at `stage` (0 for plain
# data parallelism), with `k` bytes of optimizer state a parameter.

# %% tags=["solution"]
def zero_bytes(psi, n, stage, k=12):
    """Bytes per GPU under ZeRO: 2 bytes of parameter, 2 of gradient and k of optimizer state a parameter."""
    # solution
    params, grads, state = 2 * psi, 2 * psi, k * psi
    if stage >= 1:
        state /= n
    if stage >= 2:
        grads /= n
    if stage >= 3:
        params /= n
    return params + grads + state


# %%
zero_bytes = check_zero_bytes(zero_bytes)  # yours when it is right, else the reference

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
from ringlab.lessons.lab08_beyond_data_parallelism.sharding import against_data_parallel, measure_sharding

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
# every pair of ranks joined by 50 MB/s links, 20 us a message), timed in virtual time: four ranks on
# this laptop's two cores would otherwise time their CPUs, not their traffic. There each rank's own
# work (forward, backward, Adam, the optimizer's Python around its collectives) counts as the CPU
# time it took (`compute="cpu"`), so a step is its collectives on those links plus that work: the
# table sets it beside the cost model's time for the collectives alone, and beside what this machine
# took (wall time).

# %%
# %%px
sharded = measure_sharding()

# %%
sharded = ranks.pull_rank0("sharded")
table(memory_rows(sharded), MEMORY_COLUMNS)
memory_bars(sharded)

# %%
table(traffic_rows(sharded), TRAFFIC_COLUMNS)
print(sharding_lesson(sharded))

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
# ([NVLS](glossary.md)), and each GPU's port carries K(n+1)/n each way instead of 2K(n-1)/n, at NCCL's
# NVLS efficiency of 0.85. On 8 GPUs that is 2(n-1)/(n+1) x 0.85 = 14/9 x 0.85 = 1.32 in the allreduce's
# favour, the ratio the model prints. NCCL has NVLS all-gather and reduce-scatter kernels too
# (`src/device/all_gather.h` and `reduce_scatter.h` in NVIDIA/nccl, since 2.17), but its tuner
# (`src/graph/tuning.cc`) prices them without the allreduce's doubling and turns them off across nodes
# without CollNet, and a node runs them as rings: 8 H200s at 16 GiB (stas00/ml-engineering's table,
# ringlab's published sweep A19) gave 480 GB/s of bus bandwidth for the NVLS allreduce against 361 and
# 363 GB/s for the ring all-gather and reduce-scatter, 1.33x. ringlab's NCCL model prices NVLS for
# allreduce only, and picks the ring for both, as NCCL did there.

# %% [markdown]
# ## Tensor parallelism: splitting the matrices
#
# Sharding still computes every layer whole on every rank. Megatron-LM (Shoeybi et al. 2019) splits
# the layers themselves. An MLP `y = W2 act(W1 x)` over t ranks: rank r keeps rows r of W1 (a slice of the
# hidden features: **column-parallel**, nothing to exchange) and the same columns of W2 (**row-parallel**:
# its slice of the hidden layer times its columns is a partial sum of y), and one allreduce adds the
# partial sums. Backward mirrors it: the input's gradient is a sum over the ranks, one allreduce more.
# `rl.train.tensor.split_mlp` builds it on ringlab's ring allreduce. Is it the same MLP, forward and
# backward, with 10 hidden features that four ranks do not divide?

# %%
# %%px
from ringlab.lessons.lab08_beyond_data_parallelism.mesh import measure_mappings, split_against_whole

split = split_against_whole()

# %%
table(ranks.pull_rank0("split"), {"what": "what", "largest difference (relative)": ("difference", ".1e")})

# %% [markdown]
# This MLP is half of a transformer layer. Megatron splits the layer's attention too, by heads: its
# query, key and value projections column-parallel, its output projection row-parallel, one allreduce more
# forward and one more backward. So a Megatron layer runs four allreduces of activations a micro-batch (two
# forward, two backward; Shoeybi et al. 2019, Figure 4), and each blocks: its sum is the next operation's
# input. The gradients cross the data group once a step, and that allreduce can overlap the backward pass
# (lab 06). A real job lays its ranks out as a **mesh** of the two groups, and must choose which goes on a
# node's NVLink and which on the network (lab 05's [rails](glossary.md)): below, first a small mesh measured
# on emulated links, then the same question at a real model's size.
# `rl.train.tensor.device_mesh(comm, data, tensor, tensor_inner=True)` splits a communicator into both groups.
#
# ## Exercise 2: the mesh's groups
#
# Write the world ranks of each tensor group and each data group of a `data` x `tensor` mesh. With
# `tensor_inner`, rank `d * tensor + t` sits at (d, t), so a tensor group is a run of consecutive ranks (one
# node's GPUs); otherwise rank `t * data + d` does, and the data groups are the runs.

# %% tags=["solution"]
def mesh_groups(world, data, tensor, tensor_inner=True):
    """(tensor groups, data groups), lists of world ranks."""
    # solution
    rank = (lambda d, t: d * tensor + t) if tensor_inner else (lambda d, t: t * data + d)
    return ([[rank(d, t) for t in range(tensor)] for d in range(data)],
            [[rank(d, t) for d in range(data)] for t in range(tensor)])


# %%
mesh_groups = check_mesh_groups(mesh_groups)  # yours when it is right, else the reference

# %% [markdown]
# Now the mapping, measured. The four ranks stand for two GPUs of each of the two nodes of the
# `ib-2x8-h100` preset (GPUs 0, 1, 8 and 9; two nodes of an [HGX](glossary.md) board of 8 H100s each, joined by
# [InfiniBand](glossary.md)): a 2 x 2 mesh that trains a stack of tensor-parallel MLP blocks (MLPs only: two
# allreduces a block, not a Megatron layer's four), 8 wide, on 4096 tokens a data rank. A width of 8 keeps
# this CPU's work small, and it also makes a block's weights, and so its gradients, tiny beside its activations: the
# lesson's words say by how much. Each group's collectives run on an emulated machine made of the
# links between its GPUs in the preset (`group_machine`: NVLink inside a node, the network card across),
# at the H100s' full speed, in virtual time with `compute="model"`: this CPU's work never counts (its
# forward and backward would outweigh a few microseconds of NVLink a thousandfold, and a laptop is no
# H100), so a step's time is its collectives alone, each message taking its links' time; the stack's
# own arithmetic is left out. First with the tensor groups inside the nodes, then across them; beside
# each, the cost model's time for the same collectives on the same links, and what this machine took.

# %%
# %%px
mappings = measure_mappings()

# %%
mappings = ranks.pull_rank0("mappings")
table(mapping_rows(mappings), MAPPING_COLUMNS)
print(mapping_lesson(mappings))
mapping_bars(mappings)

# %% [markdown]
# ## The mesh at a real model's size
#
# Llama 3 70B is 8192 wide with 80 layers (Meta's published configuration: `hidden_size` 8192,
# `intermediate_size` 28672, `num_hidden_layers` 80, 64 attention heads and 8 key-value heads, `config.json` of
# meta-llama/Meta-Llama-3-70B). On a mesh of 8 x 8 H100s (8 nodes, tensor group of 8, data group of 8) with 4096
# tokens a micro-batch in bf16, each layer's tensor group runs Megatron's four allreduces of 4096 x 8192 activations,
# and once a step the data group allreduces a rank's gradients, an eighth of the model. A layer has about
# 12 x hidden^2 weights, so a micro-batch's tensor bytes are about tokens x tensor / (3 x hidden) of the data
# group's. NCCL's model (`rl.predict_nccl`) prices every call with each mapping: the tensor group on one node's
# NVLink and the data group across nodes (one GPU a node, each on its own rail), or the other way round. All
# predicted, nothing measured:

# %%
megatron = megatron_mesh()
table(megatron_rows(megatron), MEGATRON_COLUMNS)
print(megatron_lesson(megatron))

# %% [markdown]
# ## Experts: an all-to-all there and back
#
# A mixture-of-experts layer has many expert MLPs and a router that sends each token to one of them
# (top-1, as the Switch Transformer does). With the experts spread over the ranks (expert parallelism),
# every rank sends each of its tokens to the rank of its expert and gets the output back: an all-to-all
# there (dispatch) and one back (combine), `rl.alltoall` in `rl.train.experts.ExpertParallel`.
# `rl.alltoall` moves equal blocks, so every block is padded to the largest count in the n x n table of
# counts (`table[s][d]`: the tokens rank s has for rank d's expert), a rank's count for its own expert
# included: that block stays home, but it is laid out in the same send buffer. The counts come first, in
# one small allreduce. Is it the same layer as on one rank?

# %%
# %%px
from ringlab.lessons.lab08_beyond_data_parallelism.experts import against_one_rank, measure_imbalance

moe_same = against_one_rank()

# %%
print(ranks.pull_rank0("moe_same"))

# %% [markdown]
# ## Exercise 3: what the padding costs
#
# `table[s][d]` is how many tokens rank s has for rank d (the diagonal, `table[s][s]`, is what stays on
# rank s). Write how many bytes one rank sends in one padded all-to-all when a token is `token_bytes`
# bytes: every block is as large as the largest count in the whole table, the diagonal included, and a
# rank sends its block for each of the n-1 other ranks (its own stays).

# %% tags=["solution"]
def padded_bytes(table, token_bytes):
    """Bytes one rank sends: a block padded to the table's largest count (diagonal included) to each other rank."""
    # solution
    return (len(table) - 1) * max(max(row) for row in table) * token_bytes


# %%
padded_bytes = check_padded_bytes(padded_bytes)  # yours when it is right, else the reference

# %% [markdown]
# A router is rarely even. Here four experts (one a rank) with the router as initialised, and then
# with its bias pushed towards expert 0, on the emulated machine of the ZeRO section; forward and
# backward of the layer, timed in virtual time with this CPU's work (the router's, the experts')
# counted as the CPU time it took, so that both costs of imbalance show: the padded all-to-alls, and
# the busiest expert's rank computing while the others wait for it.

# %%
# %%px
loads = measure_imbalance()

# %%
loads = ranks.pull_rank0("loads")
table(loads, IMBALANCE_COLUMNS)
print(imbalance_lesson(loads))
expert_load_bars(loads)

# %% [markdown]
# ## Capacity: what production layers send instead
#
# Nothing is dropped here, so the layer stays equal to the one-rank layer, and the largest count sets
# every block. Production layers do not pad to the largest count. GShard (Lepikhin et al., 2020) and the
# Switch Transformer (Fedus et al., 2021) fix each expert's **capacity** in advance: a
# [capacity factor](glossary.md) times the even share, capacity = factor x tokens / experts (GShard per
# group of tokens, here per rank), so every block has one size known before the router runs. Tokens
# beyond an expert's capacity are **dropped**: the layer leaves them out and the residual connection
# carries them on unchanged. The Switch Transformer did best with low factors (1.0, 1.25) and adds a loss
# that rewards an even router. Dropless layers send variable sizes instead: MegaBlocks (Gale et al., 2022)
# computes the experts' uneven batches as block-sparse products, and DeepSeek's DeepEP (its training
# kernels) counts first, then sends each rank exactly its tokens. `capacity_rows` prices all three on the
# count tables your layer just ran:
# for each router, what factors 1.0, 1.25 and 2.0 would drop and send, padding to the largest count
# (the factor that drops nothing), and dropless.

# %%
from ringlab.lessons.lab08_beyond_data_parallelism.experts import CAPACITY_COLUMNS, capacity_lesson, capacity_rows

capacity = capacity_rows(loads)
table(capacity, CAPACITY_COLUMNS)
print(capacity_lesson(capacity))

# %% [markdown]
# ## Ring attention: a sequence split over the ranks
#
# Long sequences split over ranks too: [context parallelism](glossary.md) (some papers say sequence
# parallelism) gives each rank a contiguous block of every sequence's tokens, in every layer. The MLPs
# and norms work token by token and need nothing from other ranks; attention needs every query
# against every key, so the key and value blocks travel (ring attention, Liu et al., 2023, as
# Megatron-Core's context parallelism passes them around a ring): at step s rank j holds block (j - s) mod n and
# passes it to rank j+1, exactly as the chunks of `allgather.ring` travel, while it computes its queries
# against the block it holds. The scores of one block at a time fold into a running softmax (the online
# softmax of FlashAttention): a running maximum m, a running sum l of exp(score - m) and a running
# output o, rescaled whenever m grows. After all the blocks o / l is the softmax over the whole sequence.
#
# ## Exercise 4: fold one block in
#
# `merge(m, l, o, scores, v)` takes the running values for each query (m and l vectors, o a matrix) and
# one block's `scores` (queries x keys) and values `v`; return the new (m, l, o). A masked key (causal
# attention, padding) has a score of -inf, and a query can see no key at all in a block: its row maximum
# is -inf, and exp(-inf - (-inf)) is NaN. The check folds such a row in first; where the new maximum is
# still -inf, subtract 0 instead, so that the row's exponentials are 0 and it adds nothing.

# %% tags=["solution"]
def merge(m, l, o, scores, v):
    """The online softmax: one more block of scores and values folded in."""
    # solution
    import numpy as np

    top = np.maximum(m, scores.max(axis=-1))
    finite = np.where(np.isfinite(top), top, 0.0)  # a row that has seen no key yet
    rescale = np.exp(m - finite)
    p = np.exp(scores - finite[..., None])
    return top, l * rescale + p.sum(axis=-1), o * rescale[..., None] + p @ v


# %%
merge = check_merge(merge)  # yours when it is right, else the reference

# %% [markdown]
# `rl.train.attention.RingAttention` passes the blocks with non-blocking sends posted before the compute,
# so that the transfer runs during it (`overlap=True`), or exchanges first and computes after. On the four
# ranks, causal attention over 1024 tokens, against full attention on one rank, and timed both ways on
# this machine (no emulation: these are point-to-point messages of its own), beside the same compute with
# no transfers at all: what is left of the call without overlap is the transfers, the most overlap could
# hide.

# %%
# %%px
from ringlab.lessons.lab08_beyond_data_parallelism.attention import measure_ring_attention

ring_attention = measure_ring_attention()

# %%
ring_attention = ranks.pull_rank0("ring_attention")
ranks.stop()
print(attention_lesson(ring_attention))

# %% [markdown]
# ## How NCCL chooses
#
# NCCL runs every collective with one of several algorithms and one of three [protocols](glossary.md) (LL128
# among them). The algorithms: the ring; the tree (a double binary tree across nodes, chains inside); NVLS
# ([NVLink SHARP](glossary.md): the NVSwitch adds); [NVLSTree](glossary.md) (NVLS inside each node, a tree of
# nodes across them); [CollNet](glossary.md) (the network's switches add, InfiniBand's SHARP); and
# [PAT](glossary.md), below, for all-gather and reduce-scatter with one GPU a node. For each call it costs
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
# ## Exercise 5: NCCL's pick
#
# `options` maps each protocol to its (latency in seconds, bandwidth in bytes/s) from NCCL's model. Return
# the protocol NCCL runs for a message of `nbytes`.

# %% tags=["solution"]
def fastest_protocol(nbytes, options):
    """The protocol with the least latency + nbytes / bandwidth."""
    # solution
    return min(options, key=lambda name: options[name][0] + nbytes / options[name][1])


# %%
fastest_protocol = check_fastest_protocol(fastest_protocol)  # yours when it is right, else the reference

# %% [markdown]
# **Channels.** One ring is a chain of copies driven by one block of GPU threads, and a channel (one such
# ring) moves only so fast, so NCCL runs several rings side by side, each over part of the buffer (lab 05's
# `allreduce.rings`). How many is not the port's rate divided by some rate per channel. NCCL's topology rates
# one NVLink at 20.6 GB/s on Hopper (`SM90_NVLINK_BW` in `src/graph/topo.h`, published) and a GPU's NVLink
# bandwidth at that times its count of links (`src/graph/topo.cc`); the channels come from its graph search
# (`src/graph/search.cc`), and `NCCL_DEBUG=INFO` prints how many it found. One H100's port in ringlab's preset,
# against NCCL's per-link rate:

# %%
print(describe_nvlink_port(nvlink_port()))

# %% [markdown]
# **Algorithms by size and scale.** What the model picks for allreduce, all-gather and reduce-scatter
# from 1 KiB to 8 GiB, on one [HGX](glossary.md) H100 board (NVIDIA's 8-GPU baseboard, its GPUs joined by
# NVSwitch), and on two and sixteen such nodes joined by [InfiniBand](glossary.md) (one 400 Gbit/s card a GPU):

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
# every GPU has registered as a [symmetric memory](glossary.md) window, "allowing buffers with identical virtual
# addresses across GPUs to benefit from optimized collective operations" (NVIDIA's blog on NCCL 2.27,
# published). A flag or a barrier in memory, not a message, tells a peer that the data is there, so an allreduce
# needs one or two synchronisations in all:
#
# - **[one-shot allreduce](glossary.md)**: every rank makes its whole buffer visible to the others, and each
#   adds up all n buffers itself. One synchronisation; each rank reads n-1 whole buffers and adds them in.
#   NCCL's kernel is `AllReduce_AGxLL_R`: each GPU stores its whole buffer into every peer with LL's flags, then
#   reduces all the copies locally.
# - **[two-shot allreduce](glossary.md)**: rank r adds up chunk r of every buffer (a reduce-scatter in one
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
# - ZeRO shards what data parallelism replicates: stage 1 the optimizer state, stage 2 the gradients,
#   stage 3 the parameters. Built from a reduce-scatter and an allgather, stages 1 and 2 send what an
#   allreduce sends (2 Psi) and stage 3 half as much again (3 Psi); each trains exactly as data
#   parallelism does. It pays when the model does not fit otherwise. On an H100 board the same bytes
#   still cost stages 1 and 2 about 1.3x the time: NCCL adds the allreduce in the switch (NVLS) and runs
#   the reduce-scatter and all-gather as rings.
# - Tensor parallelism splits the matrices: column-parallel then row-parallel, one allreduce of
#   activations forward and one backward per MLP, exactly the unsplit model; a Megatron layer splits its
#   attention the same way, four allreduces in all. At a real model's width a micro-batch's tensor bytes
#   and a step's gradient bytes are of the same order (tokens x tensor / (3 x hidden)); what puts the tensor
#   dimension on NVLink is that its allreduces block every layer of every micro-batch, while the data
#   group's one allreduce a step can overlap the backward pass.
# - Expert parallelism is two all-to-alls per layer; with equal blocks the largest count in the table
#   sets every block's size, so an uneven router costs bytes and time on every rank. Production layers
#   fix a capacity (capacity factor x tokens / experts) and drop the overflow, or send variable sizes
#   and drop nothing.
# - Ring attention is a ring allgather of key/value blocks with compute between the steps and an online
#   softmax: exact, masked rows included, with two blocks held at a time.
# - NCCL picks algorithm and protocol per call by latency + bytes / bandwidth: LL for small messages,
#   LL128 and Simple for large ones; trees and NVLS where they beat the ring; PAT for all-gather and
#   reduce-scatter at many nodes of one GPU each (never on nodes of several GPUs), in log2 n steps but, by
#   NCCL's own model, with a latency term linear in the ranks, so its gain is far short of (n-1)/log2 n.
#   The channels NCCL runs come from its graph search, not from an NVLink port's rate.
# - Inside a node, symmetric memory lets a rank read its peers' buffers: one-shot synchronises once and has
#   every rank add all n buffers, two-shot synchronises twice and splits the additions n ways, the ring takes
#   2(n-1) steps. For small messages the count of synchronisations sets the time; as messages grow, two-shot's
#   split additions pay for its second one. NCCL (from 2.27) and PyTorch's SymmetricMemory pick between the two
#   by size; across nodes, where no GPU reads another's memory, the ring and the tree take over.
#
# ## Exercises
#
# 1. (Above) the paper's formulas. Find the smallest number of H100s (80 GB) on which a 70B-parameter
#    model fits at each stage.
# 2. Train with `ZeroOptimizer(..., stage=3)` and print `memory()` between backward and `step()`, and
#    after `step()`: which gradients exist when?
# 3. (Above) the mesh's groups. Run `measure_mappings(placement=(0, 1, 2, 3))`: all four GPUs on one node.
#    Does the mapping still matter, and what does the prediction say?
# 4. Run `measure_imbalance(skew=0.5)` and `measure_imbalance(skew=5)`: how do the block and the step follow the
#    busiest expert?
# 5. `rl.predict_nccl("allgather", nbytes, rl.topology.cluster("h100", 1000, gpus_per_node=1))`: up to what size
#    does the model pick PAT at a thousand nodes?
# 6. Run `symmetric_lesson(measure_symmetric(nranks=4))`: on 4 ranks one-shot reads and adds 3 whole buffers a
#    rank (`counted_rows((4,))`). Does two-shot overtake one-shot sooner than on 2? (Four ranks share this
#    machine's cores: the times include the scheduler.)

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out or a choice to make. Run the cell that shows a
# question, write your answer in the cell under it (`answer = ...`: a number in the unit asked, or one of
# the choices as a string), then run the check. The worked answer is folded under **Answer**: open it once
# you have tried. ringlab computes every expected answer when the check runs, from its schedules, its cost
# models and the paper's formulas, and the worked answer says which.

# %%
from ringlab.lessons.lab08_beyond_data_parallelism.quiz import QUIZ

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
answer = None  # your MiB
# solution
answer = 2 * (8 - 1) / 8 * 8 * 2048 * 4096 * 2 / 2**20  # 2(t-1)/t of the activations

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # one of the choices
# solution
import ringlab as rl

answer = rl.predict_nccl("allreduce", 64 << 20, rl.topology.preset("ib-2x8-h100")).algorithm  # NCCL's model

# %%
QUIZ.check(4, answer)

# %%
QUIZ.ask(5)

# %% tags=["solution"]
answer = None  # your number of steps
# solution
import math

answer = math.ceil(math.log2(1000))  # one step per power of two below 1000

# %%
QUIZ.check(5, answer)
