"""RCCL's own choice on AMD Instinct GPUs: where its tuner differs from NCCL's, as numbers.

RCCL is AMD's fork of NCCL, and picks an algorithm and a protocol per call the same way, ``latency + bytes /
bandwidth`` for each pair (``ncclTopoGetAlgoTime``), but from constants of its own, chosen per machine
(ROCm/rccl at 0cbce2a, 2024-10-24: ``src/graph/tuning.cc``, ``src/graph/topo.h``, ``src/graph/rome_models.cc``):

- algorithms: Ring and Tree only on these machines (no NVLS: no switch adds; CollNet not modelled here; no PAT
  in that version). Tree runs allreduce only, and RCCL leaves Tree with Simple out on one MI300-class node
  (``gfx94``, every rank on it).
- protocols: LL and Simple. RCCL enables LL128 only on gfx90a with a node model that asks for it; later versions
  (ROCm/rocm-systems, projects/rccl) enable it on gfx942 in size ranges, which is left out here.
- bandwidth: RCCL's topology rates an xGMI link at 48 GB/s on MI300 (gfx94x) and MI355X (gfx95x), 36 on MI250X
  (``ncclTopoXGMISpeed``: the links' ``RATINGS``), and models a node's bus bandwidth as the sum of a GPU's links
  (``getTotalBw``; on a full mesh, what many rings over every link reach: ``rings.mesh_ring_rates``), scaled per
  algorithm and protocol by its tuning model's ``bwRatio``: 1.00 for Ring with Simple, 0.08 for Ring with LL on
  an 8-GPU MI300-class node (tuning model 5, which rome_model_79, 81 and 84 select), 0.04 in the default model 0.
  NCCL's caps on LL (``llMaxBws``) and its per-channel tree caps are NVIDIA's only.
- latency: a base of 12 us (LL, LL128) or 17 us (Simple) a call, then per step by the hardware crossed, from the
  tuning model (xGMI counts as NVLink); across nodes, RCCL counts 2 x nodes network steps in a ring allreduce
  and scales the ring's bandwidth by ``ringCorrectionFactor`` per size; Tree's by ``treeCorrectionFactor``.

Left out: MSCCL and MSCCL++, which RCCL runs instead of Ring for allreduce at small sizes on MI300X (its rome
model enables MSCCL; up to about 1 MiB), and the channel counts RCCL sets per size. Everything here is a model of
RCCL's model of itself, labelled as such; none of it is fitted to the published MI300X and MI325X sweeps that
``benchmarks/model_vs_published.py`` holds it to.
"""
from __future__ import annotations

from dataclasses import dataclass

US = 1e-6
SOURCE = ("RCCL's tuning model: src/graph/tuning.cc (baseLat, rcclTuningModel, ncclTopoTuneModel, "
          "ncclTopoGetAlgoTime), src/graph/topo.h (ncclTopoXGMISpeed), src/graph/rome_models.cc; ROCm/rccl at 0cbce2a")

ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("LL", "Simple")
# baseLat[algorithm][protocol], us: paid once per call
BASE_LATENCY = {"ring": {"LL": 12.0 * US, "LL128": 12.0 * US, "Simple": 17.0 * US},
                "tree": {"LL": 12.0 * US, "LL128": 12.0 * US, "Simple": 17.0 * US}}


@dataclass(frozen=True)
class TuningModel:
    """One of RCCL's ``rcclTuningModel`` entries: ``hw_latency[hardware][algorithm][protocol]`` (s, per step or
    hop), ``bw_ratio[nodes <= 2 or more][algorithm][protocol]``, and the bandwidth corrections by size for trees
    and for rings across nodes, indexed by log2(bytes / 64) up to 26."""

    hw_latency: dict
    bw_ratio: dict
    tree_correction: dict
    ring_correction: dict


def _by_protocol(ll, ll128, simple) -> dict:
    return {"LL": ll, "LL128": ll128, "Simple": simple}


