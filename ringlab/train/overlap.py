"""Buckets and overlap, measured: one model trained with the DistributedOptimizer at several bucket sizes,
overlap off and on, on the ranks of a communicator, each step traced (lab 06).

- :func:`make_wide_model`: an MLP on the generated task with a few MB of gradients, in layers of equal size;
- :func:`bucket_sizes`: ``bucket_bytes`` from one parameter a bucket to the whole model in one;
- :func:`measure_overlap`: step time, time waiting on communication, backward and allreduce time per setting;
- :func:`time_compute`: this CPU's forward and backward pass of the model timed alone, for an emulated sweep's
  modelled compute;
- :func:`time_bucket_allreduce`: one bucket's allreduce (in place, then divided, as the optimizer does it) at
  several sizes, for fitting alpha and B on the same ranks.
"""
from __future__ import annotations

import os

import numpy as np

from ..mpi import emulate

WIDTH, HIDDEN_LAYERS, PER_RANK = 512, 5, 16
LR = 0.01


def make_wide_model(width: int = WIDTH, hidden_layers: int = HIDDEN_LAYERS, seed: int = 0):
    """The generated task's MLP with ``hidden_layers`` square layers of ``width``: at 512 x 5, 5.3 MB of gradients."""
    import torch

    from .task import CLASSES, FEATURES

    torch.manual_seed(seed)
    layers = [torch.nn.Linear(FEATURES, width), torch.nn.ReLU()]
    for _ in range(hidden_layers):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, CLASSES))


def gradient_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def bucket_sizes(model) -> list[int]:
    """``bucket_bytes`` to sweep: 1 (a bucket per parameter), one, two and four of the model's largest layers
    (weights and bias), and the whole model (one bucket)."""
    layer = max(sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
                for module in model.modules())
    total = gradient_bytes(model)
    return sorted({1, *(m * layer for m in (1, 2, 4) if m * layer < total), total})


def time_compute(comm=None, per_rank: int = PER_RANK, passes: int = 5) -> tuple[float, float]:
    """(forward, backward) seconds of :func:`make_wide_model` on ``per_rank`` samples, timed alone on this CPU
    (one torch thread, nothing beside it: this thread's CPU time, the median of ``passes`` passes after one
    warm-up), the slowest rank's of ``comm``: the same on every rank. Call on every rank; for
    :func:`measure_overlap`'s ``compute``."""
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError(f"passes must be a whole number >= 1, got {passes!r}")
    if isinstance(per_rank, bool) or not isinstance(per_rank, int) or per_rank < 1:
        raise ValueError(f"per_rank must be a whole number of samples >= 1, got {per_rank!r}")
    import time

    import torch
    from mpi4py import MPI

    from .task import batches, make_data, one_thread

    comm = MPI.COMM_WORLD if comm is None else comm
    x, y, _, _ = make_data()
    inputs, targets = batches(x, y, comm.Get_size(), per_rank)(comm.Get_rank(), 0)
    model, loss_fn = make_wide_model(), torch.nn.CrossEntropyLoss()
    forward, backward = [], []
    with one_thread():
        for _ in range(passes + 1):
            model.zero_grad(set_to_none=False)  # in place, as the optimizer's zero_grad: no new gradient buffers
            start = time.thread_time()
            loss = loss_fn(model(inputs), targets)
            middle = time.thread_time()
            loss.backward()
            forward.append(middle - start)
            backward.append(time.thread_time() - middle)
    mine = (float(np.median(forward[1:])), float(np.median(backward[1:])))
    everyone = comm.allgather(mine)
    return max(f for f, _ in everyone), max(b for _, b in everyone)


def model_compute(model, forward: float, backward: float) -> None:
    """On the virtual clock, each linear layer of ``model`` computes its share of ``forward`` seconds as its
    forward runs and of ``backward`` seconds before its gradients arrive, its share its weights' share of all
    the linear layers' (a linear layer's multiply-adds are its weights times the samples). Register before the
    optimizer's hooks fire: at construction."""
    import torch

    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    total = sum(layer.weight.numel() for layer in linears)
    for layer in linears:
        share = layer.weight.numel() / total

        def timed(module, inputs, output, share=share):
            emulate.elapse(forward * share)
            if output.requires_grad:
                output.register_hook(lambda grad: emulate.elapse(backward * share))

        layer.register_forward_hook(timed)


