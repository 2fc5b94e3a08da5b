"""Lab 09's ring attention: equal to full attention on the ranks, timed with and without overlap on this machine;
the exercise on the online softmax that folds one key/value block at a time."""
from __future__ import annotations

import statistics

import numpy as np

from ...lab.exercises import NotDoneYet, exercise
from ...lab.findings import Finding

TOKENS, HEADS, DIM = 256, 2, 16  # a rank's block of the sequence, heads, head width
PAID = 1.1  # overlapping pays where it makes a call at least 1.1x as fast


def measure_ring_attention(comm=None, repeats: int = 1, causal: bool = True) -> dict:
    """Ring attention on every rank's block against full attention on the whole sequence, and its time with the
    transfers overlapped and not (this machine, no emulation); the same dict on every rank."""
    from mpi4py import MPI

    from ...mpi.devices import cores
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
        if not overlap:  # the same compute without the transfers, timed as the calls are
            for _ in range(repeats):
                comm.Barrier()
                start = MPI.Wtime()
                _compute_alone(q[:, mine], k, v, rank, n, causal)
                comm.Barrier()
                seconds.setdefault("compute", []).append(MPI.Wtime() - start)
        times = []
        for _ in range(repeats):
            comm.Barrier()
            start = MPI.Wtime()
            ring(q[:, mine], k[:, mine], v[:, mine], causal=causal, overlap=overlap)
            comm.Barrier()
            times.append(MPI.Wtime() - start)
        seconds.setdefault(overlap, []).extend(times)
    block = 2 * HEADS * TOKENS * DIM * 8  # a key and a value block
    work = _work_by_layout(comm, ring, q, k, v) if causal else {}
    ring.close()
    return {"ranks": n, "difference": difference, "causal": causal, "block_bytes": block, "work": work,
            "passed_bytes": (n - 1) * block, "sequence": TOKENS * n, "cores": cores(),
            "overlapped_s": statistics.median(seconds[True]), "serial_s": statistics.median(seconds[False]),
            "compute_s": statistics.median(seconds["compute"])}


def _work_by_layout(comm, ring, q, k, v) -> dict:
    """Causal ring attention once in each layout: the scores each rank computed (``RingAttention.work``), gathered
    on every rank, and the layout's largest relative difference from full attention."""
    from mpi4py import MPI

    from ...train.attention import LAYOUTS, attention, shard

    n, rank = comm.Get_size(), comm.Get_rank()
    full = attention(q, k, v, causal=True)
    work = {}
    for layout in LAYOUTS:
        out = ring(*(shard(a, n, rank, layout) for a in (q, k, v)), causal=True, layout=layout)
        want = shard(full, n, rank, layout)
        difference = comm.allreduce(float(np.abs(out - want).max() / np.abs(want).max()), op=MPI.MAX)
        work[layout] = {"scores": comm.allgather(ring.work), "difference": difference}
    return work


def _compute_alone(q, k, v, rank: int, n: int, causal: bool):
    """A ring attention call's compute on this rank without its transfers: its queries against the blocks in the
    order the ring brings them, folded by the same merge; the output."""
    from ...train.attention import _product, merge

    m, l, o = np.full(q.shape[:-1], -np.inf), np.zeros(q.shape[:-1]), np.zeros(q.shape)
    for step in range(n):
        block = (rank - step) % n
        if causal and block > rank:
            continue
        keys, values = (np.ascontiguousarray(a[:, block * TOKENS:(block + 1) * TOKENS]) for a in (k, v))
        scores = _product(q, np.swapaxes(keys, -1, -2)) / np.sqrt(DIM)
        if causal and block == rank:
            scores = np.where(np.tril(np.ones((TOKENS, TOKENS), dtype=bool)), scores, -np.inf)
        m, l, o = merge(m, l, o, scores, values)
    return o / l[..., None]


