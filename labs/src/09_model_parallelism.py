# %% [markdown]
# # Lab 09: model parallelism
#
# **What you'll do:** split an MLP's matrices over ranks ([tensor parallelism](glossary.md#tensor-parallelism)) and check that it is
# still the same MLP; lay four ranks out as a 2-D [device mesh](glossary.md#device-mesh) of tensor and data groups and measure
# both ways of mapping it onto two nodes' links; price the same mesh at Llama 3 70B's size; send tokens to experts
# and back with an [all-to-all](glossary.md#all-to-all) ([mixture of experts](glossary.md#mixture-of-experts)); and compute attention over a
# sequence split across ranks ([ring attention](glossary.md#ring-attention)).
#
# **What you'll learn:** what each split saves and what it sends, checked equal to the unsplit model on real
# ranks; why a mesh puts its tensor dimension on a node's fast links and its data dimension on the network; what
# an unbalanced router costs, and what production layers send instead; and how an online softmax keeps attention
# over blocks exact.
#
# **What you need:** [lab 08](08_sharding_and_memory.ipynb) (sharding, which keeps every layer whole, and its
# emulated machine), labs 03, 05 and 06, and torch. Everything runs on this machine's CPU; where the laptop's two
# cores cannot show a principle, the same code runs on an emulated machine beside it (`rl.emulate`, lab 02: in
# virtual time, each message of ringlab's collectives taking its links' time on the ranks' clocks), and the lab
# says which, and how this CPU's own work is counted there.
#
# After this lab, [lab 10](10_inside_nccl.ipynb) looks inside NCCL, which runs these collectives on GPUs, and
# [lab 11](11_plan_a_run.ipynb) puts every kind of split together in the plan of a real run.

# %%
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab09_model_parallelism.attention import attention_lesson, check_merge
from ringlab.lessons.lab09_model_parallelism.experts import IMBALANCE_COLUMNS, check_padded_bytes, imbalance_lesson
from ringlab.lessons.lab09_model_parallelism.mesh import (MAPPING_COLUMNS, MEGATRON_COLUMNS, check_mesh_groups,
                                                          mapping_lesson, mapping_rows, megatron_lesson, megatron_mesh,
                                                          megatron_rows)
from ringlab.measure.tables import table
from ringlab.viz import use_renderer
from ringlab.viz.parallelism import expert_load_bars, mapping_bars

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# Four MPI ranks for the whole lab:

# %%
ranks = MPICluster(4).start()

# %% [markdown]
# ## Tensor parallelism: splitting the matrices
#
# Sharding (lab 08) still computes every layer whole on every rank. Megatron-LM (Shoeybi et al. 2019) splits
# the layers themselves. An MLP `y = W2 act(W1 x)` over t ranks: rank r keeps rows r of W1 (a slice of the
# hidden features: **column-parallel**, nothing to exchange) and the same columns of W2 (**row-parallel**:
# its slice of the hidden layer times its columns is a partial sum of y), and one allreduce adds the
# partial sums. Backward mirrors it: the input's gradient is a sum over the ranks, one allreduce more.
# `rl.train.tensor.split_mlp` builds it on ringlab's ring allreduce. Is it the same MLP, forward and
# backward, with 10 hidden features that four ranks do not divide?

# %%
# %%px
from ringlab.lessons.lab09_model_parallelism.mesh import measure_mappings, split_against_whole

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
# node's NVLink and which on the network (lab 05's [rails](glossary.md#rail)): below, first a small mesh measured
# on emulated links, then the same question at a real model's size.
# `rl.train.tensor.device_mesh(comm, data, tensor, tensor_inner=True)` splits a communicator into both groups.
#
# ## Exercise 1: the mesh's groups
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
# `ib-2x8-h100` preset (GPUs 0, 1, 8 and 9; two nodes of an [HGX](glossary.md#hgx) board of 8 H100s each, joined by
# [InfiniBand](glossary.md#infiniband)): a 2 x 2 mesh that trains a stack of tensor-parallel MLP blocks (MLPs only: two
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
from ringlab.lessons.lab09_model_parallelism.experts import against_one_rank, measure_imbalance

moe_same = against_one_rank()

# %%
print(ranks.pull_rank0("moe_same"))

# %% [markdown]
# ## Exercise 2: what the padding costs
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
# with its bias pushed towards expert 0, on the emulated machine of lab 08's ZeRO steps; forward and
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
# [capacity factor](glossary.md#capacity-factor) times the even share, capacity = factor x tokens / experts (GShard per
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
from ringlab.lessons.lab09_model_parallelism.experts import CAPACITY_COLUMNS, capacity_lesson, capacity_rows

capacity = capacity_rows(loads)
table(capacity, CAPACITY_COLUMNS)
print(capacity_lesson(capacity))

# %% [markdown]
# ## Ring attention: a sequence split over the ranks
#
# Long sequences split over ranks too: [context parallelism](glossary.md#context-parallelism) (some papers say sequence
# parallelism) gives each rank a contiguous block of every sequence's tokens, in every layer. The MLPs
# and norms work token by token and need nothing from other ranks; attention needs every query
# against every key, so the key and value blocks travel (ring attention, Liu et al., 2023, as
# Megatron-Core's context parallelism passes them around a ring): at step s rank j holds block (j - s) mod n and
# passes it to rank j+1, exactly as the chunks of `allgather.ring` travel, while it computes its queries
# against the block it holds. The scores of one block at a time fold into a running softmax (the online
# softmax of FlashAttention): a running maximum m, a running sum l of exp(score - m) and a running
# output o, rescaled whenever m grows. After all the blocks o / l is the softmax over the whole sequence.
#
# ## Exercise 3: fold one block in
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
from ringlab.lessons.lab09_model_parallelism.attention import measure_ring_attention

ring_attention = measure_ring_attention()

# %%
ring_attention = ranks.pull_rank0("ring_attention")
ranks.stop()
print(attention_lesson(ring_attention))


# %% [markdown]
# ## Summary
#
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
#
# Next, [lab 10](10_inside_nccl.ipynb): how NCCL, which runs these allreduces, all-gathers and all-to-alls on GPUs,
# chooses its algorithm, protocol and channels.
#
# ## Exercises
#
# 1. (Above) the mesh's groups. Run `measure_mappings(placement=(0, 1, 2, 3))`: all four GPUs on one node.
#    Does the mapping still matter, and what does the prediction say?
# 2. (Above) what the padding costs. Run `measure_imbalance(skew=0.5)` and `measure_imbalance(skew=5)`: how do the
#    block and the step follow the busiest expert?

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out or a choice to make. Run the cell that shows a
# question, write your answer in the cell under it (`answer = ...`: a number in the unit asked, or one of
# the choices as a string), then run the check. The worked answer is folded under **Answer**: open it once
# you have tried. ringlab computes every expected answer when the check runs, from its schedules and its
# cost models, and the worked answer says which.


# %%
from ringlab.lessons.lab09_model_parallelism.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your MiB
# solution
answer = 2 * (8 - 1) / 8 * 8 * 2048 * 4096 * 2 / 2**20  # 2(t-1)/t of the activations

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number of tokens
# solution
import math

table = [[40, 8, 8, 8], [30, 10, 12, 12], [20, 20, 12, 12], [16, 16, 16, 16]]
capacity = math.ceil(1.25 * 64 / 4)  # factor x tokens / experts
answer = sum(max(count - capacity, 0) for row in table for count in row)

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your MiB
# solution
answer = (8 - 1) / 8 * 2 * 131072 * 8 * 128 * 2 / 2**20  # (n-1)/n of the sequence's keys and values

# %%
QUIZ.check(3, answer)
