# %% [markdown]
# # Lab 09: model parallelism
#
# **What you'll do:** split an MLP's matrices over ranks ([tensor parallelism](glossary.md#tensor-parallelism)) and check that it is
# still the same MLP; lay four ranks out as a 2-D [device mesh](glossary.md#device-mesh) of tensor and data groups and measure
# both ways of mapping it onto two nodes' links; price the same mesh at Llama 3 70B's size; send tokens to experts
# and back with an [all-to-all](glossary.md#all-to-all) ([mixture of experts](glossary.md#mixture-of-experts)); split a whole transformer layer
# with Megatron's [sequence parallelism](glossary.md#sequence-parallelism) on simulated ranks; compute attention over a
# sequence split across ranks ([ring attention](glossary.md#ring-attention), and [Ulysses](glossary.md#ulysses)' two all-to-alls), with
# its causal work balanced; and draw four [pipeline schedules](glossary.md#pipeline-bubble) from their dependencies.
#
# **What you'll learn:** what each split saves and what it sends, checked equal to the unsplit model on real
# ranks; why a mesh puts its tensor dimension on a node's fast links and its data dimension on the network; what
# an unbalanced router costs, and what production layers send instead; what sequence parallelism saves for no more
# bytes; how an online softmax keeps attention over blocks exact, when Ulysses sends less than a ring, and why a
# causal ring needs its chunks dealt out; and which pipeline schedule idles least and which holds least.
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
from ringlab.lessons.lab09_model_parallelism.checks import check_capacity_factor, check_group_ratio, check_hiding_block
from ringlab.lessons.lab09_model_parallelism.experts import IMBALANCE_COLUMNS, check_padded_bytes, imbalance_lesson
from ringlab.lessons.lab09_model_parallelism.mesh import (MAPPING_COLUMNS, MEGATRON_COLUMNS, check_mesh_groups,
                                                          group_bytes_lesson, mapping_lesson, mapping_rows,
                                                          megatron_lesson, megatron_mesh, megatron_rows)
from ringlab.lessons.lab09_model_parallelism.balance import check_zigzag_chunks
from ringlab.lessons.lab09_model_parallelism.pipelines import check_timeline_bubble
from ringlab.measure.tables import table
from ringlab.train.attention import hiding_examples
from ringlab.viz import use_renderer
from ringlab.viz.parallelism import expert_load_bars, mapping_bars
from ringlab.viz.sequence import (activation_bars, causal_work_bars, hiding_bars, sequence_bytes_bars,
                                  ulysses_bytes_chart)

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
# and once a step the data group allreduces a rank's gradients, an eighth of the model, in fp32 as Megatron-LM reduces
# a bf16 model's gradients (exercise 2 works out how the
# two compare). NCCL's model (`rl.predict_nccl`) prices every call with each mapping: the tensor group on one node's
# NVLink and the data group across nodes (one GPU a node, each on its own rail), or the other way round. All
# predicted, nothing measured:

# %%
megatron = megatron_mesh()
table(megatron_rows(megatron), MEGATRON_COLUMNS)
print(megatron_lesson(megatron))

# %% [markdown]
# ## Exercise 2: the two groups' bytes
#
# The printout compares what a GPU's two groups allreduce at 4096 tokens a micro-batch. Derive the comparison
# yourself, for micro-batches of two sequences of 4096 tokens (8192 a data rank) on the same mesh (tensor groups of
# t = 8): a micro-batch's tensor-group bytes over the data group's bytes a step, both a GPU's. Count one layer of h
# features, taken as about 12 h^2 weights (attention's four h x h projections, and an MLP 4h wide: 8 h^2). Megatron
# allreduces the layer's tokens x h activations, bf16 (2 bytes a value), twice forward and twice backward every
# micro-batch; the data group allreduces, once a step however many micro-batches it accumulated, the gradients of the
# weights a GPU holds, in fp32 (4 bytes a value: Megatron-LM reduces a bf16 model's gradients in fp32 by default,
# its `grad_reduce_in_fp32`). Write
# the ratio as a formula of the tokens, t and h, then its value. The checker counts Llama 3 70B's own layers
# (`group_bytes`, as the printout did) and accepts within 15%.

