"""Data-parallel training of the generated task on 1, 2 and 4 ranks with ringlab's DistributedOptimizer.

    python benchmarks/train_scaling.py [--ranks 1,2,4] [--steps 600] [--algorithm ring]

For each rank count it starts an MPI job, trains with a global batch of 32 per rank (linear
learning-rate scaling: lr 0.05 per 32 samples), and prints the test accuracy reached, samples per
second, and the share of each step spent communicating, all measured in that run
(``ringlab.train.scaling`` does the work; lab 06 calls it too).
"""
from __future__ import annotations

import argparse

from ringlab.measure.tables import table
from ringlab.train.scaling import COLUMNS, PER_RANK, measure_scaling


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--algorithm", default="ring")
    args = parser.parse_args(argv)
    print(f"# measured here: {args.algorithm} allreduce, {PER_RANK} samples per rank per step, {args.steps} steps")
    table(measure_scaling([int(v) for v in args.ranks.split(",")], args.steps, args.algorithm), COLUMNS)


if __name__ == "__main__":
    main()
