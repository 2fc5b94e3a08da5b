"""When data parallelism pays, measured: for a few widths of the task's MLP, seconds per step on one
rank (all compute) and on n ranks averaging gradients, beside a ring-allreduce sweep on those n ranks
to fit alpha and B (:mod:`ringlab.predict.dataparallel` turns them into a predicted speed-up).

:func:`measure_payoff` times one rank in this process and starts one MPI job per rank count, each
running this module::

    mpiexec -n 2 python -m mpi4py -m ringlab.train.payoff --widths 64,256,1024 --steps 30

Every rank takes PER_RANK samples a step (n ranks: n times the samples per step), and the
DistributedOptimizer averages the gradients after backward in one allreduce (``overlap=False``, one
bucket), as the cost model assumes. A step lasts as long as its slowest rank's; the time kept is the fastest
timed step's, as timeit keeps the best of its runs: other work on the machine can slow a step, never speed one up.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json

import numpy as np

from ..mpi import emulate

from .scaling import PER_RANK
from .task import one_thread

WIDTHS = (64, 256, 1024)  # hidden units: 22.5 KiB, 282 KiB and 4.1 MiB of float32 gradients
SWEEP_SIZES = tuple(1 << k for k in range(10, 23, 2))  # 1 KiB to 4 MiB: the widths' gradients and around them
LR = 0.01  # small: the timings, not the training, are the point here


def time_steps(hidden: int, steps: int = 30, warmup: int = 5, comm=None, per_rank: int = PER_RANK) -> dict:
    """Train the task's MLP of ``hidden`` units for ``warmup`` + ``steps`` steps; time the steps.

    Alone (``comm`` None): plain SGD, all compute. On every rank of ``comm``: a DistributedOptimizer
    (ring, no overlap) whose ``step()`` time is the communication. Returns ``hidden``,
    ``gradient_bytes``, ``step_s`` (the fastest step, each step as slow as its slowest rank), ``comm_s``
    (that step's averaging: its seconds in ``step()`` on the rank that came to step() last, which waited for no
    other rank's compute), ``waited_s`` (the longest any rank of that step waited in ``step()`` beyond that, for a
    slower rank's compute) and ``wall_step_s`` (that step on this machine's own clock).
    Each rank takes ``per_rank`` samples a step. Times are :func:`ringlab.mpi.emulate.now`'s: virtual time on an
    emulated machine (its links' time plus this CPU's compute counted as CPU time), this machine's otherwise.
    """
    import torch

    from .optimizer import DistributedOptimizer
    from .task import batches, make_data, make_model

    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    if isinstance(per_rank, bool) or not isinstance(per_rank, int) or not 1 <= per_rank <= 2000:
        raise ValueError(f"per_rank must be a whole number of samples from 1 to 2000, got {per_rank!r}")
    rank = 0 if comm is None else comm.Get_rank()
    x, y, _, _ = make_data()
    batch = batches(x, y, 1 if comm is None else comm.Get_size(), per_rank)
    model = make_model(hidden=hidden)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
    opt = sgd if comm is None else DistributedOptimizer(sgd, model.named_parameters(), comm=comm, overlap=False,
                                                        bucket_bytes=nbytes)  # one allreduce, as the model has it
    loss_fn = torch.nn.CrossEntropyLoss()
    seconds = np.zeros((steps, 3))  # (step, in step() communicating, the step's wall time) per timed step
    for step in range(warmup + steps):
        began, wall, comm_before = emulate.now(), emulate.wall(), getattr(opt, "comm_seconds", 0.0)
        opt.zero_grad()
        inputs, targets = batch(rank, step)
        loss_fn(model(inputs), targets).backward()
        opt.step()
        if step >= warmup:
            seconds[step - warmup] = (emulate.now() - began, getattr(opt, "comm_seconds", 0.0) - comm_before,
                                      emulate.wall() - wall)
    if comm is not None:
        opt.close()
        ranks = np.array(comm.allgather(seconds))  # (rank, step, [step, in step(), wall])
        # a step lasts as long as its slowest rank's. In step(), a rank whose compute ended first also waits for the
        # others' (their CPU time, however the cores were shared: in one 2-rank job under load, 5.7 ms on one rank
        # and 5.6-10.6 ms on the other for the same 5.3 ms of links), so the averaging is the time in step() of the
        # rank that came last, and the waiting is said apart
        per_step = np.stack([ranks[:, :, 0].max(axis=0), ranks[:, :, 1].min(axis=0), ranks[:, :, 2].max(axis=0),
                             ranks[:, :, 1].max(axis=0) - ranks[:, :, 1].min(axis=0)], axis=1)
    else:
        per_step = np.column_stack([seconds, np.zeros(steps)])
    step_s, comm_s, wall_s, waited_s = per_step[np.argmin(per_step[:, 0])]  # the fastest step and its parts
    return {"hidden": hidden, "gradient_bytes": nbytes, "step_s": float(step_s), "comm_s": float(comm_s),
            "waited_s": float(waited_s), "wall_step_s": float(wall_s)}


def run_ranks(widths=WIDTHS, steps: int = 30, per_rank: int = PER_RANK) -> dict | None:
    """On every rank of COMM_WORLD: a ring-allreduce sweep, then :func:`time_steps` for each width.
    Rank 0 returns ``{"ranks", "sweep": [{"bytes", "time_s", "algorithm"}], "widths": [...]}``."""
    from mpi4py import MPI

    from ..measure.bench import run

    comm = MPI.COMM_WORLD
    with one_thread():
        sweep = run("allreduce", ["ring"], list(SWEEP_SIZES), iters=5, warmup=1, out=io.StringIO())
        timed = [time_steps(hidden, steps, comm=comm, per_rank=per_rank) for hidden in widths]
    if comm.Get_rank() != 0:
        return None
    return {"ranks": comm.Get_size(), "widths": timed,
            "sweep": [{k: row[k] for k in ("bytes", "time_s", "algorithm")} for row in sweep["rows"]]}


def default_rank_counts(cores: int) -> tuple[int, ...]:
    """2 ranks, and more up to one a core, at most 4."""
    return tuple(range(2, min(max(cores, 2), 4) + 1))


def measure_payoff(rank_counts=None, widths=WIDTHS, steps: int = 30, timeout: float = 300,
                   machine: str | None = None, per_rank: int = PER_RANK) -> dict:
    """One rank timed in this process (each width twice, the faster kept), then one MPI job per rank count (each at
    least 2; by default 2 up to this machine's cores, at most 4: a core per rank). With ``machine`` (an emulation
    SPEC) the one rank and the jobs keep virtual time on that emulated machine (``rl.emulate`` here,
    ``RINGLAB_EMULATE`` in the jobs): their sweep and their gradients' allreduces take its links' time, and the
    compute counts as this CPU's time (each thread's CPU time, so that ranks sharing a core, or other processes
    on the cores, do not lengthen it). Every rank takes ``per_rank`` samples a step.

    Returns ``{"cores", "per_rank", "machine", "one_rank": [time_steps rows], "runs": [run_ranks results]}``.
    """
    from ..cluster.launch import run_mpi
    from ..mpi.devices import cores

    rank_counts = default_rank_counts(cores()) if rank_counts is None else rank_counts
    if not rank_counts or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in rank_counts):
        raise ValueError(f"rank_counts must be integers of 2 or more (one rank is timed here), got {rank_counts!r}")
    if not widths:
        raise ValueError("no widths to time")
    if machine is not None:
        from ..topology import from_spec

        from_spec(machine, None)  # a bad SPEC is said here, before any job starts
    with one_thread(), (emulate.emulate(machine) if machine is not None else contextlib.nullcontext()):
        # every width twice, a pass over all of them apart, the faster kept: on this machine's clock a few
        # milliseconds of something else on the cores are timed into one rank's compute otherwise (width 64's 10
        # steps last 5 ms; CI once timed them at 898 us a step, and at 515-538 us in the four runs after it)
        passes = [[time_steps(hidden, steps, per_rank=per_rank) for hidden in widths] for _ in range(2)]
        alone = [min(timed, key=lambda row: row["step_s"]) for timed in zip(*passes)]
    runs = []
    for n in rank_counts:
        done = run_mpi(n, ["-m", "ringlab.train.payoff", "--widths", ",".join(map(str, widths)),
                           "--steps", str(steps), "--per-rank", str(per_rank)], timeout=timeout,
                       env={"RINGLAB_EMULATE": machine} if machine else None)
        if done.returncode != 0:
            raise RuntimeError(f"timing on {n} ranks failed:\n{done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"cores": cores(), "per_rank": per_rank, "machine": machine, "one_rank": alone, "runs": runs}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="one rank count's timings (run it under mpiexec)")
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--per-rank", type=int, default=PER_RANK, help="samples each rank takes a step")
    args = parser.parse_args(argv)
    result = run_ranks([int(w) for w in args.widths.split(",")], args.steps, args.per_rank)
    if result is not None:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
