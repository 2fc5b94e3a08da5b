"""One-shot and two-shot allreduce priced as NCCL prices its symmetric-memory kernels (NCCL 2.27 and later).

Where a GPU reads and writes its peers' memory (buffers registered as symmetric windows, every pair of GPUs
joined by NVLink, one host), NCCL runs one kernel per call that loads from, or stores to, all peers at once:
``AllReduce_AGxLL_R``, the one-shot (every rank stores its whole buffer into every peer's LL buffer, each adds
all n copies itself: ``allreduce.oneshot``), and ``AllReduce_RSxLD_AGxST``, the two-shot (rank r loads chunk r
from every peer and adds, then stores the sum into every peer: ``allreduce.twoshot``); on NVSwitch that adds
(NVLS), ``AllReduce_AGxLLMC_R`` and ``AllReduce_RSxLDMC_AGxSTMC`` do the same through multicast addresses.
No rank pays its peers one after another, so the link walk's latency (a rank's messages in a row) does not
describe them. NCCL prices each kernel with its own model (``queryModel``), in microseconds::

    bw   = softmin(blocks * smBw * busMultiplier, peakBw, softness=smBw)      # bytes per us
    time = baseLat + softplus(busBytes / bw - 1, softness=1)

with ``softmin(x, c, s) = c - s*log1p((exp(c/s) - 1)*exp(-x/s))`` (a smooth min(x, c)) and ``softplus(x, s) =
s*log1p(exp(x/s))`` (a smooth max(0, x); x itself from x/s >= 100), a kernel's bus bytes and multiplier as
:func:`bus` gives them, and a base latency, a bandwidth per thread block (SM) and a peak by GPU generation. It
runs a kernel on the fewest blocks (from ``minCTAs``) within 2.5% of its time on the most, and picks the kernel
whose time, 2.5% dearer for every block it takes, is lowest (``ncclSymPickKernel``: :func:`pick`).

Every constant below is NCCL's, from NVIDIA/nccl v2.27.3-1 (72d2432, the first release with these kernels):
``src/symmetric.cc`` (``softmin``, ``softplus``, ``model`` l.86-100; ``queryModel`` l.105-195;
``ncclSymPickKernel`` l.224-289) and ``src/include/symmetric.h`` l.8; unchanged in v2.30.7-1 (73cf112) and at
5067397 (the commit ``ringlab.predict.tuning`` cites), where they are ``src/sym_kernels.cc`` (``queryModel_lsa``
l.338-432, ``ncclSymkMask`` l.540-589, ``ncclSymkPickKernel`` l.599-641). Nothing here is fitted to a
measurement. Kept as NCCL keeps them: microseconds and bytes per microsecond inside, its float32 where it
stores a time (``float* timeUs``) and where it weighs one kernel against another; seconds outside.

Why a module of its own rather than a candidate in NCCL's tuner (``ringlab.predict.nccl``): NCCL never sets
the two models against each other. With both buffers registered on one node it always runs a symmetric kernel
when one is implemented (``src/enqueue.cc`` l.342-371, v2.27.3-1: "the perf model accuracy from asymmetric
kernels is too inaccurate ... For now just always use symmetric if available"; v2.30.7-1 falls back only for
unregistered buffers), and this model chooses only among symmetric kernels. Nor is it the link walk's
(``costmodel``, ``compact``): it prices a kernel, not a schedule's messages over links. ``rl.predict`` asks it
(:func:`symmetric_kernel`) for ``allreduce.oneshot`` and ``allreduce.twoshot`` where NCCL would run them as
these kernels: one host (one node), every pair of the ranks joined by NVLink with no GPU between
(``isAllDirectNvlink``; v2.27.3-1 asked only for direct peer access, ``isAllDirectP2p``), a GPU generation
known, and no NCCL ring protocol asked for (LL, LL128 and Simple are the ring kernels'; ``"auto"`` means what
NCCL would run, so it takes this model). Everywhere else (several nodes, GPUs over PCIe, hybrid cube-mesh
NVLink, an NVLink domain over several hosts such as GB200 NVL72, the CPU ``uniform`` topologies, a forced
protocol) the link walk prices them as before. The schedules are the unicast kernels, so ``rl.predict`` prices
those; the multicast ones are a choice of :func:`pick` and :func:`symmetric_seconds` (``multimem=True``).

NCCL's model is one figure per kernel. Shown step by step, its base latency is shared out evenly over the steps
that move data (two-shot's two synchronisations) and the rest by the bytes each step moves; no link is named
as a bottleneck, and the reduction is inside NCCL's bus factor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..schedule import check_count
from ..topology import Topology
from .compact import channel_hardware
from .protocols import NVLINK
from .tuning import ARCHS

SOURCE = ("NCCL's model of its symmetric kernels: src/symmetric.cc (queryModel, ncclSymPickKernel), NVIDIA/nccl "
          "v2.27.3-1; the same in src/sym_kernels.cc (queryModel_lsa, ncclSymkPickKernel) of v2.30.7-1 and 5067397")

US = 1e-6
GBPS = (1 << 30) / 1.e6  # NCCL's "GBps" (queryModel): a GiB/s, in bytes per microsecond
LL_BUS_FACTOR = 9.0      # queryModel: "2X the bytes, plus some processing, plus no unrolling"
LL_MULTICAST_MULTIPLIER = 1.1  # queryModel, AGxLLMC_R's busMultiplier: "To beat non-MC LL"
MAX_BLOCKS = 64          # ncclSymMaxBlocks (src/include/symmetric.h l.8)
# nMaxBlocksNvls = divUp(cudaArch < 1000 ? 16 : 32, nRanks): the multimem two-shot's most blocks
NVLS_BLOCKS = {"before sm100": 16, "sm100 on": 32}
MIN_CTAS = 1             # comm->config.minCTAs' default (src/init.cc, NCCL_CONFIG_DEFAULT(minCTAs ..., 1))
MAX_CTAS = 64            # comm->config.maxCTAs' default: MAXCHANNELS (src/include/device.h: 64)
BLOCK_TOLERANCE = 1.025  # queryModel: the fewest blocks whose time is within this of the most blocks' time
SM_PENALTY = 0.025       # ncclSymPickKernel: "2.5% percent increase in time per SM"
LL_LIMIT = 2 << 30       # ncclSymPickKernel: LL kernels are left out from 2 GiB ("32-bit ints")
ANY_LIMIT = 32 * (2 << 30)  # ... and every kernel from 64 GiB
# queryModel's hardware figures, by NCCL's two branches: comm->cudaArch < 1000 (Hopper and the generations
# before it) and the rest (Blackwell). Allreduce only: AllGather and ReduceScatter have their own there.
BASE_LATENCY_US = {"before sm100": {"LL": 4.5, "other": 7.8}, "sm100 on": {"LL": 11.0, "other": 19.5}}
SM_BW = {"before sm100": 65 * GBPS, "sm100 on": 55 * GBPS}  # allreduce's bandwidth per block
PEAK_BW = {"before sm100": {"other": 320 * GBPS, "RSxLDMC_AGxSTMC": 480 * GBPS},
           "sm100 on": {"other": 600 * GBPS, "RSxLDMC_AGxSTMC": 1000 * GBPS}}


@dataclass(frozen=True)
class Kernel:
    """One of NCCL's symmetric allreduce kernels: its ``name``, the ringlab schedule whose dataflow it runs
    (``shot``), whether it is an LL kernel (8-byte data-and-flag stores), and whether it goes through
    NVSwitch multicast (``multimem``: where the switch can add, on more than two GPUs: ``ncclNvlsInit``,
    src/transport/nvls.cc l.160 of v2.27.3-1, "gpuCount <= 2"; ``hasLsaMultimem``, sym_kernels.cc l.443)."""

    name: str
    shot: str
    ll: bool
    multimem: bool


# in NCCL's order (enum ncclSymKernelId, src/include/symmetric.h l.62-78), which its pick walks: ties keep the first
KERNELS = {k.name: k for k in (
    Kernel("AllReduce_AGxLL_R", "allreduce.oneshot", True, False),
    Kernel("AllReduce_AGxLLMC_R", "allreduce.oneshot", True, True),
    Kernel("AllReduce_RSxLD_AGxST", "allreduce.twoshot", False, False),
    Kernel("AllReduce_RSxLDMC_AGxSTMC", "allreduce.twoshot", False, True),
)}
SCHEDULE_KERNEL = {"allreduce.oneshot": "AllReduce_AGxLL_R", "allreduce.twoshot": "AllReduce_RSxLD_AGxST"}


@dataclass(frozen=True)
class Choice:
    """A kernel as NCCL's model has it: its name, ``microseconds`` (NCCL's float32 figure) and thread ``blocks``."""

    kernel: str
    microseconds: float
    blocks: int

    @property
    def seconds(self) -> float:
        return self.microseconds * US


def branch(arch: str) -> str:
    """NCCL's branch of its figures for a generation (volta, ampere, hopper: cudaArch < 1000; blackwell)."""
    if arch not in ARCHS:
        raise ValueError(f"unknown GPU generation {arch!r}; NCCL's are: {', '.join(ARCHS)}")
    return "sm100 on" if arch == "blackwell" else "before sm100"