def measure_overlap(sizes: list[int], steps: int = 8, warmup: int = 2, comm=None, per_rank: int = PER_RANK,
                    compute: tuple[float, float] | None = None) -> dict | None:
    """Train :func:`make_wide_model` at every bucket size of ``sizes``, overlap off and then on, ``warmup`` +
    ``steps`` steps each (``per_rank`` samples a rank, plain SGD), on every rank of ``comm`` (default COMM_WORLD).
    With ``compute`` ((forward, backward) seconds a step, :func:`time_compute`'s), inside ``rl.emulate(...,
    compute="model")`` only, the passes' compute is modelled (:func:`model_compute`): this CPU's time never
    counts, so the settings differ only in when their allreduces run, however busy the machine is.

    Every step starts from a barrier (on an emulated machine, every rank's clock set to the latest:
    :func:`ringlab.mpi.emulate.synchronize`) and is traced; the settings take turns, one step each (starting each
    round with the next one), so that a load on the machine that comes and goes falls on all of them alike.
    Every time is :func:`ringlab.mpi.emulate.now`'s: virtual time on an emulated machine (its links' time plus
    this CPU's compute counted as CPU time), this machine's clock otherwise.

    Rank 0 returns ``{"rows": [...], "traces": [...]}``, a row per setting and, beside it, every rank's trace
    rows of its timed steps (``DistributedOptimizer.trace_records``); other ranks return None. A row holds
    medians over the timed steps, each step's figure taken on its slowest rank: ``step_s``; ``waited_s`` in
    ``step()`` waiting for communication; ``backward_s`` from the backward pass's start to its last gradient;
    ``allreduce_s`` the buckets' allreduces summed; ``skew_s`` how far apart the ranks began the first
    bucket's allreduce; ``wall_step_s`` the step on this machine's own clock (what the CPU took: the same as
    ``step_s`` but on an emulated machine); ``clock`` what the other times read; ``compute``, the modelled
    (forward, backward) seconds or None. ``load`` is the machine's 1-minute load average at the end.
    """
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    if isinstance(per_rank, bool) or not isinstance(per_rank, int) or per_rank < 1:
        raise ValueError(f"per_rank must be a whole number of samples >= 1, got {per_rank!r}")
    if not sizes or min(sizes) < 1:
        raise ValueError(f"need bucket sizes of 1 byte or more, got {sizes!r}")
    if compute is not None:
        emulation = emulate.current()
        if emulation is None or emulation.compute != "model":
            raise ValueError("modelled compute (compute=(forward, backward)) runs on an emulated machine that "
                             "counts no CPU time: call inside rl.emulate(machine, compute='model')")
        if (not isinstance(compute, (tuple, list)) or len(compute) != 2
                or not all(isinstance(c, (int, float)) and not isinstance(c, bool) and 0 <= c < float("inf")
                           for c in compute)):
            raise ValueError(f"compute is (forward, backward) seconds a step, each finite and >= 0, got {compute!r}")
    import torch
    from mpi4py import MPI

    from .optimizer import DistributedOptimizer
    from .task import batches, make_data

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)  # one core's worth of compute a rank, whatever torch would take
    x, y, _, _ = make_data()
    batch = batches(x, y, size, per_rank)
    loss_fn = torch.nn.CrossEntropyLoss()
    settings = [(bucket_bytes, overlap) for overlap in (False, True) for bucket_bytes in sizes]
    runs = []
    for bucket_bytes, overlap in settings:
        model = make_wide_model()
        if compute is not None:
            model_compute(model, *compute)
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(), comm=comm,
                                   bucket_bytes=bucket_bytes, overlap=overlap, trace=True)
        runs.append((model, opt, []))
    for step in range(warmup + steps):
        turn = step % len(runs)  # each step starts with another setting, so none always follows the same one
        for model, opt, seconds in runs[turn:] + runs[:turn]:
            emulate.synchronize(comm)
            start, wall = emulate.now(), emulate.wall()
            opt.zero_grad()
            inputs, targets = batch(rank, step)
            opt.backward(loss_fn(model(inputs), targets))
            opt.step()
            seconds.append((emulate.now() - start, emulate.wall() - wall))
    rows, traces, clock = [], [], emulate.clock_name()
    for (bucket_bytes, overlap), (model, opt, seconds) in zip(settings, runs):
        opt.close()
        records = opt.trace_records()
        records = records[records["step"] >= warmup]
        records["step"] -= warmup
        everyone = comm.gather((np.array(seconds[warmup:]), records), root=0)
        if rank == 0:
            trace = np.concatenate([r for _, r in everyone])
            slowest = np.max([s for s, _ in everyone], axis=0)  # (step, [virtual or host, wall])
            rows.append(dict(_row(trace, slowest[:, 0], bucket_bytes, overlap, len(opt.buckets), gradient_bytes(model),
                                  size), wall_step_s=float(np.median(slowest[:, 1])), clock=clock,
                             compute=None if compute is None else tuple(map(float, compute))))
            traces.append(trace)
    if rank != 0:
        return None
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"rows": [dict(row, load=load) for row in rows], "traces": traces}


