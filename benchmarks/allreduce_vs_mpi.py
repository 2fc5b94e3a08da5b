"""ringlab's allreduce algorithms against MPI's own Allreduce, measured in one run.

    python benchmarks/allreduce_vs_mpi.py -n 4            # starts its own mpiexec
    mpiexec -n 4 python -m mpi4py benchmarks/allreduce_vs_mpi.py

For each size (4 KiB .. 64 MiB by default) it times MPI's Allreduce and each algorithm on the
same float32 buffer, checks every result against MPI's, and prints the median time, the bus
bandwidth (nccl-tests' definition, 2(n-1)/n x bytes/time) and the ratio of busbw to MPI's
from this run. With --gpu (cupy and a GPU needed) it runs on device buffers through
--transport and also prints the device-to-device copy rate measured in the same run.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import ringlab as rl
from ringlab.measure.timing import bandwidths, time_collective
from ringlab.measure.units import format_bytes, parse_size


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, help="start mpiexec with this many ranks (default: run as launched)")
    p.add_argument("-b", "--min-bytes", default="4K", help="smallest size (default 4K)")
    p.add_argument("-e", "--max-bytes", default="64M", help="largest size (default 64M)")
    p.add_argument("-f", "--factor", type=int, default=4, help="size multiplier between rows (default 4)")
    p.add_argument("-a", "--algorithms", default="ring,naive,ps,rhd", help="comma-separated (default ring,naive,ps,rhd)")
    p.add_argument("--iters", type=int, default=10, help="timed iterations per size (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    p.add_argument("--gpu", action="store_true", help="cupy buffers on the GPU")
    p.add_argument("--transport", default="auto", help="with --gpu: auto, host, cuda-aware or ipc")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    return p.parse_args(argv)


def main(argv=None):
    args = arguments(argv)
    if args.nranks:  # start our own MPI job and run this script in it, without -n
        import subprocess

        from ringlab.mpi.launch import mpiexec_command
        rest = list(sys.argv[1:] if argv is None else argv)
        i = rest.index("-n") if "-n" in rest else rest.index("--nranks")
        del rest[i:i + 2]
        return subprocess.call(mpiexec_command(args.nranks, [__file__, *rest]))
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    n, rank = comm.Get_size(), comm.Get_rank()
    xp = np
    if args.gpu:
        from ringlab.mpi.devices import bind_device, cupy_module
        xp = cupy_module()
        if xp is None:
            sys.exit("--gpu: cupy cannot see a GPU here")
        bind_device(comm)
    sizes, size = [], parse_size(args.min_bytes)
    while size <= parse_size(args.max_bytes):
        sizes.append(size)
        size *= args.factor
    algorithms = args.algorithms.split(",")
    rows = []
    if rank == 0:
        where = "GPU " + args.transport if args.gpu else "CPU, numpy over MPI"
        print(f"# allreduce on {n} ranks ({where}); busbw = 2(n-1)/n x bytes/time; ratio = busbw / MPI's busbw")
        print(f"# {'size':>9} {'who':>8} {'time (us)':>11} {'busbw (GB/s)':>13} {'ratio':>7}")
    for nbytes in sizes:
        count = nbytes // 4
        x = xp.asarray(np.random.default_rng(rank).uniform(-1, 1, count).astype(np.float32))
        want = xp.empty_like(x)
        host = x if xp is np else x.get()
        host_want = np.empty_like(host)
        comm.Allreduce(host, host_want)  # the reference: MPI's own result
        if xp is np:
            mpi_time = time_collective(lambda: comm.Allreduce(x, want), comm, warmup=args.warmup, iters=args.iters)
        else:
            mpi_time = time_collective(lambda: comm.Allreduce(x.get(), host_want), comm, warmup=args.warmup,
                                       iters=args.iters, buffer=x)
        mpi_bus = bandwidths("allreduce", nbytes, mpi_time, n)[1]
        results = [("MPI", mpi_time, mpi_bus)]
        for name in algorithms:
            got = rl.allreduce(x, name, transport=args.transport)
            got = got if xp is np else got.get()
            if not np.allclose(got, host_want, rtol=1e-4, atol=1e-5 * n):
                raise SystemExit(f"rank {rank}: {name} at {nbytes} bytes differs from MPI's Allreduce")
            seconds = time_collective(lambda: rl.allreduce(x, name, transport=args.transport, agree=False), comm,
                                      warmup=args.warmup, iters=args.iters, buffer=x if xp is not np else None)
            results.append((name, seconds, bandwidths("allreduce", nbytes, seconds, n)[1]))
        if args.gpu:
            dst = xp.empty_like(x)
            copy_time = time_collective(lambda: dst.__setitem__(Ellipsis, x), comm, warmup=2, iters=args.iters, buffer=dst)
            results.append(("D2D copy", copy_time, 2 * nbytes / copy_time))  # read + write
        for who, seconds, bus in results:
            ratio = bus / mpi_bus if who != "D2D copy" else float("nan")  # a copy rate: compare by eye
            rows.append({"bytes": nbytes, "who": who, "ranks": n, "time_s": seconds, "busbw_Bps": bus,
                         "ratio_to_mpi": ratio})
            if rank == 0:
                print(f"  {format_bytes(nbytes):>9} {who:>8} {seconds * 1e6:>11.1f} {bus / 1e9:>13.3f} {ratio:>7.2f}",
                      flush=True)
    if rank == 0 and args.json:
        with open(args.json, "w") as fh:
            json.dump({"command": " ".join(sys.argv), "ranks": n, "rows": rows,
                       "mpi": MPI.Get_library_version().splitlines()[0]}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