def softmin(x: float, ceiling: float, softness: float) -> float:
    """NCCL's smooth min(x, ceiling)."""
    return ceiling - softness * math.log1p((math.exp(ceiling / softness) - 1) * math.exp(-x / softness))


def softplus(x: float, softness: float) -> float:
    """NCCL's smooth max(0, x)."""
    z = x / softness
    return x if z >= 100.0 else softness * math.log1p(math.exp(z))


def model(bus_bytes: float, base_latency: float, blocks: int, sm_bw: float, multiplier: float, peak_bw: float) -> float:
    """NCCL's ``model``: microseconds of a kernel moving ``bus_bytes`` on ``blocks`` thread blocks."""
    bw = softmin(blocks * sm_bw * multiplier, peak_bw, sm_bw)
    return base_latency + softplus(bus_bytes / bw - 1, 1)


def bus(kernel: str, nbytes: int, nranks: int, arch: str) -> tuple[int, float, int]:
    """queryModel's (busBytes, busMultiplier, most blocks) of ``kernel`` for ``nbytes`` a rank, in C's arithmetic:
    busBytes is a size_t, LL's product a double cut back to one."""
    if kernel == "AllReduce_AGxLL_R":  # every peer's whole buffer, LL's doubled bytes and more
        return int(float(nranks * nbytes) * LL_BUS_FACTOR), 1.0, MAX_BLOCKS
    if kernel == "AllReduce_AGxLLMC_R":
        return int(float(nranks * nbytes) * LL_BUS_FACTOR), LL_MULTICAST_MULTIPLIER, MAX_BLOCKS
    if kernel == "AllReduce_RSxLD_AGxST":  # the ring's 2(n-1)/n
        return 2 * nbytes * (nranks - 1) // nranks, 1.0, MAX_BLOCKS
    if kernel == "AllReduce_RSxLDMC_AGxSTMC":  # its shard up, the whole sum down; the switch adds for n
        return nbytes // nranks + nbytes, float(nranks), -(-NVLS_BLOCKS[branch(arch)] // nranks)
    raise ValueError(f"unknown symmetric kernel {kernel!r}; NCCL's allreduce ones are: {', '.join(KERNELS)}")


