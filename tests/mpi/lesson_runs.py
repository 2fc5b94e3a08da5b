"""A lab's measured lesson run several times in a row in one MPI job; rank 0 prints each run's conclusions.

    mpiexec -n N python -m mpi4py tests/mpi/lesson_runs.py LAB RUNS

One JSON line per run: {"conclusions": [...], "observations": [...], "text": "..."}.

A lesson's conclusions come from its emulated machine's numbers alone; what this machine showed raw is said as
observations, which may change from run to run. Where the raw measurement is the long part (labs 03 and 06), it
is taken in the first run only, and every later run measures the emulated machine again and draws its lesson
with that first raw measurement: the conclusions a learner would get in each run, for a fraction of the time.
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


RAW = {}  # a lesson's raw measurement, where only the first run takes it


def once(lesson, measure):
    """``measure()``'s result the first time ``lesson`` asks; the same result every time after."""
    if lesson not in RAW:
        RAW[lesson] = measure()
    return RAW[lesson]


def lab03():
    from ringlab.lessons.lab03_allreduce import EMULATED_SIZES, MACHINE, sweep_lesson
    from ringlab.measure.bench import run
    from ringlab.mpi.devices import cores

    quiet = open("/dev/null", "w")
    result = once("03", lambda: run("allreduce", ["ring", "naive", "mpi"], [1 << k for k in range(16, 27, 2)],
                                    iters=5, warmup=1, out=quiet))
    emulated = run("allreduce", ["ring", "naive"], EMULATED_SIZES, iters=5, warmup=1, emulate=MACHINE, out=quiet)
    return sweep_lesson(result, emulated, cores()) if comm.Get_rank() == 0 else None


def lab04_server():
    from ringlab.lessons.lab04_parameter_servers.serverload import measure_emulated_load, server_bottleneck_lesson

    rows = measure_emulated_load(comm=comm)
    return server_bottleneck_lesson(rows) if comm.Get_rank() == 0 else None


def lab05():
    from ringlab.lessons.lab05_scaling.sizes import EMULATED_SIZES, MACHINE, sizes_lesson
    from ringlab.measure.bench import in_machine_units, run

    quiet = open("/dev/null", "w")
    result = run("allreduce", ["ring", "mpi"], [1 << k for k in range(10, 23, 2)], iters=5, warmup=1, out=quiet)
    emulated = run("allreduce", ["ring"], EMULATED_SIZES, iters=5, warmup=1, emulate=MACHINE, out=quiet)
    return sizes_lesson(result["rows"], in_machine_units(emulated), comm.Get_size()) if comm.Get_rank() == 0 else None


def lab06_overlap():
    from ringlab.lessons.lab06_training.overlap import measure_emulated_overlap, overlap_lesson
    from ringlab.mpi.devices import cores
    from ringlab.train.overlap import bucket_sizes, make_wide_model, measure_overlap

    raw = once("06-overlap", lambda: measure_overlap(bucket_sizes(make_wide_model()), steps=12, comm=comm))
    emulated = measure_emulated_overlap(comm=comm)
    return overlap_lesson(raw["rows"], emulated["rows"], cores()) if comm.Get_rank() == 0 else None


def lab07_straggler():
    from ringlab.lessons.lab07_hangs_and_crawls.diagnose import STRAGGLER_MACHINE, measure_straggler, straggler_lesson

    raw = measure_straggler(comm)
    emulated = measure_straggler(comm, machine=STRAGGLER_MACHINE)
    return straggler_lesson(raw, emulated) if comm.Get_rank() == 0 else None


def lab08_sharding():
    from ringlab.lessons.lab08_sharding_and_memory.sharding import measure_sharding, sharding_lesson

    result = measure_sharding(comm)
    return sharding_lesson(result) if comm.Get_rank() == 0 else None


def lab08_prefetch():
    from ringlab.lessons.lab08_sharding_and_memory.prefetch import measure_prefetch, prefetch_lesson

    result = measure_prefetch(comm)
    return prefetch_lesson(result) if comm.Get_rank() == 0 else None


def lab09_mesh():
    from ringlab.lessons.lab09_model_parallelism.mesh import mapping_lesson, measure_mappings

    rows = measure_mappings(comm)
    return mapping_lesson(rows) if comm.Get_rank() == 0 else None


def lab09_experts():
    from ringlab.lessons.lab09_model_parallelism.experts import imbalance_lesson, measure_imbalance

    rows = measure_imbalance(comm)
    return imbalance_lesson(rows) if comm.Get_rank() == 0 else None


def lab09_dispatch():
    from ringlab.lessons.lab09_model_parallelism.experts import dispatch_lesson, measure_dispatch

    rows = measure_dispatch(comm)
    return dispatch_lesson(rows) if comm.Get_rank() == 0 else None


LESSONS = {"02": lab02, "03": lab03, "04-server": lab04_server, "05": lab05, "06-overlap": lab06_overlap,
           "07-straggler": lab07_straggler,
           "08-sharding": lab08_sharding,
           "08-prefetch": lab08_prefetch,
           "09-mesh": lab09_mesh,
           "09-experts": lab09_experts,
           "09-dispatch": lab09_dispatch}

for _ in range(runs):
    finding = LESSONS[lab]()
    if comm.Get_rank() == 0:
        print(json.dumps({"conclusions": list(finding.conclusions), "observations": list(finding.observations),
                          "text": finding.text}), flush=True)