# %% tags=["solution"]
answer = None  # your ratio: a micro-batch's tensor bytes over a step's data bytes
# solution
tokens, tensor, hidden = 8192, 8, 8192
tensor_bytes = 4 * tokens * hidden * 2  # a layer's 4 allreduces of tokens x hidden bf16 activations (x layers)
data_bytes = 12 * hidden**2 / tensor * 4  # fp32 gradients of the 1/tensor of a layer's ~12 h^2 weights (x layers)
answer = tensor_bytes / data_bytes  # tokens x tensor / (6 x hidden)

# %%
answer = check_group_ratio(answer)  # yours when it is right, else ringlab's

# %% [markdown]
# What the two sizes say about the mapping:

# %%
print(group_bytes_lesson(megatron, tokens=8192))

# %% [markdown]
# ## Sequence parallelism: what tensor parallelism leaves whole
#
# Tensor parallelism splits attention by heads and the MLP by features, but not what lies between them: the two
# LayerNorms, the dropouts and the residual additions run on the whole sequence on every rank, and every rank keeps
# their activations for backward, t copies of the same numbers. Korthikanti et al. (2022, "Reducing Activation
# Recomputation in Large Transformer Models", section 4.2.2) split those regions along the sequence instead: each
# rank holds s/t of the tokens there. The allreduce after a row-parallel layer becomes a **reduce-scatter** (each
# rank keeps the sum of its own tokens) and the identity before a column-parallel layer an **all-gather** (every
# rank gets the whole sequence back); backward swaps them. A ring allreduce *is* a reduce-scatter then an
# all-gather (lab 03), so the bytes stay the same. Megatron also keeps only its s/t of a column-parallel layer's
# input and gathers it again in backward: one more all-gather, which it overlaps with the gradient's computation.
# (The LayerNorms' weights, held whole on every rank, then see only a rank's own tokens: their gradients are summed
# over the ranks once a step, a small allreduce left out of the bytes below.)
#
# `rl.train.sequence.ParallelLayer` splits a whole pre-norm transformer layer (`TransformerLayer`) either way.
# `SimulatedRanks(t)` runs it on t ranks that are threads of this kernel (ringlab's simulator does each collective:
# the same schedules and the same bytes as on MPI ranks, no MPI). At t = 2 and 3, with dropout on: is it the
# unsplit layer, forward and every gradient? What does rank 0 send, and what does it keep for backward?
# `saved_activations` measures the tensors autograd keeps, by the part of the layer that made them. The layer is
# compared in float64; what rank 0 sends and keeps is counted in float16, as the paper counts, with 1-byte dropout
# masks.

# %%
from ringlab.lessons.lab09_model_parallelism.sequence import (SEQUENCE_COLUMNS, measure_sequence_parallel, paper_bytes,
                                                              sequence_lesson, sequence_rows)

sequence = measure_sequence_parallel()
table(sequence_rows(sequence), SEQUENCE_COLUMNS)
print(sequence_lesson(sequence))

# %%
sequence_bytes_bars(sequence)

# %% [markdown]
# The paper counts what a layer keeps as s b h (34 + 5 a s / h) bytes unsplit (16-bit activations, s tokens, b
# sequences, h features, a heads), s b h (10 + 24/t + 5 a s / (h t)) with tensor parallelism: the 10 s b h left
# whole are the LayerNorms' inputs (4), the dropout masks (2) and the inputs of the QKV and first MLP layers (4),
# exactly the norm regions and column inputs measured above. Sequence parallelism divides them by t too. The black
# marks are the paper's 10 s b h for this layer:

