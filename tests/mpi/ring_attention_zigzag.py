"""Ring attention in both layouts against attention on one rank, float64: every rank's tokens of the output and
the gradients of its q, k, v (RingAttention.backward) against torch autograd on the whole sequence, causal or
not; the scores each rank computed and the bytes it sent. Rank 0 prints one JSON line per case.

    mpiexec -n N python -m mpi4py tests/mpi/ring_attention_zigzag.py
"""
import json

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train.attention import LAYOUTS, RingAttention, shard

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def torch_attention(q, k, v, grad_out, causal):
    """Output and (dq, dk, dv) by torch autograd on the whole sequence: the reference."""
    q, k, v = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        tokens = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(tokens, tokens, dtype=torch.bool).tril(), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    (out * torch.tensor(grad_out)).sum().backward()
    return out.detach().numpy(), q.grad.numpy(), k.grad.numpy(), v.grad.numpy()


def relative(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


ring = RingAttention(comm)
rng = np.random.default_rng(7)
chunk, d = 3, 4  # 2n chunks of 3 tokens
q, k, v, grad_out = (rng.standard_normal((2, 2 * size * chunk, d)) for _ in range(4))  # 2 heads, whole sequence
for layout in LAYOUTS:
    for causal in (False, True):
        expected = [shard(x, size, rank, layout) for x in torch_attention(q, k, v, grad_out, causal)]
        before = ring.sent
        out = ring(*(shard(x, size, rank, layout) for x in (q, k, v)), causal=causal, layout=layout)
        forward_sent = ring.sent - before
        grads = ring.backward(shard(grad_out, size, rank, layout))
        worst = comm.allreduce(max(relative(a, b) for a, b in zip((out, *grads), expected)), op=MPI.MAX)
        work = comm.gather(ring.work, root=0)
        if rank == 0:
            print(json.dumps({"layout": layout, "causal": causal, "ranks": size, "difference": worst, "work": work,
                              "chunk": chunk, "forward_sent": forward_sent, "backward_sent": ring.sent - before
                              - forward_sent, "block_bytes": 2 * 2 * 2 * chunk * d * 8}), flush=True)
ring.close()
