"""ringlab's allreduce algorithms against MPI's own Allreduce, measured in one run.

    python benchmarks/allreduce_vs_mpi.py -n 4            # starts its own mpiexec
    mpiexec -n 4 python -m mpi4py benchmarks/allreduce_vs_mpi.py

For each size (4 KiB .. 64 MiB by default) it times MPI's Allreduce and each algorithm on the
same float32 buffer, checks every result against MPI's, and prints the median time, the bus
bandwidth (nccl-tests' definition, 2(n-1)/n x bytes/time) and the ratio of busbw to MPI's
from this run. With --gpu (cupy and a GPU needed) it runs on device buffers through
--transport and also prints the device-to-device copy rate measured in the same run.
The sweep is ``ringlab bench``'s (``ringlab.measure.bench.run``); this script adds the ratios.
"""
from __future__ import annotations

import argparse
import json
import sys

from ringlab.measure.tables import table
from ringlab.measure.bench import run, sweep
from ringlab.measure.timing import time_collective
from ringlab.measure.units import parse_size
from ringlab.cluster.launch import relaunch


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


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row with ``ratio_to_mpi``: its busbw over MPI's at the same size."""
    mpi = {r["bytes"]: r["busbw_Bps"] for r in rows if r["algorithm"] == "mpi"}
    return [{**r, "ratio_to_mpi": r["busbw_Bps"] / mpi[r["bytes"]]} for r in rows]


def device_copies(sizes: list[int], iters: int) -> list[dict]:
    """Bytes copied per second from one device buffer to another, per size (call on every rank)."""
    from mpi4py import MPI

    from ringlab.mpi.devices import cupy_module

    cp = cupy_module()
    rows = []
    for nbytes in sizes:
        src, dst = cp.ones(nbytes // 4, cp.float32), cp.empty(nbytes // 4, cp.float32)

        def copy():
            dst[...] = src
        seconds = time_collective(copy, MPI.COMM_WORLD, warmup=2, iters=iters, buffer=dst)
        rows.append({"bytes": nbytes, "algorithm": "D2D copy", "time_s": seconds, "Bps": 2 * nbytes / seconds})
    return rows  # 2 x bytes: a copy reads and writes them; compare by eye, not as a ratio


def main(argv=None):
    args = arguments(argv)
    if args.nranks:  # start our own MPI job and run this script in it
        return relaunch(args.nranks, sys.argv[1:] if argv is None else argv, [__file__])
    sizes = sweep(parse_size(args.min_bytes), parse_size(args.max_bytes), factor=args.factor)
    algorithms = ["mpi", *(a for a in args.algorithms.split(",") if a and a != "mpi")]
    result = run("allreduce", algorithms, sizes, "float32", args.iters, args.warmup,
                 gpu=args.gpu, transport=args.transport, command=sys.argv)
    copies = device_copies(sizes, args.iters) if args.gpu else []
    if result is None:  # not rank 0
        return 0
    result["rows"] = with_ratios(result["rows"])
    print("# ratio = busbw / MPI's busbw at the same size, both measured in this run")
    table([r for r in result["rows"] if r["algorithm"] != "mpi"],
          {"size (B)": "bytes", "algorithm": "algorithm", "busbw (GB/s)": "busbw_Bps", "ratio to MPI": "ratio_to_mpi"})
    if copies:
        print("# device-to-device copy in this run (bytes read and written per second)")
        table(copies, {"size (B)": "bytes", "time (us)": "time_s", "copy (GB/s)": "Bps"})
        result["device_copy"] = copies
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    wrong = [f"{r['algorithm']} at {r['bytes']} B" for r in result["rows"] if r["wrong"]]
    if wrong:
        sys.exit("differs from MPI's Allreduce: " + ", ".join(wrong))
    return 0


if __name__ == "__main__":
    sys.exit(main())
