# %% [markdown]
# # Lab 05: scaling
#
# **What you'll do:** sweep message sizes on 2 and 4 MPI ranks, see where time stops being latency
# and starts being bandwidth, fit the alpha-beta model to your own measurements, then use the model
# to predict what nobody here can run: DGX-1, DGX-2, the 8-GPU NVSwitch boards, 1024 GPUs, and a
# cluster of 8 to 100,000 H100s.
#
# **What you'll learn:** how to read busbw curves, why [NCCL](glossary.md#nccl) switches from tree to ring as messages
# grow (and back to trees as clusters grow), and why the order of ranks in a ring matters on a real machine.
#
# **What you need:** labs 03 and 02. Measurements run on this machine's CPU (and on its GPU, when
# it has one; otherwise recorded GPU results are shown, labelled). The predictions use published
# figures for the machines (each preset's `source` names them) and assume latencies.

# %%
import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab05_scaling.predictions import (LARGEST_COLUMNS, against_published, check_ring_time,
                                                       describe_against, largest_rows,
                                                       describe_crossovers, describe_forced_ring, describe_hierarchy,
                                                       describe_machines, describe_with_ranks,
                                                       hierarchical_against_flat, machines_at, published_sweeps,
                                                       rings_on, trees_against_ring, with_ranks)
from ringlab.lessons.lab05_scaling.realcluster import here_or_recorded, table as cluster_table
from ringlab.lessons.lab05_scaling.simnodes import (describe_simulated, measure_here, predicted_on_simulated,
                                                    side_by_side, simulated_link_gbps)
from ringlab.lessons.lab05_scaling.sizes import EMULATED_SIZES, MACHINE, sizes_lesson
from ringlab.measure import published
from ringlab.measure.bench import in_machine_units
from ringlab.measure.latency import describe_alpha
from ringlab.measure.recorded import (describe_gpu_bench, describe_sharing, gpu_bench, print_sharing,
                                      sharing_comparison, sharing_rows)
from ringlab.measure.tables import table
from ringlab.mpi.devices import cores
from ringlab.predict.costmodel import crossover  # for exercise 2
from ringlab.predict.fitting import fit_rows
from ringlab.predict.rings import ring_report
from ringlab.viz import (StepThrough, busbw_plot, measured_vs_predicted, predicted_machines_plot, time_vs_ranks,
                         tree_ring_plot, use_renderer, versus_plot)

use_renderer()  # plotly figures show in JupyterLab and in exported HTML
sizes = [1 << k for k in range(10, 23, 2)]  # 1 KiB .. 4 MiB

# %% [markdown]
# ## Measure: sizes and ranks
#
# The same sweep on 2 ranks, then 4: ringlab's ring against MPI's own Allreduce, every result
# checked; one raw 8-byte MPI message from rank 0 to rank 1, to set the fitted latency against; and
# the ring again on an emulated machine beside this one (`MACHINE` of the lab's room: links of
# 200 MB/s and 1 ms a message, `rl.emulate`), where links and not this machine's cores set the pace,
# from 4 KiB to 64 MiB so that its largest messages are long against its latency. Its times are
# virtual (lab 02): each message takes its links' time on the ranks' clocks, and each rank's additions
# count as the CPU time they took (`compute="cpu"`), a few percent of a step on these links. Nobody
# sleeps, so the emulated sweep takes this machine only as long as its own work.

# %%
MEASURE = ("from mpi4py import MPI\nfrom ringlab.measure.bandwidth import pingpong\n"
           "from ringlab.measure.bench import run\n"
           f"result = run('allreduce', ['ring', 'mpi'], {sizes}, iters=5, warmup=1)\n"
           f"emulated = run('allreduce', ['ring'], {EMULATED_SIZES}, iters=5, warmup=1, emulate={MACHINE!r})\n"
           "raw = pingpong(MPI.COMM_WORLD, [8])")  # rows on rank 0 only
