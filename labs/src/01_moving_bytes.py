# %% [markdown]
# # Lab 01: moving bytes
#
# **What you'll do:** set the published bandwidths of PCIe and NVLink side by side; measure what
# two MPI ranks on this machine move, from 8 bytes to 64 MiB; fit the two numbers that describe a
# link (latency and bandwidth); measure what staging a message through an extra buffer costs; and,
# with a GPU, pinned against pageable host memory and peer-to-peer copies.
#
# **What you'll learn:** latency against bandwidth; why NVLink-connected GPUs run collectives an
# order of magnitude faster than PCIe ones; what host-staged transfers cost compared with direct ones.
#
# **What you need:** lab 00. Two MPI ranks run on this machine's CPU. GPU figures are measured when
# there is a GPU; otherwise recorded ones are shown, labelled with their machine and date.

# %%
import numpy as np

import ringlab as rl
from ringlab.lab.cluster import MPICluster
from ringlab.lessons.lab01_moving_bytes import check_message_time, check_staged_time
from ringlab.measure import published
from ringlab.measure.copies import (copy_against_mpi, describe_best_pingpong, describe_fit, describe_staged,
                                    fit_direct, format_rate, last_level_cache, staged_rows)
from ringlab.measure.recorded import gpu_bandwidth, peer_matrices
from ringlab.measure.tables import table
from ringlab.measure.units import format_bytes
from ringlab.topology.presets import PUBLISHED_LINKS
from ringlab.viz import (bandwidth_heatmap, fraction_bars, host_device_figure, links_figure, measured_vs_predicted,
                         use_renderer)

use_renderer();  # plotly figures show in JupyterLab and in exported HTML

# %% [markdown]
# ## PCIe against NVLink: the published figures
#
# One direction of one GPU's connection, from the specifications (PCIe arithmetic, NVLink link
# counts) and from published measurements of real machines that ringlab ships: host-to-GPU copies
# (bandwidthTest, nvbandwidth) and GPU-to-GPU copies with peer access off and on
# (p2pBandwidthLatencyTest). None of these bars was measured here; hover over one to see where it
# comes from. The axis is logarithmic: NVLink 2.0 on a V100 is about ten times PCIe 3.0 x16.

# %%
links_figure(PUBLISHED_LINKS, title="published figures: bandwidth per direction")

# %% [markdown]
# ## Latency against bandwidth, measured here
#
# Two MPI ranks on this machine, as [ipyparallel](glossary.md#ipyparallel) engines: a cell that starts with
# [`%%px`](glossary.md#px) runs on both ranks at once, not in this notebook, and `ranks.pull_rank0(...)`
# brings rank 0's results back here (lab 03 says more). Rank 0 sends a message to rank 1, which
# sends it back; half the round trip is the one-way time. The same run times one core copying
# memory (`np.copyto`: every byte read once and written once) at each of the same sizes, to set MPI
# against. A second pass sends every message through an extra buffer on each side (a copy before the
# send, one after the receive), the way a GPU message is staged through host memory when MPI cannot
# read GPU memory.

# %%
ranks = MPICluster(2).start()

# %%
# %%px
from mpi4py import MPI
from ringlab.measure.copies import copy_rows
from ringlab.measure.bandwidth import pingpong

