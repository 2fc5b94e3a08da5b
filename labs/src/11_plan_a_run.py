# %% [markdown]
# # Lab 11: plan a real training run
#
# **What you'll do:** plan Llama 3 70B on 256 H100s with ringlab's planner (`rl.plan`): see where each GPU's
# memory goes against what it holds (an 80 GB H100 tells a program it has 79.2 GiB, and the CUDA context takes 0.4 of
# them), and where one training step's seconds go (compute, the collectives each kind of
# parallelism leaves exposed, the [pipeline bubble](glossary.md#pipeline-bubble)); change the layout with the explorer's controls
# and watch both move; set a prediction against the closest published run; then answer four questions from the
# planner's own numbers: why tensor parallelism stays in a node, when [ZeRO](glossary.md#zero)-3 pays, what
# [context parallelism](glossary.md#context-parallelism) buys at 128k tokens, and what the same run needs on B200s or GB200 NVL72 racks.
#
# **What you'll learn:** the arithmetic behind a training layout: 18 bytes a parameter and what ZeRO shards of it;
# activations and what recomputation and context parallelism do to them; the [1F1B](glossary.md#1f1b) bubble,
# (pp-1)/(vp x m); which collectives block a layer and which hide behind compute; and model FLOPs utilisation
# ([MFU](glossary.md#mfu)), the number a run is judged by.
#
# **What you need:** labs 05, 06, 08 (sharding) and 09 (model parallelism). Nothing here runs a model or
# measures anything: every number is the planner's **prediction** from published figures (each GPU's peak and
# measured matrix-multiply rate, NCCL's cost model of each collective on the machine's links), or a
# **published** measurement with its source, and says which. It runs in seconds on a laptop.

# %%
import ringlab as rl
from ringlab.lessons.lab11_plan_a_run.layouts import (CONTEXT_COLUMNS, MACHINE_COLUMNS, TENSOR_COLUMNS, ZERO_COLUMNS,
                                                      context_lesson, context_rows, machines, machines_lesson,
                                                      tensor_lesson, tensor_reach, zero_lesson, zero_rows)
from ringlab.lessons.lab11_plan_a_run.published import (PUBLISHED_COLUMNS, against_published, closest_run,
                                                        describe_published, published_rows, source_label)
from ringlab.lessons.lab11_plan_a_run.run import (check_interleaved_bubble, check_state_bytes, describe_plan,
                                                  layout_params)
from ringlab.lessons.lab11_plan_a_run.unprinted import (UNPRINTED_COLUMNS, WORDS_COLUMNS, describe_unprinted,
                                                        describe_words, unprinted_bars, unprinted_rows, words_bars,
                                                        words_rows)
from ringlab.measure.tables import table
from ringlab.viz import use_renderer
from ringlab.viz.plan import PlanExplorer, memory_bars, published_bars, step_timeline, time_bars

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## The model and the machine
#
# A transformer is its shape: Llama 3 70B has 80 layers 8192 wide, 64 query heads sharing 8 key-value heads
# (grouped-query attention), a gated feed-forward 28672 wide and a vocabulary of 128256 (the paper's Table 3
# says 128K; the released model's config.json, 128256). `rl.train.Transformer` counts its parameters and the FLOPs
# of one token, forward and backward: PaLM's 6N for the matrix multiplications of its N parameters (all but the
# embedding table, which is looked up, not multiplied) plus 12 L h s for attention at sequence length s. The
# machine is 32 nodes of 8 H100s on NVSwitch, one 400 Gbit/s InfiniBand card a GPU (`rl.topology.cluster`, from
# published figures).

# %%
model = rl.train.Transformer.preset("llama3-70b")
machine = rl.topology.cluster("h100", nodes=32)
print(model.describe())
print(f"{model.params / 1e9:.1f}B parameters, {model.matmul_params() / 1e9:.1f}B of them multiplied (N); "
      f"{model.flops_per_token(8192) / 1e9:.0f} GFLOP a token at 8192 tokens")

# %% [markdown]
# ## A first plan
#
# A layout says how the 256 GPUs split the work. `tp` GPUs split every layer's matrices ([tensor
# parallelism](glossary.md#tensor-parallelism), with sequence parallelism: an all-gather and a reduce-scatter of the micro-batch's
# hidden states around attention and around the feed-forward, forward and backward); `pp` pipeline stages hold
# consecutive layers and pass activations on; `cp` GPUs split every sequence; the rest, dp = 256 / (tp x pp x
# cp), is data parallelism. `zero` shards over the data-parallel group (1: the optimizer, Megatron-LM's
# distributed optimizer; 3: the weights too, [FSDP](glossary.md#fsdp)). A step is 512 sequences of 8192 tokens, 4M
# tokens, cut into micro-batches of `micro_batch` sequences. Start with a node's 8 GPUs as the tensor group, 4
# pipeline stages and ZeRO-1:

