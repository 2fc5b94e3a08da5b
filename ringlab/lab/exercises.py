"""Checks for the labs' exercises: they run your code through ringlab and explain what is wrong.

Every ``check_...`` takes your function and returns the function the rest of the lab should use:
yours when it is right (and it says "Correct"), otherwise the reference answer, after a short
message: "not done yet" while your function still returns None, or what it returned against what
was expected, with a hint. Either way the notebook runs on, so Run All gets to the end of a lab
before every exercise is solved. Set ``RINGLAB_STRICT_EXERCISES=1`` (or pass ``strict=True``) to
make a wrong or unfinished answer raise AssertionError instead, as the tests do.
"""
from __future__ import annotations

import functools
import math
import os
import traceback
from pathlib import Path

from ..algorithms import build
from ..schedule import REDUCE, Step, make_schedule
from ..predict.costmodel import predict
from ..simulate import ScheduleError, check, traffic
from ..topology import pcie_bandwidth, uniform

STRICT_ENV = "RINGLAB_STRICT_EXERCISES"
_PACKAGE = str(Path(__file__).resolve().parent.parent)


class NotDoneYet(AssertionError):
    """The learner's function still returns None: the placeholder, untouched."""


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def _where_in_your_code(err: BaseException) -> str:
    """' (line N of your code: <text>)' for the innermost frame outside ringlab, or ''."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(_PACKAGE)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (line {frame.lineno} of your code: {frame.line.strip()})" if frame.line else ""


def exercise(reference, what: str = "answer"):
    """Turn a strict check (raises AssertionError with the verdict) into a learner's check: returns the
    function to use from here on, printing the verdict without ringlab's traceback (see the module)."""
    def wrap(strict_check):
        @functools.wraps(strict_check)
        def check_yours(yours, strict: bool | None = None):
            strict = _strict() if strict is None else strict
            name = getattr(yours, "__name__", "your function")
            meanwhile = f"(The cells below use the reference {what} until yours passes.)"
            try:
                strict_check(yours)
                return yours
            except NotDoneYet:
                if strict:
                    raise
                print(f"{name}: not done yet. Write it where the cell above says '# Write your code here.', run that "
                      f"cell, then run this one again. {meanwhile}")
            except AssertionError as err:
                if strict:
                    raise
                print(f"{name} is not right yet: {err}\n{meanwhile}")
            except Exception as err:  # the learner's own code raised
                if strict:
                    raise
                print(f"{name} raised {type(err).__name__}: {err}{_where_in_your_code(err)}\n{meanwhile}")
            return reference
        return check_yours
    return wrap


def _compare(yours, name: str, cases: list[dict], want, hint: str, rel_tol: float = 1e-6, unit: str = "s") -> None:
    """Call ``yours(**case)`` for every case and compare with ``want(**case)``; on the first
    difference raise an AssertionError naming the call, both answers and the hint (NotDoneYet when
    the first call returns None)."""
    for i, case in enumerate(cases):
        expected = want(**case)
        got = yours(*case.values())
        if got is None and i == 0:
            raise NotDoneYet(f"{name} returned None")
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=rel_tol):
            call = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in case.items())
            raise AssertionError(f"{name}({call}) returned {got!r}; expected {expected:.6g} {unit}.\nHint: {hint}")


# The reference answers: what the rest of a lab uses while a learner's answer is missing or wrong.

def _send_chunk(j, i, n):
    return (j - i) % n


def _chain_time(K, n, S, B):
    return K * (S + n - 2) / (S * B)


def _ring_time(n, K, alpha, B):
    return 2 * (n - 1) * (alpha + K / (n * B))


def _server_load(n, M, K):
    return (n - 1) * K // M + (M - 1) * K // M


def _scaled_lr(base_lr, k, step, warmup):
    return base_lr * k if step >= warmup else base_lr * (1 + (k - 1) * step / warmup)


def _pcie_gbytes(gt_per_s, encoding, lanes):
    return gt_per_s * encoding * lanes / 8


def _message_time(nbytes, alpha, bandwidth):
    return alpha + nbytes / bandwidth


def _bus_factor(kind, n):
    from .busbw import bus_factor_from_traffic

    return bus_factor_from_traffic(kind, n)


def _staged_time(nbytes, alpha, link, copy):
    return alpha + nbytes / link + 2 * nbytes / copy


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


