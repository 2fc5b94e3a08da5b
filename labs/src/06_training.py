# %% [markdown]
# # Lab 06: data-parallel training
#
# **What you'll do:** train one small model three ways on MPI ranks: with ringlab's allreduce behind
# a [Horovod](glossary.md#horovod)-style `DistributedOptimizer`, with a synchronous parameter server, and with torch's own
# DistributedDataParallel. You'll check that the weights come out the same, then measure the
# speed-up against ranks, and trace what gradient buckets and overlap do to a training step.
#
# **What you'll learn:** what "averaging gradients" means in practice, why the three agree, when more
# ranks pay (compute per step against gradient bytes), why accumulating micro-batches gives the same
# weights as ranks, and the linear learning-rate scaling rule (more ranks, bigger batch, larger
# learning rate, with warm-up); and, for a model that does not fit, what pipeline stages send each
# other and the idle bubble they pay for it.
#
# **What you need:** labs 03, 04 and 05 (its cost model), and torch.

# %%
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab06_training.batches import check_scaled_lr, describe_accumulation, describe_large_batches
from ringlab.lessons.lab06_training.overlap import (OVERLAP_COLUMNS, PREDICTED_COLUMNS, check_step_time,
                                                    describe_overlap, describe_prediction, overlap_lesson,
                                                    predict_sweep, timeline_traces)
from ringlab.lessons.lab06_training.payoff import (PAYOFF_COLUMNS, describe_payoff, describe_published,
                                                   emulated_payoff_lesson, emulated_payoff_rows,
                                                   measure_emulated_payoff, measured_rows, speedup_rows)
from ringlab.lessons.lab06_training.trainers import (TRAINER_SPEED_COLUMNS, compare_trainers, describe_accuracy,
                                                     describe_speedup, describe_trainer_speeds, describe_trainers,
                                                     trainer_speeds)
from ringlab.measure.tables import table
from ringlab.mpi.devices import cores
from ringlab.predict.fitting import fit_rows
from ringlab.train.accumulation import check_accumulation
from ringlab.train.large_batch import large_batch_runs
from ringlab.train.payoff import measure_payoff
from ringlab.train.scaling import RECIPE_COLUMNS, measure_scaling, train_in_one_process
from ringlab.viz import use_renderer
from ringlab.viz.dataparallel import large_batch_plot, payoff_plot
from ringlab.viz.overlap import bucket_sweep_plot, overlap_timeline
from ringlab.viz.training import speedup_plot

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## Three trainers, one result
#
# Three workers each take their slice of every global batch of 96. The parameter server needs a rank
# of its own to serve, so we start four ranks: rank 0 serves, ranks 1-3 are the three workers of all
# three trainers. The DistributedOptimizer averages gradients with `rl.allreduce` (ring) after every
# backward pass; [DDP](glossary.md#ddp) does the same with [gloo](glossary.md#gloo); both run on a communicator of ranks 1-3 (`Split`) while
# rank 0 waits. Then the synchronous parameter server of lab 04 averages the same gradients on rank 0.
# After 30 steps of plain SGD, are the three sets of weights the same? And how long did each take?

# %%
ranks = MPICluster(4).start()

# %%
# %%px
import time

import torch
from mpi4py import MPI
from ringlab.train import DistributedOptimizer, ParameterServer
from ringlab.train.reference import ddp_train
from ringlab.train.task import batches, make_data, make_model, weights

world = MPI.COMM_WORLD
workers = world.Split(0 if world.Get_rank() > 0 else MPI.UNDEFINED)  # ranks 1-3; rank 0 gets COMM_NULL
x, y, _, _ = make_data()
batch = batches(x, y, 3, 32)  # batch(worker, step): worker's 32 of step's 96
loss_fn = torch.nn.CrossEntropyLoss()
trained, seconds = {}, {}  # each trainer's weights, and its seconds for the 30 steps

