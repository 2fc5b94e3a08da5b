"""Lab 04's three trainers against the clock, and the server's load, on few steps: argv = out.json.
Rank 0 writes {"runs": {method: run}, "load": rows}."""
import json
import sys

from mpi4py import MPI

from ringlab.lessons.lab04_parameter_servers.serverload import measure_server_load
from ringlab.lessons.lab04_parameter_servers.wallclock import METHODS, race
from ringlab.train.straggler import Straggler

STEPS = 6
straggler = Straggler(MPI.COMM_WORLD.Get_size() - 2, extra_seconds=0.005)  # the last worker
runs = {method: race(method, STEPS, straggler, lr=0.3) for method in METHODS}
load = measure_server_load(steps=3, hidden=16)
if MPI.COMM_WORLD.Get_rank() == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump({"runs": runs, "load": load}, fh)
