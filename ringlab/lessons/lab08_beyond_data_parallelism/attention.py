"""Lab 08's ring attention: equal to full attention on the ranks, timed with and without overlap on this machine;
the exercise on the online softmax that folds one key/value block at a time."""
from __future__ import annotations

import statistics

import numpy as np

from ...lab.exercises import NotDoneYet, exercise
from ...lab.findings import Finding

TOKENS, HEADS, DIM = 256, 2, 16  # a rank's block of the sequence, heads, head width


def measure_ring_attention(comm=None, repeats: int = 1, causal: bool = True) -> dict:
    """Ring attention on every rank's block against full attention on the whole sequence, and its time with the
    transfers overlapped and not (this machine, no emulation); the same dict on every rank."""
    from mpi4py import MPI

    from ...train.attention import RingAttention, attention

    comm = MPI.COMM_WORLD if comm is None else comm
    n, rank = comm.Get_size(), comm.Get_rank()
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((HEADS, TOKENS * n, DIM)) for _ in range(3))
    mine = slice(rank * TOKENS, (rank + 1) * TOKENS)
    ring = RingAttention(comm)
    out = ring(q[:, mine], k[:, mine], v[:, mine], causal=causal)
    full = attention(q, k, v, causal=causal)[:, mine]
    difference = comm.allreduce(float(np.abs(out - full).max() / np.abs(full).max()), op=MPI.MAX)
    seconds = {}
    for overlap in (False, True, False, True):  # taking turns, so that a passing load falls on both
        times = []
        for _ in range(repeats):
            comm.Barrier()
            start = MPI.Wtime()
            ring(q[:, mine], k[:, mine], v[:, mine], causal=causal, overlap=overlap)
            comm.Barrier()
            times.append(MPI.Wtime() - start)
        seconds.setdefault(overlap, []).extend(times)
    block = 2 * HEADS * TOKENS * DIM * 8  # a key and a value block
    ring.close()
    return {"ranks": n, "difference": difference, "causal": causal, "block_bytes": block,
            "passed_bytes": (n - 1) * block, "sequence": TOKENS * n,
            "overlapped_s": statistics.median(seconds[True]), "serial_s": statistics.median(seconds[False])}


def attention_lesson(result: dict) -> Finding:
    """Equal or not, the bytes passed, and whether overlapping paid on this machine (an observation)."""
    equal = result["difference"] < 1e-9
    gain = result["serial_s"] / result["overlapped_s"]
    said = (f"{result['ranks']} ranks, {result['sequence']} tokens of causal attention: ring attention differs from "
            f"full attention on one rank by {result['difference']:.1e} (relative), "
            + ("equal in float64. " if equal else "not equal. ")
            + f"Each rank passed on {result['ranks'] - 1} key/value blocks of {result['block_bytes'] / 2**10:.0f} KiB "
            "and never held more than two. On this machine a call took "
            f"{result['overlapped_s'] * 1e3:.1f} ms with the transfers overlapped and {result['serial_s'] * 1e3:.1f} ms "
            f"without ({gain:.2f}x): " + (
                "overlapping paid here." if gain > 1.1 else
                "no clear gain here: between processes on one machine a transfer is a memory copy by the same cores "
                "that compute, so there is nothing to hide it behind (on GPUs the copy engines and links work while "
                "the cores compute)."))
    observed = ("overlapping paid on this machine" if gain > 1.1 else "overlapping did not clearly pay on this machine",)
    return Finding(said, ("ring attention equals full attention" if equal else "ring attention differs from full attention",),
                   observed)


def _merge(m, l, o, scores, v):
    from ...train.attention import merge
    return merge(m, l, o, scores, v)


@exercise(_merge, "merge")
def check_merge(merge):
    """Fold blocks one at a time with the learner's ``merge`` and compare with the softmax of all of them."""
    from ...train.attention import attention

    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((12, 4)), rng.standard_normal((12, 3))
    m, l, o = np.full(6, -np.inf), np.zeros(6), np.zeros((6, 3))
    for block in (slice(0, 5), slice(5, 6), slice(6, 12)):
        scores = q @ k[block].T / 2.0
        got = merge(m, l, o, scores, v[block])
        if got is None:
            raise NotDoneYet("merge returned None")
        m, l, o = got
    want = attention(q, k, v)
    if not np.allclose(o / l[:, None], want, rtol=1e-9, atol=1e-12):
        raise AssertionError(f"after three blocks o / l differs from full attention by "
                             f"{np.abs(o / l[:, None] - want).max():.2e}.\nHint: the new maximum is the larger of m and "
                             "the block's row maxima; multiply l and o by exp(m - new max) before adding the block's "
                             "exp(scores - new max) (summed for l, times v for o).")
    print("Correct: folding the blocks one at a time gives exactly the softmax over all of them.")
