"""``ringlab cluster up|status|run|down``: the command line of a cluster on this machine."""
from __future__ import annotations

import argparse
import math
import os
import sys

from .layout import DEFAULT_NAME, MAX_NODES, SLOTS, Layout, format_rate, parse_rate

ABOUT = ("A real cluster on this machine: each node is a Linux network namespace with its own host name, joined "
         "to the others by a link the kernel shapes to --link (tc's token bucket), with a head to launch jobs "
         "from and, with --slurm, Slurm. MPI between nodes runs over TCP through those links. Rates are "
         "kernel-shaped links on one machine, not a real network. Needs Linux, and root or (for an ordinary user, "
         "without Slurm) user namespaces.")


def seconds(text: str) -> float:
    """A number of seconds > 0 from the command line (NaN, inf, 0 and less are refused: no deadline at all, or one
    that has passed)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"a number of seconds > 0, got {text!r}")
    return value


def add_parser(commands) -> None:
    """Add ``cluster`` and its four subcommands to ``ringlab``'s subparsers."""
    top = commands.add_parser("cluster", help="a real cluster on this machine: nodes as namespaces, shaped links, "
                                              "Slurm (up, status, run, down)",
                              description=ABOUT, formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog="examples:\n"
                                     "  sudo ringlab cluster up --nodes 2 --link 1gbit --slurm\n"
                                     "  ringlab cluster run -n 4 -- python -m mpi4py mine.py\n"
                                     "  ringlab cluster run -- mpiexec -f /run/ringlab-lab/hosts -ppn 2 -n 4 "
                                     "python -m mpi4py mine.py\n"
                                     "  ringlab cluster run -- srun -N 2 --ntasks-per-node=2 python -m mpi4py "
                                     "mine.py\n"
                                     "  ringlab cluster status\n  sudo ringlab cluster down")
    verbs = top.add_subparsers(dest="verb", required=True, metavar="up|status|run|down")
    up = verbs.add_parser("up", help="build the cluster (again only if it differs or is broken)",
                          description=ABOUT + f" Writes a hostfile (node1, node2, ...; each node offers {SLOTS} "
                                              "slots) and, with --slurm, a partition 'ringlab' with every node.")
    up.add_argument("--nodes", type=int, default=2, metavar="N", help=f"how many nodes, 1 to {MAX_NODES} (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=0, metavar="G",
                    help="deal this machine's GPUs out to the nodes in blocks (node k sees its own through "
                         "CUDA_VISIBLE_DEVICES); default 0: none declared")
    up.add_argument("--link", default="1gbit", metavar="RATE", help="each node's link rate, both ways, in tc's words: 100mbit, "
                                                    "500mbit, 1gbit (default 1gbit)")
    up.add_argument("--latency", type=float, default=0.0, metavar="MS",
                    help="added one-way delay on each link, ms; needs the kernel's netem (default 0)")
    up.add_argument("--slurm", action="store_true", help="also run Slurm: slurmctld and munged in the head, a "
                                                         "slurmd on every node (Debian: slurm-wlm, munge)")
    verbs.add_parser("status", help="the nodes, their links and shaping, Slurm, and whatever is broken")
    run = verbs.add_parser("run", help="run a command in the head; with -n, an MPI job across the nodes",
                           description="Runs COMMAND in the cluster's head namespace with the cluster's "
                                       "environment (its ssh, so mpiexec reaches the nodes; MPI over TCP between "
                                       "nodes; SLURM_CONF). With -n, COMMAND becomes an MPI job of that many "
                                       "ranks in consecutive blocks per node: mpiexec -f HOSTFILE -ppn P, or srun "
                                       "when the cluster has Slurm.",
                           epilog="example: ringlab cluster run -n 4 -- python -m mpi4py mine.py")
    run.add_argument("-n", "--nranks", type=int, metavar="RANKS", help="ranks of an MPI job across the nodes")
    run.add_argument("--nodes", type=int, metavar="N", help="use only the first this many nodes (default: all)")
    run.add_argument("--launcher", choices=["mpiexec", "srun"], help="default: srun with Slurm, else mpiexec")
    run.add_argument("--timeout", type=seconds, metavar="S", help="end the command (and all it started) after this many s")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND...")
    verbs.add_parser("down", help="take the cluster down: its daemons, namespaces, links and files; leftovers "
                                  "of killed runs too")
    for verb in verbs.choices.values():
        verb.add_argument("--name", default=DEFAULT_NAME,
                          help=f"the cluster's name, so that several can coexist (default {DEFAULT_NAME})")


def main(args, argv: list[str]) -> int:
    """Carry out ``ringlab cluster VERB`` (``argv``: ringlab's arguments); errors are one line on stderr and exit
    status 2. An ordinary user's cluster lives in user namespaces (:mod:`.rootless`)."""
    from .control import ClusterError, down, run, status, up

    if sys.platform.startswith("linux") and os.geteuid() != 0:
        from .rootless import main as as_user

        return as_user(args, argv[argv.index("cluster") + 1:])

    try:
        if args.verb == "up":
            layout = Layout(args.name, args.nodes, parse_rate(args.link), args.latency, args.gpus_per_node, args.slurm)
            state = up(layout)
            how = "already up, left as it was" if state["already"] else f"up in {state['seconds']:g} s"
            print(f"ringlab cluster {layout.name}: {layout.nodes} nodes, links shaped to {format_rate(layout.link_bps)} "
                  f"by the kernel (not a real network), {how}")
            if state.get("cleaned"):
                print(f"  removed first what was there under its name (another cluster, or what a killed run left): "
                      f"{', '.join(state['cleaned'])}")
            print(f"  hostfile: {layout.hostfile}")
            if layout.slurm:
                print(f"  Slurm: partition ringlab (SLURM_CONF={layout.folder / 'slurm' / 'slurm.conf'})")
            print("  try: ringlab cluster run -n 4 -- python -m mpi4py mine.py")
        elif args.verb == "status":
            print("\n".join(status(args.name)))
        elif args.verb == "run":
            argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
            return run(args.name, argv, args.nranks, args.nodes, args.launcher, args.timeout)
        elif args.verb == "down":
            removed = down(args.name)
            what = removed["namespaces"]
            print(f"ringlab cluster {args.name}: down; removed {len(what)} namespaces"
                  f"{' (' + ', '.join(what) + ')' if what else ''}, ended {len(removed['processes'])} processes"
                  + (f", removed {removed['folder']}" if removed.get("folder") else ""))
    except KeyboardInterrupt:  # a run interrupted has ended its own processes and said so
        return 130
    except (ClusterError, ValueError, RuntimeError) as err:
        print(f"ringlab cluster {args.verb}: error: {err}", file=sys.stderr)
        return 2
    return 0