rows, raw, emulated = {}, {}, {}
for n in (2, 4):
    with MPICluster(n) as ranks:
        ranks.view.execute(MEASURE, block=True)
        rows[n], raw[n] = ranks.pull_rank0("result")["rows"], ranks.pull_rank0("raw")[0]["one_way_s"]
        emulated[n] = in_machine_units(ranks.pull_rank0("emulated"))  # the emulated machine's (virtual) times
busbw_plot([dict(r, algorithm=f"{r['algorithm']} on {n} ranks, this machine") for n in rows for r in rows[n]]
           + [dict(r, algorithm=f"ring on {n} ranks, emulated {MACHINE.split('@')[0]} (virtual time)") for n in emulated
              for r in emulated[n]],
           title="measured here: allreduce bus bandwidth, on this machine and on emulated links").show()

# %% [markdown]
# On a network, small messages are latency-bound: the time barely changes with size, so busbw
# climbs with size; large messages are bandwidth-bound and busbw flattens. Whether that shows here,
# and on the emulated machine, the sentences below say from the measurements. Then fit alpha
# (latency) and B (bandwidth) to the 4-rank ring measurements of this machine, and set alpha beside
# the raw message:

# %%
print(sizes_lesson(rows[4], emulated[4], 4))
fitted = fit_rows(rows[4], "ring", 4)
print(fitted)
print(describe_alpha(fitted, raw[4], "ring allreduce", nranks=4, cores=cores()))
measured_vs_predicted(fitted.sizes, fitted.measured, fitted.predicted, label="ring, 4 ranks",
                      title="measured here against the fitted alpha-beta model").show()

# %% [markdown]
# Lab 02 fitted an alpha too, to a chain broadcast; the two need not agree, and neither is lab 01's
# raw message. Each is what one step of its own collective costs, fitted to its own measurements: a
# ring step has every rank send, receive and add at once, a chain step only passes a segment on; the
# chain's pieces were 64 KiB to 4 MiB (4 MiB in 1 to 64 segments), the ring's here 256 B to 1 MiB
# (1 KiB to 4 MiB in 4 chunks); and the chain's fit reads alpha from how time grows with the number
# of segments at one size, the ring's from how it levels off at small sizes.

# %% [markdown]
# ## On GPUs: ringlab against MPI and NCCL
#
# The same comparison on GPU buffers: ringlab's ring, MPI's own collective, and NCCL (and
# torch.distributed) when every rank has a GPU of its own. Measured here when there is a GPU;
# otherwise the recorded sweep that best stands for a GPU machine (direct rather than staged, [MPS](glossary.md#mps) when
# ranks shared a GPU, the most ranks), labelled with its machine and date.

# %%
gpu_sweep = gpu_bench("allreduce")
if gpu_sweep is not None:
    busbw_plot(gpu_sweep.data["rows"], title=f"allreduce bus bandwidth on GPUs, {gpu_sweep.label}").show()
    print(describe_gpu_bench(gpu_sweep.data))

# %% [markdown]
# ## Ranks that share one GPU: taking turns against MPS
#
# A laptop or a cloud instance often has one GPU, and every rank of a job then uses it. Without
# NVIDIA's Multi-Process Service (MPS), CUDA gives the processes the GPU in turns, in time slices:
# a rank whose next step waits for a peer's kernel also waits for that peer's turn. Under MPS
# (`nvidia-cuda-mps-control -d` before the job starts) their kernels share the GPU at once. The
# bytes never cross a link either way: both ranks' buffers sit in the same GPU's memory. When a
# machine recorded the same sweep with and without MPS, the figure draws both and the table gives,
# per size, how much faster the ring was under MPS on that machine.

# %%
pair = sharing_comparison("allreduce")
if pair is None:
    print("No recorded pair of GPU sweeps with and without MPS in results/: nothing to compare.")
else:
    busbw_plot(sharing_rows(pair), title=f"{pair['ranks']} ranks sharing {pair['machine']}: time slices against MPS "
               f"(recorded {pair['with_mps'].date[:10]})").show()
    print(describe_sharing(print_sharing(pair)))

