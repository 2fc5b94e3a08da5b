"""Speed-up against ranks: data-parallel training of the generated task with ringlab's DistributedOptimizer.

:func:`measure_scaling` starts one MPI job per rank count, each running this module::

    mpiexec -n 4 python -m mpi4py -m ringlab.train.scaling --steps 600 --algorithm ring

Every rank takes 32 samples per step (linear learning-rate scaling: lr 0.05 per 32 samples); rank 0
prints one JSON row: samples per second, the share of each step spent communicating, the test
accuracy reached, all measured in that run.
"""
from __future__ import annotations

import argparse
import json
import time

PER_RANK, LR = 32, 0.05

# for ringlab.lab.tables.table(rows, COLUMNS)
COLUMNS = {"ranks": "ranks", "samples/s": ("samples_per_s", ".0f"), "speed-up": "speedup",
           "communicating": ("comm_share", ".0%"), "test accuracy": ("accuracy", ".3f")}


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
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR * size, momentum=0.9),
                               model.named_parameters(), algorithm=algorithm, comm=comm)
    loss_fn = torch.nn.CrossEntropyLoss()
    comm.Barrier()
    start = time.perf_counter()
    for step in range(steps):
        opt.zero_grad()
        inputs, targets = batch(rank, step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    seconds = time.perf_counter() - start
    opt.close()
    slowest = comm.allreduce(seconds, op=MPI.MAX)
    comm_share = comm.allreduce(opt.comm_seconds / seconds, op=MPI.SUM) / size
    if rank != 0:
        return None
    return {"ranks": size, "steps": steps, "algorithm": algorithm, "seconds": slowest,
            "samples_per_s": steps * PER_RANK * size / slowest, "comm_share": comm_share,
            "accuracy": accuracy(model, x_test, y_test)}


def measure_scaling(rank_counts=(1, 2, 4), steps: int = 600, algorithm: str = "ring",
                    timeout: float = 1800) -> list[dict]:
    """One MPI job per rank count; a row each, with the speed-up over the first rank count."""
    from ..mpi.launch import run_mpi

    rows = []
    for n in rank_counts:
        done = run_mpi(n, ["-m", "ringlab.train.scaling", "--steps", str(steps), "--algorithm", algorithm],
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