def kernel_time(kernel: str, nbytes: int, nranks: int, arch: str, min_blocks: int = MIN_CTAS,
                max_blocks: int = MAX_CTAS) -> Choice:
    """NCCL's ``queryModel``: ``kernel``'s time for ``nbytes`` a rank over ``nranks`` GPUs of generation ``arch``,
    on the fewest blocks (from ``min_blocks``) within 2.5% of its time on the most (at most ``max_blocks``).
    Any size is priced, also where NCCL would not run the kernel (:func:`allowed`)."""
    nbytes = check_count("nbytes", nbytes, minimum=0)
    nranks = check_count("nranks", nranks, minimum=1)
    bus_bytes, multiplier, most = bus(kernel, nbytes, nranks, arch)
    most = min(most, max_blocks)
    which = branch(arch)
    latency = BASE_LATENCY_US[which]["LL" if KERNELS[kernel].ll else "other"]
    peak = PEAK_BW[which].get(kernel.removeprefix("AllReduce_"), PEAK_BW[which]["other"])
    sm_bw = SM_BW[which]
    best = np.float32(model(bus_bytes, latency, most, sm_bw, multiplier, peak))  # NCCL stores it as a float
    blocks = most
    for fewer in range(min_blocks, most):
        time = model(bus_bytes, latency, fewer, sm_bw, multiplier, peak)
        if time <= BLOCK_TOLERANCE * float(best):
            best, blocks = np.float32(time), fewer
            break
    return Choice(kernel, float(best), blocks)


def allowed(nbytes: int, multimem: bool = False) -> list[str]:
    """The allreduce kernels NCCL's pick considers for ``nbytes`` a rank (floating-point sum, both buffers
    registered): the multicast ones only with ``multimem`` (NVLS: a switch that adds, more than two GPUs)."""
    if nbytes >= ANY_LIMIT:
        return []
    return [name for name, k in KERNELS.items() if (multimem or not k.multimem) and not (k.ll and nbytes >= LL_LIMIT)]


def pick(nbytes: int, nranks: int, arch: str, multimem: bool = False) -> Choice | None:
    """NCCL's ``ncclSymPickKernel`` for an allreduce of ``nbytes`` a rank: the allowed kernel whose time x
    (1 + 2.5% a block) is lowest, compared in float32 as NCCL does (None: no kernel, NCCL runs its others);
    ``multimem``: NVSwitch that adds, whose kernels NCCL offers on more than two GPUs."""
    best, score = None, np.float32(np.inf)
    penalty = np.float32(SM_PENALTY)
    for name in allowed(nbytes, multimem and nranks > 2):
        choice = kernel_time(name, nbytes, nranks, arch)
        mine = np.float32(choice.microseconds) * (np.float32(1) + penalty * np.float32(choice.blocks))
        if mine < score:
            best, score = choice, mine
    return best