# %% [markdown]
# ## Published sweeps: what NCCL reaches on real machines
#
# Allreduce sweeps as published for real machines (ringlab ships the numbers with their sources; none
# was measured here): PCIe boxes, 8-GPU NVSwitch servers (A100, H100, H200, B200), AMD MI300X boxes
# under RCCL, a GB200 NVL72 rack, and clusters over InfiniBand and Ethernet. Most are nccl-tests'
# all_reduce_perf; the label says where another tool measured (AMD's rccl-tests, or PyTorch's
# all_reduce_bench.py, whose algbw is a mean over calls). Each line is one sweep, named by its
# machine; the printout after the figure gives each sweep's source.

# %%
busbw_plot(published.busbw_rows("allreduce"), title="published measurements: allreduce bus bandwidth").show()
for sweep in published.sweeps("allreduce"):
    print(f"{sweep['name'][:3]}  {published.load(sweep['name']).label}")

# %% [markdown]
# ## The cost model against those sweeps
#
# Every published sweep that one of ringlab's presets describes, drawn against the cost model's
# prediction for that preset (dashed, same colour): the fastest of the ring and the closed forms the
# model has for that machine, with NCCL's protocol costs (LL, [LL128](glossary.md#ll-ll128-simple), Simple). Markers are published
# measurements, lines are predictions; nothing here was measured on this machine. The printout gives
# each sweep's predicted over measured busbw at its largest message.

# %%
against = against_published("allreduce")  # {sweep: rows}, allreduce sweeps only
versus_plot(against, title="allreduce: published busbw (markers) against the cost model's prediction (lines)").show()
table(largest_rows(against), LARGEST_COLUMNS)  # each sweep at its largest message
print(describe_against(against))

# %% [markdown]
# Across nodes the model follows NCCL: one ring channel per network card (a channel starts at card c
# mod the cards), trees and [NVLS](glossary.md#nvls) where NCCL's tuner would pick them. A ratio far from one is then a
# question about the machine, not only about the model, which the section "Is my number normal?" takes up.
#
# ## Past the ring's ceiling: reduction inside the switch
#
# A ring's busbw cannot pass the rate of a GPU's port, yet the published H100 and H200 sweeps do. On
# these machines NCCL uses NVLS: the NVSwitch itself adds the shards, so each GPU moves about K(n+1)/n
# bytes each way instead of the ring's 2K(n-1)/n. `ringlab.predict.nvls` writes that as a labelled
# closed form (no ringlab schedule can express a switch that adds). The numbers, computed:

# %%
from ringlab.predict.nvls import nvls_busbw, port_rate

hgx = rl.topology.preset("hgx-h100-8")
top = max(published.load("A05_azure_nd_h100_v5_8xh100_allreduce_busbw").data["rows"], key=lambda r: r["bytes"])
print(f"ring ceiling on {hgx.name}: the port rate, {port_rate(hgx) / 1e9:.1f} GB/s of busbw")
closed = nvls_busbw(top["bytes"], hgx)  # this closed form; the table above priced the same call with NCCL's tuner
tuned = next(r for r in largest_rows(against) if r["sweep"].startswith("A05:") and r["bytes"] == top["bytes"])
print(f"NVLS, predicted at {top['bytes'] / 2**20:.0f} MiB: {closed / 1e9:.1f} GB/s of busbw by this closed form, "
      f"{tuned['predicted_Bps'] / 1e9:.1f} by NCCL's tuning model (the table's A05 row, {tuned['predicted_by']}): "
      f"two models of one call, {abs(closed / tuned['predicted_Bps'] - 1):.1%} apart")
measured = top["busbw_Bps"] or top["inplace_busbw_Bps"]  # this source printed only the in-place column
print(f"published (8x H100, nccl-tests) at {top['bytes'] / 2**20:.0f} MiB: {measured / 1e9:.1f} GB/s of busbw, "
      f"{measured / port_rate(hgx):.2f}x the ring's ceiling")

# %% [markdown]
# ## Your own nccl-tests logs
#
# Save `all_reduce_perf` output from your machines into `my_logs/` at the top of the project (or the
# folder named by `$RINGLAB_LOGS`): this cell draws each beside the published sweeps above.

