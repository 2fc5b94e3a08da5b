"""Lab 05's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

import functools

from ...algorithms import build
from ...lab.quiz import Question, Quiz
from ...predict.costmodel import predict
from ...simulate import traffic
from ...topology import uniform

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


@functools.lru_cache(maxsize=8)
def _ring_prediction(n, mib, alpha_us, gbps) -> tuple[float, float]:
    """(seconds of latency, seconds in all) of the cost model's ring allreduce on a uniform network."""
    network = uniform(n, bandwidth=gbps * 1e9, latency=alpha_us * 1e-6)
    prediction = predict(build("allreduce.ring", n), mib * MiB, network)
    return float(prediction.steps["latency"].sum()), prediction.seconds


def _dbtree_ms(n, mib, alpha_us, gbps):
    from .predictions import dbtree_seconds

    return dbtree_seconds(uniform(n, bandwidth=gbps * 1e9, latency=alpha_us * 1e-6), mib * MiB)[0] * 1e3


def _ring_ms(n, mib, alpha_us, gbps):
    return _ring_prediction(n, mib, alpha_us, gbps)[1] * 1e3


def _ring_latency_share(n, mib, alpha_us, gbps):
    latency, seconds = _ring_prediction(n, mib, alpha_us, gbps)
    return latency / seconds


TREE_NAMES = {"tree": "binomial tree", "dbtree": "double binary tree", "ring": "ring"}


def _fastest_at(preset, nbytes):
    from .predictions import trees_against_ring

    rows = trees_against_ring(preset, [nbytes])["predicted"]
    return TREE_NAMES[max(rows, key=lambda r: r["busbw_Bps"])["algorithm"]]


def _busbws_at(preset, nbytes):
    from .predictions import trees_against_ring

    rows = trees_against_ring(preset, [nbytes])["predicted"]
    n = trees_against_ring(preset, [nbytes])["nranks"]
    return {"busbws": ", ".join(f"{TREE_NAMES[r['algorithm']]} {r['busbw_Bps'] / 1e6:.0f} MB/s" for r in rows),
            "tree_steps": len(build("allreduce.tree", n).steps), "ring_steps": len(build("allreduce.ring", n).steps)}


def _nvls_over_ring(preset):
    from ...predict.nvls import EFFICIENCY, LATENCY, nvls_allreduce, port_rate
    from ...topology import preset as load_preset

    machine = load_preset(preset)
    nbytes = GiB
    nvls_bytes = (nvls_allreduce(nbytes, machine) - LATENCY) * port_rate(machine) * EFFICIENCY  # K(n+1)/n
    ring_bytes = max(traffic(build("allreduce.ring", machine.nranks), nbytes)["sent"])  # 2K(n-1)/n
    return ring_bytes / nvls_bytes


@functools.lru_cache(maxsize=4)
def _turning(gib):
    from .datacenter import ring_turning_point

    return ring_turning_point(gib * GiB)


def _turning_fields(gib):
    turning = _turning(gib)
    return {"alpha_us": turning["alpha_s"] * 1e6, "gbps": turning["rate_Bps"] / 1e9,
            "formula": turning["formula_gpus"], "latency_ms": turning["latency_s"] * 1e3,
            "transfer_ms": turning["transfer_s"] * 1e3}


def _nvls_fields(preset):
    from ...topology import preset as load_preset

    n = load_preset(preset).nranks
    return {"n": n, "top": 2 * (n - 1), "bottom": n + 1}