def _latencies(rows) -> dict:
    return {hw: {"tree": _by_protocol(*(x * US for x in tree)), "ring": _by_protocol(*(x * US for x in ring))}
            for hw, (tree, ring) in zip(("nvlink", "pcie", "net"), rows)}


def _ratios(rows) -> dict:
    return {key: {"tree": _by_protocol(*tree), "ring": _by_protocol(*ring)}
            for key, (tree, ring) in zip(("up to 2 nodes", "more nodes"), rows)}


TUNING = {
    0: TuningModel(  # the default, for every node no rome model matches (2 or 4 MI300X, MI250X's rome_model_73)
        _latencies((((0.8, 1.4, 2.5), (0.8, 2.2, 3.6)), ((2.2, 2.2, 5.7), (2.2, 2.2, 5.7)),
                    ((11.8, 18.2, 20.8), (9.5, 19.8, 15.1)))),
        _ratios((((0.04, 0.22, 0.91), (0.04, 0.34, 1.00)), ((0.04, 0.22, 0.95), (0.04, 0.34, 1.00)))),
        _by_protocol((.1, .2, .1, .1, .9, .3, .4, .1, .2, .4, .2, .1, .3, .3, .2, .2, .2, .1, .1, .1, .1, .1, .1, .1,
                      .1, .1, .1),
                     (.1, .3, 1., .1, .5, 1., .9, 1., 1., 1., .3, .1, .4, .5, .5, .4, .4, .3, .3, .2, .2, .2, .2, .2,
                      .2, .2, .2),
                     (.2, 1., .1, .1, .7, .2, .4, .1, .1, .3, .4, .3, .6, .8, 1., 1., 1., 1., .9, .8, .8, .8, .8, .8,
                      .9, .9, .9)),
        _by_protocol((.1, .1, .1, .1, .1, .2, .4, .2, .3, .5, .3, .1, .5, .5, .3, .2, .2, .1, .1, .1, .1, .1, .1, .1,
                      .1, .1, .1),
                     (.1, .1, .1, .1, .1, .1, .1, .1, .1, .3, 1., 1., 1., 1., 1., 1., .8, .7, .5, .4, .4, .3, .3, .3,
                      .3, .3, .3),
                     (1., .8, .2, 1., 1., .3, 1., .1, .1, .2, .2, .1, .5, 1., .8, .8, 1., .9, 1., 1., 1., 1., 1., 1.,
                      1., 1., 1.))),
    5: TuningModel(  # 8 MI300-class GPUs on xGMI, with 0, 8 or 16 NICs (rome_model_79, 81, 84: "tuning=5")
        _latencies((((0.9, 0.0, 2.3), (0.8, 0.0, 2.1)), ((2.2, 2.2, 5.7), (2.2, 2.2, 5.7)),
                    ((10.5, 0.0, 25.0), (9.5, 0.0, 320.0)))),
        _ratios((((0.06, 0.00, 0.11), (0.08, 0.00, 1.00)), ((0.06, 0.00, 0.59), (0.08, 0.00, 1.00)))),
        _by_protocol((.1,) * 6 + (1., 1., 1., 1., 1., .6, 1., .9, 1., 1.) + (.1,) * 11, (0.0,) * 27,
                     (.1,) * 15 + (.7,) + (1.,) * 10 + (.8,)),
        _by_protocol((.1,) * 11 + (1., .2, 1., .4, .4, .1, .2, .2) + (.1,) * 8, (0.0,) * 27,
                     (.1,) * 23 + (.8, 1., 1., 1.))),
}


def tuning_index(machine) -> int:
    """The tuning model RCCL selects: 5 for a node of 8 MI300-class GPUs (its rome models for them; MI355X, newer
    than the version modelled, is taken as its MI300X), 0 otherwise."""
    return 5 if machine.arch in ("cdna3", "cdna4") and machine.gpus_per_node == 8 else 0