# %%
activation_bars(sequence, [sum(paper_bytes(row).values()) for row in sequence])

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
# ## Capacity and dropless, built
#
# `capacity_rows` counted on tables. `ExpertParallel` builds both. `capacity_factor=1.25` keeps, on each rank,
# the first ceil(1.25 x tokens / experts) tokens that chose each expert, in blocks of that fixed size, and drops
# the rest. `dispatch="dropless"` sends each pair of ranks its own count with `rl.alltoallv`, an
# [all-to-all-v](glossary.md#all-to-all-v) (MPI's `Alltoallv`; on NCCL one send and one receive per peer in a group,
# as `torch.distributed.all_to_all_single` with split sizes runs): the n-1 pairwise rounds of `alltoall.pairwise`,
# each message its own size. All three run with both routers on the emulated links with `compute="model"`, so a
# step's time is its collectives' alone, beside the cost model's prediction (`ringlab.predict.predict_alltoallv`
# for the variable sizes); each is checked against the one-rank layer dropping the same tokens. Which saves
# time: fewer bytes, or a smaller largest message?

# %%
# %%px
from ringlab.lessons.lab09_model_parallelism.experts import measure_dispatch

ways = measure_dispatch()

# %%
from ringlab.lessons.lab09_model_parallelism.experts import DISPATCH_COLUMNS, dispatch_lesson

ways = ranks.pull_rank0("ways")
table(ways, DISPATCH_COLUMNS)
print(dispatch_lesson(ways))

# %% [markdown]
# ## Exercise 4: the smallest capacity factor
#
# A trained router is uneven too: some experts are more popular than others. `routing_table()` draws such a router's
# count table, seeded so that everyone gets the same one: 8 ranks of 4096 tokens, one expert a rank, each expert's
# popularity drawn once (lognormal) and each rank's shares drawn around it. Choose the smallest capacity factor, a
# multiple of 0.05, at which the layer drops under 1% of its tokens, with capacity = ceil(factor x tokens / experts)
# for each rank's tokens to each expert, as `capacity_rows` counts it. The checker counts the drops at your factor and
# at your factor less 0.05.

# %%
from ringlab.lessons.lab09_model_parallelism.experts import describe_routing, routing_table

routing = routing_table()
print(describe_routing(routing))

# %% tags=["solution"]
answer = None  # your capacity factor, a multiple of 0.05
# solution
import math

from ringlab.lessons.lab09_model_parallelism.experts import routing_table

routing = routing_table()  # the table above
tokens, experts = sum(routing[0]), len(routing)
dropped = lambda factor: sum(max(c - math.ceil(factor * tokens / experts), 0) for row in routing for c in row)
answer = next(k / 20 for k in range(1, 200) if dropped(k / 20) < 0.01 * tokens * experts)  # steps of 0.05

# %%
answer = check_capacity_factor(answer)  # yours when it is right, else ringlab's

# %% [markdown]
# ## Ring attention: a sequence split over the ranks
#
# Long sequences split over ranks too: [context parallelism](glossary.md#context-parallelism) (some papers say sequence
# parallelism; Megatron's, above, splits only the norms' regions inside a tensor group) gives each rank a contiguous
# block of every sequence's tokens, in every layer. The MLPs
# and norms work token by token and need nothing from other ranks; attention needs every query
# against every key, so the key and value blocks travel (ring attention, Liu et al., 2023, as
# Megatron-Core's context parallelism passes them around a ring): at step s rank j holds block (j - s) mod n and
# passes it to rank j+1, exactly as the chunks of `allgather.ring` travel, while it computes its queries
# against the block it holds. The scores of one block at a time fold into a running softmax (the online
# softmax of FlashAttention): a running maximum m, a running sum l of exp(score - m) and a running
# output o, rescaled whenever m grows. After all the blocks o / l is the softmax over the whole sequence.
#
# ## Exercise 5: fold one block in
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
# ## Causal load balance: dealing the chunks out
#
# With causal attention a query sees only the keys before it. With contiguous blocks, rank 0's queries see its own
# block only and rank n-1's see every block: the last rank computes n times what the first does, and every step of
# the ring waits for it. Cut the sequence into 2n chunks instead and give rank r chunk r and chunk 2n-1-r, one early
# and one late: the [zigzag](glossary.md#zigzag-layout) layout of Megatron-Core's context parallelism (Striped Attention, Brandon et
# al. 2023, strides single tokens instead). `causal_work(n, layout)` counts each rank's unmasked blocks of the
# (2n x 2n) grid of chunks; `simulate_ring_attention` runs the same ring in this process (no MPI) and counts the
# scores each rank computed, shown as dashes over the counted bars, each layout checked against full attention. At
# n = 4 the crosses are `RingAttention.work`, measured on the four MPI ranks above in both layouts.

