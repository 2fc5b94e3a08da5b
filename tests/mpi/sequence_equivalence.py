"""Sequence parallelism and Ulysses on real ranks against torch on one rank, float64. Every rank builds the same
unsplit layer and runs it whole (the reference); then tensor parallelism, Megatron's sequence parallelism and
Ulysses attention on the ranks, forward and backward. Rank 0 prints one JSON line per check, with the worst
difference over the ranks, rank 0's bytes sent by collective and its saved activations by region.

    mpiexec -n N python -m mpi4py tests/mpi/sequence_equivalence.py
"""
import json

import torch
from mpi4py import MPI

from ringlab.train.sequence import CommGroup, ParallelLayer, TransformerLayer, attend, saved_activations
from ringlab.train.ulysses import ulysses_attention

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
torch.set_default_dtype(torch.float64)


def difference(pairs) -> float:
    worst = max(float((a.detach() - b.detach()).abs().max() / b.detach().abs().max()) for a, b in pairs)
    return comm.allreduce(worst, op=MPI.MAX)


def report(**row):
    if rank == 0:
        print(json.dumps({"ranks": size, **row}), flush=True)


layer = TransformerLayer(hidden=12, heads=6, ffn=10, dropout=0.2, seed=2)
x = torch.randn(4 * size, 2, 12, generator=torch.Generator().manual_seed(3), requires_grad=True)
weights = torch.randn(4 * size, 2, 12, generator=torch.Generator().manual_seed(4))
y = layer(x, seed=9)
(y * weights).sum().backward()
outputs = {}
for mode, sequence_parallel, regather in (("tensor", False, True), ("sequence", True, True),
                                          ("sequence, gathered input kept", True, False)):
    group = CommGroup(comm)
    split = ParallelLayer(layer, group, sequence_parallel=sequence_parallel, regather=regather)
    mine = split.scatter_input(x.detach()).clone().requires_grad_(True)
    saved = saved_activations(split, lambda: outputs.__setitem__(mode, split(mine, seed=9)))
    forward = dict(group.sent)
    (outputs[mode] * split.scatter_input(weights)).sum().backward()
    split.sum_replicated_gradients()
    pairs = [(outputs[mode], split.scatter_input(y)), (mine.grad, split.scatter_input(x.grad)),
             (split.qkv_weight.grad, layer.qkv.weight.grad[split.qkv_rows]),
             (split.qkv_bias.grad, layer.qkv.bias.grad[split.qkv_rows]),
             (split.proj_weight.grad, layer.proj.weight.grad[:, split.proj_columns]),
             (split.proj_bias.grad, layer.proj.bias.grad),
             (split.fc1_weight.grad, layer.fc1.weight.grad[split.ffn_rows]),
             (split.fc1_bias.grad, layer.fc1.bias.grad[split.ffn_rows]),
             (split.fc2_weight.grad, layer.fc2.weight.grad[:, split.ffn_rows]),
             (split.fc2_bias.grad, layer.fc2.bias.grad),
             (split.norm1_weight.grad, layer.norm1.weight.grad), (split.norm1_bias.grad, layer.norm1.bias.grad),
             (split.norm2_weight.grad, layer.norm2.weight.grad), (split.norm2_bias.grad, layer.norm2.bias.grad)]
    report(check=f"layer, {mode}", difference=difference(pairs), forward=forward, sent=dict(group.sent),
           saved=dict(saved), activation_bytes=x.numel() * 8)
# sequence parallelism's output on every rank, gathered, is tensor parallelism's (which is whole on every rank)
gathered = torch.cat(comm.allgather(outputs["sequence"].detach()))
report(check="sequence = tensor", difference=difference([(gathered, outputs["tensor"])]))

for causal in (False, True):
    q, k, v = (torch.randn(3 * size, 2, 2 * size, 4, generator=torch.Generator().manual_seed(seed),
                           requires_grad=True) for seed in (5, 6, 7))  # 2n heads, 3 tokens a rank
    w = torch.randn(3 * size, 2, 2 * size, 4, generator=torch.Generator().manual_seed(8))
    full = attend(q, k, v, causal).view(q.shape)
    (full * w).sum().backward()
    group = CommGroup(comm)
    mine = slice(3 * rank, 3 * rank + 3)
    mq, mk, mv = (t.detach()[mine].clone().requires_grad_(True) for t in (q, k, v))
    out = ulysses_attention(mq, mk, mv, group, causal=causal)
    forward = group.sent["alltoall"]
    (out * w[mine]).sum().backward()
    pairs = [(out, full[mine]), (mq.grad, q.grad[mine]), (mk.grad, k.grad[mine]), (mv.grad, v.grad[mine])]
    report(check=f"ulysses, causal={causal}", difference=difference(pairs), forward=forward,
           sent=group.sent["alltoall"], shard_bytes=mq.numel() * 8)