def _row(trace, step_seconds, bucket_bytes: int, overlap: bool, buckets: int, nbytes: int, nranks: int) -> dict:
    """One setting's medians over steps, each step's figure taken on its slowest rank."""
    steps, ranks = np.unique(trace["step"]), np.unique(trace["rank"])

    def slowest(figure) -> float:
        return float(np.median([max(figure(trace[(trace["step"] == s) & (trace["rank"] == r)]) for r in ranks)
                                for s in steps]))

    def backward(rows) -> float:  # from the backward pass's start to its last gradient
        rows = rows[rows["kind"] == "backward"]
        return float(rows["end"].max() - rows["start"].min())

    def allreduces(rows) -> float:
        rows = rows[rows["kind"] == "allreduce"]
        return float((rows["end"] - rows["start"]).sum())

    def waited(rows) -> float:
        return float(rows[rows["kind"] == "allreduce"]["waited"].sum())

    def skew(rows) -> float:  # how far apart the ranks began the step's first allreduce
        first = rows[(rows["kind"] == "allreduce") & (rows["bucket"] == 0)]["start"]
        return float(first.max() - first.min())

    return {"bucket_bytes": bucket_bytes, "buckets": buckets, "overlap": overlap, "ranks": nranks,
            "gradient_bytes": nbytes, "steps": len(step_seconds), "step_s": float(np.median(step_seconds)),
            "waited_s": slowest(waited), "backward_s": slowest(backward), "allreduce_s": slowest(allreduces),
            "skew_s": float(np.median([skew(trace[trace["step"] == s]) for s in steps]))}


def time_bucket_allreduce(sizes: list[int], comm=None, iters: int = 5, warmup: int = 1,
                          algorithm: str = "ring") -> list[dict] | None:
    """One bucket's work as the optimizer does it (``rl.allreduce`` in place, then a division by the ranks) on
    float32 buffers of ``sizes`` bytes: rank 0 returns rows ``{"bytes", "time_s", "algorithm"}`` (the median
    of ``iters`` calls on the slowest rank) for :func:`ringlab.predict.fitting.fit_rows`; others None."""
    from mpi4py import MPI

    from ..measure.timing import time_collective
    from ..mpi.collectives import allreduce

    comm = MPI.COMM_WORLD if comm is None else comm
    rows = []
    for nbytes in sizes:
        buffer = np.ones(max(1, nbytes // 4), dtype=np.float32)

        def one_bucket():
            allreduce(buffer, algorithm, comm=comm, in_place=True, agree=False)
            buffer[:] /= comm.Get_size()

        seconds = time_collective(one_bucket, comm, warmup=warmup, iters=iters)
        rows.append({"bytes": buffer.nbytes, "time_s": seconds, "algorithm": algorithm})
    return rows if comm.Get_rank() == 0 else None