# %%
from ringlab.lessons.lab09_model_parallelism.balance import balance_lesson, causal_rows

balance = causal_rows(ranks=(4, 8), measured=ring_attention)
print(balance_lesson(balance))
causal_work_bars(balance)

# %% [markdown]
# ## Exercise 6: the zigzag chunks
#
# Write `zigzag_chunks(nranks)`: for each rank, the indices of its two chunks of the 2n, in the zigzag layout
# (rank r: one from the front, and its mirror from the back).

# %% tags=["solution"]
def zigzag_chunks(nranks):
    """[(first chunk, second chunk) for each rank] of the 2 x nranks chunks."""
    # solution
    return [(r, 2 * nranks - 1 - r) for r in range(nranks)]


# %%
zigzag_chunks = check_zigzag_chunks(zigzag_chunks)  # yours when it is right, else the reference

# %% [markdown]
# ## Exercise 7: a block that hides its transfer
#
# Balanced or not, a ring step hides its transfer only where computing with a block takes longer than passing it on:
# at each step a rank computes its c queries against the c keys and values it holds while it sends those on. Llama 3
# 70B's attention has 64 query heads of 128 and 8 key-value heads (grouped-query attention: each key-value head
# serves 8 query heads), in bf16 (b = 2 bytes). With no mask, on H100s at their published dense bf16 peak F, passing
# blocks over NVLink at B (below): what is the smallest block c, in tokens, whose compute hides its transfer? Count Q
# K^T and P V (2 FLOPs a multiply-add) for every query head, K and V for every key-value head. The checker computes
# it with `hiding_block` and accepts within 5%.

# %%
nvlink = hiding_examples()["NVLink"]
print(f"F = {nvlink['flops_per_second'] / 1e12:.0f} TFLOP/s (H100, dense bf16, published); "
      f"B = {nvlink['bandwidth'] / 1e9:.0f} GB/s each way (NVLink)")

# %% tags=["solution"]
answer = None  # your block size, in tokens
# solution
nvlink = hiding_examples()["NVLink"]
F, B = nvlink["flops_per_second"], nvlink["bandwidth"]
heads, kv_heads, head_dim, b = 64, 8, 128, 2
# compute heads x 4 c^2 d / F >= transfer kv_heads x 2 c d b / B; the head width d cancels
answer = F * b * kv_heads / (2 * B * heads)

# %%
answer = check_hiding_block(answer)  # yours when it is right, else ringlab's

# %% [markdown]
# With every head carrying its own keys and values, a block of c tokens costs 4 c^2 d FLOPs a head (Q K^T and P V)
# and sends 2 c d b bytes (K and V), so the transfer hides when c >= F b / (2 B) at F FLOP/s and B bytes/s (Liu et
# al. 2023), twice that when half the scores are masked; grouped-query attention divides it by heads / kv_heads, as
# exercise 7 found. The head width cancels, the ratio of the two rates decides. `hiding_block` at an H100's published
# dense bf16 peak, on NVLink and on a 400 Gbit/s network card, and a 128k-token sequence over 8 ranks beside them:

# %%
from ringlab.lessons.lab09_model_parallelism.balance import HIDING_COLUMNS, hiding_lesson, hiding_rows, hiding_table