# %%
plan = rl.plan(model, machine, tp=8, pp=4, zero=1, micro_batch=1, global_batch=512, seq=8192)
print(describe_plan(plan))
memory_bars(plan, title="predicted: memory per GPU, Llama 3 70B on 256 H100s")

# %% [markdown]
# The timeline lays one step end to end: the compute, then each parallelism's collectives that nothing hides
# (each kind summed over the step; in a real step they sit between the layers' kernels), the bubble and the
# optimizer's update. Below it, what runs hidden behind compute: the data-parallel gradients reduce-scattered
# while the last micro-batch's backward runs, and the parameters gathered while the first forward runs.

# %%
step_timeline(plan)

# %% [markdown]
# `plan.table()` prints all of it, and every collective with NCCL's algorithm and protocol, its size, its price
# and how many a step:

# %%
print(plan.table())

# %% [markdown]
# ## Exercise 1: 18 bytes a parameter
#
# In mixed precision each parameter costs 2 bytes of bf16 weight, 4 of fp32 gradient (Megatron-LM reduces them in
# fp32) and 12 of optimizer state (an fp32 master weight and Adam's two moments): 18 bytes. ZeRO cuts them over
# the `shards` GPUs of the data-parallel group (times cp): stage 1 the 12 bytes of optimizer, stage 2 also the
# gradients, stage 3 also the weights. Write the bytes a GPU holds for the `params` parameters of its slice (its
# stage's layers and the embedding, over tp: `layout_params(model, tp, pp)`); the check asks the planner in five
# layouts.

# %% tags=["solution"]
def state_bytes(params, shards, zero):
    """Bytes of weights, gradients and optimizer state one GPU holds for ``params`` parameters under ZeRO ``zero``."""
    # solution
    weights, gradients, optimizer = 2 * params, 4 * params, 12 * params
    if zero >= 1:
        optimizer /= shards
    if zero >= 2:
        gradients /= shards
    if zero >= 3:
        weights /= shards
    return weights + gradients + optimizer


# %%
state_bytes = check_state_bytes(state_bytes)  # yours when it is right, else the reference
print(f"{state_bytes(layout_params(model, 8, 4), plan.layout['dp'], 1) / 2**30:.2f} GiB at tp=8 pp=4 ZeRO-1")

# %% [markdown]
# ## Exercise 2: the 1F1B bubble
#
# With 1F1B (one forward, one backward: each stage starts a micro-batch's backward as soon as it can, so it holds
# at most pp micro-batches' activations), each stage still idles while the pipeline fills and drains: pp - 1
# micro-batch slots, against the m slots of work of a step's m micro-batches. Interleaving (Megatron-LM's virtual
# stages) gives each GPU `vp` chunks of layers instead of one, so each slot is vp times shorter. Write the bubble
# as a share of the compute.

# %% tags=["solution"]
def bubble_fraction(pp, vp, micro_batches):
    """The pipeline bubble of interleaved 1F1B, as a share of the compute."""
    # solution
    return (pp - 1) / (vp * micro_batches)


# %%
bubble_fraction = check_interleaved_bubble(bubble_fraction)  # yours when it is right, else the reference
print(f"tp=8 pp=4: {plan.layout['micro_batches']} micro-batches, a bubble of "
      f"{bubble_fraction(4, 1, plan.layout['micro_batches']):.1%} of the compute")

# %% [markdown]
# ## Change the layout
#
# The explorer re-plans whenever a control moves and redraws both pictures. Try tp=16 (past a node), pp=1, ZeRO-3,
# a larger micro-batch, full recomputation (each layer keeps only its input and runs its forward again in the
# backward: a third more compute, far fewer activations). A layout the planner refuses (tp x pp x cp must divide
# 256; the global batch must divide into dp x micro_batch) keeps the last pictures and says why. (Without a
# kernel, in a saved or exported copy, the controls do nothing.)

# %%
explorer = PlanExplorer(model, machine, global_batch=512, seq=8192, tp=8, pp=4, zero=1, micro_batch=1)
explorer

# %%
explorer.pp = 1  # what the controls do, from code: the figures above follow
print(explorer.summary.value)

# %% [markdown]
# ## Predicted against published
#
# A planner earns trust against real runs. ringlab ships published ones (`ringlab.train.runs`: each with its
# source, table and row, and exactly the layout printed there). The one closest to this lab's run (the same model
# shape on the same GPUs, the nearest count of them; runs on GPU variants the planner has no figures for, such as
# torchtitan's 500 W H100s, are left out), its layout planned as printed:

