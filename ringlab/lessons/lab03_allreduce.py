"""Lab 03, allreduce: the ring's reduce-scatter rule and bus bandwidth derived rather than stated
(exercises), algbw against busbw over the ranks, and the lab's quiz.

nccl-tests reports two rates for every collective: algbw = size / time, and busbw = algbw x a
factor per collective. The factor is what the busiest rank's link carries, in units of the size,
when the collective runs its bandwidth-optimal algorithm: :data:`OPTIMAL` names the schedule for
each, and counting its bytes with :func:`ringlab.traffic` gives nccl-tests' factors
(:func:`bus_factor_from_traffic`, the lab's exercise).
"""
from __future__ import annotations

from ..algorithms import build
from ..lab.exercises import NotDoneYet, compare, exercise
from ..lab.quiz import Question, Quiz
from ..predict.costmodel import busbw, predict
from ..schedule import REDUCE, Schedule, Step, bus_factor, make_schedule, nccl_tests_size
from ..simulate import ScheduleError, check, traffic
from ..topology import uniform

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10

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


# --- the exercises --------------------------------------------------------------------------------------

def _send_chunk(j, i, n):
    return (j - i) % n

def ring_with_rule(rule, nranks: int):
    """A ring allreduce whose reduce-scatter sends chunk ``rule(j, i, n)`` from rank j at step i,
    followed by the textbook allgather (rank j sends chunk (j-i+1) mod n)."""
    steps = []
    for i in range(nranks - 1):
        chunks = []
        for j in range(nranks):
            chunk = rule(j, i, nranks)
            if chunk is None and i == 0 and j == 0:
                raise NotDoneYet("send_chunk returned None")
            if isinstance(chunk, bool) or not isinstance(chunk, int):
                raise AssertionError(f"send_chunk({j}, {i}, {nranks}) returned {chunk!r}; it must return an int")
            if not 0 <= chunk < nranks:
                raise AssertionError(f"send_chunk({j}, {i}, {nranks}) returned {chunk}, but chunks are 0..{nranks - 1} "
                                     "(hint: % n keeps an index in range)")
            chunks.append(chunk)
        steps.append(Step.columns(list(range(nranks)), [(j + 1) % nranks for j in range(nranks)], chunks, REDUCE,
                                  "reduce-scatter"))
    steps += build("allreduce.ring", nranks).steps[nranks - 1:]  # the textbook allgather
    return make_schedule("allreduce", nranks, nranks, steps, name="your ring")

@exercise(_send_chunk, "rule")
def check_reduce_scatter_rule(rule, sizes=(2, 3, 4, 5, 8)):
    """Build a ring with ``rule`` for 2, 3, 4, 5 and 8 ranks and put each through the checker."""
    for n in sizes:
        try:
            check(ring_with_rule(rule, n))
        except ScheduleError as err:
            raise AssertionError(
                f"with {n} ranks your rule does not give an allreduce. The checker says:\n  {err}\n"
                "Hint: at step 0 rank j sends its own chunk j; each step after that it passes on the chunk "
                "it has just added into, which came from rank j-1.") from None
    print(f"Correct: with {', '.join(map(str, sizes))} ranks every rank ends with every chunk complete.")

def _bus_factor(kind, n):
    return bus_factor_from_traffic(kind, n)

@exercise(_bus_factor, "factor")
def check_bus_factor(bus_factor):
    """``bus_factor(kind, n)``: counted from the traffic of the collective's bandwidth-optimal schedule,
    compared with the factors nccl-tests defines (``ringlab.schedule.BUS_FACTORS``)."""
    from ..schedule import bus_factor as nccl_tests

    cases = [dict(kind=kind, n=n) for kind in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                                "alltoall") for n in (2, 3, 4, 8)]
    compare(bus_factor, "bus_factor", cases, lambda kind, n: nccl_tests(kind, n),
             "take the most bytes any rank receives (rl.traffic(schedule, nbytes)['received']) and divide by the "
             "size nccl-tests prints: one rank's buffer, nbytes, except for alltoall, where it is nbytes / n.",
             rel_tol=1e-3, unit="(nccl-tests' factor)")
    print("Correct: the bytes on the busiest link, over the size, give nccl-tests' factors for all six collectives.")


