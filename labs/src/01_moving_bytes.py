# %% [markdown]
# # Lab 01: your machine, and moving bytes
#
# **What you'll do:** ask `doctor` what this machine has, work out what a PCIe link can carry from
# its transfer rate, encoding and lanes, then measure what this machine moves: memory copies, and
# messages between two MPI ranks from 8 bytes to 64 MiB, next to the copy rate.
#
# **What you'll learn:** latency against bandwidth, and how far apart the published figures of
# PCIe and NVLink are.
#
# **What you need:** nothing else. With an NVIDIA GPU here, the lab also measures host<->device and
# peer copies next to their links' peaks. Without one, it says so: it does not show GPU numbers
# that were not measured.

# %%
import ringlab as rl
from ringlab.cluster import MPICluster
from ringlab.devices import gpu_count
from ringlab.discover import pcie_bandwidth
from ringlab.doctor import report
from ringlab.exercises import check_pcie

print("\n".join(report()))

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
check_pcie(pcie_gbytes)

# %% [markdown]
# Published figures to set beside it (none of them measured here): PCIe 3.0 x16 carries 15.754 GB/s
# each way; NVLink 1.0 gives a P100 4 links of 40 GB/s (both directions); NVLink 2.0 gives a V100 6
# links of 50 GB/s. A published measurement on a K40 server: 10.59 GB/s between two GPUs under one
# PCIe switch, 9.15 GB/s across QPI, and 35 GB/s between GPUs joined by NVLink.

# %%
for generation in (1, 2, 3, 4, 5):
    print(f"PCIe {generation}.0 x16: {pcie_bandwidth(generation, 16) / 1e9:6.2f} GB/s per direction")

# %% [markdown]
# ## Measured here: copies and messages
#
# Two MPI ranks: rank 0 sends to rank 1 and back, for sizes from 8 bytes to 64 MiB. Small messages
# take a nearly constant time (latency); large ones approach what memory copies can do (bandwidth).

# %%
ranks = MPICluster(2).start()

# %%
# %%px
import io
from mpi4py import MPI
from ringlab.bandwidth import cpu_report

text = io.StringIO()
measured = cpu_report(MPI.COMM_WORLD, [8, 64, 1024, 16 << 10, 256 << 10, 4 << 20, 64 << 20], text)

# %%
print(ranks.view.pull("text", block=True)[0].getvalue())
measured = ranks.view.pull("measured", block=True)[0]
ranks.stop()

# %% [markdown]
# ## On a GPU
#
# With an NVIDIA GPU, host<->device copies (pinned and pageable, one way and both ways), device
# copies and peer-to-peer copies are measured next to their links' peaks.

# %%
if gpu_count():
    import sys
    from ringlab.bandwidth import gpu_report
    gpu_report(sys.stdout)
else:
    print("No GPU here: nothing measured on a GPU, and no recorded GPU results yet.")

# %% [markdown]
# ## Summary
#
# - Throughput = transfer rate x encoding efficiency x lanes: PCIe 3.0 x16 is 15.754 GB/s each way.
# - A message costs a fixed latency plus its size over the bandwidth: small messages measure the
#   first, large ones the second.
# - NVLink's published per-GPU bandwidth is an order of magnitude above PCIe's, which is why
#   NVLink-connected GPUs run collectives so much faster (lab 05 predicts by how much).
#
# ## Exercises
#
# 1. (Above) the PCIe arithmetic.
# 2. From the ping-pong table, estimate alpha (the one-way time of the smallest message) and B (the
#    bandwidth of the largest). How long would a 1 MiB message take by alpha + K/B? Compare with
#    the measured row.
