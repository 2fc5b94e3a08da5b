"""How much memory an allreduce adds on each rank at its peak, against the bound ringlab keeps.

    mpiexec -n 4 python benchmarks/memory_peak.py                 # 256 MiB a rank
    mpiexec -n 3 python benchmarks/memory_peak.py --mib 32 --check # exit status 1 if a bound is passed

For ring and naive (and ps, one server), each called three ways (the result returned, ``out=`` a buffer
the caller made, ``in_place=True``): the rise of the rank's peak resident memory during one call over
its resident memory just before (Linux's VmHWM, reset through /proc/self/clear_refs; ringlab's kept
buffers are released first, so the call allocates everything it needs). Printed for the rank where it
is largest (the root, for naive and ps), with the bound: the result plus one chunk of the schedule
when the result is returned, one chunk otherwise, plus ``--slack`` MiB for MPI and Python.
"""
from __future__ import annotations

import argparse
import gc
import sys


def _kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status: this needs Linux")


def rise_during(call) -> int:
    """Bytes by which this process's peak resident memory during ``call()`` exceeds its memory before."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current resident size
    before = _kib("VmRSS")
    call()
    return max(0, _kib("VmHWM") - before) * 1024


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mib", type=int, default=256, help="buffer size per rank in MiB (default 256)")
    p.add_argument("--slack", type=float, default=12, help="MiB allowed over the bound for MPI and Python (default 12)")
    p.add_argument("--check", action="store_true", help="exit with status 1 when a call passes its bound")
    args = p.parse_args(argv)

    import numpy as np
    from mpi4py import MPI

    import ringlab as rl

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    count = (args.mib << 20) // 4
    x = np.random.default_rng(rank).standard_normal(count).astype(np.float32)
    want = np.empty_like(x)
    comm.Allreduce(x, want)
    rows, failed = [], 0
    for name in ("ring", "naive", "ps"):
        chunk = -(-x.nbytes // rl.build(f"allreduce.{name}", n).nchunks)
        for how in ("returned", "out=", "in_place"):
            rl.release_buffers()
            mine = x.copy()
            out = np.zeros_like(x) if how == "out=" else None  # a buffer the caller uses, so in memory
            got = []
            rise = rise_during(lambda: got.append(
                rl.allreduce(mine, name, in_place=True) if how == "in_place" else
                rl.allreduce(mine, name, out=out) if how == "out=" else rl.allreduce(mine, name)))
            if not np.allclose(got[0], want, rtol=1e-4, atol=1e-3):
                raise AssertionError(f"rank {rank}: {name} ({how}) differs from MPI's Allreduce")
            bound = chunk + (x.nbytes if how == "returned" else 0)
            worst = comm.allreduce((rise, rank), op=MPI.MAXLOC)
            del got, mine, out
            over = worst[0] > bound + args.slack * 2**20
            failed += over
            rows.append((name, how, worst[1], worst[0], bound, over))
    if rank == 0:
        print(f"# {n} ranks, {args.mib} MiB float32 a rank: peak memory added by one call, on the rank where it "
              f"is largest; bound = result (when returned) + one chunk, plus {args.slack:g} MiB slack")
        print(f"# {'algorithm':<9} {'call':<9} {'rank':>4} {'added (MiB)':>12} {'bound (MiB)':>12}")
        for name, how, where, rise, bound, over in rows:
            print(f"  {name:<9} {how:<9} {where:>4} {rise / 2**20:>12.1f} {bound / 2**20:>12.1f}"
                  + ("  OVER" if over else ""))
    rl.release_buffers()
    return 1 if (args.check and failed) else 0


if __name__ == "__main__":
    sys.exit(main())
