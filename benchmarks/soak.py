"""A soak of mixed user and ringlab traffic on one communicator: memory over time, and every result checked.

Every iteration, on every rank: the user's own messages are left pending on COMM_WORLD (a receive that
would take any message; or a pickled send and a receive from any rank) while a DistributedOptimizer trains a model; between
backward() and step() the global loss is logged with ``rl.allreduce``; a communicator is made, used
for one ``rl.allreduce`` and freed; then the user's messages are completed and checked. The same model
is trained beside it with every gradient averaged by MPI's own Allreduce, and after every step the two
must agree (relative 1e-5; then the reference takes the optimizer's weights, so that rounding does
not pile up). Every minute rank 0 prints each rank's resident memory and the wrong-result counts.

    python benchmarks/soak.py --minutes 30          # starts 3 ranks itself (or run it under mpiexec)
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

WRONG_KINDS = ("weights vs MPI", "weights across ranks", "logged loss", "fresh communicator", "user message",
               "user pickled message")


def rss_mib() -> float:
    """This process's resident memory (VmRSS), MiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def soak(minutes: float, every: float = 60.0) -> None:
    import torch
    from mpi4py import MPI

    import ringlab as rl
    from ringlab.train import DistributedOptimizer
    from ringlab.train.task import batches, make_data, make_model, weights

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    other, source = (rank + 1) % size, (rank - 1) % size
    x, y, _, _ = make_data(3000)
    batch = batches(x, y, size, 16)
    loss_fn = torch.nn.CrossEntropyLoss()
    model, reference = make_model(seed=0), make_model(seed=0)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model.named_parameters(),
                               bucket_bytes=4 << 10)  # several buckets, averaged while backward runs
    sgd = torch.optim.SGD(reference.parameters(), lr=0.05)
    wrong = dict.fromkeys(WRONG_KINDS, 0)
    start = last_report = time.monotonic()
    step = 0
    if rank == 0:
        print(f"# soak: {size} ranks, {minutes:g} minutes; memory is each rank's VmRSS (MiB)", flush=True)
        print(f"# {'minute':>6} {'steps':>7} " + " ".join(f"{'rank ' + str(r):>9}" for r in range(size))
              + "   wrong so far", flush=True)
    while True:
        now = time.monotonic()
        done = comm.bcast(now - start >= minutes * 60 if rank == 0 else None, root=0)
        report = comm.bcast(now - last_report >= every or done or step == 0 if rank == 0 else None, root=0)
        if report:
            memory = comm.gather(rss_mib(), root=0)
            counts = comm.reduce(np.array(list(wrong.values())), root=0)
            if rank == 0:
                last_report = now
                print(f"  {(now - start) / 60:>6.1f} {step:>7} " + " ".join(f"{m:>9.1f}" for m in memory)
                      + f"   {int(counts.sum())}", flush=True)
        if done:
            break
        held = np.full(64, -1.0)
        if step % 2:  # pending through the step: a pickled message, and a receive from any rank
            pickled = comm.isend({"step": step, "from": rank}, dest=other, tag=21)
            anything = comm.Irecv(held, source=MPI.ANY_SOURCE, tag=22)
        else:  # a receive that would take any message at all (so no other message of the user's is pending)
            anything = comm.Irecv(held, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
        inputs, targets = batch(rank, step)
        opt.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        value = np.array([loss.item()])
        wrong["logged loss"] += not np.array_equal(rl.allreduce(value), np.array([comm.allreduce(loss.item())]))
        opt.step()
        sgd.zero_grad()
        loss_fn(reference(inputs), targets).backward()
        for p in reference.parameters():
            comm.Allreduce(MPI.IN_PLACE, p.grad.numpy())
            p.grad /= size
        sgd.step()
        ours, theirs = weights(model), weights(reference)
        if np.abs(ours - theirs).max() > 1e-5 * np.abs(theirs).max():
            wrong["weights vs MPI"] += 1
        with torch.no_grad():  # the reference starts the next step from the optimizer's weights
            for p, q in zip(reference.parameters(), model.parameters()):
                p.copy_(q)
        if step % 50 == 0 and len({hash(w.tobytes()) for w in comm.allgather(ours)}) != 1:
            wrong["weights across ranks"] += 1
        fresh = comm.Dup()
        mine = np.arange(16.0) + rank + step
        wrong["fresh communicator"] += not np.array_equal(rl.allreduce(mine, comm=fresh),
                                                          np.arange(16.0) * size + sum(range(size)) + size * step)
        fresh.Free()
        comm.Send(np.full(64, float(step)), dest=other, tag=22)
        anything.Wait()
        wrong["user message"] += not (held == step).all()
        if step % 2:
            wrong["user pickled message"] += comm.recv(source=source, tag=21) != {"step": step, "from": source}
            pickled.wait()
        step += 1
    opt.close()
    totals = comm.reduce(np.array(list(wrong.values())), root=0)
    memory = comm.gather(rss_mib(), root=0)
    if rank == 0:
        print(f"# {step} steps on each rank in {(time.monotonic() - start) / 60:.1f} minutes; final memory (MiB): "
              + ", ".join(f"rank {r} {m:.1f}" for r, m in enumerate(memory)))
        print("# wrong results, summed over ranks: " + ", ".join(f"{k} {int(v)}" for k, v in zip(wrong, totals)))
        print(f"# total wrong: {int(totals.sum())}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to run (default 30)")
    parser.add_argument("--every", type=float, default=60.0, help="seconds between memory lines (default 60)")
    parser.add_argument("-n", "--nranks", type=int, default=3, help="ranks, when it starts its own job (default 3)")
    args = parser.parse_args(argv)
    if not 0 < args.minutes < float("inf") or not args.every > 0:
        parser.error("--minutes and --every must be > 0")
    from ringlab.measure.bench import in_mpi_job

    if not in_mpi_job():
        from ringlab.cluster.launch import relaunch

        return relaunch(args.nranks, sys.argv[1:], [os.path.abspath(__file__)])
    soak(args.minutes, args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