def symmetric_seconds(algorithm: str, nbytes: int, nranks: int, arch: str, multimem: bool = False) -> float:
    """Seconds NCCL's model gives ``algorithm`` ("oneshot", "twoshot", with or without "allreduce.", or a
    kernel's name; "nccl": the kernel NCCL picks) for ``nbytes`` a rank on ``nranks`` GPUs of generation ``arch``
    (volta, ampere, hopper, blackwell); ``multimem``: the multicast kernel (and, for "nccl", allowing it)."""
    if algorithm == "nccl":
        choice = pick(nbytes, nranks, arch, multimem)
        if choice is None:
            raise ValueError(f"NCCL runs no symmetric kernel for {nbytes} B: from 64 GiB it uses its other kernels")
        return choice.seconds
    name = algorithm if algorithm in KERNELS else SCHEDULE_KERNEL.get(
        algorithm if algorithm.startswith("allreduce.") else f"allreduce.{algorithm}")
    if name is None:
        raise ValueError(f"unknown algorithm {algorithm!r}: oneshot, twoshot, nccl, or one of {', '.join(KERNELS)}")
    if multimem and not KERNELS[name].multimem:
        name = next(n for n, k in KERNELS.items() if k.shot == KERNELS[name].shot and k.multimem)
    return kernel_time(name, nbytes, nranks, arch).seconds


def crossover(nranks: int, arch: str, multimem: bool = False) -> int:
    """The smallest size (bytes a rank, exactly) from which NCCL's pick runs a two-shot kernel rather than a
    one-shot one."""
    def two_shot(size: int) -> bool:
        return KERNELS[pick(size, nranks, arch, multimem).kernel].shot == "allreduce.twoshot"

    lo, hi = 1, LL_LIMIT  # one-shot at 1 byte; from 2 GiB only two-shot kernels are left
    if two_shot(lo):
        return lo
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if two_shot(mid) else (mid, hi)
    return hi


def symmetric_kernel(schedule, topology: Topology, place: np.ndarray) -> str | None:
    """The NCCL kernel that runs ``schedule`` on the ranks ``place`` of ``topology``, or None where the link walk
    prices it: a one-shot or two-shot allreduce of two ranks or more, on one host whose GPU generation is known,
    every pair of the ranks joined by NVLink with no GPU between."""
    name = SCHEDULE_KERNEL.get(schedule.name)
    machine = topology.machine
    if name is None or schedule.nranks < 2 or machine is None or getattr(machine, "arch", None) not in ARCHS:
        return None
    if machine.nodes != 1 or not machine.one_host_per_node or machine.intra != "nvlink":
        return None
    return name if all_direct_nvlink(topology, place) else None


def all_direct_nvlink(topology: Topology, place: np.ndarray) -> bool:
    """Whether every pair of the ranks ``place`` is joined by NVLink alone (through NVSwitches or not), with no
    GPU relaying: NCCL's ``isAllDirectNvlink``, which its symmetric kernels need."""
    n = len(place)
    src, dst = np.divmod(np.arange(n * n), n)
    keep = src != dst
    hop_pair, channels = topology.routes(place[src[keep]], place[dst[keep]])
    if (channel_hardware(topology)[channels] != NVLINK).any():
        return False
    ranks = set(topology.ranks)
    reaches_rank = np.array([end in ranks for link in topology.links for end in (link.b, link.a)])
    return bool((np.bincount(hop_pair, weights=reaches_rank[channels], minlength=int(keep.sum())) == 1).all())


def symmetric_steps(kernel: str, nbytes: int, itemsize: int, nranks: int, arch: str, steps: np.ndarray) -> np.ndarray:
    """``steps`` (the link walk's per-step columns; their messages and bytes kept) with NCCL's time of ``kernel``
    for ``nbytes // itemsize`` elements: the base latency shared by the steps that move data, the rest by their
    bytes. No elements, no call: NCCL discards an empty collective (``src/enqueue.cc`` l.2334-2335), so 0."""
    out = steps.copy()
    out["reduce"] = 0.0
    out["bottleneck"] = -1
    out["latency"] = out["transfer"] = out["time"] = 0.0
    count = nbytes // itemsize
    moving = out["nbytes"] > 0
    if count == 0 or not moving.any():
        return out
    choice = kernel_time(kernel, count * itemsize, nranks, arch)
    latency = BASE_LATENCY_US[branch(arch)]["LL" if KERNELS[kernel].ll else "other"]
    out["latency"] = np.where(moving, latency * US / moving.sum(), 0.0)
    out["transfer"] = (choice.microseconds - latency) * US * out["nbytes"] / out["nbytes"].sum()
    out["time"] = out["latency"] + out["transfer"]
    return out


__all__ = ["KERNELS", "Kernel", "Choice", "kernel_time", "pick", "allowed", "symmetric_seconds", "crossover",
           "symmetric_kernel", "symmetric_steps", "all_direct_nvlink", "SOURCE"]
