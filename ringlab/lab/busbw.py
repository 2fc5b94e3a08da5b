"""Bus bandwidth, derived rather than stated (lab 03).

nccl-tests reports two rates for every collective: algbw = size / time, and busbw = algbw x a
factor per collective. The factor is what the busiest rank's link carries, in units of the size,
when the collective runs its bandwidth-optimal algorithm: :data:`OPTIMAL` names the schedule for
each, and counting its bytes with :func:`ringlab.traffic` gives the factor back. :func:`scaling_rows`
then predicts, with a fitted alpha and bandwidth, why busbw stays flat over the number of ranks
while algbw falls.
"""
from __future__ import annotations

from ..algorithms import build
from ..predict.costmodel import predict
from ..schedule import Schedule, bus_factor, nccl_tests_size
from ..simulate import traffic
from ..topology import uniform

# the bandwidth-optimal schedule of each collective, whose traffic nccl-tests' factor describes
OPTIMAL = {"allreduce": ("allreduce.ring", {}), "reduce_scatter": ("reduce_scatter.ring", {}),
           "allgather": ("allgather.ring", {}), "broadcast": ("broadcast.chain", {"segments": 64}),
           "reduce": ("reduce.chain", {"segments": 64}), "alltoall": ("alltoall.pairwise", {})}


def bandwidth_optimal(kind: str, nranks: int) -> Schedule:
    """The schedule of collective ``kind`` on ``nranks`` ranks that moves the fewest bytes per link."""
    if kind not in OPTIMAL:
        raise ValueError(f"no bandwidth-optimal schedule for {kind!r}; known: {', '.join(OPTIMAL)}")
    name, options = OPTIMAL[kind]
    return build(name, nranks, **options)


def bus_factor_from_traffic(kind: str, nranks: int, nbytes: int = 1 << 20) -> float:
    """Bytes the busiest rank receives in the bandwidth-optimal schedule, over nccl-tests' size."""
    schedule = bandwidth_optimal(kind, nranks)
    return max(traffic(schedule, nbytes)["received"]) / nccl_tests_size(kind, nranks, nbytes)


def scaling_rows(alpha: float, bandwidth: float, ranks=(2, 4, 8), sizes=tuple(1 << k for k in range(12, 29, 2)),
                 algorithm: str = "allreduce.ring") -> list[dict]:
    """Predicted (cost model, uniform network at ``alpha`` and ``bandwidth``) algbw and busbw of
    ``algorithm`` over ``ranks`` and ``sizes``: rows of ranks, bytes, seconds, algbw_Bps, busbw_Bps."""
    kind = algorithm.split(".", 1)[0]
    rows = []
    for n in ranks:
        schedule, network = build(algorithm, n), uniform(n, bandwidth=bandwidth, latency=alpha)
        for nbytes in sizes:
            seconds = predict(schedule, int(nbytes), network).seconds
            algbw = nbytes / seconds
            rows.append({"ranks": n, "bytes": int(nbytes), "seconds": seconds, "algbw_Bps": algbw,
                         "busbw_Bps": algbw * bus_factor(kind, n)})
    return rows


def describe_scaling(rows: list[dict], bandwidth: float) -> str:
    """What the predicted rows show at their largest size: how algbw and busbw move with the ranks."""
    top = max(r["bytes"] for r in rows)
    last = sorted((r for r in rows if r["bytes"] == top), key=lambda r: r["ranks"])
    if len(last) < 2:
        raise ValueError("need predictions at two rank counts or more to compare")
    first, final = last[0], last[-1]
    alg_drop = 1 - final["algbw_Bps"] / first["algbw_Bps"]
    bus_spread = max(r["busbw_Bps"] for r in last) / min(r["busbw_Bps"] for r in last) - 1
    return (f"Predicted at {top / 2**20:.0f} MiB: from {first['ranks']} to {final['ranks']} ranks algbw goes from "
            f"{first['algbw_Bps'] / 1e9:.3g} to {final['algbw_Bps'] / 1e9:.3g} GB/s "
            f"({'down' if alg_drop > 0 else 'up'} {abs(alg_drop):.0%}), because each rank's link carries "
            f"2(n-1)/n of the buffer, more as n grows; busbw, algbw x 2(n-1)/n, goes from "
            f"{first['busbw_Bps'] / 1e9:.3g} to {final['busbw_Bps'] / 1e9:.3g} GB/s (within {bus_spread:.0%} of each "
            f"other), {final['busbw_Bps'] / bandwidth:.0%} of the link's {bandwidth / 1e9:.3g} GB/s at "
            f"{final['ranks']} ranks: " + ("it measures the link, whatever n is." if bus_spread < 0.25 else
                                           "the latency of 2(n-1) steps still weighs at this size."))
