"""``-a nccl`` where only rank 1 lacks libnccl (cupy stand-in, 3 ranks): ranks 0 and 2 look as if
they had it, and rank 0 would be the one to call get_unique_id while the others wait in bcast.
Every rank must raise the same ValueError, naming rank 1, before any NCCL call; none may hang."""
import io

from cupy.cuda import nccl
from mpi4py import MPI

from ringlab.measure import bench

rank = MPI.COMM_WORLD.Get_rank()


def never():
    raise AssertionError(f"rank {rank} went on to NCCL although rank 1 cannot run it")


if rank != 1:
    nccl.available, nccl.get_unique_id, nccl.NcclCommunicator = True, never, never
try:
    bench.run("allreduce", ["nccl"], [1024], iters=1, warmup=0, gpu=True, out=io.StringIO())
except ValueError as err:
    print(f"rank {rank} ValueError: {err}", flush=True)
else:
    raise SystemExit(f"rank {rank}: no error")
