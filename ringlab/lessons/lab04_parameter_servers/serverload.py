"""A parameter server's load against the number of workers (lab 04): bytes per step counted from its
messages, busy time per step measured, beside a ring rank's traffic counted from its schedule."""
from __future__ import annotations

import numpy as np

from ...algorithms import build
from ...lab.exercises import compare, exercise
from ...lab.findings import Finding
from ...measure.units import format_bytes
from ...simulate import traffic
from .wallclock import barrier


def measure_server_load(steps: int = 20, hidden: int = 256, per_worker: int = 32, comm=None) -> list[dict] | None:
    """On every rank of ``comm`` (default COMM_WORLD): a synchronous server on rank 0 with 1, 2, ...
    ``size - 1`` workers in turn (ranks 0..w, the others sitting out), ``steps`` steps each, training an MLP
    of ``hidden`` units; rank 0 returns one row per worker count, the other ranks None.

    A row: ``workers``; ``gradient_bytes`` (K); the bytes the server ``received`` and ``sent`` per step,
    counted from its messages; ``busy_seconds``, the median over the steps of the time it was busy
    (receiving, adding, updating, answering; waiting for pushes left out), measured; and
    ``ring_bytes``, what a rank of a ring allreduce of K bytes over the same workers sends (and
    receives) per step, 2(w-1)/w K, counted from the schedule.
    """
    from mpi4py import MPI

    from ...train.task import make_data

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("measure_server_load needs at least 2 ranks: a server and a worker")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    data = make_data()
    rows = []
    for workers, group in _server_groups(comm):
        model, record = _train(group, workers, steps, hidden, per_worker, data)
        if rank == 0:
            nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
            ring = traffic(build("allreduce.ring", workers), nbytes)["sent"][0] if workers > 1 else 0
            rows.append({"workers": workers, "gradient_bytes": nbytes, "steps": steps,
                         "received": record["received_bytes"] / steps, "sent": record["sent_bytes"] / steps,
                         "busy_seconds": float(np.median(record["busy_seconds"])), "ring_bytes": ring})
    return rows if rank == 0 else None


def _server_groups(comm):
    """For 1, 2, ... ``size - 1`` workers in turn: ``(workers, group)`` on the ranks that take part (rank 0, the
    server, and ranks 1..workers), while the others sit out asleep; after each, the group is freed and every
    rank of ``comm`` meets in a barrier."""
    from mpi4py import MPI

    for workers in range(1, comm.Get_size()):
        group = comm.Split(0 if comm.Get_rank() <= workers else MPI.UNDEFINED)
        if group == MPI.COMM_NULL:  # sits this one out, sleeping
            barrier(comm, idle=True)
            continue
        yield workers, group
        group.Free()
        barrier(comm, idle=False)


def _train(group, workers: int, steps: int, hidden: int, per_worker: int, data) -> tuple:
    """A synchronous server on ``group``'s rank 0 training the MLP of ``hidden`` units for ``steps`` steps of
    ``per_worker`` samples a worker: ``(model, this rank's record)``."""
    import torch

    from ...train import ParameterServer
    from ...train.task import batches, make_model

    x, y, _, _ = data
    model = make_model(hidden=hidden)
    server = ParameterServer(model, servers=1, mode="sync", lr=0.05, comm=group)
    try:
        return model, server.run(steps, batches(x, y, workers, per_worker), torch.nn.CrossEntropyLoss())
    finally:
        server.close()


