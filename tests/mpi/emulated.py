"""Collectives on emulated links (rl.emulate), on every rank: results against MPI's, times against the links.

    mpiexec -n N python -m mpi4py tests/mpi/emulated.py MODE

Prints one line per case on rank 0 (``case: what happened``), or per rank for the error cases.
"""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1]
LINK = "uniform:0.2:500"  # 200 MB/s, 0.5 ms a message: slow enough that the link time dominates here


def timed(fn):
    """fn's result and its time on the slowest rank: virtual on an emulated machine, this machine's otherwise."""
    rl.mpi.emulate.synchronize(comm)
    start = rl.mpi.emulate.now()
    got = fn()
    return got, comm.allreduce(rl.mpi.emulate.now() - start, op=MPI.MAX)


if mode == "right":
    rng = np.random.default_rng(rank)
    x = rng.standard_normal(100_003).astype(np.float64)  # not a multiple of anything
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    with rl.emulate(LINK) as machine:
        topology = machine.resolve(n)
        for algorithm in ("ring", "naive", "rhd", "tree"):
            got, seconds = timed(lambda: rl.allreduce(x, algorithm))
            link = rl.predict(rl.build(f"allreduce.{algorithm}", n), x.nbytes, topology, itemsize=8).seconds
            if rank == 0:
                print(f"allreduce.{algorithm}: {'right' if np.allclose(got, want) else 'WRONG'} "
                      f"{seconds / link:.3f}", flush=True)
        root = n - 1
        got, seconds = timed(lambda: rl.broadcast(x, root, "chain", segments=4))
        same = comm.allreduce(int(np.array_equal(got, comm.bcast(x, root=root))), op=MPI.MIN)
        link = rl.predict(rl.build("broadcast.chain", n, root=root, segments=4), x.nbytes, topology, itemsize=8).seconds
        if rank == 0:
            print(f"broadcast.chain: {'right' if same else 'WRONG'} {seconds / link:.3f}", flush=True)
    got, seconds = timed(lambda: rl.allreduce(x, "ring"))  # after the block: the raw machine again
    if rank == 0:
        print(f"after: {'right' if np.allclose(got, want) else 'WRONG'} {seconds:.4f}", flush=True)

elif mode == "fresh":  # a loop of fresh machines, slow and fast in turn: each run is paced by its own links
    x = np.ones(1 << 15)  # 256 KiB of float64: on the slow links a ring step needs 26 ms, on the fast ones 26 us
    ring = rl.build("allreduce.ring", n)
    links = {kind: rl.predict(ring, x.nbytes, rl.topology.uniform(n, bandwidth=rate, latency=1e-5), itemsize=8).seconds
             for kind, rate in (("slow", 5e6), ("fast", 5e9))}
    for i in range(16):
        kind = ("slow", "fast")[i % 2]
        with rl.emulate(rl.topology.uniform(n, bandwidth=5e6 if kind == "slow" else 5e9, latency=1e-5)):
            got, seconds = timed(lambda: rl.allreduce(x, "ring"))  # a new machine each time, dropped after the block:
        if rank == 0:                                              # a cache by id would give the next one its times
            print(f"{i}: {kind} {'right' if got[0] == n else 'WRONG'} {seconds / links[kind]:.3f} "
                  f"{seconds / links['slow']:.4f}", flush=True)

elif mode == "environment":  # RINGLAB_EMULATE set for the job
    x = np.full(1 << 16, rank + 1.0)
    got, seconds = timed(lambda: rl.allreduce(x, "ring"))
    current = rl.mpi.emulate.current()
    link = rl.predict(rl.build("allreduce.ring", n), x.nbytes, current.resolve(n), itemsize=8).seconds * current.scale
    if rank == 0:
        print(f"env: {current.label}; {'right' if got[0] == n * (n + 1) / 2 else 'WRONG'} {seconds / link:.3f}",
              flush=True)

else:  # errors: the same clear message on every rank, then a collective that is still right
    cases = {"a Topology": lambda: rl.emulate(rl.topology.uniform(n, bandwidth=1e9, latency=1e-5)),  # same on all
             "preset too small": lambda: rl.emulate("pcie3-switch-2"),
             "mismatched": lambda: rl.emulate(LINK if rank == 0 else "uniform:0.2:400")}
    x = np.ones(1000)
    said = []
    for case, machine in cases.items():
        try:
            with machine():
                rl.allreduce(x, "ring", timeout=30)
            said.append(f"rank {rank}: {case}: no error")
        except ValueError as err:
            said.append(f"rank {rank}: {case}: {err}")
    try:  # 8 MB over links of 1 MB/s: every step needs seconds of virtual time; the deadline is this machine's
        with rl.emulate("uniform:0.001:0"):
            got, seconds = timed(lambda: rl.allreduce(np.ones(1 << 20), "ring", timeout=5))
        said.append(f"rank {rank}: slow links: {'right' if got[0] == n else 'WRONG'} in {seconds:.0f} virtual s")
    except (rl.StepTimeout, rl.mpi.private.OutOfStep) as err:
        said.append(f"rank {rank}: slow links: {type(err).__name__}")
    refused = 0
    while True:  # the next call is right (one refused as out of step would be a clear error, never a wrong one)
        try:
            got = rl.allreduce(x, "ring")
            break
        except rl.mpi.private.OutOfStep:
            refused += 1
    said.append(f"rank {rank}: then: {'right' if got[0] == n else 'WRONG'} after {refused} refused")
    everyone = comm.gather(said, root=0)  # printed by one rank, so that lines never interleave
    if rank == 0:
        print("\n".join(line for lines in everyone for line in lines), flush=True)