# %%
run = closest_run(model, "h100", 256)
checked = against_published(run)
table(published_rows(checked), PUBLISHED_COLUMNS)
print(describe_published(checked))
published_bars(published_rows(checked), f"predicted (ringlab's planner) against {source_label(run)}")

# %% [markdown]
# What the planner predicts for that layout, part by part:

# %%
memory_bars(checked["plan"], title=f"predicted: memory per GPU for {run['id']}")

# %%
step_timeline(checked["plan"], title=f"predicted: one step of {run['id']}")

# %% [markdown]
# ## What the source did not print
#
# A published table rarely prints every setting a run used. Megatron-LM's README prints the layout of its 32B run on
# 384 H100s (tp=8, dp=48, 192 sequences a step) but not the micro-batch, so the planner assumes 1, says so, and
# misses the run by more than 20%. Plan it at every micro-batch the batch allows and compare:

# %%
rows = unprinted_rows()
table(rows, UNPRINTED_COLUMNS)
print(describe_unprinted(rows).text)
unprinted_bars(rows, "predicted / published for Megatron-Core's 32B run, by the micro-batch it does not print")

# %% [markdown]
# The planner keeps its assumed value for the prediction (`python benchmarks/plan_vs_published.py` lists each run
# a setting like this would bring within 20%, and never counts it): picking the value that matches the published
# number would be fitting to the very run the planner is judged on.
#
# Sometimes the words give what the table leaves out. The Llama 3 paper's table prints no number of virtual stages
# for its 405B runs, but its text says the pipeline is interleaved and that taking a layer off the first stage
# leaves that stage's first model chunk only the embedding. Read one more way, a source can also check a setting
# without fitting it: the same paper measured two runs at 8,192 tokens, on 8,192 and 16,384 GPUs, and the relation
# between their throughputs is something a plan at the wrong setting gets wrong.

# %%
words = words_rows()
table(words, WORDS_COLUMNS)
print(describe_words(words).text)
words_bars(words, "predicted: Llama 3 405B on 16,384 H100s against 8,192, by the virtual stages the paper leaves out")

# %% [markdown]
# ## Why tensor parallelism stays in a node
#
# Every layer's tensor group gathers and scatters the micro-batch's hidden states, forward and backward, and the
# layer waits for them. Keep the GPUs, the data-parallel group and the rest fixed, and take tp from 8 (inside one
# node) to 16 (two nodes, across the network), halving the pipeline stages:

# %%
reach = tensor_reach()
table(reach["rows"], TENSOR_COLUMNS)
print(tensor_lesson(reach))
time_bars([r["plan"] for r in reach["rows"]], title="predicted: one step's seconds, tp inside a node and across two")

# %% [markdown]
# ## When ZeRO-3 pays
#
# ZeRO-3 keeps 1/dp of the weights on each GPU and gathers a layer's weights just before the layer runs, forward and
# backward, for every micro-batch, then reduce-scatters its gradients. It saves memory; it pays in all-gathers,
# which hide behind compute only as far as there is compute to hide behind. Two layouts, each with ZeRO-1 and
# ZeRO-3: micro-batches of one sequence, and of 16 with full recomputation (torchtitan's published layout):

# %%
sharding = zero_rows()
table(sharding, ZERO_COLUMNS)
print(zero_lesson(sharding))
memory_bars([r["plan"] for r in sharding], title="predicted: memory per GPU, ZeRO-1 against ZeRO-3")

# %% [markdown]
# ## Context parallelism at 128k tokens
#
# Long-context training (Llama 3's pre-training ended by growing its context to 128k tokens, the Llama 3 paper's
# section 3.4.2) multiplies every layer's activations by the
# sequence's length. With cp GPUs splitting each sequence, each keeps 1/cp of its tokens, and attention passes the
# keys and values around a ring (ring attention, lab 09) while it computes. 32 sequences of 131,072 tokens a step
# (the same 4M tokens), tp=8, pp=4, ZeRO-1, cp from 1 to 8:

# %%
context = context_rows()
table(context, CONTEXT_COLUMNS)
print(context_lesson(context))
memory_bars([r["plan"] for r in context], [f"cp={r['cp']}" for r in context],
            title="predicted: memory per GPU at 131,072 tokens a sequence")

# %% [markdown]
# ## The same run on B200s and on GB200 NVL72
#
# A B200 has more memory and more FLOP/s than an H100; a GB200 NVL72 rack joins 72 of them in one NVLink domain.
# For each machine `ringlab.train.planner.search` plans every layout it knows (tp, pp, interleaving, cp, ZeRO 0, 1,
# 2 and 3, micro-batches, recomputation) and ranks those that fit by their step; here the fastest of each, at the
# same tokens a GPU a step (4 racks of 72 make 288 GPUs, so 576 sequences a step):

