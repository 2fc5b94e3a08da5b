"""A parameter server's load against the number of workers (lab 04): bytes per step counted from its
messages, busy time per step measured, beside a ring rank's traffic counted from its schedule."""
from __future__ import annotations

import numpy as np

from ...algorithms import build
from ...lab.exercises import compare, exercise
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
    import torch
    from mpi4py import MPI

    from ...algorithms import build
    from ...simulate import traffic
    from ...train import ParameterServer
    from ...train.task import batches, make_data, make_model

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("measure_server_load needs at least 2 ranks: a server and a worker")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    x, y, _, _ = make_data()
    rows = []
    for workers in range(1, size):
        group = comm.Split(0 if rank <= workers else MPI.UNDEFINED)
        if group == MPI.COMM_NULL:  # sits this one out, sleeping
            barrier(comm, idle=True)
            continue
        model = make_model(hidden=hidden)
        record = ParameterServer(model, servers=1, mode="sync", lr=0.05, comm=group).run(
            steps, batches(x, y, workers, per_worker), torch.nn.CrossEntropyLoss())
        group.Free()
        barrier(comm, idle=False)
        if rank == 0:
            nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
            ring = traffic(build("allreduce.ring", workers), nbytes)["sent"][0] if workers > 1 else 0
            rows.append({"workers": workers, "gradient_bytes": nbytes, "steps": steps,
                         "received": record["received_bytes"] / steps, "sent": record["sent_bytes"] / steps,
                         "busy_seconds": float(np.median(record["busy_seconds"])), "ring_bytes": ring})
    return rows if rank == 0 else None


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
        lines.append(f"A rank of a ring allreduce over the same workers sends and receives 2(n-1)/n K: "
                     + ", ".join(f"{row['ring_bytes'] / K:.2f} K at {row['workers']}" for row in ring)
                     + ", never more than 2 K however many workers join.")
    times = last["busy_seconds"] / first["busy_seconds"]
    workers = last["workers"] / first["workers"]
    pace = ("about in proportion to the workers" if 0.7 * workers <= times <= 1.3 * workers else
            "more than in proportion to the workers" if times > workers else
            "less than in proportion to the workers" if times > 1 else "not at all")
    lines.append(f"Measured here: the server was busy {first['busy_seconds'] * 1e3:.2f} ms a step with "
                 f"{_workers(first['workers'])} and {last['busy_seconds'] * 1e3:.2f} ms with {last['workers']} "
                 f"({times:.1f}x for {workers:g}x the workers): its time grew {pace}.")
    if nranks is not None and cores is not None and nranks > cores:
        lines.append(f"The {nranks} ranks shared {cores} cores, so the server's busy time also holds moments when "
                     "a worker it was sending to had no core to receive on.")
    return "\n".join(lines)


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
