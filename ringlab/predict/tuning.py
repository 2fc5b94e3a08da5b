"""NCCL's tuning model, as numbers: the constants its tuner costs every algorithm and protocol with.

NCCL picks an algorithm and a protocol for each call from a model of each: a latency per call and a
bandwidth, ``time = latency + bytes / bandwidth``. Every constant below is NCCL's own, from
``src/graph/tuning.cc`` (``ncclTunerConstantsDefaults``, ``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``)
and ``src/graph/topo.h`` and ``search.cc``, NVIDIA/nccl at 5067397; each is kept under one name and
:mod:`ringlab.predict.nccl` uses them. Latencies are in seconds, bandwidths in bytes per second.

They are figures of NCCL's model of itself, labelled as such: neither measured here nor fitted to the
published sweeps that ``benchmarks/model_vs_published.py`` holds the model to.
"""
from __future__ import annotations

US = 1e-6
GB = 1e9
SOURCE = ("NCCL's tuning model: src/graph/tuning.cc (ncclTunerConstantsDefaults, ncclTopoTuneModel, "
          "ncclTopoGetAlgoTime), src/graph/topo.h, src/graph/search.cc; NVIDIA/nccl at 5067397")

ALGORITHMS = ("ring", "tree", "nvls", "nvlstree", "collnet", "pat")
PROTOCOLS = ("LL", "LL128", "Simple")

# baseLatencies[algorithm][protocol]: paid once per call (NVLS, NVLSTree and CollNet have none)
BASE_LATENCY = {
    "tree": {"LL": 6.8 * US, "LL128": 14.0 * US, "Simple": 8.4 * US},
    "ring": {"LL": 6.6 * US, "LL128": 14.0 * US, "Simple": 8.4 * US},
    "collnet": {"Simple": 0.0}, "nvls": {"Simple": 0.0}, "nvlstree": {"Simple": 0.0},
    "pat": {"Simple": 8.0 * US},
}
# hwLatencies[hardware][algorithm][protocol]: per step (ring), per hop (tree), per call (NVLS)
HW_LATENCY = {
    "nvlink": {"tree": {"LL": 0.6 * US, "LL128": 1.25 * US, "Simple": 4.0 * US},
               "ring": {"LL": 0.6 * US, "LL128": 1.9 * US, "Simple": 3.4 * US},
               "collnet": {"Simple": 3.7 * US}, "nvls": {"Simple": 25.0 * US}, "nvlstree": {"Simple": 25.0 * US},
               "pat": {"Simple": 4.0 * US}},
    "pcie": {"tree": {"LL": 1.0 * US, "LL128": 1.9 * US, "Simple": 4.0 * US},
             "ring": {"LL": 1.0 * US, "LL128": 2.5 * US, "Simple": 5.7 * US},
             "collnet": {"Simple": 3.7 * US}, "nvls": {"Simple": 0.0}, "nvlstree": {"Simple": 0.0},
             "pat": {"Simple": 4.0 * US}},
    "net": {"tree": {"LL": 5.0 * US, "LL128": 8.5 * US, "Simple": 14.0 * US},
            "ring": {"LL": 2.7 * US, "LL128": 4.0 * US, "Simple": 14.0 * US},
            "collnet": {"Simple": 31.0 * US}, "nvls": {"Simple": 18.0 * US}, "nvlstree": {"Simple": 20.9 * US},
            "pat": {"Simple": 14.0 * US}},
}
# graph->latencyInter: what the network plugin reports (props->latency), added to every network step (twice for
# Simple: the flush). NCCL's InfiniBand and socket transports report 0 ("not set"); AWS's EFA plugin reports its
# platform's figure, 35 us on P5en and P6-B200 (aws-ofi-nccl src/platform-aws.cpp at 2daf7d3)
NET_LATENCY = {"ib": 0.0, "roce": 0.0, "efa": 35.0 * US}
# getNetOverhead: a proxy's post per inter-node ring step, 2 us on AMD hosts and 1 us on others, x3 for Simple
NET_OVERHEAD = {"intel": 1.0 * US, "amd": 2.0 * US, "arm": 1.0 * US}
NET_OVERHEAD_SIMPLE = 3
RING_PLATEAU = {"pre-ampere": 1.9, "ampere+": 1.4}  # Simple ring allreduce across nodes: latency x this
COLLNET_ARITY_LATENCY = 0.4 * US  # CollNet Direct: serialisation per local rank
PAT_LATENCY_PER_RANK = 2.8 * US   # PAT's linear part, per rank
PAT_NET_DIVISOR = 3.5             # PAT's log part: the network latency / 3.5 per level

# GPU generations as NCCL indexes them (compute capability 7.x, 8.x, 9.x, 10.x and later)
ARCHS = ("volta", "ampere", "hopper", "blackwell")
# llMaxBws[row][nodes index 1 / 2 / more]: the most LL carries; one node by GPU generation, several by CPU
LL_MAX_BW = {"volta": (39.0 * GB, 39.0 * GB, 20.4 * GB), "ampere": (87.7 * GB, 22.5 * GB, 19.0 * GB),
             "hopper": (141.0 * GB, 45.0 * GB, 35.0 * GB), "blackwell": (282.0 * GB, 90.0 * GB, 70.0 * GB)}
# the rows NCCL reads across nodes, by CPU vendor (AMD and mixed: row 1; Intel, Arm and the rest: row 0)
LL_MAX_BW_ACROSS_NODES = {"intel": "volta", "amd": "ampere", "arm": "volta"}
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}  # nvlsEfficiency (Volta and Ampere have no NVLS)
# NCCL runs NVLS for all-gather and reduce-scatter over at most this many GPUs of a node (allreduce over any):
# NCCL_MAX_NVLS_ARITY, src/include/device.h, checked in src/enqueue.cc (ncclGetAlgoInfo's cost table)
NVLS_MAX_ARITY = 32

