"""Flat ring against hierarchical allreduce on a real cluster of namespaces on this machine (``ringlab cluster``),
on 2 and 4 nodes with links shaped to 1 Gbit/s, beside the cost model for the same machine; and the rate
between nodes against the shaped rate. Needs root (it brings the clusters up and takes them down).

    sudo python benchmarks/cluster_allreduce.py [--nodes 2,4] [--per-node 2] [--link 1gbit] [--record results/cluster_allreduce.md]

The links are veth pairs shaped by the kernel's token bucket (tc tbf) on one machine, not a real network;
the model's links are the declared rate (TCP's share of it) between nodes and the in-node bandwidth and
latency measured in the same run (``ringlab.lessons.lab05_scaling.realcluster`` does the work; lab 05 calls it).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

from ringlab.lessons.lab05_scaling import realcluster


def provenance(argv: list[str]) -> dict:
    """Where, when and with what this was measured."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return {"date": datetime.date.today().isoformat(), "command": " ".join(["python", *argv]), "commit": commit,
            "machine": f"{os.cpu_count()} cores ({cpu}), no GPU, Linux {platform.release()}",
            "load_average_at_start": os.getloadavg(),  # the cores are shared: other work moves the timings
            "links": "veth pairs shaped by the kernel's token bucket (tc tbf), namespaces on one machine: "
                     "not a real network"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", default="2,4", help="node counts, comma-separated (default 2,4)")
    parser.add_argument("--per-node", type=int, default=2, help="ranks per node (default 2)")
    parser.add_argument("--link", default="1gbit", help="each node's link rate in tc's words (default 1gbit)")
    parser.add_argument("--sizes", default="262144,4194304,16777216", help="bytes per rank, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--record", help="write a Markdown record: provenance, tables and the results as JSON "
                                         "(results/cluster_allreduce.md; lab 05 reads it)")
    args = parser.parse_args(argv)
    why = realcluster.why_not_here()
    if why:
        sys.exit(why)
    runs = []
    for nodes in [int(n) for n in args.nodes.split(",")]:
        result = realcluster.run(nodes, args.per_node, args.link, [int(s) for s in args.sizes.split(",")],
                                 args.repeats, name="bench")
        print("\n".join(realcluster.table(result)), flush=True)
        runs.append(result)
    if args.record:
        facts = provenance(sys.argv)
        text = ["# Flat ring against hierarchical allreduce on a cluster of namespaces on one machine", "",
                f"Measured {facts['date']} on {facts['machine']}, commit {facts['commit']}, load average "
                f"{', '.join(f'{v:.1f}' for v in facts['load_average_at_start'])} at the start (the cores are shared).",
                f"Command: `{facts['command']}`.", "",
                f"The links are {facts['links']}. Predicted: the cost model on the cluster's declared rate "
                "(TCP's share of it) between nodes, with the in-node bandwidth and latency measured in the same run.",
                "", "```", *["\n".join(realcluster.table(r)) for r in runs], "```", "",
                "The results, as `ringlab.lessons.lab05_scaling.realcluster.recorded()` reads them:", "",
                "```json", json.dumps({"provenance": facts, "runs": runs}, indent=1), "```", ""]
        with open(args.record, "w") as fh:
            fh.write("\n".join(text))
        print(f"# wrote {args.record}")


if __name__ == "__main__":
    main()
