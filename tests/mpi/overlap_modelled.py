"""Lab 06's emulated overlap sweep with modelled compute: argv = out.json FACTOR [FACTOR ...].

Each rank times the wide model's passes alone (train.overlap.time_compute), then, for each FACTOR, runs the
lesson's sweep (its machine and bucket sizes) with FAST's compute times FACTOR: a CPU FACTOR times slower than
the one FAST was measured on. Rank 0 writes {"timed": every rank's time_compute, "rows": {FACTOR: rows}}."""
import json
import sys

from mpi4py import MPI

from ringlab.lessons.lab06_training.overlap import MACHINE
from ringlab.mpi.emulate import emulate
from ringlab.train.overlap import bucket_sizes, make_wide_model, measure_overlap, time_compute

# the wide model's passes on 256 samples, timed alone on a fast CPU (an AMD EPYC Zen 4, family 25 model 17):
# time_compute said 9-11 ms forward, 18-22 ms backward there
FAST = (9.5e-3, 20e-3)

comm = MPI.COMM_WORLD
out, factors = sys.argv[1], [float(f) for f in sys.argv[2:]]
timed = comm.allgather(time_compute(comm, per_rank=16, passes=2))
sizes = bucket_sizes(make_wide_model())
rows = {}
for factor in factors:
    with emulate(MACHINE, compute="model"):  # per_rank 16: the compute is modelled, so only the wall time is less
        measured = measure_overlap([sizes[1], sizes[2], sizes[-1]], steps=2, warmup=1, per_rank=16, comm=comm,
                                   compute=(FAST[0] * factor, FAST[1] * factor))
    if comm.Get_rank() == 0:
        rows[str(factor)] = measured["rows"]
if comm.Get_rank() == 0:
    with open(out, "w") as f:
        json.dump({"timed": timed, "rows": rows}, f)
