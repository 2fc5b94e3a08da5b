"""Misuse with device arrays, on every rank the same clear error and no hang (cupy stand-in).

argv[1] names the case; rank 0 prints 'ok CASE' when every rank raised what it should.
"""
import sys

import cupy as cp
import numpy as np
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi.devices import bind_device

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
case = sys.argv[1]
bind_device(comm)


def expect(error, match, call):
    try:
        call()
    except error as err:
        assert match in str(err), f"rank {rank}: {err}"
        return str(err)
    raise AssertionError(f"rank {rank}: {case}: no {error.__name__}")


if case == "mixed":  # rank 0 passes numpy, the others cupy: the agreement catches it before any transport
    x = np.ones(10) if rank == 0 else cp.ones(10)
    message = expect(ValueError, "memory", lambda: rl.allreduce(x, timeout=30))
elif case == "ipc-unreachable":  # GPUs without peer access: ipc refused on every rank, auto falls back
    message = expect(ValueError, "transport='ipc' needs", lambda: rl.allreduce(cp.ones(10), transport="ipc",
                                                                               timeout=30))
    assert rl.which_transport(cp.ones(1)) == "host", rl.which_transport(cp.ones(1))
    assert float(rl.allreduce(cp.ones(3), timeout=30)[0]) == n
elif case == "out-elsewhere":  # out= on another GPU than x
    x = cp.ones(10)
    with cp.cuda.Device((cp.cuda.Device().id + 1) % cp.cuda.runtime.getDeviceCount()):
        out = cp.empty(10)
    message = expect(ValueError, "must share a GPU", lambda: rl.allreduce(x, out=out, timeout=30))
elif case == "cuda-aware-claimed":  # RINGLAB_CUDA_AWARE=1 where MPICH says no: one error everywhere, no transfer
    import os

    from ringlab.mpi import plan

    made, make = [], plan.make

    def counted(transport, *args, **kwargs):  # a Transport, which would hand the buffers to MPI
        made.append(transport)
        return make(transport, *args, **kwargs)
    plan.make = counted
    os.environ.pop("RINGLAB_CUDA_AWARE", None)
    if rank == n - 1:  # one rank alone claims it: the others, which would not, raise it too
        os.environ["RINGLAB_CUDA_AWARE"] = "1"
    x = cp.ones(10)
    for transport in ("auto", "cuda-aware", "host", "ipc"):
        message = expect(ValueError, "RINGLAB_CUDA_AWARE=1 says the MPI library reads GPU memory",
                         lambda: rl.allreduce(x, transport=transport, timeout=30))
    assert not made, f"rank {rank}: {made} made before the refusal"
    os.environ["RINGLAB_CUDA_AWARE"] = "force"  # the way out for an MPI whose query is wrong
    assert float(rl.allreduce(cp.ones(3), transport="cuda-aware", timeout=30)[0]) == n
    assert made == ["cuda-aware"], made
else:
    raise SystemExit(f"unknown case {case}")
seen = comm.gather(message, root=0)
if rank == 0:
    assert len(set(seen)) == 1, seen
    print(f"ok {case}: {seen[0]}")