def unusable(algorithm: str, collective: str, facts) -> str | None:
    """Why RCCL would not run ``algorithm`` for ``collective`` here, or None where it would."""
    if algorithm == "ring":
        return None
    if algorithm == "tree":
        return None if collective == "allreduce" else f"RCCL runs {collective} with Ring only here"
    if algorithm in ("nvls", "nvlstree"):
        return "RCCL has no NVLS: no switch between AMD GPUs adds"
    if algorithm == "pat":
        return "the RCCL modelled here (0cbce2a) has no PAT"
    return "CollNet under RCCL is not modelled here"


def protocol_unusable(algorithm: str, protocol: str, facts) -> str | None:
    """Why RCCL would not run ``algorithm`` with ``protocol`` here, or None where it would."""
    if protocol not in PROTOCOLS:
        return "RCCL enables LL128 only on MI250X nodes whose model asks for it, not modelled here"
    if (algorithm, protocol) == ("tree", "Simple") and facts.arch == "cdna3" and facts.nodes == 1:
        return "RCCL leaves Tree with Simple out on one MI300-class node"
    return None


def algbw(collective: str, algorithm: str, protocol: str, facts, across: float, nbytes: int) -> float:
    """Bytes/s of the call's size: the rate the algorithm's busiest links allow (``across``: a node's ring rate
    when it spans nodes), scaled as RCCL's tuning model scales it for the protocol, and corrected by size."""
    model = TUNING[tuning_index(facts.machine)]
    ratio = model.bw_ratio["up to 2 nodes" if facts.nodes <= 2 else "more nodes"][algorithm][protocol]
    n, index = facts.nranks, min(max((nbytes >> 6).bit_length() - 1, 0), 26)
    if algorithm == "ring":
        bus = (facts.ring if facts.nodes == 1 else min(across, facts.net)) * ratio
        if facts.nodes > 1:
            bus *= model.ring_correction[protocol][index]
        steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reduce_scatter": n - 1}.get(collective, n)
        rate = bus * n / steps
        if collective in ("allreduce", "reduce_scatter", "reduce"):
            rate = min(rate, facts.reduce_rate * n / (n - 1))  # reduction overlapped with the transfer
        return rate
    chain = facts.ring
    bus = (chain if facts.nodes == 1 else min(chain, facts.net * (2 if facts.nodes == 2 else 1))) * ratio
    return 0.5 * bus * model.tree_correction[protocol][index]


def latency(collective: str, algorithm: str, protocol: str, facts) -> float:
    """RCCL's latency per call: its base, then per step (ring) or per level (tree) by the hardware crossed."""
    model = TUNING[tuning_index(facts.machine)]
    intra_hw = "nvlink" if facts.machine.intra in ("xgmi", "nvlink") else "pcie"
    n, nodes = facts.nranks, facts.nodes
    base = BASE_LATENCY[algorithm][protocol]
    intra = model.hw_latency[intra_hw][algorithm][protocol]
    inter = model.hw_latency["net"][algorithm][protocol]
    if algorithm == "tree":
        per_node = n // nodes
        return base + 2 * ((per_node - 1) * intra + (max(nodes, 1).bit_length() - 1) * inter)
    steps = {"allreduce": 2 * (n - 1), "allgather": n - 1, "reduce_scatter": n - 1}.get(collective, n)
    if collective in ("broadcast", "reduce"):
        hw = "net" if nodes > 1 else intra_hw
        return base + steps * model.hw_latency[hw]["tree" if protocol == "Simple" else "ring"][protocol]
    crossing = 0 if nodes == 1 else 2 * nodes if collective == "allreduce" else nodes - 1
    if nodes > 1:  # a proxy's post per network step, as NCCL's getNetOverhead: 2 us on AMD hosts, x3 for Simple
        overhead = (2.0 if facts.machine.cpu == "amd" else 1.0) * US * (3 if protocol == "Simple" else 1)
        intra = max(intra, overhead)
    return base + max(steps - crossing, 0) * intra + crossing * inter


__all__ = ["SOURCE", "ALGORITHMS", "PROTOCOLS", "BASE_LATENCY", "TUNING", "TuningModel", "tuning_index",
           "unusable", "protocol_unusable", "algbw", "latency"]
