"""ringlab's DistributedOptimizer against torch's DistributedDataParallel (gloo), step for step, in one run.

    python benchmarks/optimizer_vs_ddp.py [--ranks 2] [--params 0.1,1,5] [--steps 20] [--rounds 3]

Both train the same MLP (``ringlab.train.task``, hidden width chosen for about 0.1, 1 and 5 million
parameters) with plain SGD on the same batches, on the same MPI ranks, one after the other, ``--rounds``
times alternating; the best round of each is kept (other work on the machine can slow a step, never
speed one up). It prints seconds per step for each and the ratio ours / DDP's, all measured here in
this run; issue 49's goal: no slower than before (0.2-0.8x DDP's at 2 ranks on this 2-core machine).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def hidden_for(params: float) -> int:
    """The task MLP's hidden width whose parameter count is nearest ``params``: its layers hold
    hidden^2 + hidden x (FEATURES + CLASSES + 2) + CLASSES."""
    from ringlab.train.task import CLASSES, FEATURES

    b = FEATURES + CLASSES + 2
    return max(1, round((-b + math.sqrt(b * b + 4 * max(params - CLASSES, 0))) / 2))


def _ours(hidden: int, steps: int, comm, batch) -> float:
    import torch

    from ringlab.train.optimizer import DistributedOptimizer
    from ringlab.train.task import make_model

    model = make_model(hidden=hidden)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), model.named_parameters(), comm=comm)
    loss_fn = torch.nn.CrossEntropyLoss()
    comm.Barrier()
    start = time.perf_counter()
    for step in range(steps):
        opt.zero_grad()
        inputs, targets = batch(comm.Get_rank(), step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
    seconds = time.perf_counter() - start
    opt.close()
    return seconds / steps


def worker(params: list[float], steps: int, rounds: int) -> None:
    from mpi4py import MPI

    from ringlab.train.reference import ddp_train
    from ringlab.train.scaling import PER_RANK
    from ringlab.train.task import batches, make_data, make_model, one_thread

    comm = MPI.COMM_WORLD
    x, y, _, _ = make_data()
    batch = batches(x, y, comm.Get_size(), PER_RANK)
    rows = []
    with one_thread():
        for p in params:
            hidden = hidden_for(p * 1e6)
            count = sum(q.numel() for q in make_model(hidden=hidden).parameters())
            ours, ddp = math.inf, math.inf
            for _ in range(rounds):
                ours = min(ours, max(comm.allgather(_ours(hidden, steps, comm, batch))))
                seconds = ddp_train(make_model(hidden=hidden), batch, steps, 0.01, comm)
                ddp = min(ddp, max(comm.allgather(seconds / steps)))
            rows.append({"parameters": count, "hidden": hidden, "ours_s": ours, "ddp_s": ddp, "ratio": ours / ddp})
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--params", default="0.1,1,5", help="millions of parameters, comma-separated")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    params = [float(v) for v in args.params.split(",")]
    if args.worker:
        worker(params, args.steps, args.rounds)
        return 0
    from ringlab.cluster.launch import run_mpi
    from ringlab.measure.tables import table

    done = run_mpi(args.ranks, [str(HERE), "--worker", "--params", args.params, "--steps", str(args.steps),
                                "--rounds", str(args.rounds)], timeout=1800)
    line = next((l for l in done.stdout.splitlines() if l.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        print(done.stdout + done.stderr, file=sys.stderr)
        return 1
    rows = json.loads(line[len("RESULT "):])
    print(f"# measured here, {args.ranks} ranks: seconds per step (best of {args.rounds} rounds of {args.steps} "
          "steps), ringlab's DistributedOptimizer (ring, buckets overlapped with backward) against torch DDP (gloo)")
    table(rows, {"parameters": ("parameters", ",.0f"), "ours (ms)": ("ours_s", ".2f"), "DDP (ms)": ("ddp_s", ".2f"),
                 "ours / DDP": ("ratio", ".2f")})
    worst = max(r["ratio"] for r in rows)
    print(f"# goal (issue 49): no slower than before, 0.2-0.8x DDP's: worst here {worst:.2f}x: "
          + ("met" if worst <= 0.8 else "NOT met"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