if workers != MPI.COMM_NULL:
    worker = workers.Get_rank()
    model = make_model(seed=worker)  # on purpose: the optimizer broadcasts worker 0's weights first
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model.named_parameters(), comm=workers)
    start = time.perf_counter()
    for step in range(30):
        opt.zero_grad()
        inputs, targets = batch(worker, step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    seconds["DistributedOptimizer (ring)"] = time.perf_counter() - start
    opt.close()
    trained["DistributedOptimizer (ring)"] = weights(model)
    model = make_model(seed=0)
    seconds["DDP"] = ddp_train(model, batch, steps=30, lr=0.05, comm=workers)
    trained["DDP"] = weights(model)

model = make_model(seed=0)
record = ParameterServer(model, servers=1, lr=0.05).run(30, batch, loss_fn)  # rank 0 serves, ranks 1-3 work
seconds["parameter server (sync)"] = record["seconds"]
trained["parameter server (sync)"] = weights(model)

# %%
trained = ranks.view.pull("trained", block=True)[1]  # rank 1, worker 0, took part in all three
seconds = ranks.view.pull("seconds", block=True)[1]
ranks.stop()
compared = compare_trainers(trained, reference="DDP")
table(compared, {"trainer": "trainer", "largest difference from DDP (relative)": ("difference", ".1e")})
print(describe_trainers(compared))
assert all(row["difference"] <= 1e-5 for row in compared)

# %% [markdown]
# The three side by side in time as well: each one's 30 steps timed on worker 0 (rank 1), with starting
# DDP's process group and the first broadcast of the weights left out.

# %%
speeds = trainer_speeds(seconds, steps=30, batch=96)
table(speeds, TRAINER_SPEED_COLUMNS)
print(describe_trainer_speeds(speeds, workers=3, nranks=4, cores=cores()))

# %% [markdown]
# ## Exercise 1: scaling the learning rate
#
# With one GPU a model trains well at batch 100 and learning rate 0.001. With k GPUs the global
# batch is k times larger, and the linear scaling rule multiplies the learning rate by k, reached
# gradually over a warm-up. Write the learning rate at step `step` for `k` ranks, growing linearly
# from the single-GPU rate to k times it over `warmup` steps, then staying there.

# %% tags=["solution"]
def scaled_lr(base_lr, k, step, warmup):
    """Linear scaling with linear warm-up."""
    # solution
    if step >= warmup:
        return base_lr * k
    return base_lr * (1 + (k - 1) * step / warmup)


# %%
scaled_lr = check_scaled_lr(scaled_lr)  # yours when it is right, else the reference

# %% [markdown]
# ## Speed-up against ranks
#
# Now one MPI job each for 1, 2 and 4 ranks, every rank taking 32 samples a step with the linear
# scaling rule (learning rate 0.05 per 32 samples, momentum 0.9). Every run trains on the same
# number of samples, so n ranks take n times fewer steps of n times the batch: with the same number
# of steps instead, n ranks would see n times the samples, and their accuracies would compare
# different amounts of training. Measured here: samples per second, the share of each step spent
# communicating, and the test accuracy reached.

# %%
rows = measure_scaling([1, 2, 4], samples=38400)
table(rows, RECIPE_COLUMNS)

# %%
speedup_plot(rows, cores=cores())

# %%
print(describe_speedup(rows, cores()))

# %% [markdown]
# ## Accuracy: what differs between the runs
#
# The runs differ in batch size, learning rate and number of steps. Does averaging gradients over
# ranks change what is learned as well? Check it: train in this one process on the largest run's
# global batches (all its ranks' slices together) with its learning rate and number of steps.

# %%
one_process = train_in_one_process(nranks=rows[-1]["ranks"], steps=rows[-1]["steps"])
print(describe_accuracy(rows, one_process))

# %% [markdown]
# ## When does data parallelism pay?
#
# n ranks take n times the samples per step. A step on n ranks computes as long as a step on one rank
# (the same samples per rank), then averages the gradients. The cost model of lab 05 puts numbers on
# both: with t_c one rank's compute per step and t_comm(n) the ring allreduce of the gradient bytes,
#
#     speed-up(n) = n t_c / (t_c + t_comm(n)),   t_comm(n) = 2(n-1) alpha + 2(n-1)/n x bytes / B
#
# So data parallelism pays where the allreduce is short next to the compute it is added to.
# Measure both sides for three widths of the MLP (64, 256 and 1024 hidden units: more compute per step,
# and many more gradient bytes): one rank's compute per step in this process; then on 2 ranks, and on
# more up to one a core (at most 4), a ring-allreduce sweep to fit alpha and B on those ranks, and the
# training steps themselves. The optimizer averages after backward (`overlap=False`), as the model
# assumes. The table predicts with each rank count's own fit; the lines, out to 8 ranks, with the fit of
# the most ranks measured, a core per rank.

# %%
payoff = measure_payoff()  # 2 ranks up to one a core, at most 4
speedups = speedup_rows(payoff)
table(measured_rows(speedups), PAYOFF_COLUMNS)

# %%
payoff_plot(speedups)

# %%
print(describe_payoff(speedups, payoff))

# %% [markdown]
# ### The same question on an emulated network
#
# On this machine the "network" is a memory copy and the ranks share its cores, so the allreduce's time
# is partly the CPU's. The next measurement runs the 2-rank job on an emulated network
# (`payoff.PAYOFF_MACHINE`, `uniform:10:2000`: every rank on its own 10 GB/s port, 2 ms a message, `rl.emulate`)
# with 256 samples a rank a step, in **virtual time**: the data really moves and is really averaged, but
# every rank keeps a clock of its own, to which each message adds its links' time and each computation
# this CPU's time for it (the thread's CPU time, so ranks sharing cores, or other processes, do not
# lengthen it); nobody sleeps. The one rank alone is timed the same way. The prediction beside each width
# comes from the links' own figures (`rl.predict`), not from a fit. Each verdict sets the averaging that
# `step()` measured beside one rank's compute (`step()` on the rank that came to it last: the other also
# waits there for that rank's compute, which is this CPU's, not the links'); the end-to-end step is printed
# too, and so is what this machine's own clock (wall time) said, which is not the emulated machine's time.

# %%
emulated_payoff = measure_emulated_payoff()  # one rank here, then a 2-rank job on the emulated links
emulated_payoff_lesson(emulated_payoff_rows(emulated_payoff))  # the sentences are computed from the rows

# %% [markdown]
# A published pair of speed-ups reads the same way: Horovod with TensorFlow on one machine, 2 GPUs and
# 3 GPUs against one. Why are both below n, and why did the third GPU add more than the second?

# %%
print(describe_published())

# %% [markdown]
# ## Accumulating gradients: micro-batches on one rank
#
# When a batch does not fit, a rank can run k micro-batches through backward before one optimizer
# step: autograd adds each backward pass into `.grad`, and dividing each loss by k makes the sum the
# mean. That is the average k ranks of data parallelism compute, each taking one micro-batch. Check it
# on 2 ranks in float64 (`train_accumulating`), and once more with each rank accumulating 2
# micro-batches inside the DistributedOptimizer's `no_sync()` (as with DDP), against one process
# accumulating all 4.

# %%
accumulated = check_accumulation(nranks=2, steps=10)
print(describe_accumulation(accumulated))

# %% [markdown]
# ## Large batches and the learning rate
#
# k ranks see k times the batch per step, so they take k times fewer steps through the same samples.
# Does a large batch learn as well? Here in one process (a batch k times as large is what k ranks see
# together), batch 8 x 32 against batch 32, all on the same samples: at the same learning rate; at 8
# times it (the linear scaling rule); and at 8 times it reached over a linear warm-up (Exercise 1's rule,
# `scaled_lr`), as Goyal et al. (2017) did to train on ImageNet at 8192 images per batch (published).

# %%
large = large_batch_runs(k=8)
large_batch_plot(large)

# %%
print(describe_large_batches(large))

# %% [markdown]
# ## Overlap and buckets
#
# The DistributedOptimizer fuses gradients into buckets of about `bucket_bytes` and, with `overlap=True`
# (the default), hands each bucket to a communication thread the moment backward has filled it: its
# allreduce runs while backward computes the layers before it. Without overlap, `step()` runs every
# bucket's allreduce after backward has ended. Does overlap hide communication on this machine, and
# which bucket size is best?
#
# Two ranks train a wider model (`make_wide_model`: five square layers of 512 x 512 between its input and
# output layers, on 16 samples a rank, so that averaging its gradients is a large share of a step) with
# overlap off and on, and `bucket_bytes`
# from one parameter a bucket to the whole model in one (`bucket_sizes`). The settings
# take turns, one step each, so that a load on the machine that comes and goes falls on all of them
# alike. Every step starts from a barrier and is traced (`trace=True`): when each parameter's gradient
# arrived, when each bucket was handed over, when its allreduce ran and how long `step()` waited for
# it. First the same ranks time one bucket's allreduce from 4 KiB to 4 MiB, for the exercise below.

# %%
ranks = MPICluster(2).start()

# %%
# %%px
from ringlab.lessons.lab06_training.overlap import measure_emulated_overlap
from ringlab.train.overlap import bucket_sizes, make_wide_model, measure_overlap, time_bucket_allreduce

one_bucket = time_bucket_allreduce([1 << k for k in range(12, 23, 2)], iters=10)  # rows on rank 0 only
measured = measure_overlap(bucket_sizes(make_wide_model()), steps=12)
emulated = measure_emulated_overlap()  # the same sweep on an emulated network, for the section after the next

# %%
one_bucket, measured, emulated = ranks.pull_rank0("one_bucket", "measured", "emulated")
ranks.stop()
table(measured["rows"], OVERLAP_COLUMNS)
print(describe_overlap(measured["rows"], cores()))

# %%
bucket_sweep_plot(measured["rows"])

# %% [markdown]
# One step on each rank, drawn from the trace, overlap off and on at the same bucket size: a bar per
# parameter's backward (from the gradient before it to its own, coloured by the bucket it fills) and a
# bar per bucket's allreduce; the diamond marks when the bucket was handed over. Hover for names,
# bytes and how long `step()` waited.

# %%
overlap_timeline(timeline_traces(measured))

# %% [markdown]
# ## Overlap where communication has links of its own
#
# Whether overlap paid above depends on this machine: where a rank's backward pass and its communication
# thread share one core, and MPI copies and adds on that core, what runs side by side runs slower. On a
# GPU box the bytes cross links and NICs while the GPU computes. The cell above also ran the sweep on an
# emulated network (`overlap.MACHINE`, `uniform:0.25:50`: every rank on its own 0.25 GB/s port, 50 us a
# message) in virtual time: each thread keeps a clock, the main thread's running with the forward and
# backward passes' compute and the communication thread's with the allreduces' link time, as a GPU's
# compute and communication streams run side by side; nobody sleeps. The compute is this CPU's, timed
# alone before the sweep (`time_compute`: each pass with nothing beside it) and then modelled, the same
# in every step of every setting: counted as the threads' CPU time instead, a busy machine slows the
# backward pass and the allreduces beside each other (the two threads share caches and Python's lock),
# which a GPU's streams do not. With 256 samples a rank a backward pass takes about as long as averaging
# the gradients over those links, at three bucket sizes: one layer, two layers and the whole model. The
# gradients really move and are really added on this machine's cores; the times are the emulated
# machine's.

# %%
table(emulated["rows"], OVERLAP_COLUMNS)
overlap_lesson(measured["rows"], emulated["rows"], cores(), raw_shown=True)  # computed from both sweeps

# %%
overlap_timeline(timeline_traces(emulated), clock=emulated["rows"][0]["clock"])

# %% [markdown]
# ## Exercise 2: predict the best bucket size
#
# Model a step from numbers you can measure. With k buckets of a model's K bytes of gradients, each
# bucket is one ring allreduce of K/k bytes on n ranks: 2(n-1)(alpha + K/(k n B)) (lab 05). Without
# overlap a step computes (forward and backward: `compute` seconds), then runs the k allreduces one
# after another. With overlap the allreduces run during compute, but the last bucket is filled only
# when backward ends: the step ends at compute plus one bucket's allreduce, or when all k allreduces
# are done, whichever is later. (An optimistic model: the allreduces may start as soon as compute
# does, and take nothing from it.) Write `step_time`.

# %% tags=["solution"]
def step_time(compute, nbytes, buckets, n, alpha, B, overlap):
    """Seconds per step: nbytes of gradients in `buckets` equal buckets, each a ring allreduce on n ranks."""
    # solution
    one = 2 * (n - 1) * (alpha + nbytes / (buckets * n * B))  # one bucket's ring allreduce
    if not overlap:
        return compute + buckets * one
    return max(compute + one, buckets * one)


# %%
step_time = check_step_time(step_time)  # yours when it is right, else the reference

# %% [markdown]
# The model's inputs, all measured here: alpha and B fitted (as in lab 05) to one bucket's allreduce on
# the two ranks above, and compute from the sweep without overlap (step time less waiting). Where does
# the model put the best bucket size, and where did the measurements?

# %%
fitted = fit_rows(one_bucket, "ring", 2)
predicted, compute = predict_sweep(measured["rows"], step_time, fitted)
table(predicted, PREDICTED_COLUMNS)
print(describe_prediction(predicted, fitted, compute))
bucket_sweep_plot(predicted)

# %% [markdown]
# ## When the model does not fit
#
# Everything above keeps a whole copy of the model on every rank. When the weights, their gradients
# and the optimizer's state do not fit on one device, the model itself is cut up: model parallelism.
# Pipeline parallelism cuts it into n consecutive stages, one per device: stage s hands its output
# (the activations) to stage s+1, and backward sends the gradients of those activations back the
# other way. What crosses a link is then a micro-batch's activations, not every weight's gradient.
#
# Count both for a GPT-style stack of transformer layers, sized here (not a published model): 32
# layers of hidden size 4096, sequences of 2048 tokens, 2-byte values (fp16), on 4 devices, 8
# micro-batches of one sequence per step. A layer holds 12h² + 13h parameters, the count Narayanan et
# al. (2021, Megatron-LM) use (published; embeddings left out).

# %%
from ringlab.lessons.lab06_training.pipeline import check_bubble_fraction
from ringlab.lessons.lab06_training.pipeline import describe_bubble, describe_pipeline_traffic
from ringlab.predict.pipeline import gpipe_schedule, pipeline_traffic
from ringlab.viz.pipeline import bubble_plot, pipeline_chart

gpt = pipeline_traffic(hidden=4096, sequence=2048, layers=32, microbatch=1, microbatches=8, devices=4)
print(describe_pipeline_traffic(gpt))

# %% [markdown]
# The catch is time. A plain chain of stages leaves all devices but one idle at any moment (as the
# published write-ups on model parallelism put it). GPipe (Huang et al. 2019, published) cuts each batch into
# m micro-batches so that the stages work on different micro-batches at once: every stage runs all m
# forward passes, then all m backward passes. Stages still wait at the start and at the end of each
# step: the bubble. Here is the schedule for 4 stages and 8 micro-batches, built from the dependencies
# alone (one slot per pass, each pass as soon as its input has arrived): predicted, not measured.

# %%
grid = gpipe_schedule(stages=4, microbatches=8)
pipeline_chart(grid)

# %% [markdown]
# ## Exercise 3: the bubble
#
# Write the share of a GPipe step that sits idle, for n stages and m micro-batches (forward and
# backward passes one slot each). The check counts the idle slots of the drawn schedule for several n
# and m.

# %% tags=["solution"]
def bubble_fraction(n, m):
    """The idle share of a GPipe step: n stages, m micro-batches."""
    # solution
    return (n - 1) / (m + n - 1)


# %%
bubble_fraction = check_bubble_fraction(bubble_fraction)  # yours when it is right, else the reference

# %%
print(describe_bubble(grid))
bubble_plot(stage_counts=(4, 8))

# %% [markdown]
# More micro-batches shrink the bubble: at m micro-batches it is (n-1)/(m+n-1) of the step.
# Narayanan et al. (2021) write the same bubble as (n-1)/m, the idle time against the busy time
# rather than against the whole step. With GPipe's order a stage keeps the activations of all m
# micro-batches until their backward passes; their one-forward-one-backward schedule (1F1B) has the
# same bubble but starts each backward as early as it can, so a stage holds at most n micro-batches'
# activations. Megatron-LM also splits each layer's matrices over the GPUs of a node (tensor
# parallelism, activations exchanged inside every layer over the fast links), pipelines across nodes,
# and runs data parallelism over the pipelines: each link carries the traffic it is fit for.

# %% [markdown]
# ## Summary
#
# - Data parallelism: every rank holds the model, computes gradients on its slice of the batch, and
#   the gradients are averaged. A ring allreduce, a synchronous parameter server and DDP give the
#   same weights.
# - Fusing gradients into buckets and starting each bucket's allreduce as soon as backward has
#   filled it can hide communication behind computation, where communication has resources of its
#   own (a GPU's links and NICs); where ranks share a few CPU cores it competes with backward
#   instead. More buckets start sooner but pay alpha more often. Trace a step to see which.
# - A step on n ranks is one rank's compute plus the allreduce of the gradients, so speed-up stays below
#   n (a measured one above it says the 1-rank run was slow). The allreduce costs 2(n-1) latencies plus
#   2(n-1)/n of its bytes: at the same latency, more gradient bytes per unit of compute scale worse, but a
#   small model's few bytes can leave it latency-bound, as the measured widths above show. The first extra
#   rank brings the allreduce in; after it the bytes term grows only from 1x towards 2x, while the latency
#   term keeps growing with n.
# - k micro-batches accumulated before one step (loss / k each) give the weights of k ranks taking
#   one each.
# - k times the batch calls for about k times the learning rate, reached over a warm-up: at the same
#   rate a large batch falls behind at equal samples.
# - n ranks averaging gradients compute what one process computes on their slices together: what
#   is learned depends on the global batch, the learning rate and the number of steps, not on the
#   ranks. Compare accuracies at equal samples.
# - When the model does not fit, pipeline stages pass a micro-batch's activations forward and their
#   gradients backward, far fewer bytes than every weight's gradient; the price is the bubble,
#   (n-1)/(m+n-1) of a GPipe step, which more micro-batches shrink.
#
# ## Exercises
#
# 1. (Above) linear scaling with warm-up.
# 2. Pass `algorithm="naive"` or `"rhd"` to the DistributedOptimizer. Do the weights change? Does the time?
# 3. Run `measure_scaling([1, 2, 4], steps=300)`: the same steps at every rank count. How many samples
#   does each run see, and how do the accuracies compare now?
# 4. (Above, Exercise 2) a step-time model of buckets and overlap. Give `measure_overlap` more sizes
#   between those of `bucket_sizes`: does the measured best bucket size sit where the model says?
# 5. Run `measure_payoff(rank_counts=(2, 3, 4), widths=(64, 2048))`. Where ranks outnumber cores the plot
#   shows them open, beside crosses: the model with compute n / cores times as long. At what width does
#   the model put 4 ranks above 3x, and do your measurements agree?
# 6. Run `large_batch_runs(k=32, samples=20480)`: does linear scaling still hold at batch 1024, and
#   does warm-up help there? Plot the test loss with `large_batch_plot(runs, "loss")`.
# 7. (Above, Exercise 3) the pipeline bubble. With `pipeline_traffic`, find the micro-batch size (in
#   sequences) at which a pipeline boundary carries as many bytes a step as a data-parallel allreduce.

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
from ringlab.lessons.lab06_training.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your learning rate
# solution
answer = 0.05 * 4  # k times the batch, k times the learning rate

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your learning rate
# solution
answer = 0.05 * (1 + (8 - 1) * 5 / 10)  # base_lr x (1 + (k-1) step / warmup)

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of steps
# solution
answer = 38400 // (32 * 4)  # samples / (samples per rank x ranks)

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your number of micro-batches
# solution
import math

answer = math.floor((4 - 1) * (1 / 0.1 - 1)) + 1  # the smallest whole m with (n-1)/(m+n-1) < 0.1

# %%
QUIZ.check(4, answer)