def attention_lesson(result: dict) -> Finding:
    """Equal or not, the bytes passed, and whether overlapping paid on this machine (an observation): set against
    what it could have paid, the transfers' share of the call without overlap (that call less the compute alone);
    a cause is named only where these numbers show one."""
    equal = result["difference"] < 1e-9
    serial, overlapped, compute = result["serial_s"], result["overlapped_s"], result["compute_s"]
    gain = serial / overlapped
    transfer = max(serial - compute, 0.0)
    # the transfers wholly hidden behind the compute, or it behind them; never below 1x: hiding slows nothing (a
    # compute timed longer than the whole call, as a busy machine can time it, leaves nothing to hide)
    best = max(serial / max(compute, transfer), 1.0)
    ranks, cores = result["ranks"], result["cores"]
    said = (f"{ranks} ranks, {result['sequence']} tokens of {'causal ' if result['causal'] else ''}attention: ring "
            f"attention differs from full attention on one rank by {result['difference']:.1e} (relative), "
            + ("equal in float64. " if equal else "not equal. ")
            + f"Each rank passed on {ranks - 1} key/value blocks of {result['block_bytes'] / 2**10:.0f} KiB "
            "and never held more than two. On this machine a call took "
            f"{overlapped * 1e3:.1f} ms with the transfers overlapped and {serial * 1e3:.1f} ms without ({gain:.2f}x); "
            f"its compute alone took {compute * 1e3:.1f} ms, so the transfers came to {transfer * 1e3:.1f} ms "
            f"({transfer / serial:.0%} of the call) and hiding them wholly would give at most {best:.2f}x: ")
    if gain > PAID and round(gain, 2) > round(best, 2):  # timings that do not add up, as on a busy machine
        said += (f"overlapping paid here, {gain:.2f}x, more than the {best:.2f}x that hiding the transfers wholly "
                 "could give: these three timings do not add up, so time them again before reading the size of the "
                 "gain.")
    elif gain > PAID:
        said += f"overlapping paid here, {gain:.2f}x of the {best:.2f}x there was."
    elif best <= PAID and compute >= serial:
        said += (f"the compute alone took {compute / serial:.2f}x the whole call, so no time was left for the "
                 "transfers and overlapping had nothing to hide here.")
    elif best <= PAID:
        said += (f"the compute took {compute / serial:.0%} of the call and the transfers {transfer / serial:.0%}; "
                 "overlapping hides only the smaller of the two, so it could not pay much here.")
    elif ranks > cores:
        said += (f"there was time to hide, but {ranks} ranks share {cores} core{'s' if cores > 1 else ''}: no core sat "
                 "idle to run the transfers while the others computed (between processes on one machine a transfer "
                 "is a memory copy by those same cores; on GPUs the copy engines and links work while the cores "
                 "compute).")
    else:
        said += (f"there was time to hide, and {cores} cores for {ranks} ranks, yet overlapping did not hide it: these "
                 "numbers do not say why.")
    observed = ("overlapping paid on this machine" if gain > PAID else "overlapping did not clearly pay on this machine",)
    concluded = "ring attention equals full attention" if equal else "ring attention differs from full attention"
    return Finding(said, (concluded,), observed)


def _merge(m, l, o, scores, v):
    from ...train.attention import merge
    return merge(m, l, o, scores, v)


@exercise(_merge, "merge")
def check_merge(merge):
    """Fold blocks one at a time with the learner's ``merge`` and compare with the softmax of all of them: once with
    every key seen, once with masked keys (-inf scores), a row of which sees no key at all in its first block."""
    from ...train.attention import attention

    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((12, 4)), rng.standard_normal((12, 3))
    masked = np.zeros((6, 12), dtype=bool)
    masked[0, :5] = masked[3, 5:6] = masked[4, 6:] = True  # row 0 sees no key of block 0, row 3 none of block 1
    for mask in (None, masked):
        m, l, o = np.full(6, -np.inf), np.zeros(6), np.zeros((6, 3))
        for block in (slice(0, 5), slice(5, 6), slice(6, 12)):
            scores = q @ k[block].T / 2.0
            if mask is not None:
                scores = np.where(mask[:, block], -np.inf, scores)
            got = merge(m, l, o, scores, v[block])
            if got is None:
                raise NotDoneYet("merge returned None")
            m, l, o = got
        with np.errstate(invalid="ignore", divide="ignore"):
            out = o / l[:, None]
        if mask is None:
            want = attention(q, k, v)
            if not np.allclose(out, want, rtol=1e-9, atol=1e-12):
                raise AssertionError(f"after three blocks o / l differs from full attention by "
                                     f"{np.abs(out - want).max():.2e}.\nHint: the new maximum is the larger of m and the "
                                     "block's row maxima; multiply l and o by exp(m - new max) before adding the block's "
                                     "exp(scores - new max) (summed for l, times v for o).")
            continue
        scores = np.where(masked, -np.inf, q @ k.T / 2.0)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        want = weights / weights.sum(axis=1, keepdims=True) @ v
        if not np.allclose(out, want, rtol=1e-9, atol=1e-12):
            rows = sorted(set(np.flatnonzero(~np.isclose(out, want, rtol=1e-9, atol=1e-12).all(axis=1)).tolist()))
            raise AssertionError(f"with masked keys (scores of -inf) rows {rows} of o / l are wrong "
                                 f"({'NaN' if np.isnan(out).any() else 'off'}); row 0 sees no key in the first block."
                                 "\nHint: a row whose scores are all -inf keeps the maximum -inf, and exp(-inf - (-inf)) "
                                 "is NaN: subtract 0 instead where the new maximum is still -inf (np.where(np.isfinite("
                                 "top), top, 0)); that row's p is then 0 and it adds nothing.")
    print("Correct: folding the blocks one at a time gives exactly the softmax over all of them, masked keys too.")