@exercise(_chain_time, "formula")
def check_chain_time(chain_time):
    """Compare ``chain_time(K, n, S, B)`` with the cost model's pipelined chain broadcast on a
    network with no latency (bandwidth B everywhere)."""
    def cost_model(K, n, S, B):
        return predict(build("broadcast.chain", n, segments=S), K, uniform(n, bandwidth=B, latency=0.0)).seconds

    cases = [dict(K=1 << 20, n=2, S=1, B=1e9), dict(K=1 << 20, n=4, S=4, B=1e9), dict(K=1 << 24, n=8, S=16, B=10e9),
             dict(K=1 << 26, n=16, S=64, B=25e9)]
    _compare(chain_time, "chain_time", cases, cost_model,
             "the first segment needs n-1 steps to reach the last rank, and the other S-1 segments follow one "
             "step apart; each step moves one segment of K/S bytes at B bytes/s.")
    print("Correct: K(S+n-2)/(S B) matches the cost model.")


@exercise(_ring_time, "formula")
def check_ring_time(ring_time):
    """Compare ``ring_time(n, K, alpha, B)`` with the cost model's ring allreduce on a uniform network."""
    def cost_model(n, K, alpha, B):
        return predict(build("allreduce.ring", n), K, uniform(n, bandwidth=B, latency=alpha)).seconds

    cases = [dict(n=2, K=1 << 20, alpha=5e-6, B=10e9), dict(n=8, K=1 << 24, alpha=2e-6, B=25e9),
             dict(n=64, K=1 << 26, alpha=10e-6, B=12.5e9)]
    _compare(ring_time, "ring_time", cases, cost_model, "2(n-1) steps, each one latency plus one chunk of K/n bytes at B.")
    print("Correct: 2(n-1)(alpha + K/(nB)) matches the cost model.")


@exercise(_server_load, "count")
def check_server_load(server_load):
    """Compare ``server_load(n, M, K)`` with the bytes a server rank receives in ``allreduce.ps``."""
    def counted(n, M, K):
        return traffic(build("allreduce.ps", n, servers=M), K)["received"][0]

    cases = [dict(n=n, M=M, K=720720) for n, M in [(4, 1), (8, 1), (8, 2), (8, 4), (12, 3), (16, 16)]]
    _compare(server_load, "server_load", cases, counted,
             "as a server rank 0 receives its shard (K/M bytes) from each of the other n-1 ranks; as a worker it "
             "also receives the M-1 shards it does not serve.", rel_tol=0, unit="bytes received by server rank 0")
    print("Correct: a server receives (n-1)K/M as a server plus (M-1)K/M as a worker.")


@exercise(_scaled_lr, "schedule")
def check_scaled_lr(scaled_lr):
    """The linear scaling rule with linear warm-up: base_lr at step 0, base_lr * k from ``warmup`` on."""
    def rule(base_lr, k, step, warmup):
        return base_lr * k if step >= warmup else base_lr * (1 + (k - 1) * step / warmup)

    cases = [dict(base_lr=b, k=k, step=s, warmup=w) for b, k, s, w in
             [(0.001, 4, 0, 10), (0.001, 4, 5, 10), (0.001, 4, 10, 10), (0.001, 4, 500, 10), (0.1, 1, 3, 5),
              (0.01, 8, 2, 4)]]
    _compare(scaled_lr, "scaled_lr", cases, rule,
             "at step 0 it is base_lr; it rises in a straight line to base_lr * k at step warmup; after that it "
             "stays at base_lr * k.", rel_tol=1e-9, unit="")
    print("Correct: linear scaling with a linear warm-up.")


@exercise(_pcie_gbytes, "formula")
def check_pcie(pcie_gbytes):
    """Compare ``pcie_gbytes(gt_per_s, encoding, lanes)`` (GB/s per direction) with the PCIe arithmetic."""
    def spec(gt_per_s, encoding, lanes):
        generation = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5}[gt_per_s]
        return pcie_bandwidth(generation, lanes) / 1e9

    cases = [dict(gt_per_s=2.5, encoding=8 / 10, lanes=16), dict(gt_per_s=5.0, encoding=8 / 10, lanes=8),
             dict(gt_per_s=8.0, encoding=128 / 130, lanes=16), dict(gt_per_s=16.0, encoding=128 / 130, lanes=4)]
    _compare(pcie_gbytes, "pcie_gbytes", cases, spec,
             "GT/s is billions of bit transfers per second per lane; multiply by the encoding's share of useful "
             "bits and by the lanes, then divide by 8 bits per byte.", rel_tol=1e-3, unit="GB/s")
    print("Correct: PCIe 3.0 x16 carries 15.754 GB/s each way.")