QUIZ = Quiz("05", [
    Question(
        "A ring allreduce of {mib} MiB on {n} ranks, every message costing alpha = {alpha_us:g} us plus bytes / B with "
        "B = {gbps:g} GB/s: how many milliseconds does it take (leave out the adds)?",
        _ring_ms, given=dict(n=8, mib=64, alpha_us=5.0, gbps=12.5), unit="ms",
        derived=lambda n, mib, alpha_us, gbps: {"steps": 2 * (n - 1), "chunk_ms": mib * MiB / n / (gbps * 1e9) * 1e3},
        worked="2(n-1)(alpha + K/(nB)): {steps} steps of {alpha_us:g} us + {chunk_ms:.3f} ms = {answer:.3f} ms "
               "(ringlab's cost model on a uniform network; exercise 1's formula).",
        hint="2(n-1) steps, each one alpha plus one chunk of K/n bytes at B."),
    Question(
        "The lab's prediction for {n} ranks: {mib} MiB per rank, B = {gbps:g} GB/s, alpha = {alpha_us:g} us. What "
        "fraction of the ring's time is latency? (A number between 0 and 1.)",
        _ring_latency_share, given=dict(n=1024, mib=64, alpha_us=5.0, gbps=12.5), rel_tol=0.02,
        derived=lambda n, mib, alpha_us, gbps: {"latency_ms": _ring_prediction(n, mib, alpha_us, gbps)[0] * 1e3,
                                                "total_ms": _ring_ms(n, mib, alpha_us, gbps),
                                                "dbtree_ms": _dbtree_ms(n, mib, alpha_us, gbps)},
        worked="Latency: 2(n-1) alpha = {latency_ms:.2f} ms of {total_ms:.2f} ms, so {answer:.2f}. The bandwidth term "
               "hardly grows with n, the latency term grows as n. NCCL's double binary tree moves about as many "
               "bytes but takes about 2 log2(n) steps plus its pipeline's: the same model predicts it at "
               "{dbtree_ms:.2f} ms here (the figure's dbtree line), which is why NCCL's trees take over at scale. "
               "Lab 02's binomial tree, which sends the whole buffer on every step, does not.",
        hint="the latency part is 2(n-1) x alpha; divide it by the whole 2(n-1)(alpha + K/(nB))."),
    Question(
        "Read the tree-against-ring panel of the DGX-1 (V100): which algorithm does the cost model predict fastest "
        "for a {kib} KiB allreduce?",
        lambda preset, kib: _fastest_at(preset, kib * KiB), given=dict(preset="dgx1-v100", kib=1),
        choices=tuple(TREE_NAMES.values()), derived=lambda preset, kib: _busbws_at(preset, kib * KiB),
        worked="The {answer} (predicted busbw: {busbws}). At {kib} KiB every step is nearly all latency, so the "
               "fewest steps win: the binomial tree takes {tree_steps} steps of the whole buffer, the ring "
               "{ring_steps} steps of K/n.",
        hint="at the left edge of the DGX-1 panel, which line is highest? Fewer steps win while latency dominates."),
    Question(
        "On the 8-GPU H100 board (`hgx-h100-8`), how many times the ring's busbw ceiling can NVLS (reduction inside "
        "NVSwitch) reach, before NCCL's efficiency factor?",
        _nvls_over_ring, given=dict(preset="hgx-h100-8"), unit="times", derived=_nvls_fields,
        worked="A ring moves 2K(n-1)/n per GPU each way, NVLS K(n+1)/n: 2(n-1)/(n+1) = {top}/{bottom} = {answer:.3f} "
               "for n = {n}, from ringlab's ring schedule and its NVLS closed form (`ringlab.predict.nvls`).",
        hint="divide the ring's 2K(n-1)/n bytes per GPU by NVLS's K(n+1)/n, for n = {n}."),
    Question(
        "On the lab's datacenter design (nodes of 8 H100, a 400G NIC per GPU), every step of a {gib} GiB ring "
        "allreduce pays alpha = {alpha_us:.3g} us (its slowest message crosses PCIe, the fabric and PCIe) and "
        "moves a chunk of K/n bytes over the {gbps:.3g} GB/s PCIe link into a NIC. From how many GPUs is the "
        "ring's latency part larger than the time it spends moving bytes?",
        lambda gib: _turning(gib)["gpus"], given=dict(gib=1), unit="GPUs", derived=_turning_fields,
        worked="2(n-1) alpha = 2(n-1) K/(n B) where n = K/(alpha B) = {formula:,.0f}; the cost model's predictions, "
               "bisected over whole nodes, first pass it at {answer:,} GPUs (there: {latency_ms:.1f} ms of latency "
               "against {transfer_ms:.1f} ms of transfer). Beyond that the ring's time grows with n and NCCL's trees, "
               "2 log2 n steps, take over.",
        hint="set the latency part 2(n-1) alpha equal to the bandwidth part 2(n-1) K/(nB) and solve for n."),
])