# %%
from ringlab.measure.logs import my_logs_folder, read_folder

mine = [log for log in read_folder(format="nccl-tests") if log.get("collective") == "allreduce"]
if mine:
    busbw_plot([dict(r, algorithm=log["label"]) for log in mine for r in log["rows"] if r.get("busbw_Bps")]
               + published.busbw_rows("allreduce"), title="your nccl-tests logs and the published sweeps").show()
print(f"{len(mine)} nccl-tests allreduce log(s) in {my_logs_folder()}")

# %% [markdown]
# ## Exercise 1: the ring's time
#
# On a network where every message costs alpha plus bytes/B, write the time of a ring allreduce of
# K bytes over n ranks (leave out the time to add).

# %% tags=["solution"]
def ring_time(n, K, alpha, B):
    """Seconds for a ring allreduce: 2(n-1) steps of one K/n chunk each."""
    # solution
    return 2 * (n - 1) * (alpha + K / (n * B))


# %%
ring_time = check_ring_time(ring_time)  # yours when it is right, else the reference

# %% [markdown]
# ## Predict: what nobody here can run
#
# The same model on topologies built from published figures (DGX-1, DGX-2, and the 8-GPU NVSwitch
# boards of the A100 and H100), with 64 MiB per GPU. The bars are predictions, not measurements;
# where ringlab's data set has a published nccl-tests sweep of the machine at that size, a diamond
# shows what NCCL reached there (with its own choice of algorithm). The hover names each bar's
# bottleneck.

# %%
MACHINES = ["dgx1-v100", "dgx2-nvswitch", "hgx-a100-8", "hgx-h100-8"]
predicted, found = machines_at(MACHINES, 64 << 20, ["allreduce.ring", "allreduce.tree"])
predicted_machines_plot(predicted, found, title="predicted (cost model): allreduce of 64 MiB per GPU; "
                        "diamonds: published nccl-tests busbw (ringlab's data set)").show()
print(describe_machines(predicted, found))

# %% [markdown]
# And up to 1024 GPUs with 100 Gbit/s links (12.5 GB/s each way) and an assumed 5 µs per message:

# %%
ranks_counts = [2 ** k for k in range(1, 11)]  # 2 .. 1024
scaling = with_ranks(["allreduce.ring", "allreduce.tree", "allreduce.dbtree", "allreduce.rhd"], 64 << 20, ranks_counts,
                     12.5e9, 5e-6)
time_vs_ranks(ranks_counts, scaling, unit="ms", title="predicted (cost model): allreduce of 64 MiB per rank, "
              "12.5 GB/s links, 5 µs a message (assumed)").show()
print(describe_with_ranks(scaling, ranks_counts, 64 << 20, 12.5e9, 5e-6))
print(f"your formula for the ring at 1024 ranks: {ring_time(1024, 64 << 20, 5e-6, 12.5e9) * 1e3:.2f} ms")

# %% [markdown]
# ## Tree against ring
#
# Lab 02's binomial tree sends the whole buffer on every one of its 2·log2(n) steps. That is not
# NCCL's tree. NCCL builds a **double binary tree**: two binary trees over the same ranks, each
# carrying half of the buffer, arranged so that a rank that forwards in one tree is a leaf in the
# other, and pipelined in small pieces, so data flows up and down the tree at once. Every rank then
# moves about 2K bytes in all, like the ring, but in about 2·log2(n) + S steps instead of 2(n-1).
# `allreduce.dbtree` is that algorithm (NCCL's `ncclGetBtree` and `ncclGetDtree`), with `segments=S`;
# step through it. The ranks are drawn as the first tree (rank 0 its root, each rank a row below its
# parent); the second tree is the first mirrored, so its arrows are the ones that run against the drawing:

# %%
dbtree = rl.build("allreduce.dbtree", 6, segments=2)
print(f"{dbtree}: bytes each rank sends, 1 MiB buffer: {rl.traffic(dbtree, 1 << 20)['sent']}")
StepThrough(dbtree)

