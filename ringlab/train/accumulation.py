"""Gradient accumulation: k micro-batches' gradients added up on one rank before one optimizer step give
the weights that k ranks of data parallelism give, each taking one of the micro-batches.

Both average the same k mean gradients: accumulation adds k backward passes of loss / k into the same
``.grad``; data parallelism adds the k ranks' gradients in an allreduce and divides by k. Only the order
of the float additions differs. :func:`check_accumulation` runs both under MPI::

    mpiexec -n 3 python -m mpi4py -m ringlab.train.accumulation --steps 10

Every rank trains by data parallelism (rank r takes micro-batch r of every step); rank 0 then trains
alone, accumulating all the micro-batches, and prints the largest difference between the two sets of
weights as one JSON row. It also runs ranks that each accumulate 2 micro-batches (``no_sync()`` around
the first backward pass, as with DDP), set against one process accumulating 2 x ranks.
"""
from __future__ import annotations

import argparse
import contextlib
import json

import numpy as np
import torch

from ..schedule import check_count
from .task import batches, make_data, make_model, weights

PER_MICRO_BATCH, LR = 32, 0.1


def train_accumulating(model: torch.nn.Module, batch, steps: int, micro_batches: int, lr: float = LR,
                       comm=None) -> np.ndarray:
    """Plain SGD at ``lr`` for ``steps`` steps of ``micro_batches`` backward passes each, loss / micro_batches
    in each, so that every step takes the mean gradient; return the weights (flat, float64).

    Alone (``comm`` None) micro-batch i of step s is ``batch(i, s)``. On every rank of ``comm`` a
    DistributedOptimizer averages over the ranks too: rank r takes micro-batches r*k to r*k+k-1 (k =
    ``micro_batches``), all but the last backward pass inside ``no_sync()``, so the step takes the mean
    gradient of ranks x k micro-batches.
    """
    from .optimizer import DistributedOptimizer

    steps, micro_batches = check_count("steps", steps), check_count("micro_batches", micro_batches)
    first = 0 if comm is None else comm.Get_rank() * micro_batches
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    opt = sgd if comm is None else DistributedOptimizer(sgd, model.named_parameters(), comm=comm)
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = next(model.parameters()).dtype
    for step in range(steps):
        opt.zero_grad()
        for i in range(micro_batches):
            inputs, targets = batch(first + i, step)
            last = i == micro_batches - 1
            with opt.no_sync() if comm is not None and not last else contextlib.nullcontext():
                (loss_fn(model(inputs.to(dtype)), targets) / micro_batches).backward()
        opt.step()
    if comm is not None:
        opt.close()
    return weights(model)


def compare(steps: int = 10, dtype=torch.float64, comm=None) -> dict | None:
    """On every rank of ``comm`` (default COMM_WORLD): the runs the module docstring describes; rank 0
    returns ``{"ranks", "steps", "dtype", "micro_batch", "difference", "accumulating_difference",
    "one_micro_batch_difference", "largest_weight"}`` (differences: largest absolute, weights)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD if comm is None else comm
    n = comm.Get_size()
    x, y, _, _ = make_data()
    batch = batches(x, y, 2 * n, PER_MICRO_BATCH)
    parallel = train_accumulating(make_model(dtype=dtype), batch, steps, 1, comm=comm)
    parallel_accumulating = train_accumulating(make_model(dtype=dtype), batch, steps, 2, comm=comm)
    if comm.Get_rank() != 0:
        return None
    alone = train_accumulating(make_model(dtype=dtype), batch, steps, n)
    alone_twice = train_accumulating(make_model(dtype=dtype), batch, steps, 2 * n)
    first_only = train_accumulating(make_model(dtype=dtype), batch, steps, 1)  # another run: the check can fail
    return {"ranks": n, "steps": steps, "dtype": str(dtype).removeprefix("torch."), "micro_batch": PER_MICRO_BATCH,
            "difference": float(np.abs(parallel - alone).max()),
            "accumulating_difference": float(np.abs(parallel_accumulating - alone_twice).max()),
            "one_micro_batch_difference": float(np.abs(parallel - first_only).max()),
            "largest_weight": float(np.abs(alone).max())}


def check_accumulation(nranks: int = 3, steps: int = 10, dtype: str = "float64", timeout: float = 300) -> dict:
    """Run :func:`compare` on ``nranks`` ranks (an MPI job); its row."""
    from ..cluster.launch import run_mpi

    nranks = check_count("nranks", nranks, minimum=2)
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    done = run_mpi(nranks, ["-m", "ringlab.train.accumulation", "--steps", str(steps), "--dtype", dtype],
                   timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the accumulation check on {nranks} ranks failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="accumulation against data parallelism (run it under mpiexec)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    row = compare(args.steps, getattr(torch, args.dtype))
    if row is not None:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
