"""Data-parallel training of the generated task on 1, 2 and 4 ranks with ringlab's DistributedOptimizer.

    python benchmarks/train_scaling.py [--ranks 1,2,4] [--steps 600] [--algorithm ring]

For each rank count it starts an MPI job, trains with a global batch of 32 per rank (linear
learning-rate scaling: lr 0.05 per 32 samples), and prints the test accuracy reached, samples per
second, and the share of each step spent communicating against computing, all measured in that run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def worker(steps: int, algorithm: str) -> None:
    import torch
    from mpi4py import MPI

    from ringlab.train import DistributedOptimizer
    from ringlab.train.task import accuracy, batches, make_data, make_model

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    x, y, x_test, y_test = make_data()
    batch = batches(x, y, size, 32)
    model = make_model()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05 * size, momentum=0.9),
                               model.named_parameters(), algorithm=algorithm)
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
    if rank == 0:
        print(json.dumps({"ranks": size, "steps": steps, "seconds": slowest, "samples_per_s": steps * 32 * size / slowest,
                          "comm_share": comm_share, "accuracy": accuracy(model, x_test, y_test)}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--algorithm", default="ring")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.steps, args.algorithm)
    from ringlab.mpi.launch import mpiexec_command

    print(f"# measured here: {args.algorithm} allreduce, 32 samples per rank per step, {args.steps} steps")
    print(f"# {'ranks':>5} {'samples/s':>10} {'speed-up':>9} {'communicating':>14} {'test accuracy':>14}")
    base = None
    for n in (int(v) for v in args.ranks.split(",")):
        done = subprocess.run(mpiexec_command(n, [__file__, "--worker", "--steps", str(args.steps),
                                                  "--algorithm", args.algorithm]),
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            sys.exit(done.stderr[-2000:])
        row = json.loads(done.stdout.strip().splitlines()[-1])
        base = base or row["samples_per_s"]
        print(f"  {n:>5} {row['samples_per_s']:>10.0f} {row['samples_per_s'] / base:>9.2f} "
              f"{row['comm_share']:>13.0%} {row['accuracy']:>14.3f}", flush=True)


if __name__ == "__main__":
    main()
