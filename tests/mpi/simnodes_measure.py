"""Lab 05's measurement on simulated nodes, on every rank; rank 0 prints the rows as JSON."""
import json
import os

from mpi4py import MPI

from ringlab.lessons.lab05_scaling.simnodes import measure_on_simulated_nodes

rows = measure_on_simulated_nodes([1 << 12, 1 << 16], per_node=2, link_gbps=0.05, repeats=2)
assert "RINGLAB_RANKS_PER_NODE" not in os.environ  # restored after the block
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(rows))