hiding = hiding_rows()
table(hiding_table(hiding), HIDING_COLUMNS)
print(hiding_lesson(hiding, sequence=131072, ranks=8))
hiding_bars(hiding, block=131072 // 8)

# %% [markdown]
# ## Ulysses: two all-to-alls instead of a ring
#
# DeepSpeed-Ulysses (Jacobs et al. 2023) splits the sequence over n ranks too, but never passes keys around. Heads
# are independent, so before attention one all-to-all trades the split: rank r sends its tokens of head group j
# (H/n heads) to rank j and gets every rank's tokens of its own group, the whole sequence for H/n heads. It runs
# ordinary attention on them, causal or not, and a second all-to-all sends each token's output home. Backward is
# the same two all-to-alls reversed. `ulysses_attention` on simulated ranks, against attention on one rank:

# %%
from ringlab.lessons.lab09_model_parallelism.sequence import (ulysses_against_full, ulysses_lesson, ulysses_rows,
                                                              ulysses_said)

for n in (2, 3):
    print(ulysses_said(ulysses_against_full(nranks=n, heads=6)))

# %% [markdown]
# Each rank needs whole heads, so the heads must divide by n: 6 heads cannot go to 4 ranks.

# %%
try:
    ulysses_against_full(nranks=4, heads=6)
except ValueError as error:
    print(f"refused: {error}")

# %% [markdown]
# An all-to-all keeps 1/n of a rank's buffer and sends the rest: (n-1)/n of its Q, K, V and of its output, about
# 4 s h b / n bytes for s tokens. The ring passes (n-1)/n of the *whole* sequence's K and V. Grow the sequence with
# the ranks, 4096 tokens a rank, as long-context training does, and count both:

# %%
growth = ulysses_rows()
print(ulysses_lesson(growth))
ulysses_bytes_chart(growth)

# %% [markdown]
# ## Pipeline schedules: the order of the same passes
#
# Lab 06 cut a model into stages and counted GPipe's bubble. A schedule is only the order in which each stage takes
# its forward (F) and backward (B) passes: a stage's forward waits for the stage before, its backward for the stage
# after, and a device runs one pass at a time. `ringlab.predict.schedules` runs each order as early as those rules
# allow, so the step, the idle time and the micro-batches a stage holds are counted, not assumed:
#
# - **GPipe**: every forward, then every backward; a stage holds all m micro-batches' activations.
# - **[1F1B](glossary.md#1f1b)** (PipeDream-Flush, Megatron-LM): warm up with p-1-s forwards, then one forward one
#   backward: the same step, at most p micro-batches held.
# - **interleaved 1F1B** (Megatron-LM): v chunks of layers a device, the fill and drain v times shorter.
# - **ZB-H1** ([zero-bubble](glossary.md#zero-bubble-pipeline), Qi et al. 2023): the backward split into B (the input's gradient, which
#   the stage before waits for) and W (the weights', which nobody waits for); W fills the drain.
#
# Four stages, eight micro-batches, two chunks a device for the interleaved one; a forward takes 1 and a backward 2.
# The counted bubble (idle over the ideal time) and the peak held beside the papers' closed forms:

# %%
from ringlab.lessons.lab09_model_parallelism.pipelines import SCHEDULE_COLUMNS, pipeline_lesson, schedule_rows
from ringlab.viz.pipeline_schedules import schedule_chart

schedules = schedule_rows(stages=4, microbatches=8, chunks=2)
table(schedules, SCHEDULE_COLUMNS)
print(pipeline_lesson(schedules))

# %%
for row in schedules:
    schedule_chart(row["timeline"]).show()

# %% [markdown]
# ## Exercise 8: the bubble off a timeline
#
# Write `timeline_bubble(timeline)`: the stage-time spent idle over the stage-time spent computing. Each stage's
# passes are `timeline.passes[stage]` (each with `.start` and `.end`); a stage is idle for whatever of
# `timeline.makespan` its passes do not fill.

# %% tags=["solution"]
def timeline_bubble(timeline):
    """Idle stage-time over busy stage-time."""
    # solution
    busy = sum(p.end - p.start for row in timeline.passes for p in row)
    return (timeline.stages * timeline.makespan - busy) / busy


# %%
timeline_bubble = check_timeline_bubble(timeline_bubble)  # yours when it is right, else the reference


# %% [markdown]
# ## Summary
#
# - Tensor parallelism splits the matrices: column-parallel then row-parallel, one allreduce of
#   activations forward and one backward per MLP, exactly the unsplit model; a Megatron layer splits its
#   attention the same way, four allreduces in all. At a real model's width a micro-batch's tensor bytes
#   and a step's fp32 gradient bytes are of the same order (tokens x tensor / (6 x hidden)); what puts the tensor
#   dimension on NVLink is that its allreduces block every layer of every micro-batch, while the data
#   group's one allreduce a step can overlap the backward pass.
# - Expert parallelism is two all-to-alls per layer; with equal blocks the largest count in the table
#   sets every block's size, so an uneven router costs bytes and time on every rank. Production layers
#   fix a capacity (capacity factor x tokens / experts) and drop the overflow, or send variable sizes
#   and drop nothing; the factor is chosen for what the router's skew drops. Dropless (`rl.alltoallv`)
#   saves bytes, and time only where the largest messages shrink: while one expert draws most tokens,
#   its rank's link takes as much as with padding, and the step is as long.
# - Ring attention is a ring allgather of key/value blocks with compute between the steps and an online
#   softmax: exact, masked rows included, with two blocks held at a time.
# - Sequence parallelism splits the norms' regions by the sequence: each allreduce becomes a reduce-scatter and an
#   all-gather, the same bytes, and what tensor parallelism left whole (the paper's 10 s b h) shrinks t-fold, for
#   one re-gather more in backward.
# - A causal ring needs its chunks dealt out (zigzag) or its last rank sets every step; a step hides its transfer
#   once a block holds about F b / (2 B) tokens, kv_heads / heads of that with grouped-query attention. Ulysses trades the sequence split for a head split with two
#   all-to-alls: fewer bytes than the ring as the sequence grows with the ranks, but no more ranks than heads.
# - Pipeline schedules differ only in order: 1F1B takes GPipe's time and holds p micro-batches instead of m;
#   interleaving shortens the bubble v-fold for more held; ZB-H1 fills the drain with the weight gradients.
#
# Next, [lab 10](10_inside_nccl.ipynb): how NCCL, which runs these allreduces, all-gathers and all-to-alls on GPUs,
# chooses its algorithm, protocol and channels.
#
# ## Exercises
#
# 1. (Above) the mesh's groups. Run `measure_mappings(placement=(0, 1, 2, 3))`: all four GPUs on one node.
#    Does the mapping still matter, and what does the prediction say?
# 2. (Above) the two groups' bytes: derive a micro-batch's tensor bytes over a step's data bytes. At how many tokens
#    a micro-batch would the tensor group carry more than 3x the data group's? Check with `group_bytes_lesson`.
# 3. (Above) what the padding costs. Run `measure_imbalance(skew=0.5)` and `measure_imbalance(skew=5)`: how do the
#    block and the step follow the busiest expert?
# 4. (Above) the smallest capacity factor that drops under 1% of a drawn router's tokens. Draw
#    `routing_table(spread=0.5)`: how much higher must the factor go?
# 5. (Above) fold one block in.
# 6. (Above) the zigzag chunks. Run `balance_lesson(causal_rows(ranks=(16,)))`: how far does the contiguous
#    layout's step fall behind at 16 ranks?
# 7. (Above) a block that hides its transfer, with grouped-query attention on NVLink. How large must it be on a
#    400 Gbit/s network card, and with causal zigzag blocks?
# 8. (Above) the bubble off a timeline. Run `schedule_rows(stages=4, microbatches=16)`: which bubbles halve, and
#    does the memory each schedule holds change?

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
answer = None  # your ms
# solution
answer = 3 * (20e-6 + 512 * 1024 / 1e9) * 1e3  # n-1 rounds, each as long as its largest message (512 KiB into rank 0)

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

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your MiB
# solution
answer = 4 * (8 - 1) / 8 * 131072 / 8 * 64 * 128 * 2 / 2**20  # (n-1)/n of Q, K, V and the output, each s/n tokens

# %%
QUIZ.check(4, answer)

# %%
QUIZ.ask(5)

# %% tags=["solution"]
answer = None  # your %
# solution
answer = 100 * (4 - 1) * (1 + 1 - 1) / (8 * (1 + 2))  # (p-1)(F + B - W) / (m (F + B + W))

# %%
QUIZ.check(5, answer)

