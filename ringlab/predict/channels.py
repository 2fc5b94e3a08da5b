"""How many channels NCCL runs one call on: its rule for small calls, and what it costs them.

A *channel* is one ring (or tree) that NCCL builds at start-up and one thread block, on one SM, that
runs it. NCCL splits every call's bytes evenly over the channels it uses, each moving its share at
the same rate: its tuner prices the full rate as ``nChannels x`` one channel's bandwidth, then caps
it (LL's cap, ``tuning.cc``). A call on ``c`` of a communicator's ``C`` channels gets ``c / C`` of
the links' rate, under the same caps.

How many a communicator has (``comm->nChannels``) comes from NCCL's ring search
(``src/graph/search.cc``, ``ncclTopoCompute``): it tries channel speeds from a table, fastest first,
and fits as many channels of that speed as a GPU's NVLink bandwidth holds (its links x NCCL's rating
of one link, ``topo.h``: the port rate ringlab's topologies give an NVSwitch GPU), keeping the speed
whose channels carry the most (it stops looking at half the best speed found). ``ncclTopoDupChannels``
then doubles fast channels at half the speed, and ``ncclTopoPostset`` (``connect.cc``) doubles them
all again. On one HGX node: A100 6 channels at 40 GB/s, doubled to 12, then 24; H100 6 at 60 GB/s,
then 12, then 24; H800 (8 NVLinks) 4 at 40 GB/s, then 8, then 16. NCCL's logs print the same: 24 on
8 A100 (nccl-tests#100, "Channel 23/24"), 24 on 8 H100 (AWS's expected output for p5.48xlarge:
"24 coll channels, 16 nvls channels"), 16 on 8 H800 (nccl#892).

How many a call uses (``src/enqueue.cc``, ``topoGetAlgoInfo``): each thread of a channel must have
at least a *threshold* of bytes to work on, so while ``bytes < channels x threads x threshold``
NCCL drops a channel, down to one, then halves the threads. The thresholds (``comm.h``) are 64 bytes
a thread for Simple, 8 for LL and LL128, and a ring's LL threshold is multiplied by the ranks
(``tuning.cc``: 64 on 8 GPUs); the threads are 512 for Simple and LL and 640 for LL128
(``device.h``; Simple 256 where the ring's bandwidth is no more than PCIe 3's 12 GB/s). On 24
channels of 8 GPUs a ring allreduce keeps all of them from 768 KiB (Simple and LL: 24 x 512 x 64
bytes) and 120 KiB (LL128: 24 x 640 x 8); at 256 KiB with LL it runs on 8, a third of the links.
From 32 KiB to 512 KiB each channel added brings its own 32 KiB, so the call takes the same time.
NVLS and NVLSTree always run on their own channel count, and CollNet has a rule of its own (not
modelled here).

Where a call has every channel, this changes nothing: NCCL's ring then pipelines each channel's
share through its steps in slices, every rank sending at every moment, and its tuner's model
(latency per step plus bytes over the full rate) already holds that. NCCL picks the algorithm and
protocol by that model with all channels, before it narrows them, and so does the prediction.

Modelled where NCCL's search can be followed from what a topology says: one host of NVIDIA GPUs on
NVSwitch. Elsewhere (PCIe, GPUs joined pairwise, several nodes, RCCL) the search also weighs PCIe
paths, NICs and CPUs, and a call is priced on all its channels, as NCCL's tuner does. A channel with
fewer threads is priced at a full channel's rate: NCCL's model gives a channel no rate by threads.

What it does not explain: from 1 MiB to 128 MiB every channel runs, so published sweeps that fall
below NCCL's model there (8 A100 driven by one thread, ``-g 8``: 1.2-1.9x; their gap a near-constant
100-140 us a call from 16 to 64 MiB, where a sweep of one process a GPU is within 2-15%) fall below it
for another reason, which NCCL's channel, thread and chunk rules do not give.

Every constant is NCCL's, at 5067397 (unchanged in these rules since v2.18.3 and v2.21.5).
"""
from __future__ import annotations

from dataclasses import dataclass

SOURCE = ("NVIDIA/nccl at 5067397: src/enqueue.cc (topoGetAlgoInfo), src/graph/tuning.cc (ncclTopoTuneModel, "
          "threadThresholds), src/graph/search.cc (ncclTopoCompute, ncclTopoDupChannels, speedArrayIntra), "
          "src/graph/connect.cc (ncclTopoPostset), src/include/comm.h, device.h, src/graph/topo.h")