# %% [markdown]
# The tree wins while latency dominates, so NCCL picks its algorithm by message size. Where is the
# crossover? Each panel is one machine: predicted busbw of the binomial tree, the double binary tree
# (at its best segment count for each size, as NCCL's fixed-size pipelining does) and the ring over
# message size, the crossover marked, and the machine's published nccl-tests sweeps where ringlab's
# data set has them (NCCL's own choice, which on the H100 boxes is NVLS, reduction in the switch).

# %%
panels = {p: trees_against_ring(p, [1 << k for k in range(10, 31)]) for p in MACHINES}  # 1 KiB .. 1 GiB
tree_ring_plot(panels, title="predicted (cost model): binomial tree (dotted), double binary tree (dashed), ring "
               "(solid); diamonds: published nccl-tests busbw").show()
print(describe_crossovers(panels))

# %% [markdown]
# Published, across two nodes: the same 16 H100s measured with NCCL left to choose (it mixes trees,
# NVLS and rings by size) and with `NCCL_ALGO=Ring` forced (sweeps A02 and A03 of ringlab's data set,
# from nccl-tests issue #290). Where the two differ, NCCL's own choice was not the ring:

# %%
print(describe_forced_ring(published_sweeps("ib-2x8-h100", algorithm=True)))

# %% [markdown]
# ## Several rings at once
#
# One ring uses one link out of each GPU. A DGX-1's GPUs have four to six NVLinks each, so NCCL runs
# several rings (its *channels*), each over part of the buffer, in orders its search picks so that
# they use different links; the same ring backwards uses each link's other direction.
# `allreduce.rings` with `rings=k` and `orders=` does that; `ringlab.predict.rings.ring_orders` finds
# the orders on a topology. Predicted for 64 MiB on the DGX-1:

# %%
table(rings_on("dgx1-v100", 64 << 20), {"rings": "rings", "orders": "orders", "predicted (ms)": ("seconds", ".2f"),
                                         "predicted busbw (GB/s)": "busbw_Bps"})

# %% [markdown]
# ## Across nodes: hierarchy
#
# Between nodes a GPU's network card is several times slower than its NVLinks. A flat ring over 16
# GPUs of two nodes crosses the network at the node boundaries only; a hierarchical allreduce
# (`allreduce.hierarchical`, `local=8`) reduce-scatters inside each node over NVLink, allreduces each
# shard across the nodes between the GPUs that hold it (every GPU through its own card), and
# allgathers inside the node again. Predicted on the 2 x 8 H100 preset, with the published sweeps of
# that machine beside them:

# %%
hierarchy = hierarchical_against_flat("ib-2x8-h100", [1 << k for k in range(16, 31)], local=8)
busbw_plot([dict(r, algorithm=label) for label, rows in hierarchy.items() for r in rows],
           title="2 nodes x 8 H100: flat ring and hierarchical allreduce predicted (cost model); "
                 "published nccl-tests sweeps").show()
print(describe_hierarchy(hierarchy, 1 << 28, machine="ib-2x8-h100"))

# %% [markdown]
# ### Two nodes on this machine
#
# You have one machine, but ringlab can treat groups of ranks as nodes and slow the link between
# them: `RINGLAB_RANKS_PER_NODE=2` and `RINGLAB_NODE_LINK_GBPS=B` in a job's environment, or
# `ringlab.mpi.nodes.simulated_nodes(2, B)` in code. Below, one MPI job of 4 ranks (`measure_here`:
# `measure_on_simulated_nodes` on every rank) becomes 2 simulated nodes of 2.
# That is the emulated machine `nodes:2:B:0` (lab 02's virtual time): between the nodes each message
# takes its bytes' time on its rank's port of B GB/s, shared by the messages of a step that cross it,
# with B set 9 times below the bandwidth you fitted above (or, where the fit found none, below the ring's measured
# busbw at its largest size), the ratio of an H100's NVLink to its 400 Gbit/s network card (public figures); inside a node a message costs nothing on the virtual
# clocks but this CPU's work of adding it, counted as the CPU time it took, as if the node's own links
# were far faster still. These are **simulated nodes**: real code and data on a modelled link, not a
# network. Each result is checked against MPI's `Allreduce` before it is timed; the cost model
# predicts the same emulated machine, without this CPU's additions.

