"""Lab 02, reduce and broadcast: the pipelined chain broadcast's time (exercise) and the lab's quiz."""
from __future__ import annotations

import math

from ..algorithms import build
from ..lab.exercises import compare, exercise
from ..lab.quiz import Question, Quiz
from ..predict.costmodel import best_segments, predict
from ..topology import uniform

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


# --- the exercise ---------------------------------------------------------------------------------------

def _chain_time(K, n, S, B):
    return K * (S + n - 2) / (S * B)


@exercise(_chain_time, "formula")
def check_chain_time(chain_time):
    """Compare ``chain_time(K, n, S, B)`` with the cost model's pipelined chain broadcast on a
    network with no latency (bandwidth B everywhere)."""
    def cost_model(K, n, S, B):
        return predict(build("broadcast.chain", n, segments=S), K, uniform(n, bandwidth=B, latency=0.0)).seconds

    cases = [dict(K=1 << 20, n=2, S=1, B=1e9), dict(K=1 << 20, n=4, S=4, B=1e9), dict(K=1 << 24, n=8, S=16, B=10e9),
             dict(K=1 << 26, n=16, S=64, B=25e9)]
    compare(chain_time, "chain_time", cases, cost_model,
             "the first segment needs n-1 steps to reach the last rank, and the other S-1 segments follow one "
             "step apart; each step moves one segment of K/S bytes at B bytes/s.")
    print("Correct: K(S+n-2)/(S B) matches the cost model.")


# --- the quiz -------------------------------------------------------------------------------------------

def _steps(name, nranks, **options):
    return len(build(name, nranks, **options).steps)


def _halving(n):
    left, seq = n, [n]
    while left > 1:
        left = math.ceil(left / 2)
        seq.append(left)
    return {"halving": " -> ".join(map(str, seq)), "chain": _steps("reduce.chain", n),
            "direct": _steps("reduce.direct", n)}


def _chain_ms(mib, n, S, gbps):
    return predict(build("broadcast.chain", n, segments=S), mib * MiB, uniform(n, bandwidth=gbps * 1e9,
                                                                             latency=0.0)).seconds * 1e3


def _best_segments(kib, n, alpha_us, gbps):
    return best_segments(n, kib * KiB, uniform(n, bandwidth=gbps * 1e9, latency=alpha_us * 1e-6))[0]


def _best_direction(small_kib, kib, n, alpha_us, gbps):
    small, big = _best_segments(small_kib, n, alpha_us, gbps), _best_segments(kib, n, alpha_us, gbps)
    return "up" if small > big else "down" if small < big else "same"


QUIZ = Quiz("02", [
    Question(
        "A binomial-tree reduce on {n} ranks: how many steps does it take?",
        lambda n: _steps("reduce.tree", n), given=dict(n=13), unit="steps", rel_tol=0, derived=_halving,
        worked="ceil(log2 {n}) = {answer}: each step halves the ranks that still hold a partial sum ({halving}), "
               "counted from ringlab's `reduce.tree` schedule. A direct reduce takes {direct} step but loads the "
               "root with {n} - 1 buffers; a chain takes {chain} steps.",
        hint="each step, half of the ranks still holding a partial sum send it to the other half: ceil(log2 n)."),
    Question(
        "A chain broadcast of {mib} MiB over {n} ranks, cut into S = {S} segments, on links of {gbps:g} GB/s with no "
        "latency. How many milliseconds does it take?",
        _chain_ms, given=dict(mib=64, n=8, S=16, gbps=10.0), unit="ms",
        derived=lambda mib, n, S, gbps: {"unsplit": _chain_ms(mib, n, 1, gbps),
                                         "limit": mib * MiB / (gbps * 1e9) * 1e3},
        worked="K(S+n-2)/(S B) = {mib} MiB x ({S}+{n}-2) / ({S} x {gbps:g} GB/s) = {answer:.2f} ms (ringlab's cost "
               "model). Unsplit (S = 1) it would be (n-1)K/B = {unsplit:.2f} ms; as S grows it tends to K/B = "
               "{limit:.2f} ms, whatever n is.",
        hint="the first segment takes n-1 steps to reach the last rank and the other S-1 follow one step apart: "
             "S+n-2 steps of K/S bytes each."),
    Question(
        "A chain broadcast of {kib} KiB over {n} ranks with alpha = {alpha_us:g} us per step and B = {gbps:g} GB/s: "
        "which segment count S is fastest?",
        _best_segments, given=dict(kib=4096, n=4, alpha_us=20.0, gbps=5.0), unit="segments", rel_tol=0.1,
        derived=lambda kib, n, alpha_us, gbps: {
            "root": math.sqrt((n - 2) * kib * KiB / (alpha_us * 1e-6 * gbps * 1e9))},
        worked="(n+S-2)(alpha + K/(S B)) is smallest near S = sqrt((n-2) K / (alpha B)) = {root:.2f}; trying every S, "
               "ringlab's cost model finds S = {answer} fastest. Fewer segments leave the pipeline empty for "
               "longer; more pay alpha more often than they save.",
        hint="minimise (n+S-2)(alpha + K/(S B)) over S: the minimum is near sqrt((n-2) K / (alpha B))."),
    Question(
        "Same chain and links, but the buffer shrinks from {kib} KiB to {small_kib} KiB. Does the best segment count "
        "go up, go down, or stay the same?",
        _best_direction, given=dict(small_kib=64, kib=4096, n=4, alpha_us=20.0, gbps=5.0),
        choices=("up", "down", "same"),
        derived=lambda small_kib, kib, n, alpha_us, gbps: {"small": _best_segments(small_kib, n, alpha_us, gbps),
                                                            "big": _best_segments(kib, n, alpha_us, gbps),
                                                            "shrink": kib / small_kib},
        worked="{answer}: the cost model's best S is {small} for {small_kib} KiB against {big} for {kib} KiB. Every "
               "segment adds the same alpha, while the transfer time it saves shrinks with K, so the best S grows "
               "as sqrt(K) and small buffers are best sent whole (the lab's exercise 2 asks you to measure it).",
        hint="in sqrt((n-2) K / (alpha B)), what happens when K shrinks {shrink:g} times?"),
])
