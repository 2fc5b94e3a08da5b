"""The per-call fast path on real ranks: every way of passing the result, results held or dropped,
persistent requests made once and reused, release_buffers, and MPICH's forced ring (mpi-ring)."""
import sys

import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import plan, private
from ringlab.measure.mpich import forced_allreduce

comm = MPI.COMM_WORLD
n, rank = comm.Get_size(), comm.Get_rank()
rng = np.random.default_rng(rank)


def mpi_sum(a):
    out = np.empty_like(a)
    comm.Allreduce(a, out)
    return out


for algorithm in ("ring", "naive", "rhd", "tree"):
    for count in (1, 7, 1000, 300_001):  # 300_001 float64: several 1 MiB pieces per reduce message
        x = rng.integers(-50, 50, count).astype(np.float64)
        want = mpi_sum(x)
        kept = [rl.allreduce(x * k, algorithm) for k in (1, 2, 3)]  # held results stay what they were
        assert all(np.array_equal(r, want * k) for r, k in zip(kept, (1, 2, 3))), (algorithm, count)
        for _ in range(3):  # dropped results are reused: still right
            assert np.array_equal(rl.allreduce(x, algorithm), want)
        out = np.full_like(x, np.nan)
        for _ in range(3):
            assert rl.allreduce(x, algorithm, out=out) is out and np.array_equal(out, want)
        work = x.copy()
        assert rl.allreduce(work, algorithm, in_place=True) is work and np.array_equal(work, want)
        assert np.array_equal(rl.allreduce(x, algorithm, timeout=30.0), want)  # the polling wait, same sums
        view = rl.allreduce(x, algorithm)[:1]
        rl.allreduce(x * 5, algorithm)
        assert np.array_equal(view, want[:1]), "a view of a dropped-looking result was overwritten"

# persistent requests: one bound plan per result buffer, made on the first call and started after
x = np.ones(4096, np.float32)
out = np.empty_like(x)
rl.allreduce(x, out=out)
calls = plan.calls(private.state(comm))
key = (out.__array_interface__["data"][0], out.nbytes, None)  # (result, bytes, input read in place)
call = next(c for c in calls.values() if key in c.transport.kept)
bound = call.transport.kept[key]
requests = [r for step in bound.steps for r in step.requests]
assert requests and all(isinstance(r, MPI.Prequest) for r in requests)
rl.allreduce(x, out=out)
assert call.transport.kept[key] is bound  # the same requests again, not new ones
rl.release_buffers()
assert not plan.calls(private.state(comm)) and not call.transport.kept
assert np.array_equal(rl.allreduce(x), np.full(4096, n, np.float32))  # and it works after

# a mismatch found by the fast path's agreement is the same clear error on every rank
try:
    rl.allreduce(np.ones(10 + (rank == n - 1)))
    raise SystemExit("a size mismatch was not caught")
except ValueError as err:
    assert f"rank {n - 1} has [11]" in str(err), err

# MPICH's own ring, forced, and checked to be in force
x = rng.uniform(-1, 1, 1000)
with forced_allreduce(comm, "ring"):  # raises unless MPICH refuses what its ring cannot do
    ring_result = mpi_sum(x)
assert np.allclose(ring_result, rl.allreduce(x))
if rank == 0:
    print(f"ok {n} ranks")
