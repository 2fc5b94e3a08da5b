"""Run on every rank (mpiexec): rl.topology.discover(comm) asks every rank for its node; rank 0 prints the nodes."""
import json

from mpi4py import MPI

import ringlab as rl

topology, facts = rl.topology.discover(MPI.COMM_WORLD, timeout=30)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(facts["nodes"]))