# %%
others = machines()
table(others, MACHINE_COLUMNS)
print(machines_lesson(others))
time_bars([r["plan"] for r in others if r["fits"]], [r["machine"] for r in others if r["fits"]],
          title="predicted: one step's seconds, the fastest layout of each machine", xaxis_title="machine")

# %% [markdown]
# ## Summary
#
# - A plan is arithmetic on published figures: 18 bytes a parameter of weights, gradients and optimizer state,
#   sharded by ZeRO; activations per layer and token, cut by tp, cp and recomputation; FLOPs at a GPU's measured
#   matrix rate; and every collective priced by NCCL's model on the links its group spans.
# - The pictures say what to change: memory near the line asks for ZeRO, recomputation, pipeline stages or cp;
#   time in exposed collectives asks for a smaller group on faster links, or more compute to hide behind; a large
#   bubble asks for more micro-batches or interleaving, (pp-1)/(vp x m).
# - Tensor parallelism's collectives block every layer and carry the micro-batch's whole hidden states whatever
#   tp is, so doubling tp doubles what each GPU sends for the same compute; across nodes each call also costs
#   more.
# - ZeRO-3 re-gathers every layer's weights for every micro-batch: it pays where it makes a layout fit and there
#   are few micro-batches' gathers to hide.
# - At long sequences activations dominate; context parallelism divides them by cp and returns micro-batches to
#   the pipeline.
# - A planner is checked against published runs, and where it misses, its list of what it leaves out is where to
#   look.
#
# ## Exercises
#
# 1. (Above) 18 bytes a parameter. At which ZeRO stage does tp=8, pp=1 first fit with micro-batches of 2?
# 2. (Above) the bubble. With the explorer, hold tp=8, pp=8 and compare vp=1 with `rl.plan(..., vp=5)`: what
#    does interleaving cost in activations?
# 3. `rl.plan(..., attention="unfused")`: what did FlashAttention save, in memory and in time? And
#    `attention="fa2"` (FlashAttention-2's published rates instead of cuDNN's) and `attention="fa1"` (the first
#    FlashAttention's, the era of MPT's 2023 benchmark): how much of an H100 step does the choice of attention
#    kernel move?
# 4. `ringlab.train.planner.search(model, machine, global_batch=512, seq=8192).table()`: which layouts are
#    rejected, and why? Does the best one match the published run's layout?
# 5. Plan `rl.train.Transformer.preset("mixtral-8x7b")` with `ep=8` on 64 H100s: how much of the step is the
#    experts' all-to-all?

# %% [markdown]
# ## Quiz
#
# A few short questions on this lab: a number to work out or a choice to make. Run the cell that shows a
# question, write your answer in the cell under it (`answer = ...`: a number in the unit asked, or one of the
# choices as a string), then run the check. The worked answer is folded under **Answer**: open it once you have
# tried. ringlab computes every expected answer when the check runs, from its planner and published GPU figures.

# %%
from ringlab.lessons.lab11_plan_a_run.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your GiB
# solution
import ringlab as rl
from ringlab.lessons.lab11_plan_a_run.run import layout_params

model = rl.train.Transformer.preset("llama3-70b")
answer = layout_params(model, 8, 4) * (2 + 4 + 12 / 8) / 2**30  # ZeRO-1 over dp = 256 / (8 x 4) = 8

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your %
# solution
dp = 256 // (4 * 8)
answer = 100 * (8 - 1) / (2 * (512 // dp))  # (pp-1)/(vp x m), m = 512 / dp micro-batches

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # one of the choices
# solution
import ringlab as rl

machine = rl.topology.cluster("h100", nodes=32)
faster = min((8, 16), key=lambda tp: rl.plan("llama3-70b", machine, tp=tp, pp=32 // tp, zero=1, global_batch=512,
                                              seq=8192).step_seconds)
answer = f"tp={faster}"

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # one of the choices
# solution
from ringlab.lessons.lab11_plan_a_run.layouts import context_rows

answer = str(next((r["cp"] for r in context_rows(seq=131072, global_batch=32) if r["fits"]), "none"))

# %%
QUIZ.check(4, answer)

# %%
QUIZ.ask(5)

# %% tags=["solution"]
answer = None  # your %
# solution
import ringlab as rl

answer = 100 * 1000 * rl.train.Transformer.preset("llama3-70b").flops_per_token(8192) / 989e12  # H100: 989 TFLOP/s

# %%
QUIZ.check(5, answer)
