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
    return top


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
        try:
            print(walkthrough(schedule, args.nbytes))
        except BrokenPipeError:  # piped into head: stop quietly
            sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
