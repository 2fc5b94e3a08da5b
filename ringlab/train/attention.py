"""Ring attention (sequence parallelism): attention over a sequence split across ranks, its key/value blocks
passed around the ring while every rank computes on the block it holds.

Each of n ranks holds one contiguous block of the sequence's queries, keys and values. The key/value blocks
travel exactly as the chunks of ringlab's ring allgather (``rl.build("allgather.ring", n)``): at step s rank
j holds block (j - s) mod n and passes it to rank j+1. Between the steps a rank computes its queries against
the block it holds and folds the scores into a running softmax (the online softmax of FlashAttention: the
running maximum m, sum l and output o, :func:`merge`), so that after the n blocks o / l is exactly
softmax(Q K^T / sqrt(d)) V over the whole sequence, while no rank ever holds more than two blocks. With
``overlap`` the next block's send and receive are posted before the compute (non-blocking), so the transfer
runs during it; without, the rank first exchanges, then computes. ``causal`` masks keys after each query.
Blocks move point to point on a private duplicate of the communicator (so they never meet the user's messages).

Causal load balance. With contiguous blocks a causal ring is lopsided: rank 0's queries see only its own keys,
rank n-1's see every rank's: rank r computes r+1 blocks, so rank n-1 computes n times what rank 0 does while
the others wait for it at every step. Cut the sequence into 2n chunks instead and give rank r chunks r and
2n-1-r (``layout="zigzag"``, the layout of
Megatron-LM's context parallelism and of zhuzilin's zigzag ring attention; Brandon et al. 2023, "Striped
Attention", arXiv 2311.09431, balance it by striding tokens instead): every rank then holds one early and one
late chunk, every rank has the same 2n+1 unmasked chunk-by-chunk score blocks (:func:`causal_work`), and at
every step after the first each rank computes 2 of the 4 tiles of the block it holds. Either layout gives
exactly full attention; :func:`shard` cuts a sequence into a rank's tokens for either.

When the transfer hides: :func:`hiding_block` (the condition, derived) and :func:`hiding_examples` (H100 figures).
"""
from __future__ import annotations

import numpy as np

from ..algorithms import build


def merge(m, l, o, scores, v):
    """Fold one block's ``scores`` (queries x keys) and values ``v`` into the running (max, sum, output)."""
    top = np.maximum(m, scores.max(axis=-1))
    finite = np.where(np.isfinite(top), top, 0.0)  # rows with every key masked so far
    rescale = np.exp(m - finite)
    p = np.exp(scores - finite[..., None])
    return top, l * rescale + p.sum(axis=-1), o * rescale[..., None] + _product(p, v)


def _product(a, b):
    """a @ b for stacks of small matrices, by numpy's own loops: a multithreaded BLAS in every rank of a
    machine with fewer cores than ranks spends its time contending, not computing."""
    return np.einsum("...ij,...jk->...ik", a, b)


