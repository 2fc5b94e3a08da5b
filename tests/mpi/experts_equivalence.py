"""The expert-parallel mixture-of-experts layer against the same layer on one rank, float64: outputs, the
input's gradient, every owned expert's gradients and the router's (summed over the ranks), with one and two
experts a rank and a different number of tokens on every rank; padded, dropless (rl.alltoallv) and with a
capacity factor of 1.0 (against the layer on one rank dropping within each rank's tokens). Rank 0 prints one
JSON line per check.

    mpiexec -n N python -m mpi4py tests/mpi/experts_equivalence.py
"""
import json

import numpy as np
import torch
from mpi4py import MPI

from ringlab.train.experts import ExpertParallel, MixtureOfExperts, expert_capacity

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
counts = [5 + 3 * r for r in range(size)]  # tokens per rank


def relative(a, b) -> float:
    if a is None or b is None:  # an expert no token chose has no gradient: both must be missing, or zero
        return float(max((t.abs().max() for t in (a, b) if t is not None), default=0.0))
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max()) if b.abs().max() > 0 else float(a.abs().max())


MODES = (("padded", None), ("dropless", None), ("padded", 1.0))  # dispatch, capacity factor

for (dispatch, factor), per_rank in [(mode, per_rank) for mode in MODES for per_rank in (1, 2)]:
    experts = per_rank * size
    gen = torch.Generator().manual_seed(11)
    x_all = torch.randn(sum(counts), 6, generator=gen, dtype=torch.float64)
    weights = torch.randn(sum(counts), 6, generator=gen, dtype=torch.float64)
    reference = MixtureOfExperts(features=6, experts=experts, hidden=7, seed=2).double()
    skew = 0.0 if factor is None else 0.5  # with a capacity, a busier expert 0, whose extra tokens are dropped
    with torch.no_grad():  # (without one, the router as made leaves an expert with no token: it must take part)
        reference.router.bias[0] += skew
    x_ref = x_all.clone().requires_grad_(True)
    bounds = np.concatenate(([0], np.cumsum(counts)))
    # a capacity counts each rank's tokens alone (GShard's groups): the reference drops within each rank's share
    ref_out = torch.cat([reference(x_ref[lo:hi], None if factor is None else expert_capacity(factor, hi - lo, experts))
                         for lo, hi in zip(bounds[:-1], bounds[1:])])
    (ref_out * weights).sum().backward()

    moe = MixtureOfExperts(features=6, experts=experts, hidden=7, seed=2).double()
    with torch.no_grad():
        moe.router.bias[0] += skew
    layer = ExpertParallel(moe, comm, dispatch=dispatch, capacity_factor=factor)
    lo = int(bounds[rank])
    x = x_all[lo:lo + counts[rank]].clone().requires_grad_(True)
    out = layer(x)
    (out * weights[lo:lo + counts[rank]]).sum().backward()
    diffs = {"output": relative(out, ref_out[lo:lo + counts[rank]]),
             "input gradient": relative(x.grad, x_ref.grad[lo:lo + counts[rank]])}
    for i, expert in enumerate(layer.experts):
        theirs = reference.experts[rank * per_rank + i]
        diffs[f"expert {i} gradients"] = max(relative(a.grad, b.grad) for a, b in zip(expert.parameters(),
                                                                                       theirs.parameters()))
    router = [comm.allreduce(p.grad.numpy(), op=MPI.SUM) for p in layer.router.parameters()]
    diffs["router gradient (summed over ranks)"] = max(relative(torch.as_tensor(a), b.grad)
                                                       for a, b in zip(router, reference.router.parameters()))
    zero = int((ref_out.detach().abs().sum(dim=1) == 0).sum())  # tokens the reference dropped
    for what, difference in diffs.items():
        worst = comm.allreduce(difference, op=MPI.MAX)
        if rank == 0:
            print(json.dumps({"check": what, "dispatch": dispatch, "capacity_factor": factor,
                              "experts_per_rank": per_rank, "ranks": size, "difference": worst,
                              "per_expert": layer.last["per_expert"], "capacity": layer.last["capacity"],
                              "dropped": layer.last["dropped"], "reference_dropped": zero,
                              "sent": dict(layer.sent)}), flush=True)
