"""Lab 08's prefetch: ZeRO-3 with and without it against plain data parallelism, then the measured steps on the
emulated machine. Rank 0 prints two JSON lines: the training rows, then measure_prefetch's result.

    mpiexec -n N python -m mpi4py tests/mpi/lab08_prefetch.py
"""
import json

from mpi4py import MPI

from ringlab.lessons.lab08_sharding_and_memory import prefetch

comm = MPI.COMM_WORLD
rows = prefetch.prefetch_against_data_parallel(comm)
result = prefetch.measure_prefetch(comm)
if comm.Get_rank() == 0:
    print(json.dumps(rows))
    print(json.dumps(result))
