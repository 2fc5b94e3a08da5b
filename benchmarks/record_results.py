"""Record this GPU machine's measurements under results/, for the labs to show on machines without one.

    python benchmarks/record_results.py                 # on a machine with a GPU: writes results/<date>_<gpu>/
    python benchmarks/record_results.py --out /tmp/r    # somewhere else

It runs, each as its own MPI job with a time limit:
  1. ``ringlab bandwidth -n 2 --json bandwidth.json``: host<->device (pinned and pageable, one way and
     both ways), device copies, small-transfer latency, the peer matrix when there are 2+ GPUs,
     plus the CPU copy rate and MPI ping-pong;
  2. ``ringlab bench --gpu`` for allreduce, reduce-scatter and allgather on 2 ranks (and on as many
     ranks as --ranks lists), ringlab's ring against MPI's own collective, plus NCCL and
     torch.distributed for allreduce when there is one GPU per rank (NCCL refuses two ranks on one GPU);
  3. ``ringlab bench --gpu -a allreduce.ring,...`` against the host-staged transport, so labs can show
     staged against direct.
Every file carries the machine's description (GPUs, driver, MPI, versions, command, date). Commit
the folder: ``ringlab doctor`` and labs 00, 01 and 05 find it there.

Without a GPU it stops, saying so, unless --allow-cpu is given (then the same runs happen on numpy
buffers: useful to try the script, not to commit, since the labs measure the CPU themselves).
"""
from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="folder to write into (default: results/<date>_<gpu name>)")
    p.add_argument("--ranks", default="2", help="comma-separated rank counts for the bench runs (default 2)")
    p.add_argument("-b", "--min-bytes", default="8", help="smallest bench size (default 8)")
    p.add_argument("-e", "--max-bytes", default="256M", help="largest bench size (default 256M)")
    p.add_argument("-f", "--factor", default="4", help="bench size multiplier (default 4)")
    p.add_argument("--iters", default="20", help="timed iterations per size (default 20)")
    p.add_argument("--timeout", type=float, default=540, help="seconds each run may take (default 540)")
    p.add_argument("--allow-cpu", action="store_true", help="run without a GPU (numpy buffers; not for committing)")
    return p.parse_args(argv)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"


def plan(gpus: int, ranks: list[int], sizes: list[str], iters: str, out: Path) -> list[tuple[str, list[str]]]:
    """(file name, ringlab arguments) for every run."""
    gpu = ["--gpu"] if gpus else []
    runs = [("bandwidth.json", ["bandwidth", "-n", "2"])]
    for n in ranks:
        for collective in ("allreduce", "reduce_scatter", "allgather"):
            algorithms = f"{collective}.ring,mpi" + (",nccl,torch" if gpus >= n and collective == "allreduce" else "")
            runs.append((f"bench-{collective}-{n}ranks.json",
                         ["bench", "-n", str(n), "-c", collective, "-a", algorithms, *sizes, "--iters", iters, *gpu]))
        if gpus:
            runs.append((f"bench-allreduce-{n}ranks-staged.json",
                         ["bench", "-n", str(n), "-a", "allreduce.ring,mpi", *sizes, "--iters", iters, "--gpu",
                          "--transport", "host"]))
    return [(name, [*args, "--json", str(out / name)]) for name, args in runs]


def main(argv=None) -> int:
    args = arguments(argv)
    from ringlab.mpi.devices import gpu_count
    from ringlab.measure.machine import describe_machine

    gpus = gpu_count()
    if not gpus and not args.allow_cpu:
        print("record_results: no GPU here (cupy sees none). The labs measure CPUs themselves; recorded results "
              "are for GPU machines. Use --allow-cpu to try the script anyway.", file=sys.stderr)
        return 2
    info = describe_machine()
    name = info["gpus"][0].get("name", "gpu") if info["gpus"] else "cpu"
    mps = "-mps" if info.get("mps") and max(int(r) for r in args.ranks.split(",") if r) > gpus else ""
    out = Path(args.out) if args.out else ROOT / "results" / f"{datetime.date.today():%Y-%m-%d}_{slug(name)}{mps}"
    out.mkdir(parents=True, exist_ok=True)
    ranks = [int(r) for r in args.ranks.split(",") if r]
    sizes = ["-b", args.min_bytes, "-e", args.max_bytes, "-f", args.factor]
    failed = []
    for filename, ringlab_args in plan(gpus, ranks, sizes, args.iters, out):
        command = [sys.executable, "-m", "ringlab", *ringlab_args]
        print(f"\n$ ringlab {' '.join(ringlab_args)}", flush=True)
        try:
            done = subprocess.run(command, timeout=args.timeout)
            ok = done.returncode == 0
        except subprocess.TimeoutExpired:
            print(f"record_results: {filename} took longer than {args.timeout:.0f} s; skipped", file=sys.stderr)
            ok = False
        if not ok:
            failed.append(filename)
    print(f"\n# wrote {out}" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