# %%
per_node = 2
link_gbps, chosen = simulated_link_gbps(fitted, nranks=4)
print(chosen)
node_sizes = [1 << k for k in range(16, 23, 2)]  # 64 KiB .. 4 MiB per rank
on_nodes = measure_here(node_sizes, per_node, link_gbps, nranks=4, repeats=3)  # one MPI job of 4 ranks
model = predicted_on_simulated(node_sizes, 4, per_node, link_gbps * 1e9)  # the cost model on the same links
busbw_plot([dict(r, algorithm=f"{r['algorithm']}: measured here") for r in on_nodes] +
           [dict(r, algorithm=f"{r['algorithm']}: predicted") for r in model],
           title=f"4 ranks as 2 simulated nodes, link slowed to {link_gbps:.2g} GB/s: measured here (virtual time) and "
                 "predicted").show()
print(describe_simulated(on_nodes, model, link_gbps, 4, per_node))

# %% [markdown]
# How much faster the hierarchy is than the flat ring, here and on the real two-node machine. The
# published row is the nearest published comparison, not the same experiment: NCCL's own choice on
# that machine (its NVLS and tree family, which also keeps most bytes inside the nodes) set against
# the same machine with NCCL's ring forced, which is not the one flat ring of the rows above: it runs
# a ring channel through every network card. That machine also ran at about a quarter of its
# hardware (the section "Is my number normal?" below).

# %%
table(side_by_side(on_nodes, model, link_gbps, 4, per_node, hierarchy),
      {"setup": "setup", "source": "source", "size per rank (MiB)": ("bytes", ".2f"),
       "hierarchy (published: NCCL's choice) over the ring (x)": ("speedup", ".2f")})

# %% [markdown]
# ### Real nodes on this machine: namespaces and shaped links
#
# The simulated nodes above share one network stack. `ringlab cluster up` builds real ones (as root,
# on Linux): every node is a network namespace with its own host name, joined to the others by a
# virtual cable whose rate the kernel shapes (`tc`'s token bucket), and MPI between nodes goes over
# TCP through those cables, so its bytes really cross a 1 Gbit/s link. In-node traffic is shared
# memory, as before. The same commands run on a real Slurm cluster (see the README). The link is a
# **kernel-shaped link on one machine, not a real network**: what it shows is the rate, not a switch.
#
# Below, 2 nodes x 2 ranks: first the rate between nodes against the shaped rate (TCP over Ethernet
# can carry 1448 of every 1514 bytes the shaper lets through), then the flat ring against the
# hierarchy, beside the cost model built from the declared 1 Gbit/s and the in-node bandwidth measured
# in the same run. Without root, you see this project's recorded run, labelled so.

# %%
on_cluster, where = here_or_recorded(nodes=2, per_node=2, link="1gbit")
print(where)
print("\n".join(cluster_table(on_cluster)))

# %% [markdown]
# ## The order of the ring
#
# On a DGX-1 not every pair of GPUs has an NVLink, and some pairs have two. The plain order
# 0, 1, ..., 7 sends some ring edges over slower or shared paths:

# %%
table([{"topology": p, **ring_report(rl.topology.preset(p))} for p in ("dgx1-p100", "dgx1-v100", "dual-socket-qpi-8")],
      {"topology": "topology", "best ring": "best_order", "predicted: plain order slower by (x)": "slowdown_of_plain"})