def attention(q, k, v, causal: bool = False):
    """softmax(Q K^T / sqrt(d)) V on one rank: the reference."""
    scores = _product(q, np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return _product(weights / weights.sum(axis=-1, keepdims=True), v)


LAYOUTS = ("contiguous", "zigzag")


def _check_layout(tokens: int, nranks: int, layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
        raise ValueError(f"nranks must be a whole number >= 1, got {nranks!r}")
    parts = 2 * nranks if layout == "zigzag" else nranks
    if tokens % parts:
        raise ValueError(f"the {layout} layout cuts the sequence into {parts} equal parts; {tokens} tokens do not "
                         f"divide by {parts}")


def layout_chunks(nranks: int, layout: str = "contiguous") -> list[tuple[int, int]]:
    """The two of the sequence's 2n equal chunks each rank holds, in the order it holds them: (2r, 2r+1) for
    contiguous blocks, (r, 2n-1-r) for the zigzag layout."""
    _check_layout(2 * nranks, nranks, layout)
    return [(r, 2 * nranks - 1 - r) if layout == "zigzag" else (2 * r, 2 * r + 1) for r in range(nranks)]


def token_positions(tokens: int, nranks: int, rank: int, layout: str = "contiguous") -> np.ndarray:
    """Where in the whole sequence of ``tokens`` this rank's tokens sit, in the order it holds them."""
    _check_layout(tokens, nranks, layout)
    if layout == "contiguous":
        per = tokens // nranks
        return np.arange(rank * per, (rank + 1) * per)
    per = tokens // (2 * nranks)
    return np.concatenate([np.arange(c * per, (c + 1) * per) for c in layout_chunks(nranks, layout)[rank]])


def shard(x, nranks: int, rank: int, layout: str = "contiguous", axis: int = -2):
    """This rank's tokens of the whole sequence ``x`` (tokens along ``axis``) in ``layout``."""
    return np.take(x, token_positions(x.shape[axis], nranks, rank, layout), axis=axis)


def causal_work(nranks: int, layout: str = "contiguous") -> list[int]:
    """Unmasked score blocks per rank for causal attention, on the grid of 2n equal chunks that both layouts
    share: a (query chunk, key chunk) block counts when any of its scores is unmasked (key chunk <= query chunk).

    Contiguous: rank r holds chunks 2r and 2r+1, so 4r + 3 blocks: 3 on rank 0, 4n - 1 on rank n-1 (the busiest
    rank sets the step's time). Zigzag: chunks r and 2n-1-r, (r + 1) + (2n - r) = 2n + 1 on every rank.
    Both sum to n(2n + 1), the lower triangle of the (2n x 2n) grid with its diagonal."""
    return [sum(q + 1 for q in chunks) for chunks in layout_chunks(nranks, layout)]


def ring_blocks(schedule, rank: int) -> list[tuple[int, int, int]]:
    """Per step, (block held, rank to send it to, rank to receive from): the ring allgather's, for ``rank``."""
    out = []
    for step in schedule.steps:
        send = int(np.flatnonzero(step.src == rank)[0])
        recv = int(np.flatnonzero(step.dst == rank)[0])
        out.append((int(step.chunk[send]), int(step.dst[send]), int(step.src[recv])))
    return out


def _tiles(tokens: int, layout: str) -> list[slice]:
    """A rank's tokens as the tiles it computes on: its whole block (contiguous) or its two chunks (zigzag)."""
    return [slice(0, tokens)] if layout == "contiguous" else [slice(0, tokens // 2), slice(tokens // 2, tokens)]


def _fold(state, q, q_pos, keys, values, k_pos, causal: bool, layout: str) -> int:
    """Fold one held key/value block into this rank's running (max, sum, output), tile by tile; a tile whose
    every score is masked is skipped. Returns the number of scores computed (the work)."""
    m, l, o = state
    d = q.shape[-1]
    work = 0
    for qi in _tiles(len(q_pos), layout):
        for ki in _tiles(len(k_pos), layout):
            if causal and k_pos[ki].min() > q_pos[qi].max():
                continue  # later keys than every query of the tile: all masked
            scores = _product(q[..., qi, :], np.swapaxes(keys[..., ki, :], -1, -2)) / np.sqrt(d)
            if causal and k_pos[ki].max() > q_pos[qi].min():
                scores = np.where(k_pos[ki][None, :] <= q_pos[qi][:, None], scores, -np.inf)
            m[..., qi], l[..., qi], o[..., qi, :] = merge(m[..., qi], l[..., qi], o[..., qi, :], scores,
                                                         values[..., ki, :])
            work += (qi.stop - qi.start) * (ki.stop - ki.start)
    return work


def _unfold(q, q_pos, grad_out, lse, delta, keys, values, k_pos, causal: bool, layout: str, grads) -> int:
    """Backward of :func:`_fold` for one held block, tile by tile (FlashAttention's backward): the
    probabilities again from the saved log-sum-exp, then dV += P^T dO, dS = P (dO V^T - rowsum(dO O)),
    dQ += dS K / sqrt(d), dK += dS^T Q / sqrt(d). ``grads`` is (dQ of this rank, dK and dV of the held block),
    added into. Returns the number of scores computed again."""
    dq, dk, dv = grads
    scale = 1 / np.sqrt(q.shape[-1])
    work = 0
    for qi in _tiles(len(q_pos), layout):
        for ki in _tiles(len(k_pos), layout):
            if causal and k_pos[ki].min() > q_pos[qi].max():
                continue
            scores = _product(q[..., qi, :], np.swapaxes(keys[..., ki, :], -1, -2)) * scale
            if causal and k_pos[ki].max() > q_pos[qi].min():
                scores = np.where(k_pos[ki][None, :] <= q_pos[qi][:, None], scores, -np.inf)
            p = np.exp(scores - lse[..., qi, None])
            dv[..., ki, :] += _product(np.swapaxes(p, -1, -2), grad_out[..., qi, :])
            ds = p * (_product(grad_out[..., qi, :], np.swapaxes(values[..., ki, :], -1, -2)) - delta[..., qi, None])
            dq[..., qi, :] += _product(ds, keys[..., ki, :]) * scale
            dk[..., ki, :] += _product(np.swapaxes(ds, -1, -2), q[..., qi, :]) * scale
            work += (qi.stop - qi.start) * (ki.stop - ki.start)
    return work


class RingAttention:
    """Attention over the sequence blocks of the ranks of ``comm`` (call it on every rank with its own block).

    ``sent``: bytes this rank passed on, over every call; ``work``: the query-key scores it computed in the last
    call. It computes on whole blocks (contiguous) or on its two chunks (zigzag) and skips a tile whose every
    score is masked; a causal diagonal block is computed whole, its masked half too, so with contiguous
    blocks rank r computes (r+1) (s/n)^2 scores, 4(r+1) blocks of the 2n grid against :func:`causal_work`'s
    4r+3 unmasked ones."""

    def __init__(self, comm=None):
        from mpi4py import MPI

        self.comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self.nranks, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.schedule = build("allgather.ring", self.nranks)
        self.sent = 0  # bytes this rank passed on
        self.work = 0

    def _blocks(self):
        """Per step, (block held, rank to send it to, rank to receive from): the ring allgather's, for this rank."""
        return ring_blocks(self.schedule, self.rank)

    def __call__(self, q, k, v, causal: bool = False, overlap: bool = True, layout: str = "contiguous"):
        """This rank's block of the output; ``q``, ``k``, ``v`` are its blocks, shaped (..., tokens, d), the
        same shape on every rank, holding its tokens in ``layout`` (:func:`shard`)."""
        shapes = self.comm.allgather((q.shape, k.shape, v.shape, layout))
        if len(set(shapes)) != 1 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"ring attention needs blocks of one shape on every rank (q and k alike, v with their "
                             f"tokens) and one layout; got {shapes}")
        tokens, d = q.shape[-2], q.shape[-1]
        positions = [token_positions(tokens * self.nranks, self.nranks, r, layout) for r in range(self.nranks)]
        held = np.ascontiguousarray(np.concatenate([k, v], axis=-1), dtype=np.float64)
        spare = np.empty_like(held)
        state = (np.full(q.shape[:-1], -np.inf), np.zeros(q.shape[:-1]), np.zeros(v.shape))
        steps = self._blocks() + [(None, None, None)]  # the last block arrives with the last step
        block = self.rank
        self.work = 0
        for index, (chunk, dst, src) in enumerate(steps):
            if chunk is not None and chunk != block:
                raise RuntimeError(f"step {index}: the schedule sends block {chunk}, this rank holds {block}")
            requests = []
            if dst is not None:
                if overlap:
                    requests = [self.comm.Isend(held, dest=dst, tag=index), self.comm.Irecv(spare, source=src, tag=index)]
                else:
                    self.comm.Sendrecv(held, dest=dst, sendtag=index, recvbuf=spare, source=src, recvtag=index)
                self.sent += held.nbytes
            self.work += _fold(state, q, positions[self.rank], held[..., :d], held[..., d:], positions[block],
                               causal, layout)
            if requests:
                from mpi4py import MPI
                MPI.Request.Waitall(requests)
            held, spare = spare, held
            block = (block - 1) % self.nranks
        m, l, o = state
        out = o / l[..., None]
        self._saved = (q, k, v, out, m + np.log(l), positions, causal, layout)
        return out

    def backward(self, grad_out):
        """The gradients of this rank's ``q``, ``k``, ``v`` (the last call's) given its output's gradient; call
        it on every rank. The key/value blocks go round the ring again with their gradients, dK and dV, which
        every rank adds to (:func:`_unfold`); after n-1 passes a block's dK and dV are whole, and one more pass
        brings them home. Each rank sends (n-1) x (K, V, dK, dV) + (dK, dV): twice the forward's bytes, plus a
        block (counted in ``sent``); ``backward_work`` counts the scores it computed again. The passes here are
        not overlapped: dK and dV are only ready once the step's compute is done."""
        if getattr(self, "_saved", None) is None:
            raise RuntimeError("backward needs a forward call first")
        q, k, v, out, lse, positions, causal, layout = self._saved
        grad_out = np.asarray(grad_out, dtype=np.float64)
        if grad_out.shape != out.shape:
            raise ValueError(f"the output's gradient must be shaped like the output {out.shape}, got {grad_out.shape}")
        d, dv_width = k.shape[-1], v.shape[-1]
        delta = (grad_out * out).sum(axis=-1)
        dq, self.backward_work = np.zeros(q.shape), 0
        held = np.ascontiguousarray(np.concatenate([k, v, np.zeros(k.shape), np.zeros(v.shape)], axis=-1),
                                    dtype=np.float64)
        spare = np.empty_like(held)
        block, steps = self.rank, self._blocks()
        for index in range(self.nranks):
            keys, values = held[..., :d], held[..., d:d + dv_width]
            grads = (dq, held[..., d + dv_width:2 * d + dv_width], held[..., 2 * d + dv_width:])
            self.backward_work += _unfold(q, positions[self.rank], grad_out, lse, delta, keys, values, positions[block],
                                 causal, layout, grads)
            if index < len(steps):  # pass K, V and their gradients so far to the next rank
                _, dst, src = steps[index]
                self.comm.Sendrecv(held, dest=dst, sendtag=index, recvbuf=spare, source=src, recvtag=index)
                self.sent += held.nbytes
                held, spare = spare, held
                block = (block - 1) % self.nranks
        if steps:  # the held block's gradients are whole: home to its owner, the next rank
            _, dst, src = steps[0]
            mine = np.ascontiguousarray(held[..., d + dv_width:])
            home = np.empty_like(mine)
            self.comm.Sendrecv(mine, dest=dst, sendtag=self.nranks, recvbuf=home, source=src, recvtag=self.nranks)
            self.sent += mine.nbytes
        else:
            home = held[..., d + dv_width:]
        self._saved = None
        return dq, home[..., :d], home[..., d:]

    def close(self) -> None:
        """Free the private communicator."""
        self.comm.Free()


def simulate_ring_attention(q, k, v, nranks: int, causal: bool = False, layout: str = "contiguous"):
    """Ring attention on ``nranks`` ranks simulated in one process (the same steps and folds as
    :class:`RingAttention`): (the output in sequence order, the scores each rank computed)."""
    schedule = build("allgather.ring", nranks)
    tokens = q.shape[-2]
    positions = [token_positions(tokens, nranks, r, layout) for r in range(nranks)]
    out, work = np.zeros(v.shape), []
    for rank in range(nranks):
        mine = positions[rank]
        state = (np.full(q.shape[:-2] + (len(mine),), -np.inf), np.zeros(q.shape[:-2] + (len(mine),)),
                 np.zeros(v.shape[:-2] + (len(mine), v.shape[-1])))
        held = [chunk for chunk, _, _ in ring_blocks(schedule, rank)] + [(rank + 1) % nranks]  # + the last to arrive
        done = 0
        for block in held:
            done += _fold(state, q[..., mine, :], mine, k[..., positions[block], :], v[..., positions[block], :],
                          positions[block], causal, layout)
        m, l, o = state
        out[..., mine, :] = o / l[..., None]
        work.append(done)
    return out, work


def simulate_ring_attention_backward(q, k, v, grad_out, nranks: int, causal: bool = False,
                                     layout: str = "contiguous"):
    """The gradients of q, k, v (in sequence order) by the steps of :meth:`RingAttention.backward`, simulated in
    one process: each rank's queries against every block in ring order, each block's dK and dV added to as
    they would be where it travels."""
    out, _ = simulate_ring_attention(q, k, v, nranks, causal, layout)
    schedule = build("allgather.ring", nranks)
    tokens = q.shape[-2]
    positions = [token_positions(tokens, nranks, r, layout) for r in range(nranks)]
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    delta = (grad_out * out).sum(axis=-1)
    for rank in range(nranks):
        mine = positions[rank]
        state = (np.full(q.shape[:-2] + (len(mine),), -np.inf), np.zeros(q.shape[:-2] + (len(mine),)),
                 np.zeros(v.shape[:-2] + (len(mine), v.shape[-1])))
        order = [chunk for chunk, _, _ in ring_blocks(schedule, rank)] + [(rank + 1) % nranks]
        for block in order:  # the forward's running max and sum, for this rank's log-sum-exp
            _fold(state, q[..., mine, :], mine, k[..., positions[block], :], v[..., positions[block], :],
                  positions[block], causal, layout)
        lse = state[0] + np.log(state[1])
        dq_mine = np.zeros(q.shape[:-2] + (len(mine), q.shape[-1]))
        for block in order:
            theirs = positions[block]
            dk_block = np.zeros(k.shape[:-2] + (len(theirs), k.shape[-1]))
            dv_block = np.zeros(v.shape[:-2] + (len(theirs), v.shape[-1]))
            _unfold(q[..., mine, :], mine, grad_out[..., mine, :], lse, delta[..., mine], k[..., theirs, :],
                    v[..., theirs, :], theirs, causal, layout, (dq_mine, dk_block, dv_block))
            dk[..., theirs, :] += dk_block
            dv[..., theirs, :] += dv_block
        dq[..., mine, :] = dq_mine
    return dq, dk, dv


def hiding_block(flops_per_second: float, bandwidth: float, bytes_per_element: float = 2,
                 computed: float = 1.0) -> float:
    """The fewest tokens a ring-attention block needs for its compute to hide its transfer (Liu et al. 2023,
    "Ring Attention with Blockwise Transformers", arXiv 2310.01889, whose condition this is).

    At each step a rank computes its c queries against the c keys it holds, while it passes those keys and
    values on. Per head of width d:

    - compute: Q K^T is c x c dot products of length d (2 c^2 d FLOPs) and P V as many again, so 4 d FLOPs per
      query-key pair and 4 c^2 d in all, of which a fraction ``computed`` is not masked away (1 without a mask;
      1/2 for causal zigzag blocks, 2 of their 4 tiles at most steps);
    - transfer: K and V, c x d each, at b bytes an element: 2 d b bytes per key, 2 c d b in all.

    The transfer hides when computed x 4 c^2 d / F >= 2 c d b / B, that is when

        c >= (F / B) x (2 d b) / (computed x 4 d) = F b / (2 B computed)

    (block size >= (FLOP rate / bandwidth) x (bytes per key / FLOPs per query-key pair)); in bf16 (b = 2) with
    no mask, c >= F / B, the paper's form. The head width cancels; the ratio F / B, FLOPs the GPU can do per byte
    the link moves, decides. Forward pass only, at peak rates:
    the backward computes about twice as much and sends the gradients of K and V too."""
    for name, value in (("flops_per_second", flops_per_second), ("bandwidth", bandwidth),
                        ("bytes_per_element", bytes_per_element), ("computed", computed)):
        if not np.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {value!r}")
    return flops_per_second * bytes_per_element / (2 * bandwidth * computed)


def hiding_examples() -> dict[str, dict]:
    """:func:`hiding_block` for an H100's published dense bf16 peak (``ringlab/data/gpu_compute.json``) on NVLink
    (ringlab.topology's H100 figure, 450 GB/s each way) and on a 400 Gbit/s NIC (50 GB/s), bf16 K and V.

    For an H100 (989 TFLOP/s): about 2,200 tokens a block on NVLink and about 19,800 on a 400G NIC; twice that
    for causal zigzag blocks. Published peaks, not measurements: real attention kernels reach less of the FLOP
    rate (a large bf16 matmul reaches ~80% on an H100, ml-engineering's MAMF) and a transfer less of the link, so
    the real threshold moves with the ratio of the two rates actually reached."""
    from ..topology.links import H100_NVLINK, IB_400G
    from .planner import compute_data

    flops = compute_data()["h100"]["peak_tflops"]["bf16"] * 1e12
    return {link: {"flops_per_second": flops, "bandwidth": rate, "tokens": hiding_block(flops, rate),
                   "tokens_causal_zigzag": hiding_block(flops, rate, computed=0.5),
                   "label": "published peaks (vendor dense bf16; link as rated by its maker)"}
            for link, rate in (("NVLink", H100_NVLINK), ("400G NIC", IB_400G))}
