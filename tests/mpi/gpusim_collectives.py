"""Every collective and algorithm on device arrays through one transport (argv[1]), against numpy.

Run under mpiexec with the cupy stand-in first on the Python path (tests/gpusim_support.py). Each
rank builds every rank's input from a seed, so the expected result is computed with numpy alone.
Prints 'ok N ranks via T' on rank 0. Flags after the transport: ``quick`` runs a smaller set
(the mutation test); ``own-gpu``: each rank was shown only its own GPU (CUDA_VISIBLE_DEVICES=rank).
"""
import ctypes
import os
import sys

if "own-gpu" in sys.argv[2:]:  # the launcher showed each rank only its own GPU before it started
    assert os.environ["CUDA_VISIBLE_DEVICES"] == os.environ["PMI_RANK"], "start it with run_gpusim_own_gpu"

import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.algorithms import options_of
from ringlab.schedule import chunk_bounds

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
transport = sys.argv[1]
quick = "quick" in sys.argv[2:]
TIMEOUT = 60
COUNTS = [n + 1, 40_003] if quick else sorted({0, 1, n, n + 1, 1000, 300_007})  # 300_007 float64: pieces
rl.mpi.devices.bind_device(comm)
used = rl.which_transport(cp.ones(1), comm, transport)
checked = 0


def inputs(count, seed, dtype=np.float64):
    """Every rank's input: integers, so that sums are exact in any order."""
    return [np.random.default_rng(seed * 131 + r).integers(-1000, 1000, count).astype(dtype) for r in range(n)]


def in_memory(array):
    """What is in device memory now, read through __cuda_array_interface__ as a CUDA-aware MPI would,
    without synchronising: a call that returns before its work has landed shows stale bytes here."""
    face = array.__cuda_array_interface__
    nbytes = array.size * array.dtype.itemsize
    if nbytes == 0:
        return np.empty(array.shape, array.dtype)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(face["data"][0]))
    return raw.view(array.dtype).reshape(array.shape).copy()


def same(got, want, what):
    global checked
    checked += 1
    host = in_memory(got)
    if not np.array_equal(host, got.get()):
        raise AssertionError(f"rank {rank}: {what} via {used}: returned before the result was in memory")
    if host.shape != want.shape or not np.array_equal(host, want):
        bad = np.flatnonzero(host.reshape(-1) != want.reshape(-1))
        raise AssertionError(f"rank {rank}: {what} via {used}: {bad.size} wrong elements, first at {bad[:5]}: "
                             f"got {host.reshape(-1)[bad[:3]]}, want {want.reshape(-1)[bad[:3]]}")


def variants(name):
    accepted = options_of(name)
    out = [{}]
    if "root" in accepted:
        out = [{"root": r} for r in sorted({0, n - 1})]
    if "segments" in accepted:
        out = [dict(o, segments=s) for o in out for s in (1, 3)]
    if "servers" in accepted:
        out = [dict(o, servers=m) for o in out for m in sorted({1, n})]
    return out


if "windows" in sys.argv[2:]:  # only the steps that take their receives a window at a time (3 ranks or more)
    count = 300_007  # float64: a root's n-1 incoming buffers need more scratch than one chunk of 1 MiB pieces
    everyone = inputs(count, 11)
    for short, options in (("naive", {"root": n - 1}), ("ps", {"servers": 1})):
        for _ in range(2):
            same(rl.allreduce(cp.asarray(everyone[rank]), short, transport=transport, timeout=TIMEOUT, **options),
                 np.sum(everyone, axis=0), f"windowed {short}")
    if rank == 0:
        print(f"ok {n} ranks via {used} ({transport} asked), windows")
    raise SystemExit(0)

for name in sorted(rl.ALGORITHMS):
    kind, short = name.split(".")
    for count in COUNTS:
        if kind in ("gather", "scatter", "alltoall") and count > 1000:  # copies only, in blocks: no pieces to test
            continue
        everyone = inputs(count, count)
        total = np.sum(everyone, axis=0)
        for options in variants(name):
            what = f"{name} {options} count={count}"
            x = cp.asarray(everyone[rank])
            root = options.get("root", 0)
            if kind == "allreduce":
                same(rl.allreduce(x, short, transport=transport, timeout=TIMEOUT, **options), total, what)
            elif kind == "reduce":
                got = rl.reduce(x, algorithm=short, transport=transport, timeout=TIMEOUT, **options)
                assert (got is None) == (rank != root), what
                if rank == root:
                    same(got, total, what)
            elif kind == "broadcast":
                same(rl.broadcast(x, algorithm=short, transport=transport, timeout=TIMEOUT, **options),
                     everyone[root], what)
            elif kind == "gather":
                got = rl.gather(x, algorithm=short, transport=transport, timeout=TIMEOUT, **options)
                assert (got is None) == (rank != root), what
                if rank == root:
                    same(got, np.stack(everyone), what)
            elif kind == "scatter":  # the root's rows are every rank's input; the others' contents are ignored
                rows = cp.asarray(np.stack(everyone) if rank == root else np.zeros((n, count)))
                same(rl.scatter(rows, algorithm=short, transport=transport, timeout=TIMEOUT, **options),
                     everyone[rank], what)
            elif kind == "alltoall":  # rank s sends everyone[s] + 3000 d to rank d
                rows = cp.asarray(np.stack([everyone[rank] + 3000 * d for d in range(n)]))
                same(rl.alltoall(rows, short, transport=transport, timeout=TIMEOUT),
                     np.stack([everyone[s] + 3000 * rank for s in range(n)]), what)
            else:  # reduce_scatter and allgather: only the chunks the collective defines are compared
                schedule = rl.build(name, n)
                got = rl.execute(schedule, x, transport=transport, timeout=TIMEOUT).get()
                bounds = chunk_bounds(count, schedule.nchunks)
                for chunk, owner in enumerate(schedule.collective.owners):
                    part = slice(int(bounds[chunk]), int(bounds[chunk + 1]))
                    if kind == "reduce_scatter" and owner == rank:
                        assert np.array_equal(got[part], total[part]), f"rank {rank}: {what} chunk {chunk}"
                    elif kind == "allgather":
                        assert np.array_equal(got[part], everyone[owner][part]), f"rank {rank}: {what} chunk {chunk}"
                checked += 1
            assert np.array_equal(x.get(), everyone[rank]), f"rank {rank}: {what}: the input was modified"

