# %% [markdown]
# # Lab 00: your machine
#
# **What you'll do:** ask `doctor` what this machine has; read a GPU topology, this machine's or a
# published one; work out what a PCIe link can carry from its transfer rate, encoding and lanes; and
# set measured host<->device copies against that peak.
#
# **What you'll learn:** the parts between two GPUs (PCIe switches, host bridges, the link between
# CPU sockets, [NVLink](glossary.md#nvlink)), how to read `nvidia-smi topo -m`, and how close real copies come to a link's
# theoretical rate.
#
# **What you need:** nothing else. On a machine with an NVIDIA GPU the copies are measured here.
# Without one, the lab shows GPU results recorded on a GPU machine, labelled with that machine and
# date, when the project has some. It never shows GPU numbers that nobody measured.

# %%
import ringlab as rl
from ringlab.topology import pcie_bandwidth, published_topo
from ringlab.measure.doctor import report
from ringlab.lessons.lab00_your_machine import check_pcie
from ringlab.measure.tables import table
from ringlab.measure import published
from ringlab.measure.logs import my_logs_folder, read_folder
from ringlab.measure.recorded import gpu_bandwidth
from ringlab.predict.rings import best_gpus
from ringlab.viz import bandwidth_heatmap, host_device_figure, topology_figure, use_renderer

use_renderer()
print("\n".join(report()))

# %% [markdown]
# ## The topology
#
# Between two GPUs there may be one PCIe switch, several bridges, the CPU's host bridge, the link
# between two CPU sockets (QPI or UPI), or NVLink. `nvidia-smi topo -m` prints one code for each
# pair of devices, from closest to farthest:
#
# | code | the path between the two devices |
# |---|---|
# | `NV#` | a bonded set of # NVLinks |
# | `PIX` | at most one PCIe bridge (one switch) |
# | `PXB` | several PCIe bridges, without the CPU's host bridge |
# | `PHB` | PCIe and a host bridge (typically the CPU) |
# | `NODE` | PCIe and the link between host bridges within one [NUMA](glossary.md#numa) node |
# | `SYS` | PCIe and the link between NUMA nodes (QPI/UPI) |
#
# ringlab reads the same facts through NVML (`rl.topology.discover()`), or from `nvidia-smi topo -m`
# when NVML is missing. Here is what it finds on this machine:

# %%
topology, facts = rl.topology.discover()
print(topology if topology is not None else f"no GPU topology here: {facts['reason']}")
if topology is not None:
    topology_figure(topology).show()

# %% [markdown]
# A published example: `nvidia-smi topo -m` of a server with eight RTX 4090s and two network cards
# (the file's first line says where it was posted). Every GPU pair is `SYS`, the code for a path through
# PCIe and the link between NUMA nodes; its NUMA Affinity column says more (next).

# %%
text, _ = published_topo("rtx4090x8")
print(text.split("Legend")[0])

# %% [markdown]
# The same matrix as a ringlab topology: a tree of PCIe links with the sockets joined at the top.
# Every pair is `SYS`, so the codes alone cannot say which GPUs share a socket; the printout's
# NUMA Affinity column can (0 for GPUs 0-3, 1 for GPUs 4-7), and the picture groups them by it.
# The codes give the shape only, not the rates: `topo -m` does not print the PCIe generation a link
# runs at. So each GPU's link is drawn at PCIe 4.0 x16, the RTX 4090's own (NVIDIA's specification,
# as in the `rtx4090-8-p2p-on` and `-off` presets), and the link between the sockets at an assumed
# QPI's; neither was read from that machine. The legend names each kind of link.

# %%
topology_figure(rl.topology.published("rtx4090x8", pcie=pcie_bandwidth(4, 16)))

# %% [markdown]
# And a machine built around NVLink: the DGX-1 with V100s, from published figures, drawn as its
# published "hybrid cube-mesh": GPUs 0-3 and 4-7 are two fully linked quads, the front and back faces
# of a cube, and each GPU is also linked to the one straight behind it (i and i+4). Each GPU has six
# NVLinks; where a pair has two, the line is wider and marked ×2. Below the GPUs, in another colour,
# the PCIe switches and the two CPUs with the link between the sockets: the path a copy takes when
# two GPUs have no NVLink between them.