def describe_server_load(rows: list[dict], nranks: int | None = None, cores: int | None = None) -> str:
    """Sentences on how the server's bytes and busy time grew with the workers, worded from ``rows`` (from
    :func:`measure_server_load`); ``nranks`` and ``cores`` say whether the ranks had a core each."""
    if len(rows) < 2:
        raise ValueError("need rows for at least two worker counts to say how the load grows")
    first, last = rows[0], rows[-1]
    K = last["gradient_bytes"]
    per_worker = {row["received"] / (row["workers"] * row["gradient_bytes"]) for row in rows}
    lines = [f"Counted from its messages: with {_workers(first['workers'])} the server received "
             f"{first['received'] / K:.2f} K a step and with {_workers(last['workers'])} {last['received'] / K:.2f} K "
             f"(K = {format_bytes(K)} of gradients), "
             + (f"exactly {per_worker.pop():g} K per worker" if len(per_worker) == 1 else "not the same per worker")
             + f", and it sent {last['sent'] / K:.2f} K back at {_workers(last['workers'])}."]
    ring = [row for row in rows if row["workers"] > 1]
    if ring:
        lines.append("A rank of a ring allreduce over the same workers sends and receives 2(n-1)/n K: "
                     + ", ".join(f"{row['ring_bytes'] / K:.2f} K at {row['workers']}" for row in ring)
                     + ", never more than 2 K however many workers join.")
    times = last["busy_seconds"] / first["busy_seconds"]
    workers = last["workers"] / first["workers"]
    pace = ("about in proportion to the workers" if 0.7 * workers <= times <= 1.3 * workers else
            "more than in proportion to the workers" if times > workers else
            "less than in proportion to the workers" if times > 1 else "not at all")
    fell = float(f"{times:.1f}") < 1  # as printed: a busy time that fell is not said to have grown
    lines.append(f"Measured here: the server was busy {first['busy_seconds'] * 1e3:.2f} ms a step with "
                 f"{_workers(first['workers'])} and {last['busy_seconds'] * 1e3:.2f} ms with {last['workers']} "
                 f"({times:.1f}x for {workers:g}x the workers): "
                 + ("its time did not grow with the workers but fell." if fell else f"its time grew {pace}."))
    if nranks is not None and cores is not None and nranks > cores:
        lines.append(f"The {nranks} ranks shared {cores} cores, so the server's busy time also holds moments when "
                     "a worker it was sending to had no core to receive on.")
    return "\n".join(lines)


# Every rank on its own 1 Gb/s Ethernet port (0.125 GB/s, 50 us a message): the 256-unit MLP's push (289 kB) takes
# 2.4 ms, so with 4 workers the server's port carries ~9 ms of pushes a step and the ring ~4 ms in all; in virtual
# time the links no longer have to outrun the CPU (nobody sleeps), so this is a network a learner knows, and the
# server's own CPU work (adding the pushes, ~0.1-0.3 ms a step here, counted as CPU time) stays a few percent of it
EMULATED = "uniform:0.125:50"