# %% [markdown]
# ## Summary
#
# - busbw climbs with size while latency dominates, then flattens at what the links carry.
# - Two numbers, alpha and B, fitted to your own runs, predict other sizes and algorithms.
# - A fitted alpha is what one step of that collective costs, a raw message and all that goes with
#   it; the printout above says how much of it was the message itself.
# - A ring costs 2(n-1)(alpha + K/(nB)): the bandwidth term hardly grows with n, the latency term
#   does, which is why NCCL's double binary tree (two pipelined binary trees, about 2K per rank in
#   2 log2 n + S steps) takes over for small and middle sizes.
# - NCCL runs several rings at once (channels), in orders that use different links; across nodes, a
#   hierarchy keeps most bytes on NVLink and sends each shard through its own network card.
# - Nodes of namespaces joined by kernel-shaped links (`ringlab cluster up`) run the same commands
#   as a real cluster. In this project's recorded run the rate between nodes was 93 to 95% of the
#   shaped rate, and the hierarchy beat the flat ring at every size, as the model built from the
#   declared rate predicted.
# - On machines with uneven links, the ring's order matters as much as the algorithm.
# - At datacenter scale the ring's 2(n-1) latencies dominate: on nodes of 8 H100 a 1 GiB ring is
#   latency-bound from a few thousand GPUs (n = K/(alpha B)), and trees, about 2 log2 n steps, take over.
#
# ## Exercises
#
# 1. (Above) the ring's time.
# 2. With your fitted alpha and B, from what size does `allreduce.ring` beat `allreduce.rhd` on 6 ranks?
#    Use `crossover("allreduce.rhd", "allreduce.ring", fitted.topology(6))` (it returns the smallest size
#    at which the second is predicted faster, `None` if never). Why is the answer `None` on 4 ranks?

# %% [markdown]
# ## Is my number normal? Two nodes against their [rails](glossary.md#rail)
#
# A published sweep is one machine measured on one day, healthy or not. `ringlab explain` (the
# function `ringlab.measure.explain.explain`) sets every size of an nccl-tests sweep beside what
# NCCL's own model predicts for healthy hardware of that kind: NCCL's tuner constants, one ring
# channel per network card across nodes, its trees and NVLS, and the machine built from public
# figures (`rl.topology.cluster("h100", nodes=2)`). Where a sweep is well below, it predicts the same
# machine with one thing wrong (one NIC instead of eight, the NICs at a quarter of their rate, NVLS
# or P2P off) and names the one the measurement matches.
#
# Below: the two published 2-node H100 sweeps (A02, NCCL's default; A03, the ring forced) beside a
# healthy 8-GPU H100 board (A01). "measured" is the published figure, "expected" a prediction.

# %%
from ringlab.measure import published
from ringlab.measure.explain import describe, explain, plot_rows
from ringlab.viz import busbw_plot

explained = {}
for name in ("A01_nccltests290_h100x8_hgx_1node_allreduce", "A02_nccltests290_h100_2x8_ib_ndr_allreduce_default",
             "A03_nccltests290_h100_2x8_ib_ndr_allreduce_ring"):
    explained[name[:3]] = explain(published.load(name).data, name=name)
    print("\n".join(describe(explained[name[:3]], f"{name[:3]}, {published.load(name).label}")), "\n")

# %%
busbw_plot([row for label, answer in explained.items() for row in plot_rows(answer, label)],
           title="published busbw (measured) against NCCL's model of the healthy machine and of the cause "
                 "it matches (predicted)").show()

# %% [markdown]
# The board reaches what its NVLink and NVLS allow. The two nodes reach about a quarter of what
# eight 400G rails allow, and the machine they match is the same cluster with every rail at a
# quarter of its rate: 8 x 12 GB/s, where NCCL's model rates a healthy ConnectX-7 behind PCIe 5.0 at 48. That is
# the classic symptom of GPUDirect RDMA not in use (the data staged through host memory), PCIe ACS or
# the IOMMU in the path, or NICs on the far NUMA node: `nvidia-smi topo -m`, `NCCL_DEBUG=INFO`
# (look for `GDRDMA` on the NET lines) and the ACS settings of the PCIe switches are where to look.
# One NIC's worth instead of eight (rails not used) would be slower still, and it does not match.
#
# Your own log: `ringlab explain all_reduce_perf.log`, which reads the machine from the log's GPUs
# and hosts, or give it: `ringlab explain LOG --machine h100:2x8` (`--json OUT` keeps the rows).