# %%
topology_figure(rl.topology.preset("dgx1-v100"))

# %% [markdown]
# ## What `topo -m` says, and what the GPUs measured
#
# A published pair of runs on one box with eight RTX 4090s on two AMD EPYC sockets: its
# `nvidia-smi topo -m` and its p2pBandwidthLatencyTest, peer access on (ringlab ships both, with their
# source; neither was measured here). Read the matrix first: every pair of GPUs is `SYS`, so the codes
# alone do not tell which GPUs to put together. The last column, the NUMA node each GPU hangs off,
# does.

# %%
box_topo = published.load("D02_chlc_rtx4090x8_topo")
print(box_topo.label)
print(published.topo_table(box_topo.name))

# %% [markdown]
# Now the copies between every pair, each against the PCIe 4.0 x16 peak of the GPUs' links (hover
# for the fraction). The box's `rtx4090-8-p2p-on` preset gives the peak.

# %%
box = published.load("B06_chlc_rtx4090x8_p2p_tinygraddriver")
box_peer = published.peer_matrix(box.name, "unidirectional_enabled")
box_peak = rl.topology.preset("rtx4090-8-p2p-on").peer_bandwidth_matrix()
bandwidth_heatmap(box_peer, peak=box_peak, title=f"peer copies, P2P on: {box.label}").show()

# %% [markdown]
# Which GPUs would you give a job of two ranks, or of four? A ring or a tree runs at the pace of its
# slowest link, so pick the GPUs whose slowest pair is fastest (`best_gpus` tries every choice).
# The cell compares that choice with the pairs that cross between the two sockets:

# %%
import numpy as np

numa = box_topo.data["numa"]
socket = [0 if node < 4 else 1 for node in numa]  # four NUMA nodes per socket on this two-socket box
same = [box_peer[a, b] for a in range(8) for b in range(8) if a != b and socket[a] == socket[b]]
across = [box_peer[a, b] for a in range(8) for b in range(8) if socket[a] != socket[b]]
for count in (2, 4):
    gpus, slowest = best_gpus(box_peer, count)
    print(f"{count} ranks: GPUs {gpus} (NUMA nodes {[numa[g] for g in gpus]}), slowest pair {slowest / 1e9:.1f} GB/s")
print(f"published: pairs on one socket {np.median(same) / 1e9:.1f} GB/s (median), pairs across the sockets "
      f"{np.median(across) / 1e9:.1f} GB/s: {np.median(same) / np.median(across):.2f}x")

# %% [markdown]
# ## Your own logs
#
# If you have run CUDA's p2pBandwidthLatencyTest on your own GPUs, put its output (or the JSON that
# `ringlab import LOG --json OUT` writes) in `my_logs/` at the top of the project, or in the folder
# named by `$RINGLAB_LOGS`: it is drawn here the same way, labelled as yours.

# %%
mine = read_folder(format="p2pBandwidthLatencyTest")
for log in mine:
    bandwidth_heatmap(np.array(log["matrices"]["unidirectional_enabled"]) * 1e9,
                      title=f"peer copies, P2P on: {log['label']}").show()
print(f"{len(mine)} p2pBandwidthLatencyTest log(s) of yours in {my_logs_folder()}")

# %% [markdown]
# ## Exercise 1: the PCIe arithmetic
#
# A PCIe link's throughput is its transfer rate (GT/s per lane) times the share of useful bits
# (8b/10b encoding for PCIe 1.x and 2.x, 128b/130b from 3.0 on) times the number of lanes. Write it
# in GB/s per direction.

# %% tags=["solution"]
def pcie_gbytes(gt_per_s, encoding, lanes):
    """GB/s per direction of a PCIe link."""
    # solution
    return gt_per_s * encoding * lanes / 8


# %%
pcie_gbytes = check_pcie(pcie_gbytes)  # yours when it is right, else the reference

# %% [markdown]
# ringlab's own `pcie_bandwidth(generation, lanes)` does the same from the generation (published
# spec figures: 2.5, 5, 8, 16 and 32 GT/s; 8b/10b up to 2.0, then 128b/130b):

