"""Lab 05 at datacenter scale: ring, double binary tree and hierarchical allreduce from one node to 100,000
GPUs on a published cluster design, where the ring's latency overtakes its bandwidth, and what NCCL's own
model picks at each scale. Every figure here is a prediction (the cost model, or NCCL's model of itself).

The design is the one DGX H100 SuperPOD-style clusters publish: nodes of 8 H100 SXM on NVSwitch, one 400
Gbit/s InfiniBand NIC per GPU on PCIe 5.0, a non-blocking fabric (``rl.topology.cluster("h100", nodes)``);
latencies are assumed (1-2 us a hop), as in every preset. The cost model prices these schedules compactly
(``ringlab.predict.compact``), so 100,000 GPUs take a second or two.
"""
from __future__ import annotations

from ...algorithms import build
from ...predict.costmodel import busbw, predict
from ...predict.nccl import predict_nccl
from ...topology import Topology, cluster

GPUS = (8, 64, 512, 4096, 16384, 100000)
NBYTES = 1 << 30  # a 1 GiB allreduce: the top of an nccl-tests sweep, a large gradient bucket
PER_NODE = 8
ALGORITHMS = {"ring": ("allreduce.ring", {}), "double binary tree": ("allreduce.dbtree", {}),
              "hierarchical": ("allreduce.hierarchical", {"local": PER_NODE})}
DBTREE_SEGMENTS = (32, 128, 512)  # NCCL pipelines a tree in fixed-size pieces: the best of these counts


