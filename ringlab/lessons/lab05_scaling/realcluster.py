"""Lab 05 on a real cluster on this machine: nodes as namespaces joined by kernel-shaped links (``ringlab cluster``).

Where the learner's machine allows it (Linux, root, iproute2), :func:`run` brings up a cluster of a few nodes,
measures across it the point-to-point rate between nodes and the flat ring against the hierarchical
allreduce, and takes the cluster down again; beside every figure is the cost model's prediction for the same
machine, built from the link rate the cluster declared. Where it does not, :func:`why_not_here` says why and
:func:`recorded` gives what was measured on this project's machine (``results/cluster_allreduce.md``).
The links' rates are the kernel's shaping of veth pairs on one machine, not a real network, and say so.

Run as ``python -m mpi4py -m ringlab.lessons.lab05_scaling.realcluster OUT [SIZES]`` on every rank of a job on
the cluster, it measures and writes OUT (JSON).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from ...algorithms import build
from ...predict.costmodel import predict
from ...schedule import bus_factor
from ...topology.graph import Link, Topology
from .simnodes import ALGORITHMS, checked_and_timed

TCP_SHARE = 1448 / 1514  # TCP payload per Ethernet frame at MTU 1500 (timestamps on): what the shaped bytes carry
RESULTS = Path(__file__).resolve().parents[3] / "results" / "cluster_allreduce.md"
LABEL = "measured on kernel-shaped links between namespaces on one machine, not a real network"


def cluster_topology(nodes: int, per_node: int, link_bps: float, in_node_Bps: float, alpha: float) -> Topology:
    """The cost model's picture of the cluster: each node's ranks share memory (``in_node_Bps``), and each node
    has one link of ``link_bps`` (bits/s, both ways at once) to the switch, of which TCP carries
    :data:`TCP_SHARE`; ``alpha`` seconds per message."""
    ranks = tuple(f"node{g + 1}.rank{r}" for g in range(nodes) for r in range(per_node))
    links = [Link(rank, rank.split(".")[0], in_node_Bps, 0.0, "shm") for rank in ranks]
    links += [Link(f"node{g + 1}", "switch", link_bps / 8, alpha / 2, "ethernet", efficiency=TCP_SHARE)
              for g in range(nodes)]
    return Topology(f"{nodes} nodes x {per_node} ranks, {link_bps / 1e9:g} Gbit/s links", ranks, tuple(links),
                    source="the cluster's declared link rate; in-node bandwidth and latency measured here")


def predicted(nodes: int, per_node: int, link_bps: float, in_node_Bps: float, alpha: float,
              sizes: list[int]) -> list[dict]:
    """The flat ring and the hierarchical allreduce at each size (bytes per rank, float64), predicted."""
    topology = cluster_topology(nodes, per_node, link_bps, in_node_Bps, alpha)
    n, rows = nodes * per_node, []
    for algorithm in ALGORITHMS:
        schedule = build(f"allreduce.{algorithm}", n, **({"local": per_node} if algorithm == "hierarchical" else {}))
        for nbytes in sizes:
            seconds = predict(schedule, nbytes, topology, itemsize=8).seconds
            rows.append({"algorithm": algorithm, "bytes": nbytes, "time_s": seconds,
                         "busbw_Bps": nbytes / seconds * bus_factor("allreduce", n)})
    return rows


def _one_way(comm, src: int, dst: int, nbytes: int, repeats: int) -> float:
    """Seconds for ``nbytes`` from ``src`` to ``dst`` (median of ``repeats`` sends, each acknowledged)."""
    from mpi4py import MPI

    rank, buf, ack = comm.Get_rank(), np.zeros(max(nbytes, 1), np.uint8), np.zeros(1, np.uint8)
    times = []
    for _ in range(repeats + 1):  # the first, untimed, opens the connection
        comm.Barrier()
        start = MPI.Wtime()
        if rank == src:
            comm.Send(buf[:nbytes], dst)
            comm.Recv(ack, dst)
        elif rank == dst:
            comm.Recv(buf[:nbytes], src)
            comm.Send(ack, src)
        times.append(MPI.Wtime() - start)
    return float(comm.bcast(np.median(times[1:]) if rank == src else None, root=src))


def measure(sizes: list[int], repeats: int = 5, comm=None, timeout: float = 120) -> dict:
    """Call on every rank of a job across the cluster's nodes (ranks in node order): the links (rate between
    nodes, in-node bandwidth, small-message latency), then each algorithm at each size, checked against MPI's
    Allreduce, the median of ``repeats`` (slowest rank's time)."""
    from mpi4py import MPI

    from ...mpi.nodes import node_ids, ranks_per_node

    comm = comm or MPI.COMM_WORLD
    n, ids, per_node = comm.Get_size(), node_ids(comm), ranks_per_node(comm)
    other = per_node  # rank 0's counterpart on the next node
    big = 64 << 20
    links = {"between_nodes_Bps": big / _one_way(comm, 0, other, big, 3),
             "in_node_Bps": (big / _one_way(comm, 0, 1, big, 3)) if per_node > 1 else None,
             "latency_s": _one_way(comm, 0, other, 8, 20) / 2}
    rows = checked_and_timed(sizes, repeats, comm, timeout, "across the nodes ")
    return {"nodes": max(ids) + 1, "per_node": per_node, "ranks": n, "links": links, "measured": rows}


def why_not_here() -> str | None:
    """Why this machine cannot hold a cluster of namespaces (None: it can)."""
    from ...cluster.control import missing
    from ...cluster.layout import Layout

    lacking = missing(Layout("lab05"))
    return ("this machine cannot hold a cluster of namespaces: it lacks " + "; and ".join(lacking)) if lacking else None


def run(nodes: int = 2, per_node: int = 2, link: str = "1gbit", sizes=(1 << 18, 1 << 22), repeats: int = 3,
        name: str = "lab05", timeout: float = 300) -> dict:
    """Bring up a cluster of ``nodes`` (links shaped to ``link``), measure on it with ``per_node`` ranks a node,
    take it down; the measurement with the model's prediction beside it (:func:`with_prediction`)."""
    from ...cluster.layout import parse_rate

    ringlab = [sys.executable, "-m", "ringlab", "cluster"]
    with _one_at_a_time(name):
        subprocess.run([*ringlab, "up", "--name", name, "--nodes", str(nodes), "--link", link], check=True,
                       capture_output=True, text=True)
        try:
            result = _measure(ringlab, name, nodes * per_node, sizes, repeats, timeout)
        finally:
            subprocess.run([*ringlab, "down", "--name", name], capture_output=True)
    return with_prediction(result, parse_rate(link))


@contextlib.contextmanager
def _one_at_a_time(name: str):
    """Hold a lock on the cluster ``name`` of this user: two copies of the lab run at once (two kernels, the
    notebook and its solution under test) take turns instead of bringing the same cluster up twice."""
    import fcntl

    from ...cluster.layout import open_private

    path = Path(tempfile.gettempdir()) / f"ringlab-cluster-{name}-{os.getuid()}.lock"
    lock = open_private(path)  # in a folder all may write: never through a symbolic link, nor another user's file
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


def _measure(ringlab: list[str], name: str, n: int, sizes, repeats: int, timeout: float) -> dict:
    """Run this module on ``n`` ranks of the cluster ``name``; what rank 0 wrote."""
    with tempfile.TemporaryDirectory(prefix="ringlab-lab05-") as folder:
        out = Path(folder) / "measured.json"
        done = subprocess.run([*ringlab, "run", "--name", name, "-n", str(n), "--timeout", str(timeout), "--",
                               sys.executable, "-m", "mpi4py", "-m", __name__, str(out), ",".join(map(str, sizes)),
                               str(repeats)], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the measurement on the cluster failed: {done.stderr[-2000:]}")
        return json.loads(out.read_text())


def with_prediction(result: dict, link_bps: float) -> dict:
    """``result`` with the shaped rate, what TCP can carry of it, and the cost model's rows beside the measured."""
    links, sizes = result["links"], sorted({r["bytes"] for r in result["measured"]})
    in_node = links["in_node_Bps"] or links["between_nodes_Bps"]
    return {**result, "link_bps": link_bps, "tcp_ceiling_Bps": link_bps / 8 * TCP_SHARE, "label": LABEL,
            "predicted": predicted(result["nodes"], result["per_node"], link_bps, in_node, links["latency_s"], sizes)}


def recorded(path: Path = RESULTS) -> dict:
    """What was measured on this project's machine: ``provenance`` and ``runs``, from the JSON block of the record
    ``benchmarks/cluster_allreduce.py --record`` wrote, for machines that cannot run it."""
    text = path.read_text()
    return json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])


