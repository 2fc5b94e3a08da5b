"""On an emulated machine, one rank computes SLOW seconds of virtual time more a step than the others (rank 1's
forward pass adds them with ``rl.mpi.emulate.elapse``): ``time_steps`` must say the averaging apart from the
waiting. Rank 0 prints the row as JSON.

    RINGLAB_EMULATE=uniform:1:500 mpiexec -n N python -m mpi4py tests/mpi/payoff_waiting.py SLOW
"""
import json
import sys

from mpi4py import MPI

import ringlab.train.task as task
from ringlab.mpi import emulate
from ringlab.train.payoff import time_steps

comm = MPI.COMM_WORLD
slow = float(sys.argv[1])
made = task.make_model


def make_model(**kwargs):
    model = made(**kwargs)
    if comm.Get_rank() == 1:
        model.register_forward_hook(lambda *_: emulate.elapse(slow))
    return model


task.make_model = make_model
with task.one_thread():
    row = time_steps(16, steps=4, warmup=1, comm=comm)
if comm.Get_rank() == 0:
    print(json.dumps(row))