sizes = [8, 64, 1024, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
comm = MPI.COMM_WORLD
copies = copy_rows(sizes) if comm.Get_rank() == 0 else None  # one core's np.copyto at each size
direct = pingpong(comm, sizes)
staged = pingpong(comm, sizes, staged=True)

# %%
copies, direct, staged = ranks.pull_rank0("copies", "direct", "staged")
ranks.stop()
copy_rate, copy_nbytes = copies[-1]["copy_Bps"], copies[-1]["bytes"]  # the largest, as `ringlab bandwidth` times it
print(f"measured here: memory copy rate {format_rate(copy_rate)} (one core, {format_bytes(copy_nbytes)})")
table([{**d, "staged_s": s["one_way_s"], "staged_Bps": s["bandwidth_Bps"]} for d, s in zip(direct, staged)],
      {"size (B)": "bytes", "direct (us)": "one_way_s", "direct (GB/s)": "bandwidth_Bps",
       "staged (us)": "staged_s", "staged (GB/s)": "staged_Bps"})

# %% [markdown]
# Small messages all take about the same time: that floor is the **latency**. Large ones take time
# in proportion to their size: the slope is one over the **bandwidth**.
#
# ## MPI against a memory copy
#
# Between two processes of one machine no wire is involved: a CPU core copies the message from one
# process's memory to the other's. MPICH (the mpich wheel these labs use) does it with a single copy
# where the kernel lets it: for a message of at least `MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD` bytes (8 KiB),
# the receiving process reads the sender's buffer directly through the kernel ("cross-memory attach",
# the system call `process_vm_readv`; `strace -f -e trace=process_vm_readv` on a ping-pong shows the
# calls). One copy per message is the work of one `np.copyto`, so a one-core copy looks like a bound
# for MPI. But a copy's rate depends on its size: a copy whose source and destination fit in the CPU's
# caches need not wait for main memory. So the cell below sets MPI's rate at each size against a copy
# of the same size, and says what the numbers show.

# %%
table(copy_against_mpi(copies, direct),
      {"size (B)": "bytes", "copy alone (GB/s)": "copy_Bps", "MPI (GB/s)": "mpi_Bps", "MPI / copy": "ratio"})
print(describe_best_pingpong(copies, direct, cache=last_level_cache()))

# %% [markdown]
# ## Exercise 1: the [alpha-beta](glossary.md#alpha-beta) model
#
# A message of K bytes over a link with latency alpha (seconds) and bandwidth B (bytes per second)
# takes alpha + K/B. Write it.

# %% tags=["solution"]
def message_time(nbytes, alpha, bandwidth):
    """Seconds for one message of ``nbytes`` bytes."""
    # solution
    return alpha + nbytes / bandwidth


# %%
message_time = check_message_time(message_time)  # yours when it is right, else the reference

# %% [markdown]
# Now fit alpha and B to the measured rows (least squares on relative error) and draw the model
# through the measurements:

# %%
fitted = fit_direct(direct)
alpha, bandwidth = fitted.alpha, fitted.bandwidth  # bandwidth is inf where the fit finds no cost per byte
print(describe_fit(fitted))
measured_vs_predicted([r["bytes"] for r in direct], [r["one_way_s"] for r in direct],
                      [message_time(r["bytes"], alpha, bandwidth) for r in direct], label="(alpha-beta fit)",
                      title="MPI ping-pong: measured here, and predicted by the fitted alpha + K/B")

# %% [markdown]
# This alpha is the start-up of one raw MPI message between two processes. Labs 02 and 05 fit alphas
# to ringlab's own collectives: each step of those starts more than one message and also pays for
# Python, the step's bookkeeping and waiting for the slowest rank, so their alphas come out larger.
# They are the cost of a collective's step, not of a message.

# %% [markdown]
# ## Exercise 2: what staging costs
#
# A staged message is copied into the staging buffer, sent, and copied out on the other side, one
# after the other. Write its time from alpha, the link's bandwidth and the copy rate; the plot then
# sets your formula, fed with the alpha, B and copy rate measured above, against the staged
# measurements.

# %% tags=["solution"]
def staged_time(nbytes, alpha, link, copy):
    """Seconds for one message staged through a buffer on each side."""
    # solution
    return alpha + nbytes / link + 2 * nbytes / copy


# %%
staged_time = check_staged_time(staged_time)  # yours when it is right, else the reference
measured_vs_predicted([r["bytes"] for r in staged], [r["one_way_s"] for r in staged],
                      [staged_time(r["bytes"], alpha, bandwidth, copy_rate) for r in staged], label="(staged)",
                      title="staged ping-pong: measured here, and predicted by your formula")

# %% [markdown]
# In this ping-pong nothing overlaps: each copy ends before its send starts, and each receive ends
# before its copy starts (`pingpong` in `ringlab/measure/bandwidth.py`). So a staged message should
# cost its parts added up: the direct message and two copies. The cell sets your formula against the
# staged measurements and against those parts measured on their own (the direct message above, and
# two copies of the same size timed alone: the "copy alone" column above), to find which part of the
# formula is off where it is off.

# %%
staged_parts = staged_rows(staged, direct, copies, alpha, bandwidth, copy_rate)
table(staged_parts, {"size (B)": "bytes", "staged (us)": "staged_s", "formula (us)": "formula_s",
                     "formula / staged": "formula_ratio", "2K/copy rate (us)": "formula_copies_s",
                     "2 copies alone (us)": "copies_s", "direct + copies (us)": "parts_s",
                     "parts / staged": "parts_ratio"})
print(describe_staged(staged_parts, copy_rate, copy_nbytes))

# %% [markdown]
# GPUs have the same choice. Without peer access, a copy from one GPU to another goes through host
# memory; with it, the GPUs copy directly over PCIe or NVLink. CUDA's p2pBandwidthLatencyTest also
# times a tiny copy between every pair of GPUs with peer access off and on; the cell prints the
# medians of two published runs (ringlab ships them with their source; neither was measured here).

# %%
for name in ("B06_chlc_rtx4090x8_p2p_tinygraddriver", "B03_kr_h100x8_hgx_p2p"):
    latency = published.peer_latency(name)
    print(f"GPU-to-GPU latency {latency['off_s'] * 1e6:.3g} us with peer access off, {latency['on_s'] * 1e6:.3g} us "
          f"with it on, off/on {latency['off_s'] / latency['on_s']:.1f}x (medians of {latency['pairs']} pairs; "
          f"{published.load(name).label})")

# %% [markdown]
# ## On a GPU: pinned against pageable, and peer copies
#
# Pageable host memory can be moved by the operating system, so the driver first copies it into a
# pinned buffer of its own; pinned memory is copied by the GPU's DMA engines directly. With two GPUs
# or more the peer-to-peer matrix is measured with peer access on and off, as CUDA's
# p2pBandwidthLatencyTest does. Measured here when there is a GPU; otherwise recorded results, with
# their machine and date.

# %%
gpu = gpu_bandwidth()

# %%
if gpu is not None:
    host_device_figure(gpu, f"pinned against pageable, {gpu['source']}").show()
    for access, matrix in peer_matrices(gpu).items():
        bandwidth_heatmap(matrix, title=f"peer copies, {access}, {gpu['source']}").show()

# %% [markdown]
# ## Published measurements: pinned against pageable
#
# CUDA's bandwidthTest on two A100 hosts, 32 MB copies, as published (ringlab ships the numbers with
# their source; none of them was measured here). An A100's host interface is PCIe 4.0 x16, whose
# peak per direction is marked on each figure; the fractions printed after the figures are computed
# from the shipped numbers.

# %%
PCIE4_X16 = rl.topology.pcie_bandwidth(4, 16)
hosts = [published.host_device(name, peak_Bps=PCIE4_X16) for name in
         ("C20_gengwg-gpu_dgx-a100_bandwidthtest_pageable", "C21_gengwg-gpu_dell-a100-pcie_bandwidthtest_pageable")]
for host in hosts:
    host_device_figure(host, f"pinned against pageable: {host['source']}").show()

# %%
for host in hosts:
    rate = {(r["what"], r["pinned"]): r["Bps"] for r in host["host_device"]}
    print(f"{host['device']}: " + "; ".join(
        f"{what} pinned {rate[what, True] / 1e9:.1f} GB/s ({rate[what, True] / PCIE4_X16:.0%} of PCIe 4.0 x16), "
        f"pageable {rate[what, False] / 1e9:.1f} GB/s ({rate[what, True] / rate[what, False]:.1f}x slower)"
        for what in ("host->device", "device->host")))

# %% [markdown]
# ## Published measurements: peer access off and on
#
# p2pBandwidthLatencyTest measures every pair of GPUs twice: with peer access off, each copy goes
# through host memory over the GPUs' PCIe links; with it on, the GPUs copy to each other directly,
# over NVLink where they have it. Three published machines: two H100 PCIe cards joined by an NVLink
# bridge, eight H100 SXM on NVSwitch, and eight RTX 4090s on two sockets with no PCIe switch and a
# modified driver that allows peer access on this card. Each bar is the median over all pairs, drawn
# against the peak of the link that copy crosses (NVLink for [P2P](glossary.md#p2p) on where there is NVLink, the GPU's
# PCIe link otherwise). Hover over a bar for its source.

# %%
PCIE5_X16 = rl.topology.pcie_bandwidth(5, 16)
machines = {"B20_hpe_2xh100pcie_nvlink_p2p": ("2x H100 PCIe + NVLink bridge", "h100-pcie-nvlink-2", PCIE5_X16),
            "B03_kr_h100x8_hgx_p2p": ("8x H100 SXM, NVSwitch", "hgx-h100-8", PCIE5_X16),
            "B06_chlc_rtx4090x8_p2p_tinygraddriver": ("8x RTX 4090, PCIe", "rtx4090-8-p2p-on", PCIE4_X16)}
rows = []
for name, (machine, preset, pcie_peak) in machines.items():
    peer_peak = float(np.nanmax(rl.topology.preset(preset).peer_bandwidth_matrix()))
    rows += published.peer_rows(name, machine, peak_on_Bps=peer_peak, peak_off_Bps=pcie_peak)
fraction_bars(rows, "published: peer copies, median over GPU pairs, against the link's peak").show()
for off, on in zip(rows[::2], rows[1::2]):
    print(f"{on['what']}: {on['Bps'] / 1e9:.1f} GB/s ({on['Bps'] / on['peak_Bps']:.0%} of {on['peak_Bps'] / 1e9:.0f}); "
          f"P2P off {off['Bps'] / 1e9:.1f} GB/s ({off['Bps'] / off['peak_Bps']:.0%} of {off['peak_Bps'] / 1e9:.0f}); "
          f"on/off {on['Bps'] / off['Bps']:.1f}x")

# %% [markdown]
# Read the printout: where the GPUs share NVLink, peer access lets a copy leave PCIe and host memory
# behind, and the ratio on/off is about ten. On the RTX 4090 box both routes cross PCIe links of the
# same peak, so the ratio is close to one: peer access saves the trip through host memory, not the
# bottleneck. The heatmaps below show the H100 SXM box and the RTX 4090 box pair by pair, PCIe against
# NVLink: hover over a cell for the pair's link peak and the fraction of it measured.

# %%
hgx = published.load("B03_kr_h100x8_hgx_p2p")
bandwidth_heatmap(published.peer_matrix(hgx.name, "unidirectional_enabled"),
                  peak=rl.topology.preset("hgx-h100-8").peer_bandwidth_matrix(),
                  title=f"P2P on (GPU to GPU over NVLink and NVSwitch): {hgx.label}").show()
box = published.load("B06_chlc_rtx4090x8_p2p_tinygraddriver")
peak = rl.topology.preset("rtx4090-8-p2p-on").peer_bandwidth_matrix()
peer_off = published.peer_matrix(box.name, "unidirectional_disabled")
peer_on = published.peer_matrix(box.name, "unidirectional_enabled")
bandwidth_heatmap(peer_off, peak=peak, title=f"P2P off (through host memory): {box.label}").show()
bandwidth_heatmap(peer_on, peak=peak, title=f"P2P on (GPU to GPU over PCIe): {box.label}").show()

# %% [markdown]
# ## Your own logs
#
# Put the output of `p2pBandwidthLatencyTest` or `bandwidthTest` from your machines (or the JSON that
# `ringlab import LOG --json OUT` writes from it) into `my_logs/` at the top of the project, or into
# the folder named by `$RINGLAB_LOGS`, and this cell draws them, labelled with their file name. With
# no logs there, it says so.

# %%
from ringlab.measure.logs import my_logs_folder, read_folder

mine = read_folder(format="p2pBandwidthLatencyTest") + read_folder(format="bandwidthTest")
for log in mine:
    for key, matrix in log.get("matrices", {}).items():
        if key.startswith(("unidirectional", "bidirectional")):
            bandwidth_heatmap(np.array(matrix, dtype=float) * 1e9,
                              title=f"{key.replace('_', ' ')}: {log['label']}").show()
    if log["format"] == "bandwidthTest":
        print(log["label"])
        table(log["rows"], {"direction": "direction", "memory": "memory", "size (B)": "bytes", "rate (GB/s)": "Bps"})
print(f"{len(mine)} log(s) of these tools in {my_logs_folder()}")

# %% [markdown]
# ## Side by side
#
# The published figures again, now with what was measured in this notebook (and on a GPU, measured
# here or recorded, as labelled):

# %%
best = max(copy_against_mpi(copies, direct), key=lambda r: r["mpi_Bps"])
measured = {f"memory copy, one core, {format_bytes(copy_nbytes)} (measured here)": copy_rate,
            f"memory copy, one core, {format_bytes(best['bytes'])} (measured here)": best["copy_Bps"],
            f"MPI shared memory, best ping-pong, {format_bytes(best['bytes'])} (measured here)": best["mpi_Bps"]}
if gpu is not None:
    pinned = {r["what"]: r["Bps"] for r in gpu["host_device"] if r["pinned"]}
    where = "measured here" if gpu["source"] == "measured here" else "recorded: see the label above"
    measured[f"host->device, pinned ({where})"] = pinned["host->device"]
links_figure(PUBLISHED_LINKS, measured, title="published figures and measured ones, per direction")

# %% [markdown]
# ## Summary
#
# - A message costs a latency plus its size over the bandwidth: small messages measure the first,
#   large ones the second. Two numbers, alpha and B, describe a link well enough to predict it.
# - NVLink's published per-GPU bandwidth is about ten times that of PCIe 3.0 x16, which is why
#   NVLink-connected GPUs run collectives so much faster (lab 05 predicts by how much).
# - Between two processes of one machine a message is a memory copy; a copy's rate depends on its
#   size, so set MPI against a copy of the same size, not against one copy rate.
# - Staging through another buffer adds two copies to every message, each at the rate of a copy of
#   its size; peer access and CUDA-aware MPI exist to remove them.
# - Pinned host memory is copied directly by the GPU; pageable memory takes an extra copy (on the
#   two published A100 hosts above, pageable was 2.4 to 5.2 times slower).
# - Peer access is worth about ten times in bandwidth on GPUs joined by NVLink and little on a
#   PCIe-only box, in the published measurements above; on both it cuts the latency between two GPUs
#   several times.
#
# ## Exercises
#
# 1. (Above) the alpha-beta model.
# 2. (Above) the cost of staging.
# 3. From the fitted alpha and B, at what message size is half the time latency and half transfer?
#    (Solve alpha = K/B.) Which rows of the table are latency-bound?

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
from ringlab.lessons.lab01_moving_bytes import QUIZ

QUIZ.ask(1)

# %% tags=["solution"]
answer = None  # your number, in microseconds
# solution
answer = 2 + (1 << 20) / 10e9 * 1e6  # alpha + K/B

# %%
QUIZ.check(1, answer)

# %%
QUIZ.ask(2)

# %% tags=["solution"]
answer = None  # your number, in kB
# solution
answer = 5e-6 * 12.5e9 / 1e3  # K = alpha x B

# %%
QUIZ.check(2, answer)

# %%
QUIZ.ask(3)

# %% tags=["solution"]
answer = None  # your number of times
# solution
import ringlab as rl

nbytes, latency, link, copy_rate = 16 << 20, 2e-6, rl.topology.pcie_bandwidth(3, 16), 10e9
answer = (latency + nbytes / link + 2 * nbytes / copy_rate) / (latency + nbytes / link)

# %%
QUIZ.check(3, answer)

# %%
QUIZ.ask(4)

# %% tags=["solution"]
answer = None  # your number of times
# solution
import numpy as np
from ringlab.measure import published

p2p_on = published.peer_matrix("B03_kr_h100x8_hgx_p2p", "unidirectional_enabled")
p2p_off = published.peer_matrix("B03_kr_h100x8_hgx_p2p", "unidirectional_disabled")
answer = np.nanmedian(p2p_on) / np.nanmedian(p2p_off)  # medians over the GPU pairs, as printed

# %%
QUIZ.check(4, answer)