def measure_emulated_load(machine: str = EMULATED, steps: int = 10, hidden: int = 256, per_worker: int = 32,
                          comm=None) -> list[dict] | None:
    """On every rank of ``comm`` (default COMM_WORLD): the synchronous server of :func:`measure_server_load` with
    1, 2, ... ``size - 1`` workers in turn, on the emulated machine ``machine`` (a SPEC, as ``rl.emulate``
    takes), and beside it a ring allreduce of the same gradients among the same workers on the same machine.
    Times are virtual (:mod:`ringlab.mpi.emulate`): every message takes its links' time, and this CPU's
    compute (the server adding pushes, the ring's additions) counts as CPU time; nobody sleeps. Rank 0
    returns one row per worker count, the others None.

    A row: ``workers``; ``gradient_bytes`` (K); ``ps_seconds``, a worker's communication per step (from its
    push to the new parameters: the mean over the steps, the median over the workers), measured;
    ``ring_seconds``, one ``rl.allreduce`` of K bytes among the workers (the median of ``steps`` calls, each
    from clocks set alike; None with one worker), measured; ``ps_wall_seconds`` and ``ring_wall_seconds``, a
    step and an allreduce on this machine's own clock (what its CPU took: its ranks sharing its cores);
    ``ps_predicted`` and ``ring_predicted``, ``rl.predict`` of ``allreduce.ps`` (one server) and
    ``allreduce.ring`` on the same machine, in this machine's seconds (times its scale); ``machine``, the
    emulation's label.
    """
    from mpi4py import MPI

    from ...mpi import emulate as emulation
    from ...mpi.collectives import allreduce
    from ...mpi.emulate import emulate
    from ...predict.costmodel import predict
    from ...topology.spec import from_spec
    from ...train.task import make_data

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("measure_emulated_load needs at least 2 ranks: a server and a worker")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    from_spec(machine)  # a bad SPEC is one clear error on every rank, before any work
    data = make_data()
    rows = []
    for workers, group in _server_groups(comm):
        with emulate(machine) as used:
            model, record = _train(group, workers, steps, hidden, per_worker, data)
        K = sum(p.numel() * p.element_size() for p in model.parameters())
        ring = group.Split(0 if group.Get_rank() >= 1 else MPI.UNDEFINED)
        ring_seconds = None
        if ring != MPI.COMM_NULL:
            if workers > 1:
                buf, times = np.ones(K // 4, dtype=np.float32), []
                with emulate(machine):
                    allreduce(buf, "ring", comm=ring)  # warm-up
                    for _ in range(steps):
                        emulation.synchronize(ring)  # every rank's clock set to the latest
                        began, wall = emulation.now(), emulation.wall()
                        allreduce(buf, "ring", comm=ring)
                        times.append((emulation.now() - began, emulation.wall() - wall))
                ring_seconds = tuple(float(t) for t in np.median(times, axis=0))
            ring.Free()
        waits = group.gather(record["wait_seconds"] / steps if record["role"] == "worker" else None, root=0)
        walls = group.gather(record["wall_seconds"] / steps, root=0)
        rings = group.gather(ring_seconds, root=0)
        if rank == 0:
            scale = used.scale
            ps_machine, _ = from_spec(machine, workers + 1)
            row = {"workers": workers, "gradient_bytes": K, "steps": steps, "machine": used.label,
                   "ps_seconds": float(np.median([w for w in waits if w is not None])),
                   "ps_wall_seconds": float(max(walls)),
                   "ps_predicted": predict(build("allreduce.ps", workers + 1, servers=1), K, ps_machine).seconds
                   * scale, "ring_seconds": None, "ring_wall_seconds": None, "ring_predicted": None}
            if workers > 1:
                ring_machine, _ = from_spec(machine, workers)
                row["ring_seconds"] = float(np.median([r[0] for r in rings if r is not None]))
                row["ring_wall_seconds"] = float(np.median([r[1] for r in rings if r is not None]))
                row["ring_predicted"] = predict(build("allreduce.ring", workers), K, ring_machine).seconds * scale
            rows.append(row)
    return rows if rank == 0 else None


BOTTLENECK = 1.5     # the server's step at least this many times the ring's: "the bottleneck"
NEAR_PREDICTION = 1.5  # measured within this factor of predicted: "matches the prediction"


def server_bottleneck_lesson(rows: list[dict]) -> Finding:
    """What :func:`measure_emulated_load`'s rows say: how a worker's communication grew with the workers under
    one server and under a ring allreduce on the emulated machine, and against the cost model."""
    if len(rows) < 3 or any(row["ring_seconds"] is None for row in rows[1:]):
        raise ValueError("need rows for 1, 2 and more workers (3 ranks or more) to compare the server with a ring")
    first, low, last = rows[0], rows[1], rows[-1]
    ms = 1e3
    workers = last["workers"] / first["workers"]
    grew = last["ps_seconds"] / first["ps_seconds"]
    pace = ("about in proportion to the workers" if 0.7 * workers <= grew <= 1.3 * workers else
            "more than in proportion to the workers" if grew > workers else
            "less than in proportion to the workers" if grew > 1.15 else "hardly at all")
    said = [f"Measured on the {last['machine']}, in virtual time (its links' time plus this CPU's compute counted as "
            f"CPU time): a worker waited {first['ps_seconds'] * ms:.1f} ms a step for the server with "
            f"{_workers(first['workers'])} and "
            f"{last['ps_seconds'] * ms:.1f} ms with {last['workers']} ({grew:.1f}x for {workers:g}x the workers): its "
            f"time grew {pace}. The cost model predicts {first['ps_predicted'] * ms:.1f} and "
            f"{last['ps_predicted'] * ms:.1f} ms: every push comes in over the server's one link and every answer "
            "goes out over it, 2 W K in all."]
    server_2_to_n = last["ps_seconds"] / low["ps_seconds"]
    ring_2_to_n = last["ring_seconds"] / low["ring_seconds"]
    said.append(f"A ring allreduce of the same K over the same workers took {low['ring_seconds'] * ms:.1f} ms with "
                f"{low['workers']} and {last['ring_seconds'] * ms:.1f} ms with {last['workers']} ({ring_2_to_n:.1f}x, "
                f"where the server's step grew {server_2_to_n:.1f}x; predicted {low['ring_predicted'] * ms:.1f} and "
                f"{last['ring_predicted'] * ms:.1f} ms): each rank sends and receives 2(n-1)/n K over its own link, "
                "never more than 2 K.")
    over = last["ring_seconds"] / last["ring_predicted"]
    observations = []
    if over >= NEAR_PREDICTION:
        said.append(f"The ring took {over:.1f}x its prediction at {last['workers']} workers: the links account for "
                    f"{last['ring_predicted'] * ms:.1f} ms, and this CPU's work on the messages (the additions that "
                    "land them, counted as CPU time) for the rest.")
        observations.append("the ring took well over its prediction here")
    ratio = last["ps_seconds"] / last["ring_seconds"]
    if ratio >= BOTTLENECK:
        said.append(f"With {_workers(last['workers'])} the server's step took {ratio:.1f}x the ring's: the server's "
                    "link is the bottleneck, and every worker added makes it worse.")
    else:
        said.append(f"With {_workers(last['workers'])} the server's step took {ratio:.1f}x the ring's: not yet "
                    f"{BOTTLENECK:g}x, so no clear bottleneck at this count.")
    if last.get("ps_wall_seconds") is not None and last.get("ring_wall_seconds") is not None:
        said.append(f"On this machine's own clock a step of the server's took {last['ps_wall_seconds'] * ms:.1f} ms "
                    f"with {_workers(last['workers'])} and a ring allreduce {last['ring_wall_seconds'] * ms:.1f} ms: "
                    "what its CPU took to run every rank's code on its cores, not the emulated machine's time.")
    near = all(1 / NEAR_PREDICTION <= row["ps_seconds"] / row["ps_predicted"] <= NEAR_PREDICTION for row in rows)
    conclusions = ("the server's step grows with the workers on the emulated machine" if grew >= 0.5 * workers else
                   "the server's step does not grow with the workers on the emulated machine",
                   "the server is the bottleneck on the emulated machine" if ratio >= BOTTLENECK else
                   "the server is not clearly the bottleneck on the emulated machine",
                   "the server's steps match the prediction on the emulated machine" if near else
                   "the server's steps miss the prediction on the emulated machine")
    return Finding(" ".join(said), conclusions, tuple(observations))


def _workers(n: int) -> str:
    return f"{n} worker{'s' * (n != 1)}"


def _server_load(n, M, K):
    return (n - 1) * K // M + (M - 1) * K // M


@exercise(_server_load, "count")
def check_server_load(server_load):
    """Compare ``server_load(n, M, K)`` with the bytes a server rank receives in ``allreduce.ps``."""
    def counted(n, M, K):
        return traffic(build("allreduce.ps", n, servers=M), K)["received"][0]

    cases = [dict(n=n, M=M, K=720720) for n, M in [(4, 1), (8, 1), (8, 2), (8, 4), (12, 3), (16, 16)]]
    compare(server_load, "server_load", cases, counted,
             "as a server rank 0 receives its shard (K/M bytes) from each of the other n-1 ranks; as a worker it "
             "also receives the M-1 shards it does not serve.", rel_tol=0, unit="bytes received by server rank 0")
    print("Correct: a server receives (n-1)K/M as a server plus (M-1)K/M as a worker.")