# %%
table([{"link": f"PCIe {generation}.0 x16", "Bps": pcie_bandwidth(generation, 16)} for generation in (1, 2, 3, 4, 5)],
      {"link": "link", "per direction (GB/s)": "Bps"})

# %% [markdown]
# ## Measured against theoretical
#
# Copies between host memory and a GPU cross that GPU's PCIe link. With a GPU here, ringlab
# measures them now, with pinned (page-locked) and pageable host memory, one way and both ways at
# once, and divides each by the peak of the PCIe generation and width the driver reports. Without
# one, it shows recorded results and says where and when they were measured.

# %%
gpu = gpu_bandwidth()

# %%
if gpu is not None:
    host_device_figure(gpu, f"host<->device copies, {gpu['source']}").show()

# %% [markdown]
# ## A published measurement: eight H100s over [NVSwitch](glossary.md#nvswitch)
#
# What a real NVLink machine carries, from a published run of CUDA's p2pBandwidthLatencyTest on an
# 8x H100 HGX server (ringlab ships it with its source; it was not measured here). Each cell is one
# GPU copying to another with peer access on; hover for the link's theoretical peak (18 NVLink 4
# links, from the `hgx-h100-8` preset) and the fraction of it the copy reached. The diagonal, a copy
# inside one GPU, is left out. The cell after the figure prints the same comparison in numbers.

# %%
h100 = published.load("B03_kr_h100x8_hgx_p2p")
peer = published.peer_matrix(h100.name, "unidirectional_enabled")
peak = rl.topology.preset("hgx-h100-8").bandwidth_matrix()
bandwidth_heatmap(peer, peak=peak, title=f"peer copies, P2P on: {h100.label}").show()

# %%
off = ~np.eye(len(peer), dtype=bool)
print(f"published: {np.median(peer[off]) / 1e9:.0f} GB/s per pair (median), {np.median(peer[off] / peak[off]):.0%} of "
      f"the {peak[0, 1] / 1e9:.0f} GB/s NVLink peak; with P2P off the same copies went through the host at "
      f"{np.nanmedian(published.peer_matrix(h100.name, 'unidirectional_disabled')[off]) / 1e9:.0f} GB/s")

# %% [markdown]
# ## Summary
#
# - `doctor` lists what this machine has and what each lab will do with it.
# - `nvidia-smi topo -m` (or NVML) tells how GPUs connect: NVLink, or a path through PCIe switches,
#   host bridges and the link between sockets; the farther apart, the slower the copy.
# - Throughput = transfer rate x encoding efficiency x lanes: PCIe 3.0 x16 carries 15.754 GB/s each
#   way, and every later generation doubles it.
# - Real copies reach a share of that peak, and pinned host memory gets closer than pageable memory.
#
# ## Exercises
#
# 1. (Above) the PCIe arithmetic.
# 2. A GPU in a x16 slot that is wired as x8: what does the same arithmetic give for PCIe 4.0? Where
#    in NVML's facts (`facts["gpus"]`, each GPU's `pcie_current` against `pcie_max`), or in the copy
#    table's peak column, would you notice?

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
from ringlab.lessons.lab00_your_machine import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number, in GB/s
# solution
answer = 16 * (128 / 130) * 8 / 8  # GT/s per lane x useful share of the bits x lanes / 8 bits per byte

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number of cores
# solution
import re

from ringlab.measure.doctor import report

answer = int(re.search(r"ranks and cores: (\d+) cores", "\n".join(report())).group(1))

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of links
# solution
answer = 2  # the line from GPU 0 to GPU 3 is marked x2

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your fraction, between 0 and 1
# solution
import numpy as np
import ringlab as rl
from ringlab.measure import published

h100_peer = published.peer_matrix("B03_kr_h100x8_hgx_p2p", "unidirectional_enabled")
h100_peak = rl.topology.preset("hgx-h100-8").peer_bandwidth_matrix()
pairs = ~np.eye(len(h100_peer), dtype=bool)  # the diagonal is left out
answer = float(np.median(h100_peer[pairs] / h100_peak[pairs]))

# %%
QUIZ.check(4, answer)
