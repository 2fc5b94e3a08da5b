"""ringlab's ring against MPI's own allreduce on CPU ranks: the speed goals, measured in one run.

    python benchmarks/cpu_goals.py                 # 2 and 4 ranks, 64 KiB .. 16 MiB, 11 repetitions
    python benchmarks/cpu_goals.py --json goals.json

For 2 and 4 ranks it runs ``ringlab bench`` (ring, naive, MPI's choice and MPICH's own ring, forced;
medians of ``--iters`` timed calls after warm-up, every result checked against MPI's), then times
an 8-byte ``rl.allreduce`` with its default checks against ``MPI_Allreduce`` at 2 ranks (the
median over 11 batches of 2000 calls each). It prints the measured ratios and, for each goal,
met or NOT met. Ratios are of numbers measured in this run on this machine; a machine shared
with other work moves them, which is why they are printed rather than asserted by a test.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from ringlab.cluster.launch import run_mpi
from ringlab.mpi.devices import cores

HERE = Path(__file__).resolve()
SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]

PER_CALL = """
import json, sys, time
import numpy as np
from mpi4py import MPI
import ringlab as rl
from ringlab.measure.timing import per_call_seconds

comm = MPI.COMM_WORLD
x, out = np.ones(2, np.float32), np.empty(2, np.float32)


def per_call(fn):
    return per_call_seconds(fn, comm, calls=2000, batches=11, warmup=200)


mpi = per_call(lambda: comm.Allreduce(x, out))
ours = per_call(lambda: rl.allreduce(x, comm=comm))
if comm.rank == 0:
    print(json.dumps({"mpi_s": mpi, "ringlab_s": ours}))
"""


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=11, help="timed calls per size, median taken (default 11)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--json", metavar="FILE", help="also write the measurements and verdicts as JSON")
    args = p.parse_args(argv)
    if args.iters < 11:
        p.error("--iters must be at least 11: the goals are medians of 11 repetitions or more")
    return args


def sweep(nranks: int, iters: int, warmup: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "bench.json"
        done = run_mpi(nranks, ["-m", "ringlab", "bench", "-b", str(SIZES[0]), "-e", str(SIZES[-1]), "-f", "4",
                                "-a", "mpi,mpi-ring,ring,naive", "--iters", str(iters), "--warmup", str(warmup),
                                "--json", str(out)], timeout=1200)
        if done.returncode != 0:
            sys.exit(f"ringlab bench on {nranks} ranks failed:\n{done.stderr[-3000:]}")
        rows = json.loads(out.read_text())["rows"]
    wrong = [r for r in rows if r["wrong"]]
    if wrong:
        sys.exit(f"wrong results on {nranks} ranks: {wrong}")
    return rows


def per_call_seconds() -> dict:
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "per_call.py"
        script.write_text(PER_CALL)
        done = run_mpi(2, [str(script)], timeout=600)
        if done.returncode != 0:
            sys.exit(f"the per-call timing failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def busbw(rows: list[dict], algorithm: str, nbytes: int) -> float:
    return next(r["busbw_Bps"] for r in rows if r["algorithm"] == algorithm and r["bytes"] == nbytes)


def goals(sweeps: dict, call: dict) -> list[dict]:
    """Each goal with the ratio measured and whether it is met."""
    out = []
    for n, rows in sweeps.items():
        for nbytes, least in [(64 << 10, 0.5), (1 << 20, 0.8), (4 << 20, 1.0), (16 << 20, 1.0)]:
            ratio = busbw(rows, "ring", nbytes) / busbw(rows, "mpi", nbytes)
            out.append({"goal": f"ring / MPI busbw >= {least} at {nbytes >> 10} KiB, {n} ranks", "ratio": ratio,
                        "met": ratio >= least})
    rows = sweeps[4]
    for nbytes, least in [(256 << 10, 1.0), (1 << 20, 1.0), (4 << 20, 1.0), (16 << 20, 2.0)]:
        ratio = busbw(rows, "ring", nbytes) / busbw(rows, "naive", nbytes)
        out.append({"goal": f"ring / naive busbw >= {least} at {nbytes >> 10} KiB, 4 ranks", "ratio": ratio,
                    "met": ratio >= least})
    ratio = call["ringlab_s"] / call["mpi_s"]
    out.append({"goal": "8-byte rl.allreduce (default checks) <= 4x MPI's time, 2 ranks", "ratio": ratio,
                "met": ratio <= 4.0})
    return out


def main(argv=None) -> int:
    args = arguments(argv)
    print(f"# ringlab against MPI on CPU ranks, this machine: {cores()} cores; 4 ranks on fewer than 4 cores are "
          "oversubscribed (waiting ranks yield the core)")
    sweeps = {n: sweep(n, args.iters, args.warmup) for n in (2, 4)}
    call = per_call_seconds()
    print(f"# {'size (B)':>10} {'ranks':>5} {'mpi (GB/s)':>10} {'mpi-ring':>9} {'ring':>8} {'naive':>8} "
          f"{'ring/mpi':>9} {'ring/mpi-ring':>14} {'ring/naive':>11}")
    for n, rows in sweeps.items():
        for nbytes in SIZES:
            bw = {a: busbw(rows, a, nbytes) for a in ("mpi", "mpi-ring", "ring", "naive")}
            print(f"  {nbytes:>10} {n:>5} {bw['mpi'] / 1e9:>10.3f} {bw['mpi-ring'] / 1e9:>9.3f} {bw['ring'] / 1e9:>8.3f}"
                  f" {bw['naive'] / 1e9:>8.3f} {bw['ring'] / bw['mpi']:>9.2f} {bw['ring'] / bw['mpi-ring']:>14.2f}"
                  f" {bw['ring'] / bw['naive']:>11.2f}")
    print(f"# 8-byte allreduce, 2 ranks: MPI {call['mpi_s'] * 1e6:.1f} us, rl.allreduce {call['ringlab_s'] * 1e6:.1f} us "
          "(median of 11 batches of 2000 calls)")
    verdicts = goals(sweeps, call)
    print("# goal" + " " * 62 + "measured  verdict")
    for g in verdicts:
        print(f"  {g['goal']:<66} {g['ratio']:>8.2f}  {'met' if g['met'] else 'NOT met'}")
    print(f"# {sum(g['met'] for g in verdicts)} of {len(verdicts)} goals met")
    if args.json:
        Path(args.json).write_text(json.dumps({"sweeps": {str(n): rows for n, rows in sweeps.items()},
                                               "per_call": call, "goals": verdicts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
