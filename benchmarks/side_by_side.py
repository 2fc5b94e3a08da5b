"""Two checkouts of ringlab measured side by side in one run: did a change make ringlab slower against MPI?

    python benchmarks/side_by_side.py BEFORE AFTER                  # e.g. a worktree of main, and this checkout
    python benchmarks/side_by_side.py BEFORE AFTER --rounds 8 -- -n 3 -e 4M

Each round runs ``ringlab bench -n 2 -a ring,mpi`` (or the bench arguments after ``--``) once from each
checkout, before then after, then after then before, and so on, so that a machine that drifts (another
process, a warming cache) weighs on both alike. From each run it takes, size by size, ringlab's time over MPI's own
Allreduce's time in that same run: a ratio that the machine's speed at the moment mostly cancels out of. Per
checkout and size it keeps the median over the rounds, and prints after / before: 1.00 is the same speed
against MPI, above 1 slower. Judge a change by the geometric mean over the sizes: one size can move by tens of
percent between two builds for where its buffers happen to land in memory (seen here: ringlab's 512 KiB ratio
went from 1.6 to 1.15 when a line was added to a function that size never runs, and a receive buffer placed at
64 bytes into a page, instead of 0 or 16, made 256 KiB 1.4x slower). Every result the bench times is checked against MPI's (its ``#wrong`` column);
a run with a wrong result stops this one.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = ["-n", "2", "-a", "ring,mpi"]


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("before", type=Path, help="a checkout of ringlab (its root folder)")
    p.add_argument("after", type=Path, help="another checkout of ringlab")
    p.add_argument("--rounds", type=int, default=6, help="runs of each checkout (default 6)")
    p.add_argument("--json", metavar="FILE", help="also write every run's times and ratios, and the summary, as JSON")
    p.epilog = "after --: ringlab bench's arguments (default: -n 2 -a ring,mpi)"
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    args.bench = argv[split + 1:]
    for folder in (args.before, args.after):
        if not (folder / "ringlab" / "__init__.py").exists():
            p.error(f"{folder} is not a checkout of ringlab (no ringlab/__init__.py)")
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    return args


def bench_once(checkout: Path, bench: list[str]) -> dict[tuple[int, str], float]:
    """One ``ringlab bench`` from ``checkout``: {(bytes, algorithm): seconds}; stops on a wrong result."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "bench.json"
        env = {**os.environ, "PYTHONPATH": str(checkout.resolve())}
        done = subprocess.run([sys.executable, "-m", "ringlab", "bench", *bench, "--json", str(out)], cwd=checkout,
                              env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not out.exists():
            raise SystemExit(f"ringlab bench from {checkout} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        rows = json.loads(out.read_text())["rows"]
    wrong = [r for r in rows if r["wrong"]]
    if wrong:
        raise SystemExit(f"ringlab bench from {checkout} returned wrong results: {wrong[:3]}")
    return {(r["bytes"], r["algorithm"]): r["time_s"] for r in rows}


def ratios(times: dict[tuple[int, str], float], reference: str = "mpi") -> dict[tuple[int, str], float]:
    """Each algorithm's time over ``reference``'s at the same size, in one run."""
    return {(size, name): t / times[(size, reference)] for (size, name), t in times.items()
            if name != reference and (size, reference) in times}


def main(argv=None) -> None:
    args = arguments(argv)
    bench = args.bench or BENCH
    checkouts = {"before": args.before, "after": args.after}
    seen: dict[str, list[dict]] = {"before": [], "after": []}
    timed: dict[str, list[dict]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        for which in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
            timed[which].append(bench_once(checkouts[which], bench))
            seen[which].append(ratios(timed[which][-1]))
        print(f"round {round_ + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    keys = sorted(set.intersection(*(set(r) for runs in seen.values() for r in runs)))
    rows, changes = [], []
    for key in keys:
        before = statistics.median(r[key] for r in seen["before"])
        after = statistics.median(r[key] for r in seen["after"])
        changes.append(after / before)
        rows.append({"bytes": key[0], "algorithm": key[1], "before": before, "after": after, "change": after / before})
    print(f"{'bytes':>10} {'algorithm':>9} {'before':>8} {'after':>8} {'after/before':>12}   (time over MPI's, medians "
          f"of {args.rounds} runs each)")
    for r in rows:
        print(f"{r['bytes']:>10} {r['algorithm']:>9} {r['before']:>8.3f} {r['after']:>8.3f} {r['change']:>12.3f}")
    mean = math.exp(statistics.fmean(math.log(c) for c in changes))
    print(f"# geometric mean of after/before over {len(changes)} sizes: {mean:.3f} "
          f"({'slower' if mean > 1 else 'faster'} by {abs(mean - 1):.1%}); from {min(changes):.3f} to "
          f"{max(changes):.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"bench": bench, "rounds": args.rounds, "rows": rows,
                                               "geometric_mean_change": mean,
                                               "runs": {k: [[[*key, v] for key, v in run.items()] for run in runs]
                                                        for k, runs in seen.items()},
                                               "seconds": {k: [[[*key, v] for key, v in run.items()] for run in runs]
                                                           for k, runs in timed.items()}}, indent=1))


if __name__ == "__main__":
    main()