def here_or_recorded(nodes: int = 2, per_node: int = 2, link: str = "1gbit") -> tuple[dict, str]:
    """Measured now on a cluster brought up for it where this machine allows, else the record of this project's
    machine; and a sentence saying which, and why."""
    why = why_not_here()
    if why is None:
        return run(nodes, per_node, link), (f"Measured now, on {nodes} nodes of namespaces on this machine "
                                            f"(brought up for this cell and taken down again).")
    record = recorded()
    facts = record["provenance"]
    return record["runs"][0], (f"Not measured here: {why}. Shown instead: the record of {facts['date']}, on "
                               f"{facts['machine']} (`{facts['command']}`).")


def table(result: dict) -> list[str]:
    """Lines: the rate between nodes against the shaped rate, then each size's measured and predicted ratio."""
    links = result["links"]
    rate = links["between_nodes_Bps"]
    lines = [f"{result['nodes']} nodes x {result['per_node']} ranks, links shaped to {result['link_bps'] / 1e9:g} "
             f"Gbit/s ({result['label']})",
             f"  between nodes: {rate * 8 / 1e6:.0f} Mbit/s measured = {rate * 8 / result['link_bps']:.3f} of the "
             f"shaped rate ({TCP_SHARE:.3f} is what TCP can carry of it)",
             f"  {'size':>9} {'ring ms':>9} {'hier ms':>9} {'ring/hier measured':>19} {'predicted':>10}"]
    for nbytes in sorted({r["bytes"] for r in result["measured"]}):
        def at(rows, algorithm):
            return next(r["time_s"] for r in rows if r["algorithm"] == algorithm and r["bytes"] == nbytes)
        got = at(result["measured"], "ring") / at(result["measured"], "hierarchical")
        model = at(result["predicted"], "ring") / at(result["predicted"], "hierarchical")
        lines.append(f"  {nbytes / 2**20:>7.2f}Mi {at(result['measured'], 'ring') * 1e3:>9.1f} "
                     f"{at(result['measured'], 'hierarchical') * 1e3:>9.1f} {got:>19.2f} {model:>10.2f}")
    return lines


if __name__ == "__main__":  # on every rank: OUT [SIZES [REPEATS]]
    from mpi4py import MPI

    sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [1 << 18, 1 << 22]
    result = measure(sizes, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    if MPI.COMM_WORLD.Get_rank() == 0:
        Path(sys.argv[1]).write_text(json.dumps(result, indent=1))
