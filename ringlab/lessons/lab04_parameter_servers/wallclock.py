"""Convergence against wall-clock time (lab 04): one model trained by a synchronous and an asynchronous
parameter server and by a ring allreduce, on the same MPI ranks with the same straggler; the test loss
after every update against the seconds since the start, and sentences worded from the runs."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np

METHODS = ("sync", "async", "ring")
NAMES = {"sync": "the synchronous server", "async": "the asynchronous server", "ring": "the ring allreduce"}


def race(method: str, steps: int, straggler, lr: float = 0.05, per_worker: int = 32, comm=None) -> dict:
    """Train lab 04's MLP with ``method`` on every rank of ``comm`` (default COMM_WORLD); every rank
    returns the run: the test loss after every update against the seconds since the start, and the
    straggler as plain values (``worker``, ``factor``, ``extra_seconds``, and ``said``: it in words). The
    seconds are :func:`ringlab.mpi.emulate.now`'s: on an emulated machine (``rl.emulate``, ``RINGLAB_EMULATE``)
    virtual time, its links' time plus this CPU's compute counted as CPU time (the straggler's delay on its
    clock), with ``wall_seconds`` beside them, the whole run on this machine's own clock, and ``clock``
    naming what they read.

    ``"sync"`` and ``"async"``: rank 0 serves and ranks 1.. work (:class:`ringlab.train.ParameterServer`).
    ``"ring"``: ranks 1.. average their gradients with ringlab's ring allreduce
    (:class:`ringlab.train.DistributedOptimizer`, plain SGD at ``lr``, no overlap, so that the straggler's
    sleep comes before its allreduce) while rank 0 sits out. Either way the same workers compute on the
    same batches from the same initial weights, and ``straggler`` (a
    :class:`~ringlab.train.straggler.Straggler`) slows the same worker.
    """
    import torch
    from mpi4py import MPI
    from torch.nn.utils import parameters_to_vector

    from ...mpi import emulate
    from ...train import DistributedOptimizer, ParameterServer
    from ...train.straggler import Straggler
    from ...train.task import batches, make_data, make_model

    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    comm = MPI.COMM_WORLD if comm is None else comm
    straggler = Straggler.of(straggler)
    rank, workers = comm.Get_rank(), comm.Get_size() - 1
    if workers < 1:
        raise ValueError("race needs at least 2 ranks: rank 0 serves (or sits out), the others work")
    x, y, x_test, y_test = make_data()
    batch, loss_fn, model = batches(x, y, workers, per_worker), torch.nn.CrossEntropyLoss(), make_model()
    run = {"method": method, "workers": workers, "steps": steps, "lr": lr, "staleness": None,
           "clock": emulate.clock_name(), "wall_seconds": None,
           "straggler": None if straggler is None else {"worker": straggler.worker, "factor": straggler.factor,
                                                        "extra_seconds": straggler.extra_seconds,
                                                        "said": str(straggler)}}
    if method == "ring":
        group = comm.Split(0 if rank > 0 else MPI.UNDEFINED)
        history = []
        if group != MPI.COMM_NULL:
            worker = group.Get_rank()
            opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), model.named_parameters(),
                                       comm=group, overlap=False)
            history.append((0.0, parameters_to_vector(model.parameters()).detach().numpy().copy()))
            emulate.synchronize(group)  # a barrier; on an emulated machine every rank's clock set to the latest
            start, wall = emulate.now(), emulate.wall()
            for step in range(steps):
                began = emulate.now()
                opt.zero_grad()
                inputs, targets = batch(worker, step)
                loss_fn(model(inputs), targets).backward()
                if straggler is not None:
                    straggler.slow_down(worker, emulate.now() - began)
                opt.step()
                history.append((emulate.now() - start,
                                parameters_to_vector(model.parameters()).detach().numpy().copy()))
            run["wall_seconds"] = emulate.wall() - wall
            opt.close()
            group.Free()
        barrier(comm, idle=rank == 0)
        keeper = 1  # worker 0: every worker holds the same weights after every step
    else:
        ps = ParameterServer(model, servers=1, mode=method, lr=lr, straggler=straggler, history=True, comm=comm)
        record = ps.run(steps, batch, loss_fn)
        history = record.get("history", [])
        run["wall_seconds"] = record["wall_seconds"]
        if method == "async" and rank == 0:
            run["staleness"] = record["staleness"]
        keeper = 0
    if rank == keeper:
        run["seconds"] = [seconds for seconds, _ in history]
        run["loss"] = test_losses([flat for _, flat in history], model, x_test, y_test)
    return comm.bcast(run, root=keeper)


def barrier(comm, idle: bool, poll: float = 0.001) -> None:
    """A barrier on every rank of ``comm``; an ``idle`` rank sleeps between polls instead of spinning in MPI,
    so that it leaves the cores to the ranks still working (when ranks outnumber cores, its spinning would
    slow them down and their timings with them)."""
    request = comm.Ibarrier()
    if not idle:
        request.Wait()
        return
    while not request.Test():
        time.sleep(poll)


def test_losses(flats, model, x, y) -> list[float]:
    """The cross-entropy on (``x``, ``y``) of ``model`` with each flat weight vector of ``flats``."""
    import torch
    from torch.nn.utils import vector_to_parameters

    out = []
    with torch.no_grad():
        for flat in flats:
            vector_to_parameters(torch.from_numpy(np.ascontiguousarray(flat)), model.parameters())
            out.append(float(torch.nn.functional.cross_entropy(model(x), y)))
    return out


def time_to(run: dict, target: float) -> float | None:
    """The seconds at which ``run``'s loss first reached ``target`` (None if it never did)."""
    for seconds, loss in zip(run["seconds"], run["loss"]):
        if loss <= target:
            return seconds
    return None