def design(gpus: int) -> Topology:
    """The published cluster design with ``gpus`` GPUs: nodes of 8 H100 and a 400G NIC per GPU."""
    return cluster("h100", -(-gpus // PER_NODE))


def at_scale(gpus=GPUS, nbytes: int = NBYTES) -> list[dict]:
    """One row per (GPU count, algorithm): predicted seconds and busbw, and the ring's three terms summed over
    its steps: ``latency_s`` (messages), ``transfer_s`` (bytes over the busiest link), ``reduce_s`` (adds).
    The double binary tree at its best segment count of :data:`DBTREE_SEGMENTS` (``segments``)."""
    rows = []
    for n in gpus:
        machine = design(n)
        for label, (name, options) in ALGORITHMS.items():
            tries = [dict(options, segments=s) for s in DBTREE_SEGMENTS] if name == "allreduce.dbtree" else [options]
            p = min((predict(build(name, n, **o), nbytes, machine) for o in tries), key=lambda p: p.seconds)
            rows.append({"gpus": n, "algorithm": label, "seconds": p.seconds,
                         "busbw_Bps": busbw("allreduce", n, nbytes, p.seconds), "steps": len(p.steps),
                         "latency_s": float(p.steps["latency"].sum()), "transfer_s": float(p.steps["transfer"].sum()),
                         "reduce_s": float(p.steps["reduce"].sum()), "segments": p.schedule.options.get("segments"),
                         "topology": machine.name, "source": "predicted (cost model)"})
    return rows


def _ring_parts(n: int, nbytes: int):
    p = predict(build("allreduce.ring", n), nbytes, design(n))
    return p, float(p.steps["latency"].sum()), float(p.steps["transfer"].sum())


def ring_turning_point(nbytes: int = NBYTES, low: int = PER_NODE * 2, high: int = 100000) -> dict:
    """The fewest GPUs (whole nodes) at which the predicted ring's latency part passes its transfer part,
    found by bisection on the predictions, and the same point from one step's figures: n = K / (alpha B)."""
    def latency_bound(n: int) -> bool:
        _, latency, transfer = _ring_parts(n, nbytes)
        return latency >= transfer

    low, high = low // PER_NODE, -(-high // PER_NODE)  # in nodes
    if latency_bound(low * PER_NODE) or not latency_bound(high * PER_NODE):
        raise ValueError(f"the ring's latency does not pass its transfer time between {low * PER_NODE} and "
                         f"{high * PER_NODE} GPUs for {nbytes} bytes")
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if latency_bound(middle * PER_NODE) else (middle, high)
    n = high * PER_NODE
    p, latency, transfer = _ring_parts(n, nbytes)
    step = len(p.steps) // 2
    alpha = float(p.steps["latency"][step])
    link = p.topology.links[int(p.steps["bottleneck"][step]) // 2]
    return {"gpus": n, "alpha_s": alpha, "rate_Bps": link.rate, "link": p.bottleneck_link(step),
            "formula_gpus": nbytes / (alpha * link.rate), "latency_s": latency, "transfer_s": transfer}


def nccl_at_scale(gpus=GPUS, nbytes: int = NBYTES) -> list[dict]:
    """What NCCL's own model predicts at each scale: its pick for the allreduce, and the ring and the tree
    forced; and, with one GPU a node (where NCCL runs PAT), its pick for an all-gather against the ring."""
    rows = []
    for n in gpus:
        machine = design(n)
        pick, ring, tree = (predict_nccl("allreduce", nbytes, machine, algorithm=a) for a in (None, "ring", "tree"))
        row = {"gpus": n, "pick": f"{pick.algorithm}/{pick.protocol}", "pick_busbw_Bps": pick.busbw,
               "ring_busbw_Bps": ring.busbw, "tree_busbw_Bps": tree.busbw, "source": "predicted (NCCL's model)"}
        if n > 1:
            spread = cluster("h100", n, gpus_per_node=1)
            gather = predict_nccl("allgather", nbytes, spread)
            row.update(allgather_pick=f"{gather.algorithm}/{gather.protocol}", allgather_busbw_Bps=gather.busbw,
                       allgather_ring_busbw_Bps=predict_nccl("allgather", nbytes, spread,
                                                            algorithm="ring").busbw)
        rows.append(row)
    return rows


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:,.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def describe_scale(rows: list[dict], turning: dict, nbytes: int = NBYTES) -> str:
    """What the predictions say, in words computed from them: the fastest at each end, where the ring's time
    goes at the largest scale, and where its latency passes its transfer time."""
    first, last = min(r["gpus"] for r in rows), max(r["gpus"] for r in rows)
    lines = []
    for n in (first, last):
        mine = sorted((r for r in rows if r["gpus"] == n), key=lambda r: r["seconds"])
        lines.append(f"{n:,} GPUs, {nbytes / 2**30:g} GiB, predicted: " + ", ".join(
            f"{r['algorithm']} {_ms(r['seconds'])} ({r['busbw_Bps'] / 1e9:.3g} GB/s busbw)" for r in mine)
            + f"; the {mine[0]['algorithm']} is fastest.")
    ring = next(r for r in rows if r["gpus"] == last and r["algorithm"] == "ring")
    hier = next(r for r in rows if r["gpus"] == last and r["algorithm"] == "hierarchical")
    lines.append(f"At {last:,} GPUs the ring takes {ring['steps']:,} steps: {_ms(ring['latency_s'])} of latency "
                 f"against {_ms(ring['transfer_s'])} moving bytes ({ring['latency_s'] / ring['seconds']:.0%} latency). "
                 f"The hierarchy keeps its bytes on NVLink and its NICs, but its ring across {last // PER_NODE:,} "
                 f"nodes still pays {_ms(hier['latency_s'])} of its {_ms(hier['seconds'])} in latency.")
    lines.append(f"The ring's latency passes its transfer time from {turning['gpus']:,} GPUs (bisection on the "
                 f"predictions). From one step: alpha = {turning['alpha_s'] * 1e6:.3g} us (its slowest message), a "
                 f"chunk of K/n over {turning['rate_Bps'] / 1e9:.3g} GB/s ({turning['link']}), so 2(n-1) alpha = "
                 f"2(n-1) K/(n B) at n = K/(alpha B) = {turning['formula_gpus']:,.0f} GPUs.")
    return "\n".join(lines)


def describe_nccl(rows: list[dict]) -> str:
    """NCCL's model at each scale, in words: its pick, and the ring against the tree."""
    lines = []
    for r in rows:
        line = (f"{r['gpus']:,} GPUs: NCCL's model picks {r['pick']} ({r['pick_busbw_Bps'] / 1e9:.3g} GB/s); "
                f"forced, the ring {r['ring_busbw_Bps'] / 1e9:.3g} GB/s and the tree {r['tree_busbw_Bps'] / 1e9:.3g} GB/s")
        if "allgather_pick" in r:
            line += (f". One GPU a node, an all-gather of as much: {r['allgather_pick']} "
                     f"({r['allgather_busbw_Bps'] / 1e9:.3g} GB/s, the ring {r['allgather_ring_busbw_Bps'] / 1e9:.3g})")
        lines.append(line + ".")
    return "\n".join(lines)
