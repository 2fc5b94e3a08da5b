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


class RingAttention:
    """Attention over the sequence blocks of the ranks of ``comm`` (call it on every rank with its own block)."""

    def __init__(self, comm=None):
        from mpi4py import MPI

        self.comm = (MPI.COMM_WORLD if comm is None else comm).Dup()
        self.nranks, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        self.schedule = build("allgather.ring", self.nranks)
        self.sent = 0  # bytes this rank passed on

    def _blocks(self):
        """Per step, (block held, rank to send it to, rank to receive from): the ring allgather's, for this rank."""
        out = []
        for step in self.schedule.steps:
            send = int(np.flatnonzero(step.src == self.rank)[0])
            recv = int(np.flatnonzero(step.dst == self.rank)[0])
            out.append((int(step.chunk[send]), int(step.dst[send]), int(step.src[recv])))
        return out

    def __call__(self, q, k, v, causal: bool = False, overlap: bool = True):
        """This rank's block of the output; ``q``, ``k``, ``v`` are its blocks, shaped (..., tokens, d), the
        same shape on every rank."""
        shapes = self.comm.allgather((q.shape, k.shape, v.shape))
        if len(set(shapes)) != 1 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"ring attention needs blocks of one shape on every rank (q and k alike, v with their "
                             f"tokens); got {shapes}")
        tokens, d = q.shape[-2], q.shape[-1]
        held = np.ascontiguousarray(np.concatenate([k, v], axis=-1), dtype=np.float64)
        spare = np.empty_like(held)
        m = np.full(q.shape[:-1], -np.inf)
        l = np.zeros(q.shape[:-1])
        o = np.zeros(v.shape)
        steps = self._blocks() + [(None, None, None)]  # the last block arrives with the last step
        block = self.rank
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
            if not (causal and block > self.rank):  # a later block is all masked for a causal query
                keys, values = held[..., :d], held[..., d:]
                scores = _product(q, np.swapaxes(keys, -1, -2)) / np.sqrt(d)
                if causal and block == self.rank:
                    scores = np.where(np.tril(np.ones((tokens, tokens), dtype=bool)), scores, -np.inf)
                m, l, o = merge(m, l, o, scores, values)
            if requests:
                from mpi4py import MPI
                MPI.Request.Waitall(requests)
            held, spare = spare, held
            block = (block - 1) % self.nranks
        return o / l[..., None]

    def close(self) -> None:
        """Free the private communicator."""
        self.comm.Free()