# a learner's schedule where every rank sends the chunk it also receives into (all ranks swap whole
# buffers in one step): the receives must wait in scratch until every reader has read the chunk
swap = rl.make_schedule("allreduce", n, 1, [[(s, d, 0, "reduce") for s in range(n) for d in range(n) if s != d]],
                        name="swap")
for count in COUNTS:
    everyone = inputs(count, 7 + count)
    for _ in range(2):
        same(rl.allreduce(cp.asarray(everyone[rank]), swap, transport=transport, timeout=TIMEOUT),
             np.sum(everyone, axis=0), f"swap count={count}")

# out= and in place, several shapes and dtypes, one after another (the caches and the IPC buffer grow)
for dtype in (np.float32, np.int64, np.float64):
    for count in ((5, 7), 10, 50_000):
        everyone = inputs(int(np.prod(count)), 99, dtype)
        want = np.sum(everyone, axis=0).reshape(count)
        x = cp.asarray(everyone[rank].reshape(count))
        out = cp.empty_like(x)
        assert rl.allreduce(x, "ring", transport=transport, out=out, timeout=TIMEOUT) is out
        same(out, want, f"out= {dtype.__name__} {count}")
        assert rl.allreduce(x, "rhd", transport=transport, in_place=True, timeout=TIMEOUT) is x
        same(x, want, f"in place {dtype.__name__} {count}")

# NCCL's other reductions, on the GPU as on the host; and bfloat16, in values whose sums bfloat16 holds exactly
REFERENCE = {"prod": np.prod, "max": np.max, "min": np.min, "avg": lambda a, axis: np.sum(a, axis=axis) / n}
for op, reference in REFERENCE.items():
    everyone = [e % 7 - 3 for e in inputs(1001, 5)] if op == "prod" else inputs(1001, 5)
    want = reference(np.stack(everyone), axis=0)
    for algorithm in ("ring", "rhd") if quick else ("ring", "rhd", "naive", "tree"):
        same(rl.allreduce(cp.asarray(everyone[rank]), algorithm, op=op, transport=transport, timeout=TIMEOUT),
             want, f"allreduce {algorithm} op={op}")
    got = rl.reduce(cp.asarray(everyone[rank]), n - 1, op=op, transport=transport, timeout=TIMEOUT)
    if rank == n - 1:
        same(got, want, f"reduce op={op}")
bf16 = rl.mpi.reduction.bfloat16()
for op in ("sum", "max", "min"):
    everyone = [(e % 61 - 30).astype(bf16) for e in inputs(4099, 8)]
    want = {"sum": np.sum, "max": np.max, "min": np.min}[op](np.stack(everyone).astype(np.float32), axis=0).astype(bf16)
    for algorithm in ("ring", "naive"):
        got = rl.allreduce(cp.asarray(everyone[rank]), algorithm, op=op, transport=transport, timeout=TIMEOUT)
        assert got.dtype == bf16, got.dtype
        same(got, want, f"bfloat16 {algorithm} op={op}")

# a trace on device arrays
out, trace = rl.allreduce(cp.ones(1000), "ring", transport=transport, trace=True, timeout=TIMEOUT)
same(out, np.full(1000, float(n)), "traced ring")
if rank == 0:
    assert len(trace) == 2 * rl.build("allreduce.ring", n).num_transfers, len(trace)

# giving the buffers back, then using them again
rl.release_buffers(comm)
same(rl.allreduce(cp.ones(10), transport=transport, timeout=TIMEOUT), np.full(10, float(n)), "after release")

total = comm.allreduce(checked)
if rank == 0:
    print(f"ok {n} ranks via {used} ({transport} asked), {total} comparisons, "
          f"{cp.cuda.runtime.getDeviceCount()} GPU(s) visible")