def common_target(runs: dict) -> float:
    """Halfway from the initial loss (the same for every run: the same initial weights) to the lowest loss
    that every run reached (the highest of the runs' lowest losses). A run that never got below the initial loss
    (it diverged at once) does not set the target: it would put it at the start, reached by every run at 0 s."""
    initial = max(run["loss"][0] for run in runs.values())
    lowest = [_lowest(run["loss"]) for run in runs.values()]
    learned = [low for low in lowest if low < initial]
    return (initial + max(learned or lowest)) / 2


def _learned(runs: dict) -> list:
    """The runs whose loss went below the initial loss."""
    initial = max(run["loss"][0] for run in runs.values())
    return [m for m, run in runs.items() if _lowest(run["loss"]) < initial]


def _lowest(loss) -> float:
    """The lowest finite loss of a run (a run that diverged reached the losses it had before), or +inf."""
    finite = np.asarray(loss, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(finite.min()) if finite.size else float("inf")


def straggler_of(runs: dict):
    """The straggler every run of ``runs`` ran with (attributes ``worker``, ``factor``, ``extra_seconds``,
    ``said``), or None; runs with different stragglers do not compare, and are refused."""
    slowed = {repr(run.get("straggler")) for run in runs.values()}
    if len(slowed) > 1:
        raise ValueError("the runs had different stragglers, so their times do not compare: "
                         + "; ".join(f"{m}: {(run.get('straggler') or {}).get('said', 'none')}"
                                     for m, run in runs.items()))
    first = next(iter(runs.values())).get("straggler")
    return None if first is None else SimpleNamespace(**first)


def _lowest_words(loss) -> str:
    """The lowest loss a run reached, or that it diverged: ``min`` of losses with a NaN in them is NaN or a value
    from before the NaN, depending on where the NaN falls, so a diverged run is named as one."""
    loss = np.asarray(loss, dtype=float)
    if np.isfinite(loss).all():
        return f"lowest {loss.min():.3f}"
    if not np.isfinite(loss).any():
        return "its loss was never a finite number: it diverged"
    return f"it diverged, after a lowest of {_lowest(loss):.3f}"


def describe_race(runs: dict, target: float | None = None) -> str:
    """Sentences on which run reached ``target`` (default :func:`common_target`) first and why, worded from
    ``runs`` ({method: what :func:`race` returned}, all with the same straggler)."""
    missing = [m for m in runs if m not in METHODS]
    if missing or not runs:
        raise ValueError(f"runs must be named among {', '.join(METHODS)}, got {', '.join(runs) or 'none'}")
    straggler = straggler_of(runs)
    said_target = target is None
    target = common_target(runs) if target is None else target
    reached = {m: time_to(run, target) for m, run in runs.items()}
    order = sorted((m for m in runs if reached[m] is not None), key=lambda m: reached[m])
    learned = _learned(runs)
    lines = [f"Target: a test loss of {target:.3f}" + (
        "." if not said_target else
        ", halfway from the initial loss to the lowest that every run reached." if len(learned) in (0, len(runs)) else
        f", halfway from the initial loss to the lowest that every run that learned reached "
        f"({', '.join(NAMES[m] for m in runs if m not in learned)} never got below the initial loss).")]
    if order:
        # runs that reached it at the same time as printed reached it together: none of them is called first alone
        together = [m for m in order if _shown(reached[m]) == _shown(reached[order[0]])]
        rest = order[len(together):]
        lines.append(" and ".join(NAMES[m] for m in together).capitalize()
                     + (f" reached it first, after {reached[order[0]]:.2f} s" if len(together) == 1 else
                        f" reached it first, together, after {reached[order[0]]:.2f} s")
                     + "".join(f"; {NAMES[m]} after {reached[m]:.2f} s" for m in rest)
                     + "".join(f"; {NAMES[m]} never did ({_lowest_words(runs[m]['loss'])})"
                               for m in runs if reached[m] is None) + f" ({_clock_words(runs)}).")
    else:
        lines.append("No run reached it.")
    per_step = {m: run["seconds"][-1] / max(len(run["seconds"]) - 1, 1) for m, run in runs.items()}
    waiting = [m for m in ("sync", "ring") if m in runs]
    if waiting and straggler is not None:
        paced = " and ".join(f"{NAMES[m]} {per_step[m] * 1e3:.1f} ms" for m in waiting)
        slept = f"{straggler.extra_seconds * 1e3:g} ms sleep" if straggler.extra_seconds else "slower compute"
        if all(per_step[m] >= straggler.extra_seconds for m in waiting):
            lines.append(f"A step took {paced} on average, the straggler's {slept} included: no step ends before "
                         f"the straggler's gradient is in, so every worker goes at its pace.")
        else:
            lines.append(f"A step took {paced} on average, less than the straggler's {slept}: the straggler was "
                         "not what set the pace here.")
    if {"sync", "ring"} <= runs.keys() and len(runs["sync"]["loss"]) == len(runs["ring"]["loss"]):
        apart = float(np.max(np.abs(np.subtract(runs["sync"]["loss"], runs["ring"]["loss"]))))
        faster = min(("sync", "ring"), key=lambda m: per_step[m])
        other = "ring" if faster == "sync" else "sync"
        shorter = 1 - per_step[faster] / per_step[other]
        same = f"{per_step[faster] * 1e3:.1f}" == f"{per_step[other] * 1e3:.1f}"  # as the sentence above prints them
        agree = (f"Those two compute the same average step after step (their losses after each step agree to "
                 f"{apart:.1e})")
        if same or round(shorter * 100) == 0:
            lines.append(agree + ", and here their steps took the same time too: " + (
                f"{per_step[faster] * 1e3:.1f} ms each." if same else
                f"{per_step[faster] * 1e3:.1f} and {per_step[other] * 1e3:.1f} ms, within 1% of each other."))
        else:
            lines.append(agree + f", so they differ only in time: {NAMES[faster]}'s steps were {shorter:.0%} shorter "
                         "here.")
    if "async" in runs:
        lines.append(_async_sentences(runs, reached, per_step, straggler))
    return "\n".join(lines)


def _clock_words(runs: dict) -> str:
    """Which clock the runs' seconds are on: this machine's, or virtual time on an emulated machine (with the
    wall time beside it)."""
    virtual = [run for run in runs.values() if str(run.get("clock", "")).startswith("virtual")]
    if not virtual:
        return "measured here"
    walls = [run["wall_seconds"] for run in virtual if run.get("wall_seconds") is not None]
    took = f"; this machine took {min(walls):.2f} to {max(walls):.2f} s of wall time a run" if walls else ""
    return ("measured in virtual time on the emulated machine: its links' time plus this CPU's compute counted as "
            "CPU time" + took)


def _async_sentences(runs: dict, reached: dict, per_step: dict, straggler) -> str:
    run = runs["async"]
    updates = len(run["seconds"]) - 1
    waited = [m for m in ("sync", "ring") if m in runs]
    compared = (", against " + " and ".join(f"{1 / per_step[m]:.0f} for {NAMES[m]}" for m in waited)) if waited else ""
    seconds = run["seconds"][-1]
    lines = [f"The asynchronous server applied {updates} updates in {seconds:.2f} s: {updates / seconds:.0f} a second"
             f"{compared}, each of lr/{run['workers']}."]
    pushes = run.get("staleness") or []
    fast = [i for i, (w, _) in enumerate(pushes) if straggler is None or w != straggler.worker]
    if straggler is not None and fast and fast[-1] + 1 < len(pushes):
        alone = len(pushes) - fast[-1] - 1
        finished = run["seconds"][fast[-1] + 1]
        lines.append(f"Its fast workers did not wait for the straggler: they had made all their {len(fast)} pushes by "
                     f"{finished:.2f} s, and the straggler's last {alone} came alone, one every "
                     f"{(run['seconds'][-1] - finished) / alone * 1e3:.0f} ms.")
    if pushes:
        mine = [s for w, s in pushes if straggler is not None and w == straggler.worker]
        lines.append(f"The price: gradients of stale weights, {np.mean([s for _, s in pushes]):.1f} updates old on "
                     f"average" + (f" (the straggler's {np.mean(mine):.1f})." if mine else "."))
    # compared as the sentences print them: a run that reached the target at the same printed time did not lose
    mine = None if reached.get("async") is None else _shown(reached["async"])
    beaten = [m for m in waited if reached.get(m) is None or (mine is not None and mine < _shown(reached[m]))]
    tied = [m for m in waited if mine is not None and reached.get(m) is not None and _shown(reached[m]) == mine]
    faster = all(f"{updates / seconds:.0f}" != f"{1 / per_step[m]:.0f}" and updates / seconds > 1 / per_step[m]
                 for m in waited)  # more updates a second than each of them, as printed
    if mine is None:
        lines.append("It never reached the target: stale gradients cost more than the waiting saved.")
    elif len(beaten) == len(waited):
        lines.append("Not waiting won: more updates a second outweighed their staleness." if faster else
                     "Not waiting won here, though not by more updates a second than theirs.")
    elif len(beaten) + len(tied) == len(waited):
        lines.append(f"It reached the target together with {' and '.join(NAMES[m] for m in tied)}: what not waiting "
                     "saved, stale gradients cost.")
    else:
        lines.append("Yet it did not reach the target first: stale gradients cost more than the waiting saved.")
    return " ".join(lines)


def _shown(seconds: float) -> float:
    """``seconds`` as the sentences print them (to 10 ms), for comparing runs as the reader sees them."""
    return float(f"{seconds:.2f}")
