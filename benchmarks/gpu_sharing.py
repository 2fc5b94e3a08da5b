"""What it costs when MPI ranks share one GPU: per-call times of the smallest GPU work, with and without MPS.

    mpiexec -n 2 python benchmarks/gpu_sharing.py          # time-sliced (no MPS daemon running)
    nvidia-cuda-mps-control -d                              # start MPS, then the same command again
    mpiexec -n 2 python benchmarks/gpu_sharing.py
    echo quit | nvidia-cuda-mps-control                     # stop the daemon you started

Every rank binds to GPU ``local rank % GPUs``, so on a one-GPU machine all ranks share it. Printed per
call, the slowest rank's mean over 200 calls after 10 warm-up calls:
  - a one-element kernel and a stream synchronisation on every rank at once;
  - the same, then an empty MPI message there and back between ranks 0 and 1 (a step's hand-off);
  - a stream synchronisation with nothing queued;
  - ``rl.allreduce`` of 8 bytes on numpy (no GPU), on cupy through ipc and through host staging,
    and of 32 MiB on cupy through ipc.
Without MPS, CUDA runs one process's work at a time, switching in time slices, so the first two lines
grow by the time a rank waits for the others' turns. Without a GPU it says so and exits with status 2.
"""
from __future__ import annotations

import sys
import time


def main() -> int:
    import numpy as np
    from mpi4py import MPI

    import ringlab as rl
    from ringlab.mpi.devices import bind_device, cupy_module, mps_running

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    cp = cupy_module()
    if cp is None:
        if rank == 0:
            print("gpu_sharing: no GPU here (cupy sees none); nothing to measure", file=sys.stderr)
        return 2
    if n < 2:
        print("gpu_sharing: run it on 2 ranks or more (mpiexec -n 2 ...)", file=sys.stderr)
        return 2
    gpu = bind_device(comm)
    stream = cp.cuda.get_current_stream()

    def per_call(work, calls: int = 200) -> float:
        for _ in range(10):
            work()
        stream.synchronize()
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            work()
        stream.synchronize()
        return comm.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX)

    x, y = cp.ones(2, cp.float32), cp.ones(2, cp.float32)
    empty = np.empty(0, np.uint8)

    def hand_off():
        cp.add(x, y, out=x)
        stream.synchronize()
        if rank == 0:
            comm.Send(empty, 1)
            comm.Recv(empty, 1)
        elif rank == 1:
            comm.Recv(empty, 0)
            comm.Send(empty, 0)

    host = np.ones(2, np.float32)
    big = cp.ones(8 << 20, cp.float32)
    rows = [
        ("one-element kernel + synchronise, every rank", per_call(lambda: (cp.add(x, y, out=x), stream.synchronize()))),
        ("the same + empty MPI message there and back", per_call(hand_off)),
        ("synchronise an idle stream", per_call(stream.synchronize)),
        ("rl.allreduce 8 B, numpy (no GPU)", per_call(lambda: rl.allreduce(host, "ring"))),
        ("rl.allreduce 8 B, cupy, ipc", per_call(lambda: rl.allreduce(x, "ring", transport="ipc"))),
        ("rl.allreduce 8 B, cupy, host staging", per_call(lambda: rl.allreduce(x, "ring", transport="host"))),
        ("rl.allreduce 32 MiB, cupy, ipc", per_call(lambda: rl.allreduce(big, "ring", transport="ipc"), 30)),
    ]
    gpus = comm.allgather(gpu)
    if rank == 0:
        name = cp.cuda.runtime.getDeviceProperties(gpu)["name"].decode()
        print(f"# {n} ranks on GPUs {gpus} ({name}); MPS {'running' if mps_running() else 'not running'}")
        for what, seconds in rows:
            print(f"{what:48} {seconds * 1e6:10.1f} us")
    rl.release_buffers()
    return 0


if __name__ == "__main__":
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    sys.exit(main())