WARP_SIZE = 32
MAX_CHANNELS = 64            # MAXCHANNELS (device.h); the ring search may find half of them (init.cc)
THREAD_THRESHOLD = {"LL": 8, "LL128": 8, "Simple": 64}  # NCCL_{LL,LL128,SIMPLE}_THREAD_THRESHOLD (comm.h)
MAX_THREADS = {"LL": 512, "LL128": 640, "Simple": 512}  # NCCL_{LL,LL128,SIMPLE}_MAX_NTHREADS (device.h)
PCI_BW = 12.0                # GB/s, PCI Gen3 x16 (topo.h): Simple rings no faster than this get 256 threads
SIMPLE_PCI_THREADS = 256
# the channel speeds the search tries inside a node, fastest first (search.cc: speedArrayIntra, sm90..., sm100...)
SPEEDS_INTRA = {
    "volta": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "ampere": (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    "hopper": (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    "blackwell": (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
SPEED_FLOOR = 0.49           # the search tries slower speeds while next / best found > .49 (ncclTopoCompute); a
                             # tie keeps the fewer hops, so the faster (ncclTopoCompareGraphs)
DUP_MIN_BW = 25.0            # ncclTopoDupChannels: channels of 25 GB/s or more are doubled at half the speed...
DUP_HOPPER_BW = 50.0         # ...except, on Hopper and later, those under 50 GB/s when there are more than 4
DUP_HOPPER_CHANNELS = 4


@dataclass(frozen=True)
class Channels:
    """What NCCL decides for one call: ``used`` of the communicator's ``total`` channels, ``threads`` a channel
    (with the Simple ring's sync warp); ``share`` = used / total, the share of the full rate the call gets."""

    used: int
    total: int
    threads: int

    @property
    def share(self) -> float:
        return self.used / self.total


def search(arch: str, port: float) -> tuple[int, float]:
    """(channels, GB/s each) NCCL's ring search finds on one NVSwitch node of ``arch`` GPUs whose NVLink port NCCL
    rates at ``port`` GB/s each way (its links x ``SMxx_NVLINK_BW``, ``topo.h``: the topology's own port rate)."""
    max_bw = port
    speeds = [s for s in SPEEDS_INTRA[arch] if s <= max_bw] or [SPEEDS_INTRA[arch][-1]]
    best = (0, 0.0)
    for speed in speeds:
        if best[0] and speed / best[1] <= SPEED_FLOOR:  # "Decrease bw until we find a solution" stops here
            break
        count = min(MAX_CHANNELS // 2, max(1, int(max_bw / speed + 1e-9)))
        if count * speed > best[0] * best[1]:  # a tie keeps the faster: fewer channels, fewer hops
            best = (count, speed)
    return best


def graph_channels(arch: str, port: float) -> int:
    """The ring graph's channels (what NCCL's tuner multiplies a channel's bandwidth by): the search's, duplicated
    at half the speed by ``ncclTopoDupChannels`` where they are fast."""
    count, speed = search(arch, port)
    hopper_or_later = arch in ("hopper", "blackwell")
    if speed >= DUP_MIN_BW and not (hopper_or_later and speed < DUP_HOPPER_BW and count > DUP_HOPPER_CHANNELS):
        count = min(2 * count, MAX_CHANNELS // 2)
    return count


def communicator_channels(arch: str, port: float) -> int:
    """``comm->nChannels`` on one NVSwitch node: the graph's channels, doubled by ``ncclTopoPostset``."""
    return min(2 * graph_channels(arch, port), MAX_CHANNELS)


def call_channels(nbytes: int, algorithm: str, protocol: str, nranks: int, total: int,
                  ring_bw: float = float("inf")) -> Channels:
    """The channels and threads NCCL gives a ring or tree call of ``nbytes`` (the buffer's bytes, as NCCL counts
    them for its tuner) on ``total`` channels (``topoGetAlgoInfo``); ``ring_bw`` (GB/s, the ring graph's channels
    x speed) decides the Simple ring's threads."""
    threads = MAX_THREADS[protocol]
    if algorithm == "ring" and protocol == "Simple" and ring_bw <= PCI_BW:
        threads = SIMPLE_PCI_THREADS
    threshold = THREAD_THRESHOLD[protocol] * (nranks if (algorithm, protocol) == ("ring", "LL") else 1)
    used = total
    while nbytes < used * threads * threshold and used >= 2:
        used -= 1
    while nbytes < used * threads * threshold and threads % 128 == 0:
        threads //= 2
    if protocol == "Simple":
        threads += WARP_SIZE if algorithm == "ring" else 4 * WARP_SIZE  # the ring's sync warp; the tree's split
    threads = max(threads, 3 * WARP_SIZE)
    if algorithm == "tree":
        threads = 640  # NCCL_MAX_NTHREADS: "Tree now uses all threads always"
    return Channels(used, total, threads)


__all__ = ["Channels", "call_channels", "communicator_channels", "graph_channels", "search", "SOURCE"]