LL_SHARE = 0.5             # ring LL: half of every 8-byte store is its flag
LL128_SHARE = 0.92         # ring LL128: 120 of 128 bytes carry data ("0.92 /*120.0/128.0*/")
TREE_SHARE = 0.92          # tree allreduce
TREE_LL_SHARE = 1 / 3.8    # tree LL
TREE_LL128_SHARE = {"one node": 7 / 9, "across nodes": 120 / 128}
PAT_SHARE = 0.75           # PAT
COLLNET_HOPPER_SHARE = 0.85  # CollNet Direct on compute capability 9.0 and later
TREE_ALGBW = 0.5           # tree and CollNet: algorithm bandwidth is half the bus bandwidth NCCL models
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MiB: "trees are not perfectly sticking to
# the model for medium sizes"
TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
# per-channel caps on one node (perChMaxRingLL128Bws, perChMaxTreeLL128Bws, perChMaxTreeBws; the N1 column), GB/s a
# channel of the graph: NCCL's tuner caps the rate at its graph's channels x these
PER_CHANNEL_RING_LL128 = {"volta": 20.0 * GB, "ampere": 20.0 * GB, "hopper": 36.7 * GB, "blackwell": 40.0 * GB}
PER_CHANNEL_TREE_LL128 = {"volta": 20.0 * GB, "ampere": 20.0 * GB, "hopper": 36.7 * GB, "blackwell": 55.6 * GB}
PER_CHANNEL_TREE = {"volta": 26.5 * GB, "ampere": 24.0 * GB, "hopper": 38.7 * GB, "blackwell": 70.0 * GB}
CHANNELS_PER_NIC = 2  # rings across nodes: two channels per NIC ("16 rings for 8 NICs", nccl#518)

# NVLS allreduce on one host, as NCCL runs it (not in its tuner's model): src/transport/nvls.cc, src/enqueue.cc
# (calcCollChunking) and src/device/all_reduce.h (RunWorkColl NVLS, oneNode) at 5067397
NVLS_CHANNELS = {"hopper": 16, "blackwell": 24}  # NVLS_NCHANNELS_SM90, NVLS_NCHANNELS_SM100_NVL (one node)
NVLS_CHUNK = 128 * 1024                          # NCCL_NVLS_CHUNKSIZE's default
# ... unless the platform sets it: on AWS, the EFA network plugin NCCL loads on every node (aws-ofi-nccl, since
# v1.10.0-aws: commit 3defe9e "Ensure NVLS and NVLSTree chunksizes are matched"; src/platform-aws.cpp at 2daf7d3,
# the default environment of every P-series platform) sets NCCL_NVLS_CHUNKSIZE=524288, and NCCL_BUFFSIZE=8 MiB
# so that NCCL's Simple step (1 MiB) does not cap it below that
NVLS_CHUNK_BY_FABRIC = {"efa": 512 * 1024}
# calcCollChunking: below (times x concurrent ops x chunk) bytes the chunk shrinks to (size), concurrent ops being
# channels x heads (one head a GPU on one node)
NVLS_CHUNK_SHRINK = ((64, 65536), (8, 32768), (2, 16384))
# each channel's warps form a three-stage pipeline, a loop (one chunk for each head) at a time: scatter the input
# to the heads, reduce through the switch and store the sum to every GPU (multimem), gather the result
NVLS_STAGES = 3
# a loop's steps synchronise through NCCL's FIFOs like a Simple step over NVLink (hwLatencies: 3.4 us); NCCL's NVLS
# efficiency holds the loops of its default chunk, so only the further loops of smaller chunks pay it
NVLS_LOOP_SYNC = HW_LATENCY["nvlink"]["ring"]["Simple"]


def arch_of(compute_capability: float) -> str:
    """NCCL's generation index for a compute capability: 7.x volta, 8.x ampere, 9.x hopper, 10+ blackwell."""
    if compute_capability >= 10:
        return "blackwell"
    return "hopper" if compute_capability >= 9 else "ampere" if compute_capability >= 8 else "volta"


def ll_max_bw(arch: str, nodes: int, cpu: str = "intel") -> float:
    """The most LL carries: by GPU generation on one node, by CPU vendor across nodes."""
    row = arch if nodes == 1 else LL_MAX_BW_ACROSS_NODES[cpu]
    return LL_MAX_BW[row][min(nodes, 3) - 1]


def tree_correction(protocol: str, nbytes: int) -> float:
    """NCCL's correction of tree bandwidth at medium sizes (1 outside 64 B to 256 MiB)."""
    index = (nbytes >> 6).bit_length() - 1
    table = TREE_CORRECTION[protocol]
    return table[index] if 0 <= index < len(table) - 1 else 1.0


def nvls_chunk(nbytes: int, concurrent_ops: int, largest: int = NVLS_CHUNK) -> int:
    """The chunk NCCL's NVLS allreduce uses for ``nbytes`` with ``concurrent_ops`` (channels x heads) at once,
    ``largest`` being NCCL_NVLS_CHUNKSIZE (NCCL's default, or what the platform sets: :data:`NVLS_CHUNK_BY_FABRIC`)."""
    chunk = largest
    for times, size in NVLS_CHUNK_SHRINK:
        if nbytes < times * concurrent_ops * chunk and chunk > size:
            chunk = size
    return chunk


def log2i(n: int) -> int:
    """NCCL's log2i: the floor of log2 n (0 for n < 2)."""
    return max(int(n).bit_length() - 1, 0)
