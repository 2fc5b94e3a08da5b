"""A lab's measured lesson run several times in a row in one MPI job; rank 0 prints each run's conclusions.

    mpiexec -n N python -m mpi4py tests/mpi/lesson_runs.py LAB RUNS

One JSON line per run: {"conclusions": [...], "observations": [...], "text": "..."}.
"""
import json
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
lab, runs = sys.argv[1], int(sys.argv[2])


def lab02():
    from ringlab.lessons.lab02_reduce_broadcast import MACHINE, measure_chain, pipelining

    raw = measure_chain(comm, 1 << 22)
    emulated = measure_chain(comm, 1 << 22, machine=MACHINE)
    return pipelining(raw, emulated) if comm.Get_rank() == 0 else None


LESSONS = {"02": lab02}

for _ in range(runs):
    finding = LESSONS[lab]()
    if comm.Get_rank() == 0:
        print(json.dumps({"conclusions": list(finding.conclusions), "observations": list(finding.observations),
                          "text": finding.text}), flush=True)
