"""Checks for the labs' exercises: they run your code through ringlab and explain what is wrong."""
from __future__ import annotations

import math

from ..algorithms import build
from ..schedule import REDUCE, Step, make_schedule
from ..simulate import ScheduleError, check


def _expect_close(got, want: float, rel_tol: float, message: str) -> None:
    """Raise ``message`` unless ``got`` is a number within ``rel_tol`` of ``want``."""
    if not isinstance(got, (int, float)) or isinstance(got, bool) or not math.isclose(got, want, rel_tol=rel_tol):
        raise AssertionError(message)


def ring_with_rule(rule, nranks: int):
    """A ring allreduce whose reduce-scatter sends chunk ``rule(j, i, n)`` from rank j at step i,
    followed by the textbook allgather (rank j sends chunk (j-i+1) mod n)."""
    steps = []
    for i in range(nranks - 1):
        chunks = []
        for j in range(nranks):
            chunk = rule(j, i, nranks)
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


def check_reduce_scatter_rule(rule, sizes=(2, 3, 4, 5, 8)) -> None:
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


def check_chain_time(chain_time) -> None:
    """Compare ``chain_time(K, n, S, B)`` with the cost model's pipelined chain broadcast on a
    network with no latency (bandwidth B everywhere)."""
    from ..predict.costmodel import predict
    from ..topology import uniform

    for n, S, K, B in [(2, 1, 1 << 20, 1e9), (4, 4, 1 << 20, 1e9), (8, 16, 1 << 24, 10e9), (16, 64, 1 << 26, 25e9)]:
        want = predict(build("broadcast.chain", n, segments=S), K, uniform(n, bandwidth=B, latency=0.0)).seconds
        got = chain_time(K, n, S, B)
        _expect_close(got, want, 1e-6,
                f"chain_time(K={K}, n={n}, S={S}, B={B:g}) returned {got!r}, but the cost model gives {want:.6g} s.\n"
                "Hint: the first segment needs n-1 steps to reach the last rank, and the other S-1 segments "
                "follow one step apart; each step moves one segment of K/S bytes at B bytes/s.")
    print("Correct: K(S+n-2)/(S B) matches the cost model.")


def check_ring_time(ring_time) -> None:
    """Compare ``ring_time(n, K, alpha, B)`` with the cost model's ring allreduce on a uniform network."""
    from ..predict.costmodel import predict
    from ..topology import uniform

    for n, K, alpha, B in [(2, 1 << 20, 5e-6, 10e9), (8, 1 << 24, 2e-6, 25e9), (64, 1 << 26, 10e-6, 12.5e9)]:
        want = predict(build("allreduce.ring", n), K, uniform(n, bandwidth=B, latency=alpha)).seconds
        got = ring_time(n, K, alpha, B)
        _expect_close(got, want, 1e-6,
                f"ring_time(n={n}, K={K}, alpha={alpha:g}, B={B:g}) returned {got!r}; the cost model gives "
                f"{want:.6g} s.\nHint: 2(n-1) steps, each one latency plus one chunk of K/n bytes at B.")
    print("Correct: 2(n-1)(alpha + K/(nB)) matches the cost model.")


def check_server_load(server_load) -> None:
    """Compare ``server_load(n, M, K)`` with the bytes a server rank receives in ``allreduce.ps``."""
    from ..simulate import traffic

    for n, M in [(4, 1), (8, 1), (8, 2), (8, 4), (12, 3), (16, 16)]:
        K = 720720
        want = traffic(build("allreduce.ps", n, servers=M), K)["received"][0]
        got = server_load(n, M, K)
        if got != want:
            raise AssertionError(
                f"server_load(n={n}, M={M}, K={K}) returned {got!r}, but server rank 0 receives {want} bytes.\n"
                "Hint: as a server it receives its shard (K/M bytes) from each of the other n-1 ranks; as a worker "
                "it also receives the M-1 shards it does not serve.")
    print("Correct: a server receives (n-1)K/M as a server plus (M-1)K/M as a worker.")