# --- the quiz -------------------------------------------------------------------------------------------

def _ring_sent_gib(n, gib):
    return max(traffic(build("allreduce.ring", n), int(gib * GiB))["sent"]) / GiB


def _naive_root_mib(n, mib):
    return traffic(build("allreduce.naive", n), mib * MiB)["received"][0] / MiB


def _ring_chunk(n, rank, step):
    return next(int(t.chunk) for t in build("allreduce.ring", n).steps[step] if t.src == rank)


def _busbw_gbps(n, mib, ms):
    return busbw("allreduce", n, mib * MiB, ms * 1e-3) / 1e9


QUIZ = Quiz("03", [
    Question(
        "A ring allreduce of a {gib:g} GiB buffer on {n} ranks: how many GiB does each rank send?",
        _ring_sent_gib, given=dict(n=8, gib=1.0), unit="GiB",
        derived=lambda n, gib: {"steps": 2 * (n - 1), "naive": _naive_root_mib(n, int(gib * 1024)) / 1024},
        worked="{steps} steps (reduce-scatter, then allgather), each sending one chunk of K/n: 2(n-1)/n x K = "
               "{answer:.3f} GiB, counted from ringlab's schedule. However many ranks, it stays under 2K; the naive "
               "root receives {naive:g} GiB.",
        hint="2(n-1) steps of one chunk each, and a chunk is K/n."),
    Question(
        "A naive allreduce (reduce to rank 0, then broadcast) of {mib} MiB on {n} ranks: how many MiB does the root "
        "receive?",
        _naive_root_mib, given=dict(n=16, mib=256), unit="MiB",
        derived=lambda n, mib: {"ring": max(traffic(build("allreduce.ring", n), mib * MiB)["received"]) / MiB},
        worked="Every other rank sends it the whole buffer: (n-1) x K = {answer:g} MiB, and it sends as much back. "
               "A ring rank receives {ring:g} MiB for the same allreduce.",
        hint="every rank but the root sends the root its whole buffer."),
    Question(
        "Ring allreduce on {n} ranks: at step i = {step} of the reduce-scatter, which chunk does rank j = {rank} send "
        "to rank {next_rank}?",
        _ring_chunk, given=dict(n=5, rank=1, step=3), rel_tol=0,
        derived=lambda n, rank, step: {"next_rank": (rank + 1) % n},
        worked="(j - i) mod n = ({rank} - {step}) mod {n} = {answer}, read from ringlab's `allreduce.ring` schedule: "
               "at "
               "step 0 a rank sends its own chunk, and each step after it passes on the chunk it has just added into.",
        hint="exercise 1's rule: chunk (j - i) mod n; Python's % gives a result from 0 to n-1."),
    Question(
        "nccl-tests reports an allreduce of {mib} MiB on {n} GPUs taking {ms:g} ms. What bus bandwidth does it print, "
        "in GB/s (1e9 bytes/s)?",
        _busbw_gbps, given=dict(n=8, mib=256, ms=20.0), unit="GB/s",
        derived=lambda n, mib, ms: {"algbw": mib * MiB / (ms * 1e-3) / 1e9, "factor": 2 * (n - 1) / n},
        worked="algbw = size / time = {algbw:.2f} GB/s; busbw = algbw x 2(n-1)/n = {algbw:.2f} x {factor:g} = "
               "{answer:.2f} GB/s: what each GPU's link carried per second, comparable across rank counts.",
        hint="algbw = bytes / seconds (1 MiB = 2**20 bytes); busbw multiplies it by 2(n-1)/n for allreduce."),
])
