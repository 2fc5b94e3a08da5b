"""How fast the cost model predicts big rings: 256, 1024 and 4096 ranks of ring allreduce.

    python benchmarks/predict_scale.py [--ranks 256,1024,4096]

Prints, per rank count, the transfers in the schedule, the seconds to build it and the seconds to
predict it on a uniform network (target on the 2-core machine: 1024 ranks predicted in under 1 s).
"""
from __future__ import annotations

import argparse
import time

import ringlab as rl


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", default="256,1024,4096", help="comma-separated rank counts")
    parser.add_argument("--algorithm", default="allreduce.ring")
    args = parser.parse_args(argv)
    print(f"# {args.algorithm}: {'ranks':>6} {'steps':>6} {'transfers':>10} {'build (s)':>10} {'predict (s)':>12}")
    for n in (int(v) for v in args.ranks.split(",")):
        start = time.perf_counter()
        schedule = rl.build(args.algorithm, n)
        built = time.perf_counter()
        prediction = rl.predict(schedule, 1 << 30, rl.topology.uniform(n, bandwidth=25e9, latency=5e-6))
        done = time.perf_counter()
        print(f"  {'':>{len(args.algorithm)}} {n:>6} {len(schedule.steps):>6} {schedule.num_transfers:>10} "
              f"{built - start:>10.3f} {done - built:>12.3f}   (predicted {prediction.seconds * 1e3:.1f} ms for 1 GiB)",
              flush=True)


if __name__ == "__main__":
    main()
