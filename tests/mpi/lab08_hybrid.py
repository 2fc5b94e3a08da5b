"""Lab 08's hybrid sharding against plain data parallelism on simulated nodes (RINGLAB_RANKS_PER_NODE); with
``crossed``, each replica group pairs piece r of one node with piece r+1 of the next (a wrong shard), on a model whose
pieces are all the same size, so that the run completes and only the weights can tell. Rank 0 prints the rows as
one JSON line and the lesson's sentence.

    RINGLAB_RANKS_PER_NODE=L mpiexec -n N python -m mpi4py tests/mpi/lab08_hybrid.py [crossed]
"""
import json
import sys

import torch
from mpi4py import MPI

from ringlab.lessons.lab08_sharding_and_memory import hybrid

comm = MPI.COMM_WORLD


def even_model():
    torch.manual_seed(5)  # units of 72 and 12 parameters: nodes of 2 or 3 ranks cut them into equal pieces
    return torch.nn.Sequential(torch.nn.Linear(5, 12), torch.nn.Tanh(), torch.nn.Linear(12, 1, bias=False)).double()


if sys.argv[1:] == ["crossed"]:
    right = hybrid.hybrid_groups

    def crossed(comm):
        mesh = right(comm)
        mesh.data.Free()
        g, rank = mesh.tensor.Get_size(), comm.Get_rank()
        node, local = divmod(rank, g)
        mesh.data = comm.Split((local - node) % g, node)  # node j's piece r with node j+1's piece r+1
        return mesh

    hybrid.hybrid_groups = crossed
    rows = hybrid.hybrid_against_data_parallel(comm, make_model=even_model)
else:
    rows = hybrid.hybrid_against_data_parallel(comm)
if comm.Get_rank() == 0:
    print(json.dumps(rows))
    print(hybrid.hybrid_check_sentence(rows))
