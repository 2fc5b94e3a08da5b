"""The ``ringlab`` command (also ``python -m ringlab``)."""
from __future__ import annotations

import argparse
import inspect
import sys

from .algorithms import ALGORITHMS, build, options_of
from .units import parse_size


def _algorithm_help() -> str:
    lines = ["algorithms (options in brackets):"]
    for name in sorted(ALGORITHMS):
        doc = inspect.cleandoc(ALGORITHMS[name].__doc__ or "").split(". ")[0].split("\n")[0]
        opts = ", ".join(options_of(name))
        lines.append(f"  {name:<20} {('[' + opts + '] ') if opts else ''}{doc}")
    return "\n".join(lines)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="ringlab", description="ringlab: collective communication from scratch.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="walk through one collective, step by step, in the terminal",
        description="Print every step of a collective: who sends which chunk to whom, what every rank "
                    "holds afterwards (r0+r1+r2 = the sum of those ranks' inputs), then the bytes each "
                    "rank sends and receives.",
        epilog=_algorithm_help() + "\n\nexample:\n  ringlab demo --algorithm allreduce.ring -n 4",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("-a", "--algorithm", default="allreduce.ring", metavar="NAME",
                      help="a registered algorithm, listed below (default: allreduce.ring)")
    demo.add_argument("-n", "--nranks", type=int, default=4, help="number of ranks (default: 4)")
    demo.add_argument("--root", type=int, help="root rank, for algorithms that have one (default: 0)")
    demo.add_argument("--segments", type=int, help="pipeline segments, for the chain algorithms (default: n)")
    demo.add_argument("--servers", type=int, help="parameter-server shards M, for allreduce.ps (default: 1)")
    demo.add_argument("-b", "--bytes", type=_size, default="1M", dest="nbytes",
                      help="buffer size per rank for the traffic table, e.g. 4K, 64M (default: 1M)")
    predict = commands.add_parser(
        "predict", help="predict times with the alpha-beta cost model on topology presets",
        description="Predicted, not measured: the cost model on topologies built from published figures "
                    "(latencies assumed). By default one row per preset and algorithm.",
        epilog="presets: " + ", ".join(_presets()) + "\n\nexamples:\n"
               "  ringlab predict -a allreduce.ring,allreduce.tree -b 64M\n"
               "  ringlab predict -t dgx1-v100 -a allreduce.ring --steps\n"
               "  ringlab predict -t dgx1-v100 --crossover allreduce.tree,allreduce.ring\n"
               "  ringlab predict -t dgx1-p100 --rings",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    predict.add_argument("-t", "--topology", default="all", help="a preset, or 'all' (default)")
    predict.add_argument("-a", "--algorithm", default="allreduce.ring,allreduce.tree",
                         help="comma-separated algorithm names (default: allreduce.ring,allreduce.tree)")
    predict.add_argument("-b", "--bytes", type=_size, default="64M", dest="nbytes", help="buffer per rank (default 64M)")
    predict.add_argument("--steps", action="store_true", help="per-step breakdown (one topology, one algorithm)")
    predict.add_argument("--crossover", metavar="A,B", help="the size above which B is predicted faster than A")
    predict.add_argument("--rings", action="store_true", help="the best ring order against the plain 0..n-1")
    return top


def _presets() -> list[str]:
    from .topology import preset_names
    return preset_names()


def _predict(args) -> None:
    from .costmodel import crossover, predict, whatif
    from .rings import ring_report
    from .topology import preset
    from .units import format_bytes

    names = _presets() if args.topology == "all" else [args.topology]
    topologies = [preset(name) for name in names]
    algorithms = [a for a in args.algorithm.split(",") if a]
    print(f"# predicted by the cost model (not measured); {topologies[0].source if len(names) == 1 else 'published figures'}; "
          "latencies assumed")
    if args.crossover:
        first, second = args.crossover.split(",")
        for topo in topologies:
            size = crossover(first, second, topo)
            said = "never, up to 16 GiB" if size is None else f"from {format_bytes(size)} up"
            print(f"  {topo.name:<18} {second} beats {first}: {said}")
    elif args.rings:
        for topo in topologies:
            r = ring_report(topo, args.nbytes)
            print(f"  {topo.name:<18} best ring {r['best_order']}: plain 0..n-1 is {r['slowdown_of_plain']:.2f}x slower "
                  f"for allreduce.ring of {format_bytes(args.nbytes)}")
    elif args.steps:
        p = predict(build(algorithms[0], topologies[0].nranks), args.nbytes, topologies[0])
        print(f"  {'step':>4} {'latency us':>11} {'transfer us':>12} {'reduce us':>10}  bottleneck")
        for i, row in enumerate(p.steps):
            print(f"  {i:>4} {row['latency'] * 1e6:>11.2f} {row['transfer'] * 1e6:>12.2f} {row['reduce'] * 1e6:>10.2f}"
                  f"  {p.bottleneck_link(i)}")
        print(f"  total {p.seconds * 1e6:.1f} us")
    else:
        print(f"  {'topology':<18} {'ranks':>5} {'algorithm':<18} {'time (us)':>11} {'busbw (GB/s)':>13}  bottleneck")
        for row in whatif(algorithms, args.nbytes, topologies):
            print(f"  {row['topology']:<18} {row['nranks']:>5} {row['algorithm']:<18} {row['seconds'] * 1e6:>11.1f} "
                  f"{row['busbw'] / 1e9:>13.2f}  {row['bottleneck']}")


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    if args.command == "demo":
        from .demo import walkthrough

        options = {k: getattr(args, k) for k in ("root", "segments", "servers") if getattr(args, k) is not None}
        try:
            schedule = build(args.algorithm, args.nranks, **options)
        except ValueError as err:
            top.exit(2, f"ringlab demo: error: {err}\n")
        _quietly(lambda: print(walkthrough(schedule, args.nbytes)))
    elif args.command == "predict":
        try:
            _quietly(lambda: _predict(args))
        except ValueError as err:
            top.exit(2, f"ringlab predict: error: {err}\n")
    return 0


def _quietly(show) -> None:
    """Run ``show``; stop without a traceback when the output is piped into head and closed."""
    try:
        show()
    except BrokenPipeError:
        sys.stderr.close()


if __name__ == "__main__":
    sys.exit(main())