# %% [markdown]
# ## Datacenter scale: from one node to 100,000 GPUs
#
# Llama 3 was trained on 16,384 H100s, and clusters of 100,000 GPUs are being built. Nobody runs one
# here, but the cost model can: a registered algorithm says its steps compactly (a ring over n ranks
# is 4n runs of "rank j sends chunk (j-i) mod n to rank j+1", not its 2n(n-1) transfers), and the
# model prices those runs on the links they cross, so 100,000 GPUs take a second or two.
# `rl.predict(..., method="explicit")` walks the transfers one by one instead: the same numbers (to
# 1e-9, tested), where it fits in memory and time.
#
# The machine is the published design of DGX H100 SuperPOD-style clusters: nodes of 8 H100 on
# NVSwitch, one 400 Gbit/s InfiniBand NIC per GPU on PCIe 5.0, one non-blocking fabric
# (`rl.topology.cluster("h100", nodes)`; latencies assumed, 1-2 µs a hop). A 1 GiB allreduce from 8
# to 100,000 GPUs: the ring, NCCL's double binary tree (at its best segment count) and the
# hierarchical allreduce (8 a node), all predicted. The dotted line is where the ring's latency part
# passes the time it spends moving bytes, found by bisection on the predictions:

# %%
from ringlab.lessons.lab05_scaling.datacenter import (at_scale, describe_nccl, describe_scale, nccl_at_scale,
                                                      ring_turning_point)
from ringlab.viz import scale_plot

scale = at_scale()  # 8, 64, 512, 4096, 16384 and 100,000 GPUs
turning = ring_turning_point()
scale_plot(scale, turning, title="predicted (cost model): 1 GiB allreduce on nodes of 8 H100, a 400G NIC per "
           "GPU").show()
print(describe_scale(scale, turning))

# %% [markdown]
# The ring moves the fewest bytes there are, 2(n-1)/n K per GPU, but in 2(n-1) steps, each paying
# the latency of its slowest message (here one that crosses PCIe, the fabric and PCIe again). Its
# bandwidth part stops growing, its latency part grows with n, and past a few thousand GPUs even a
# 1 GiB buffer is latency-bound. The hierarchy moves most bytes over NVLink and every NIC at once,
# but its ring across nodes still takes 2(nodes-1) steps. A tree needs about 2 log2 n steps however
# large the cluster: that is why NCCL switches to trees at scale. NCCL's own model (its tuner's
# constants, `rl.predict_nccl`) on the same machines: its pick, and the ring and the tree forced.
# Where a node has one GPU, all-gather and reduce-scatter have a log-depth algorithm of their own,
# [PAT](glossary.md#pat) (NCCL 2.23), and the model picks it once the cluster is large:

# %%
print(describe_nccl(nccl_at_scale()))

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
from ringlab.lessons.lab05_scaling.quiz import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number, in ms
# solution
answer = 2 * (8 - 1) * (5e-6 + (64 << 20) / (8 * 12.5e9)) * 1e3  # 2(n-1)(alpha + K/(nB))

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your fraction, between 0 and 1
# solution
latency = 2 * (1024 - 1) * 5e-6
answer = latency / (latency + 2 * (1024 - 1) * (64 << 20) / (1024 * 12.5e9))

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # "ring", "binomial tree" or "double binary tree"
# solution
answer = "binomial tree"  # the highest line at the left edge of the DGX-1 panel

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your number of times
# solution
answer = 2 * (8 - 1) / (8 + 1)  # the ring's 2K(n-1)/n over NVLS's K(n+1)/n

# %%
QUIZ.check(4, answer)

# %%
QUIZ.ask(5)

# %% tags=["solution"]
answer = None  # your number of GPUs
# solution
answer = (1 << 30) / (7e-6 * 48e9)  # 2(n-1) alpha = 2(n-1) K/(nB) where n = K/(alpha B)

# %%
QUIZ.check(5, answer)
