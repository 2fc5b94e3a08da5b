"""Virtual time on emulated links against the cost model, on every rank (tests/test_virtual_time.py).

    mpiexec -n N python -m mpi4py tests/mpi/vt_model_check.py MODE

MODE ``model``: each algorithm and size in compute="model" on a slow and a fast link; ``cpu``: compute="cpu" on a
link whose time per step dwarfs this CPU's work; ``wall``: a ring on links so slow that its virtual time is many
seconds; ``environment``: whatever RINGLAB_EMULATE and RINGLAB_EMULATE_COMPUTE say. Rank 0 prints one line per
case, ``case: right|WRONG measured/predicted virtual_s wall_s``; an error (every rank's) is printed by rank 0 as
``rank R: error: TEXT``.
"""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import emulate

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]
KiB, MiB = 1 << 10, 1 << 20
ALGORITHMS = [("allreduce.ring", {}), ("allreduce.naive", {}), ("broadcast.chain", {"segments": 4}),
              ("reduce.tree", {}), ("allreduce.rhd", {}), ("allreduce.hierarchical", {"local": 2})]


def run(name: str, options: dict, x):
    """The public call of algorithm ``name`` on ``x``, and whether its result is MPI's own."""
    kind, algorithm = name.split(".")
    if kind == "allreduce":
        got, want = rl.allreduce(x, algorithm, timeout=60, **options), np.empty_like(x)
        comm.Allreduce(x, want)
        right = np.array_equal(got, want)  # small whole numbers: every order of summing is exact
    elif kind == "broadcast":
        got = rl.broadcast(x, 0, algorithm, timeout=60, **options)
        right = np.array_equal(got, comm.bcast(x, root=0))
    else:
        got, want = rl.reduce(x, 0, algorithm, timeout=60, **options), np.empty_like(x)
        comm.Reduce(x, want, root=0)
        right = rank != 0 or np.array_equal(got, want)
    return comm.allreduce(int(right), op=MPI.MIN) == 1


def timed(name: str, options: dict, x) -> tuple[bool, float, float]:
    """(right, virtual seconds, wall seconds) of one call, timed on the slowest rank from clocks set alike."""
    emulate.synchronize(comm, 60)
    start, started = emulate.now(), emulate.wall()
    kind, algorithm = name.split(".")
    call = {"allreduce": lambda: rl.allreduce(x, algorithm, timeout=60, **options),
            "broadcast": lambda: rl.broadcast(x, 0, algorithm, timeout=60, **options),
            "reduce": lambda: rl.reduce(x, 0, algorithm, timeout=60, **options)}[kind]
    call()
    took, walked = emulate.now() - start, emulate.wall() - started
    right = run(name, options, x)  # outside the timed call: MPI's own result beside ringlab's
    return right, comm.allreduce(took, op=MPI.MAX), comm.allreduce(walked, op=MPI.MAX)


def case(spec: str, name: str, options: dict, nbytes: int, label: str) -> None:
    x = np.random.default_rng(rank).integers(-8, 8, nbytes // 4).astype(np.float32)
    right, seconds, wall = timed(name, options, x)
    topology, scale = rl.topology.from_spec(spec, n)
    link = rl.predict(rl.build(name, n, **options), nbytes, topology, itemsize=4).seconds * scale
    if rank == 0:
        print(f"{label}: {'right' if right else 'WRONG'} {seconds / link:.5f} {seconds:.6g} {wall:.6g}", flush=True)


if mode == "model":  # compute="model": this CPU never counts, on 10 MB/s and on 100 GB/s
    for spec in ("uniform:0.01:100", "uniform:100:5"):
        with rl.emulate(spec, compute="model"):
            for name, options in ALGORITHMS:
                for nbytes in (1 * KiB, 64 * KiB, 1 * MiB):
                    case(spec, name, options, nbytes, f"{spec} {name} {nbytes}")

elif mode == "cpu":  # compute="cpu" where a step's links take ~500x the CPU's work of landing it
    spec = "uniform:0.01:100"
    with rl.emulate(spec, compute="cpu"):
        for name, options in ALGORITHMS:
            for nbytes in (256 * KiB, 1 * MiB):
                case(spec, name, options, nbytes, f"{spec} {name} {nbytes}")

elif mode == "wall":  # 16 MiB over links of 1 MB/s: seconds of virtual time, and nobody sleeps through them
    spec = "uniform:0.001:100"
    for compute in ("model", "cpu"):
        with rl.emulate(spec, compute=compute):
            case(spec, "allreduce.ring", {}, 16 * MiB, f"{compute} {spec} allreduce.ring {16 * MiB}")

else:  # environment: RINGLAB_EMULATE and RINGLAB_EMULATE_COMPUTE, set for the job
    try:
        machine = emulate.current()
        if rank == 0:
            print(f"machine: {machine.label}; compute {machine.compute}; clock {emulate.clock_name()}", flush=True)
        for name, options in ALGORITHMS[:2]:
            case(machine.spec, name, options, 1 * MiB, f"env {name} {1 * MiB}")
    except ValueError as err:  # every rank's line printed by rank 0: two processes' prints would interleave
        for r, text in enumerate(comm.gather(str(err), root=0) or []):
            print(f"rank {r}: error: {text}", flush=True)
