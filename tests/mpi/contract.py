"""The correctness contract of the collectives on real ranks, one case per mode (argv[1]): ringlab's traffic
never meets the user's, deadlines by default, nothing paired with a stale call, clear errors for bad input.

Run under mpiexec: ``python -m mpi4py contract.py MODE OUT``; rank 0 writes what every rank saw to OUT
(JSON: one dict per rank, case -> what that rank saw).
"""
import gc
import json
import os
import sys
import threading
import time
import weakref

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import OutOfStep

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
mode, out = sys.argv[1], sys.argv[2]
last = n - 1
seen: dict = {}


def mpi_sum(a, on=comm):
    total = np.empty_like(a)
    on.Allreduce(a, total)
    return total


def outcome(call, want=None) -> str:
    """'right' or 'WRONG' against ``want``, 'ok' when nothing is expected, or the error's type and text."""
    try:
        got = call()
    except (ValueError, RuntimeError, TimeoutError) as err:
        return f"{type(err).__name__}: {err}"
    if want is None:
        return "ok" if got is None else "ok, a result"
    return "right" if np.array_equal(np.asarray(got), want) else f"WRONG {np.asarray(got).tolist()[:6]}"


x = np.arange(7.0) + 10 * rank
want = mpi_sum(x)
if mode == "user-messages":
    # the user's own messages, pending on the same communicator while ringlab's collectives run
    other, source = (rank + 1) % n, (rank - 1) % n
    held = np.full(7, -1.0)
    anything = comm.Irecv(held, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)  # would take any message it could
    mine = comm.Isend(np.full(7, 1000.0 + rank), dest=other, tag=0)
    seen["allreduce"] = outcome(lambda: rl.allreduce(x, "ring"), want)
    seen["allreduce, naive"] = outcome(lambda: rl.allreduce(x, "naive"), want)
    seen["reduce"] = outcome(lambda: rl.reduce(x, root=0), want if rank == 0 else None)
    seen["broadcast"] = outcome(lambda: rl.broadcast(x, root=last), np.arange(7.0) + 10 * last)
    anything.Wait()
    mine.Wait()
    seen["the user's any-source receive got"] = float(held[0])
    pickled = comm.isend({"from": rank, "payload": list(range(5))}, dest=other, tag=7)
    seen["allreduce, a pickled message pending"] = outcome(lambda: rl.allreduce(x, "ring"), want)
    seen["gather"] = outcome(lambda: rl.gather(x, root=0),
                             np.array([np.arange(7.0) + 10 * r for r in range(n)]) if rank == 0 else None)
    got = comm.recv(source=source, tag=7)
    seen["the user's pickled message"] = "intact" if got == {"from": source, "payload": list(range(5))} else repr(got)
    pickled.wait()
    seen["allreduce after"] = outcome(lambda: rl.allreduce(x, "ring"), want)
elif mode in ("skip", "late"):
    # rank `last` skips one call (or comes after the others' deadline): clear errors on every rank, then in step
    rl.allreduce(x, timeout=30)  # the private communicator exists
    start = time.monotonic()
    for i in range(4):
        comm.Barrier()
        if i == 0 and rank == last:
            if mode == "skip":
                seen[f"call {i}"] = "skipped"
                continue
            time.sleep(4)
        seen[f"call {i}"] = outcome(lambda: rl.allreduce(x * (i + 1), timeout=2), want * (i + 1))
    seen["seconds"] = time.monotonic() - start
elif mode == "default-deadline":
    # no timeout given: RINGLAB_TIMEOUT (set by the test) bounds the wait
    rl.allreduce(x)
    start = time.monotonic()
    if rank != last:
        seen["skipped by the last rank"] = outcome(lambda: rl.allreduce(x), want)
    seen["seconds"] = time.monotonic() - start
    comm.Barrier()
    seen["next"] = outcome(lambda: rl.allreduce(x * 2), want * 2)  # refused: the last rank is a call behind
    seen["then"] = outcome(lambda: rl.allreduce(x * 3), want * 3)
elif mode == "bad-environment":
    seen["RINGLAB_TIMEOUT=soon"] = outcome(lambda: rl.allreduce(x), want)
elif mode == "dup-free":
    # a communicator made and freed per call, thousands of times: ringlab's duplicates go with them
    wrong = 0
    for i in range(2500):
        mine = comm.Dup()
        wrong += not np.array_equal(rl.allreduce(x, comm=mine), want)
        mine.Free()
    seen["wrong"] = wrong
    seen["after"] = outcome(lambda: rl.allreduce(x), want)
elif mode == "threads":
    # a second communicator on a second thread runs while this one does; one communicator from two threads
    # at once is refused, clearly
    other = comm.Dup()
    results = {}

    def second():
        results["second"] = all(np.array_equal(rl.allreduce(x * 2, comm=other), want * 2) for _ in range(50))
    thread = threading.Thread(target=second)
    thread.start()
    firsts = all(np.array_equal(rl.allreduce(x, comm=comm), want) for _ in range(50))
    thread.join(60)
    seen["two communicators, two threads"] = "right" if firsts and results.get("second") else "WRONG"
    state = rl.mpi.private.state(comm)
    with state.lock:  # as if another thread were inside a call on this communicator
        seen["one communicator, two threads"] = outcome(lambda: rl.allreduce(x), want)
    seen["after"] = outcome(lambda: rl.allreduce(x), want)
    other.Free()
elif mode == "inputs":
    import torch

    seen["reduce, root=None"] = outcome(lambda: rl.reduce(x, root=None))
    seen["reduce, root=1.0"] = outcome(lambda: rl.reduce(x, root=1.0))
    seen["broadcast, root=n"] = outcome(lambda: rl.broadcast(x, root=n))
    seen["a torch tensor"] = outcome(lambda: rl.allreduce(torch.ones(3)))
    seen["a masked array"] = outcome(lambda: rl.allreduce(np.ma.masked_array(x, mask=x > 12)))
    seen["a list"] = outcome(lambda: rl.allreduce([1.0, 2.0]))
    seen["after"] = outcome(lambda: rl.allreduce(x), want)
elif mode == "slow-link":
    # a link so slow that a step takes minutes of virtual time: nobody waits for it, so the call ends right,
    # well within its 2 s deadline (this machine's), and says how long the emulated machine took
    start, began = time.monotonic(), rl.mpi.emulate.now()
    seen["allreduce"] = outcome(lambda: rl.allreduce(np.ones(100_000), timeout=2),
                                np.full(100_000, float(comm.Get_size())))
    seen["virtual"] = rl.mpi.emulate.now() - began
    seen["seconds"] = time.monotonic() - start
elif mode == "dropped-arrays":
    # arrays the caller drops are freed: no reference kept by ringlab's remembered plans
    refs = []
    for size in range(1000, 1000 + 12 * 97, 97):
        result = np.empty(size)
        rl.allreduce(np.ones(size), out=result)
        work = np.ones(size)
        rl.allreduce(work, in_place=True)
        refs += [weakref.ref(result), weakref.ref(work)]
        del result, work
    gc.collect()
    seen["alive"] = sum(r() is not None for r in refs)
    seen["after"] = outcome(lambda: rl.allreduce(x, out=np.empty_like(x)), want)
else:
    raise SystemExit(f"unknown mode {mode!r}")

everyone = comm.gather(seen, root=0)
if rank == 0:
    with open(out, "w") as fh:
        json.dump(everyone, fh)