def check_scaled_lr(scaled_lr) -> None:
    """The linear scaling rule with linear warm-up: base_lr at step 0, base_lr * k from ``warmup`` on."""
    cases = [(0.001, 4, 0, 10, 0.001), (0.001, 4, 5, 10, 0.0025), (0.001, 4, 10, 10, 0.004),
             (0.001, 4, 500, 10, 0.004), (0.1, 1, 3, 5, 0.1), (0.01, 8, 2, 4, 0.045)]
    for base, k, step, warmup, want in cases:
        got = scaled_lr(base, k, step, warmup)
        _expect_close(got, want, 1e-9,
                f"scaled_lr(base_lr={base}, k={k}, step={step}, warmup={warmup}) returned {got!r}, expected {want}.\n"
                "Hint: at step 0 it is base_lr; it rises in a straight line to base_lr * k at step warmup; "
                "after that it stays at base_lr * k.")
    print("Correct: linear scaling with a linear warm-up.")


def check_pcie(pcie_gbytes) -> None:
    """Compare ``pcie_gbytes(gt_per_s, encoding, lanes)`` (GB/s per direction) with the PCIe arithmetic."""
    cases = [(2.5, 8 / 10, 16, 4.0), (5.0, 8 / 10, 8, 4.0), (8.0, 128 / 130, 16, 15.754), (16.0, 128 / 130, 4, 7.877)]
    for rate, encoding, lanes, want in cases:
        got = pcie_gbytes(rate, encoding, lanes)
        _expect_close(got, want, 1e-3,
                f"pcie_gbytes({rate}, {encoding:.4f}, {lanes}) returned {got!r}; expected about {want} GB/s.\n"
                "Hint: GT/s is billions of bit transfers per second per lane; multiply by the encoding's "
                "share of useful bits and by the lanes, then divide by 8 bits per byte.")
    print("Correct: PCIe 3.0 x16 carries 15.754 GB/s each way.")


def check_message_time(message_time) -> None:
    """``message_time(nbytes, alpha, bandwidth)``: the alpha-beta model of one message, in seconds."""
    cases = [(0, 2e-6, 10e9, 2e-6), (8, 2e-6, 10e9, 2.0008e-6), (1 << 20, 2e-6, 10e9, 2e-6 + (1 << 20) / 10e9),
             (64 << 20, 1e-6, 25e9, 1e-6 + (64 << 20) / 25e9)]
    for nbytes, alpha, bandwidth, want in cases:
        got = message_time(nbytes, alpha, bandwidth)
        _expect_close(got, want, 1e-6,
                f"message_time({nbytes}, alpha={alpha}, bandwidth={bandwidth:g}) returned {got!r}; expected "
                f"{want:.4g} s.\nHint: a fixed start-up cost alpha, plus the bytes divided by the bandwidth "
                "(bytes per second).")
    print("Correct: t = alpha + K / B.")


def check_staged_time(staged_time) -> None:
    """``staged_time(nbytes, alpha, link, copy)``: a message copied into a staging buffer, sent, and
    copied out again, one after the other (no pipelining)."""
    cases = [(0, 2e-6, 10e9, 5e9, 2e-6), (1 << 20, 2e-6, 10e9, 5e9, 2e-6 + (1 << 20) / 10e9 + 2 * (1 << 20) / 5e9),
             (64 << 20, 1e-6, 15.754e9, 20e9, 1e-6 + (64 << 20) / 15.754e9 + 2 * (64 << 20) / 20e9)]
    for nbytes, alpha, link, copy, want in cases:
        got = staged_time(nbytes, alpha, link, copy)
        _expect_close(got, want, 1e-6,
                f"staged_time({nbytes}, alpha={alpha}, link={link:g}, copy={copy:g}) returned {got!r}; expected "
                f"{want:.4g} s.\nHint: the message itself costs alpha + K / link; staging adds one copy of K "
                "bytes at the copy rate before the send and another after the receive.")
    print("Correct: staging adds 2K / copy rate to every message.")
