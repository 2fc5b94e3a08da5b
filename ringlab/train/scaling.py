"""Speed-up against ranks: data-parallel training of the generated task with ringlab's DistributedOptimizer.

:func:`measure_scaling` starts one MPI job per rank count, each running this module::

    mpiexec -n 4 python -m mpi4py -m ringlab.train.scaling --steps 600 --algorithm ring

Every rank takes 32 samples per step (linear learning-rate scaling: lr 0.05 per 32 samples); rank 0
prints one JSON row: samples per second, the share of each step spent communicating, the test
accuracy reached, all measured in that run. Times are :func:`ringlab.mpi.emulate.now`'s: virtual time on
an emulated machine (``RINGLAB_EMULATE``: its links' time plus this CPU's compute counted as CPU time),
with ``wall_seconds`` beside them, this machine's own clock.

n ranks averaging their gradients compute what one process computes on the n slices together:
:func:`train_in_one_process` trains that way, to check that the ranks themselves change nothing
that is learned (only the global batch, the learning rate and the number of steps do).
"""
from __future__ import annotations

import argparse
import json

from ..mpi import emulate

PER_RANK, LR, MOMENTUM = 32, 0.05, 0.9

# for ringlab.measure.tables.table(rows, COLUMNS)
COLUMNS = {"ranks": "ranks", "samples/s": ("samples_per_s", ".0f"), "speed-up": "speedup",
           "communicating": ("comm_share", ".0%"), "test accuracy": ("accuracy", ".3f")}
RECIPE_COLUMNS = {"ranks": "ranks", "steps": "steps", "global batch": "batch",  # what each run did,
                  "lr": ("lr", ".2f"), **{k: v for k, v in COLUMNS.items() if k != "ranks"},  # what it measured,
                  "test accuracy": ("accuracy", ".4f")}  # to the 0.0005 of one test point in 2,000


def recipe(nranks: int) -> dict:
    """The training recipe for ``nranks`` ranks: global batch and learning rate, scaled linearly."""
    return {"batch": PER_RANK * nranks, "lr": LR * nranks, "momentum": MOMENTUM}


def train_and_time(steps: int, algorithm: str = "ring", comm=None) -> dict | None:
    """Train on every rank of ``comm`` (default COMM_WORLD) for ``steps`` steps; rank 0 returns the row."""
    import torch
    from mpi4py import MPI

    from .optimizer import DistributedOptimizer
    from .task import accuracy, batches, make_data, make_model

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    x, y, x_test, y_test = make_data()
    batch = batches(x, y, size, PER_RANK)
    model = make_model()
    plan = recipe(size)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=plan["lr"], momentum=plan["momentum"]),
                               model.named_parameters(), algorithm=algorithm, comm=comm)
    loss_fn = torch.nn.CrossEntropyLoss()
    emulate.synchronize(comm)  # a barrier; on an emulated machine every rank's clock set to the latest
    start, wall = emulate.now(), emulate.wall()
    for step in range(steps):
        opt.zero_grad()
        inputs, targets = batch(rank, step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    seconds, wall = emulate.now() - start, emulate.wall() - wall
    opt.close()
    slowest = comm.allreduce(seconds, op=MPI.MAX)
    wall = comm.allreduce(wall, op=MPI.MAX)
    comm_share = comm.allreduce(opt.comm_seconds / seconds, op=MPI.SUM) / size
    if rank != 0:
        return None
    return {"ranks": size, "steps": steps, "algorithm": algorithm, "seconds": slowest, "wall_seconds": wall,
            "clock": emulate.clock_name(), **plan,
            "samples": steps * plan["batch"], "train_points": len(y), "test_points": len(y_test),
            "gradient_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "samples_per_s": steps * plan["batch"] / slowest, "comm_share": comm_share,
            "accuracy": accuracy(model, x_test, y_test)}


def train_in_one_process(nranks: int, steps: int) -> dict:
    """Train in this process on the global batches of ``nranks`` ranks (their slices together) with the
    recipe of ``nranks`` ranks, no MPI: the same arithmetic as :func:`train_and_time` on ``nranks``
    ranks, up to the order in which float gradients are added. Returns the recipe and the test accuracy.
    """
    import torch

    from .task import accuracy, batches, make_data, make_model

    x, y, x_test, y_test = make_data()
    batch = batches(x, y, nranks, PER_RANK)
    model = make_model()
    plan = recipe(nranks)
    sgd = torch.optim.SGD(model.parameters(), lr=plan["lr"], momentum=plan["momentum"])
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        slices = [batch(rank, step) for rank in range(nranks)]
        sgd.zero_grad()
        inputs, targets = torch.cat([s[0] for s in slices]), torch.cat([s[1] for s in slices])
        loss_fn(model(inputs), targets).backward()  # the mean over the global batch = the ranks' means averaged
        sgd.step()
    return {"ranks": nranks, "steps": steps, **plan, "samples": steps * plan["batch"],
            "accuracy": accuracy(model, x_test, y_test)}


def steps_for(samples: int, nranks: int) -> int:
    """Steps that make ``nranks`` ranks train on ``samples`` samples in all (PER_RANK each per step)."""
    if samples <= 0 or samples % (PER_RANK * nranks):
        raise ValueError(f"samples must be a positive multiple of {PER_RANK} x ranks ({PER_RANK * nranks} for "
                         f"{nranks} ranks), so that every rank count trains on exactly that many; got {samples}")
    return samples // (PER_RANK * nranks)


def measure_scaling(rank_counts=(1, 2, 4), steps: int | None = None, algorithm: str = "ring",
                    timeout: float = 1800, samples: int | None = None) -> list[dict]:
    """One MPI job per rank count; a row each, with the speed-up over the first rank count.

    Give ``steps`` (default 600) for the same number of steps at every rank count (n ranks then see
    n times the samples), or ``samples`` for the same number of training samples at every rank count
    (n ranks then take n times fewer steps of n times the batch), so that accuracies compare fairly.
    """
    from ..cluster.launch import run_mpi

    if steps is not None and samples is not None:
        raise ValueError("give steps (the same steps for every rank count) or samples (the same samples), not both")
    rows = []
    for n in rank_counts:
        count = steps_for(samples, n) if samples is not None else (600 if steps is None else steps)
        done = run_mpi(n, ["-m", "ringlab.train.scaling", "--steps", str(count), "--algorithm", algorithm],
                       timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"training on {n} ranks failed:\n{done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for row in rows:
        row["speedup"] = row["samples_per_s"] / rows[0]["samples_per_s"]
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="one rank count's training run (run it under mpiexec)")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--algorithm", default="ring")
    args = parser.parse_args(argv)
    row = train_and_time(args.steps, args.algorithm)
    if row is not None:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
