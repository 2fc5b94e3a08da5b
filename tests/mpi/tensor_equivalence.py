"""Tensor parallelism against the unsplit model, in float64: an MLP split over every rank (forward and every
gradient), then a data x tensor mesh of every shape the ranks allow, both mappings, training 3 steps against
one process training the unsplit model on the global batch. Rank 0 prints one JSON line per check.

    mpiexec -n N python -m mpi4py tests/mpi/tensor_equivalence.py
"""
import json

import torch
from mpi4py import MPI

from ringlab.train.mesh import MeshTrainer, make_stack
from ringlab.train.tensor import ColumnParallelLinear, RowParallelLinear, device_mesh, split_mlp

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def relative(a, b) -> float:
    return float((a - b).detach().abs().max() / b.detach().abs().max())


def report(**row):
    rows = comm.gather(row, root=0)
    if rank == 0:
        print(json.dumps({**rows[0], "difference": max(r["difference"] for r in rows)}), flush=True)


# one MLP whose 10 hidden features do not divide by 3 (or 4) ranks
torch.manual_seed(3)
mlp = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.GELU(), torch.nn.Linear(10, 5)).double()
x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
y = mlp(x)
(y * torch.arange(5.0, dtype=torch.float64)).sum().backward()
mine = x.detach().clone().requires_grad_(True)
split = split_mlp(mlp, comm)
out = split(mine)
(out * torch.arange(5.0, dtype=torch.float64)).sum().backward()
column, row = split[0], split[2]
(lo, hi), (clo, chi) = column.rows, row.columns
diffs = {"output": relative(out, y), "input gradient": relative(mine.grad, x.grad),
         "W1 rows": relative(column.weight.grad, mlp[0].weight.grad[lo:hi]),
         "b1 rows": relative(column.bias.grad, mlp[0].bias.grad[lo:hi]),
         "W2 columns": relative(row.weight.grad, mlp[2].weight.grad[:, clo:chi]),
         "b2": relative(row.bias.grad, mlp[2].bias.grad)}
for what, difference in diffs.items():
    report(check=f"split MLP: {what}", ranks=size, difference=difference, hidden=[hi - lo])

# a data x tensor mesh, both mappings, against one process on the global batch
gen = torch.Generator().manual_seed(5)
batches = [(torch.randn(12, 16, generator=gen, dtype=torch.float64), torch.randint(0, 8, (12,), generator=gen))
           for _ in range(3)]
reference = make_stack(hidden=6, seed=1)  # 4 x 6 = 24 hidden features, split over the tensor ranks
for xb, yb in batches:
    reference.zero_grad()
    torch.nn.functional.cross_entropy(reference(xb), yb).backward()
    with torch.no_grad():
        for p in reference.parameters():
            p -= 0.1 * p.grad
for data in [d for d in range(1, size + 1) if size % d == 0]:
    for inner in (True, False):
        mesh = device_mesh(comm, data, size // data, tensor_inner=inner)
        trainer = MeshTrainer(make_stack(hidden=6, seed=1), mesh, lr=0.1)
        d = mesh.data.Get_rank()
        for xb, yb in batches:
            per = len(xb) // data
            trainer.step(xb[d * per:(d + 1) * per], yb[d * per:(d + 1) * per])
        worst = 0.0
        for theirs, ours in zip(reference, trainer.model):
            if hasattr(ours, "block"):
                (col, _, rowp), ref = list(ours.block), list(theirs.block)
                (lo, hi), (clo, chi) = col.rows, rowp.columns
                pairs = [(col.weight, ref[0].weight[lo:hi]), (col.bias, ref[0].bias[lo:hi]),
                         (rowp.weight, ref[2].weight[:, clo:chi]), (rowp.bias, ref[2].bias)]
            else:
                pairs = list(zip(ours.parameters(), theirs.parameters()))
            worst = max([worst] + [relative(a.detach(), b.detach()) for a, b in pairs])
        report(check=f"mesh {data} x {size // data}, tensor {'inner' if inner else 'outer'}", ranks=size,
               difference=worst, groups=[mesh.tensor_groups, mesh.data_groups])
        mesh.free()