@exercise(_message_time, "formula")
def check_message_time(message_time):
    """``message_time(nbytes, alpha, bandwidth)``: the alpha-beta model of one message, in seconds."""
    def model(nbytes, alpha, bandwidth):
        return alpha + nbytes / bandwidth

    cases = [dict(nbytes=k, alpha=a, bandwidth=b) for k, a, b in
             [(0, 2e-6, 10e9), (8, 2e-6, 10e9), (1 << 20, 2e-6, 10e9), (64 << 20, 1e-6, 25e9)]]
    _compare(message_time, "message_time", cases, model,
             "a fixed start-up cost alpha, plus the bytes divided by the bandwidth (bytes per second).")
    print("Correct: t = alpha + K / B.")


@exercise(_staged_time, "formula")
def check_staged_time(staged_time):
    """``staged_time(nbytes, alpha, link, copy)``: a message copied into a staging buffer, sent, and
    copied out again, one after the other (no pipelining)."""
    def model(nbytes, alpha, link, copy):
        return alpha + nbytes / link + 2 * nbytes / copy

    cases = [dict(nbytes=k, alpha=a, link=b, copy=c) for k, a, b, c in
             [(0, 2e-6, 10e9, 5e9), (1 << 20, 2e-6, 10e9, 5e9), (64 << 20, 1e-6, 15.754e9, 20e9)]]
    _compare(staged_time, "staged_time", cases, model,
             "the message itself costs alpha + K / link; staging adds one copy of K bytes at the copy rate before "
             "the send and another after the receive.")
    print("Correct: staging adds 2K / copy rate to every message.")


@exercise(_bus_factor, "factor")
def check_bus_factor(bus_factor):
    """``bus_factor(kind, n)``: counted from the traffic of the collective's bandwidth-optimal schedule,
    compared with the factors nccl-tests defines (``ringlab.schedule.BUS_FACTORS``)."""
    from ..schedule import bus_factor as nccl_tests

    cases = [dict(kind=kind, n=n) for kind in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                                "alltoall") for n in (2, 3, 4, 8)]
    _compare(bus_factor, "bus_factor", cases, lambda kind, n: nccl_tests(kind, n),
             "take the most bytes any rank receives (rl.traffic(schedule, nbytes)['received']) and divide by the "
             "size nccl-tests prints: one rank's buffer, nbytes, except for alltoall, where it is nbytes / n.",
             rel_tol=1e-3, unit="(nccl-tests' factor)")
    print("Correct: the bytes on the busiest link, over the size, give nccl-tests' factors for all six collectives.")


def _bubble_fraction(n, m):
    return (n - 1) / (m + n - 1)


@exercise(_bubble_fraction, "formula")
def check_bubble_fraction(bubble_fraction):
    """``bubble_fraction(n, m)``: the idle share of a GPipe step, against the idle stage-slots counted in
    :func:`ringlab.predict.pipeline.gpipe_schedule`'s grid for n stages and m micro-batches."""
    from ..predict.pipeline import gpipe_schedule, idle_slots

    def counted(n, m):
        grid = gpipe_schedule(n, m)
        return idle_slots(grid) / (n * len(grid[0]))

    cases = [dict(n=n, m=m) for n, m in [(4, 8), (2, 1), (4, 1), (8, 4), (8, 32), (3, 5), (1, 6)]]
    _compare(bubble_fraction, "bubble_fraction", cases, counted,
             "count a step's slots: the first micro-batch needs n-1 slots to reach the last stage, then the others "
             "follow one slot apart, and backward mirrors forward; each stage is busy for 2m of them.",
             rel_tol=1e-9, unit="(the idle share counted in the drawn schedule)")
    print("Correct: (n-1)/(m+n-1) of a GPipe step is bubble.")


from .diagnose import check_culprit, check_straggler  # noqa: E402,F401  (lab 07's checks live with its diagnosis)
from .overlap import check_step_time  # noqa: E402,F401  (lab 06's bucket model lives with its sweep)
