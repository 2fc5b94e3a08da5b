"""How fast, and in how much memory, the cost model predicts allreduce on thousands of GPUs.

    python benchmarks/predict_scale.py                          # 1k, 4k, 16k and 100k GPUs
    python benchmarks/predict_scale.py --ranks 1024 --explicit-limit 30 --json scale.json

For ring, double binary tree and hierarchical allreduce (8 ranks a node), a 1 GiB buffer on the published
cluster design (``rl.topology.cluster("h100", n // 8)``: 8 H100s a node on NVSwitch, a 400G NIC per
GPU, one InfiniBand fabric; ``--topology uniform`` for every pair alike at 50 GB/s and 5 us), each
prediction is run in a fresh Python process, which reports the seconds of building the topology and the
schedule and predicting (``predict``), of all it did from its start, import included (``in all``), the
processor seconds it used in all (``cpu``: what a busy machine's wall clock inflates, it does not), and its
peak resident memory (``ru_maxrss``: Python, numpy and ringlab included). The load average is printed
first: on a shared machine, read the wall clock beside it. The compact path (``rl.predict``'s default) runs at
every size; the explicit walk (``method="explicit"``, the reference) beside it where it fits in free
memory, stopped after ``--explicit-limit`` seconds (its time grows with the square of the ranks). The two
predictions are printed side by side where both finished. Issue 38's goals on the 2-core machine: under
2 s and 1 GB each at 100,000 GPUs, under 0.5 s at 16,384.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

ALGORITHMS = {"ring": ("allreduce.ring", {}), "dbtree": ("allreduce.dbtree", {}),
              "hierarchical": ("allreduce.hierarchical", {"local": 8})}
NBYTES = 1 << 30


def one(algorithm: str, nranks: int, method: str, topology: str) -> dict:
    """Time and memory of one prediction, in this (fresh) process."""
    start, cpu = time.perf_counter(), time.process_time()
    import ringlab as rl

    imported = time.perf_counter()
    machine = (rl.topology.cluster("h100", -(-nranks // 8)) if topology == "cluster"
               else rl.topology.uniform(nranks, bandwidth=50e9, latency=5e-6))
    name, options = ALGORITHMS[algorithm]
    schedule = rl.build(name, nranks, **options)
    built = time.perf_counter()
    try:
        prediction = rl.predict(schedule, NBYTES, machine, method=method)
    except MemoryError as err:
        return {"refused": str(err)}
    done = time.perf_counter()
    return {"import_s": imported - start, "build_s": built - imported, "predict_s": done - imported,
            "total_s": done - start, "cpu_s": time.process_time() - cpu,
            "peak_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "predicted_s": prediction.seconds, "steps": len(prediction.steps), "topology": machine.name}


def fresh(algorithm: str, nranks: int, method: str, topology: str, limit: float | None) -> dict:
    """:func:`one` in a new Python process, stopped after ``limit`` seconds."""
    command = [sys.executable, __file__, "--one", algorithm, str(nranks), method, topology]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return {"stopped": f"stopped after {limit:g} s"}
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def describe(row: dict) -> str:
    if "predict_s" not in row:
        return row.get("refused") or row.get("stopped") or row.get("failed", "")
    return (f"{row['predict_s']:7.3f} s {row['total_s']:7.3f} s {row['cpu_s']:7.3f} s {row['peak_MB']:7.0f} MB   "
            f"predicted {row['predicted_s'] * 1e3:.4f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="1024,4096,16384,100000", help="comma-separated rank counts")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS), help=f"of {', '.join(ALGORITHMS)}")
    parser.add_argument("--topology", choices=("cluster", "uniform"), default="cluster")
    parser.add_argument("--explicit-limit", type=float, default=60.0,
                        help="seconds after which the explicit walk is stopped (0: do not run it)")
    parser.add_argument("--json", help="write every row to this file")
    parser.add_argument("--one", nargs=4, metavar=("ALGORITHM", "RANKS", "METHOD", "TOPOLOGY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        algorithm, nranks, method, topology = args.one
        print(json.dumps(one(algorithm, int(nranks), method, topology)))
        return 0
    rows = []
    print(f"# 1 GiB allreduce predicted on {args.topology} topologies; each prediction in a fresh process "
          f"({sys.platform}, Python {sys.version.split()[0]}, {os.cpu_count()} cores, load average "
          f"{', '.join(f'{v:.1f}' for v in os.getloadavg())})")
    print(f"# {'algorithm':<13}{'ranks':>7}  {'method':<9}{'predict':>9} {'in all':>9} {'cpu':>9} {'peak':>10}")
    for nranks in (int(v) for v in args.ranks.split(",")):
        for algorithm in args.algorithms.split(","):
            for method in ("compact", "explicit"):
                if method == "explicit" and args.explicit_limit <= 0:
                    continue
                row = fresh(algorithm, nranks, "auto" if method == "compact" else "explicit", args.topology,
                            None if method == "compact" else args.explicit_limit)
                rows.append({"algorithm": algorithm, "ranks": nranks, "method": method, **row})
                print(f"  {algorithm:<13}{nranks:>7}  {method:<9}{describe(row)}", flush=True)
            pair = [r for r in rows[-2:] if "predicted_s" in r and (r["algorithm"], r["ranks"]) == (algorithm, nranks)]
            if len(pair) == 2:
                print(f"  {'':<13}{'':>7}  compact / explicit prediction: "
                      f"{pair[0]['predicted_s'] / pair[1]['predicted_s']:.12f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"nbytes": NBYTES, "topology": args.topology, "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
