"""Lab 05's two nodes on one machine: the flat ring against the hierarchical allreduce, measured on
simulated nodes with a slowed link between them, and predicted by the cost model for the same links.

The nodes are simulated (``ringlab.mpi.nodes``): every rank runs here, and the link between the nodes is
the emulated machine ``nodes:RANKS:B:0`` (:mod:`ringlab.mpi.emulate`), timed in virtual time. Between the
nodes each message takes its bytes' time on its rank's port of B; inside a node a message costs nothing on
the virtual clocks but this CPU's work of landing it (an addition, counted as the CPU time it took). B is
chosen in the same ratio to the bandwidth fitted here (where the fit found none, to the ring's measured
busbw: :func:`simulated_link_gbps`) as an H100's NVLink to its 400 Gbit/s network card.
Measured figures are this code and data on those modelled links; they say nothing about InfiniBand itself.
"""
from __future__ import annotations

import numpy as np

from ...algorithms import build
from ...predict.costmodel import predict
from ...schedule import bus_factor
from ...topology import from_spec
from ...topology.presets import H100_NVLINK, IB_400G

ALGORITHMS = ("ring", "hierarchical")


def nvlink_to_nic() -> float:
    """How many times an H100's NVLink bandwidth (per GPU, one way) is its NDR network card's (public figures)."""
    return H100_NVLINK / IB_400G


def simulated_link_gbps(fitted, nranks: int) -> tuple[float, str]:
    """B for the simulated nodes, in GB/s, and a sentence saying where it came from: the bandwidth ``fitted`` to
    this machine's ring allreduce on ``nranks`` ranks, over :func:`nvlink_to_nic`; or, where that fit found no
    finite bandwidth (on a busy machine the times need not grow with size, and the best fit then has no cost per
    byte), the ring's measured busbw at the largest size it was fitted to, over the same ratio. Either is finite: a
    slowed link must have a rate."""
    ratio = nvlink_to_nic()
    if 0 < fitted.bandwidth < np.inf:
        gbps = float(fitted.bandwidth / ratio / 1e9)
        return gbps, (f"B = the bandwidth fitted above, {fitted.bandwidth / 1e9:.2f} GB/s, / {ratio:.0f} = "
                      f"{gbps:.3g} GB/s")
    if not len(fitted.sizes):
        raise ValueError("the fit holds no measurements to take a bandwidth from")
    largest = int(np.argmax(fitted.sizes))
    size, seconds = float(fitted.sizes[largest]), float(fitted.measured[largest])
    busbw = size / seconds * bus_factor("allreduce", nranks)
    gbps = float(busbw / ratio / 1e9)
    return gbps, (f"The fit above found no finite bandwidth (its times did not grow with size), so B = the ring's "
                  f"measured busbw at {size / 2**20:g} MiB, {busbw / 1e9:.2f} GB/s, / {ratio:.0f} = {gbps:.3g} GB/s")


def measure_on_simulated_nodes(sizes: list[int], per_node: int, link_gbps: float, repeats: int = 5,
                               comm=None, timeout: float = 60) -> list[dict]:
    """Call on every rank: the flat ring and the hierarchical allreduce at each size (bytes of float64
    per rank) on nodes of ``per_node`` simulated ranks with a ``link_gbps`` link between them (the emulated
    machine ``nodes:per_node:link_gbps:0``, in virtual time). Every result is checked against MPI's Allreduce
    first; then the median of ``repeats`` timed calls (the slowest rank's virtual time, from a barrier that
    sets the clocks alike), with this machine's wall time beside. Rows ``algorithm, bytes, time_s, busbw_Bps,
    wall_time_s``, on every rank."""
    from mpi4py import MPI

    from ...mpi.nodes import simulated_nodes

    comm = comm or MPI.COMM_WORLD
    with simulated_nodes(per_node, link_gbps):
        return checked_and_timed(sizes, repeats, comm, timeout, "on simulated nodes ")


def measure_here(sizes: list[int], per_node: int, link_gbps: float, nranks: int = 4, repeats: int = 5,
                 timeout: float = 600) -> list[dict]:
    """:func:`measure_on_simulated_nodes` on ``nranks`` ranks of this machine, as one MPI job (mpiexec) that
    is ended after ``timeout`` seconds: rank 0's rows. A RuntimeError with what the ranks printed if the
    job fails (a rank whose result differs from MPI's, or a step past its deadline, ends every rank)."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from ...cluster.launch import run_mpi

    if per_node < 1 or nranks % per_node or nranks // per_node < 2:
        raise ValueError(f"{nranks} ranks do not make 2 or more simulated nodes of {per_node}")
    if not link_gbps > 0:
        raise ValueError(f"link_gbps must be a bandwidth in GB/s > 0, got {link_gbps!r}")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "rows.json"
        arguments = json.dumps({"sizes": list(map(int, sizes)), "per_node": per_node, "link_gbps": float(link_gbps),
                                "repeats": repeats, "out": str(out)})
        try:
            done = run_mpi(nranks, ["-m", __name__, arguments], timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the measurement on {nranks} ranks in simulated nodes took longer than {timeout:g} s "
                               "and was ended; try fewer or smaller sizes, or a longer timeout (the link's speed does "
                               "not change how long it takes here: its time is virtual)") from None
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the measurement on {nranks} ranks in simulated nodes failed (exit status "
                               f"{done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
        return json.loads(out.read_text())


def checked_and_timed(sizes: list[int], repeats: int, comm, timeout: float, where: str = "") -> list[dict]:
    """Call on every rank: each of :data:`ALGORITHMS` at each size (bytes of float64 per rank), checked
    against MPI's Allreduce (an AssertionError naming the rank if not), then the median of ``repeats``
    timed calls, each from a barrier, the slowest rank's time (virtual on an emulated machine, with this
    machine's own beside as ``wall_time_s``). Rows ``algorithm, bytes, time_s, busbw_Bps, wall_time_s``."""
    from ...measure.timing import time_collective
    from ...mpi import collectives

    n, rows = comm.Get_size(), []
    for nbytes in sizes:
        x = np.random.default_rng(comm.Get_rank()).standard_normal(max(nbytes // 8, 1))
        want = np.empty_like(x)
        comm.Allreduce(x, want)
        for algorithm in ALGORITHMS:
            if not np.allclose(collectives.allreduce(x, algorithm, comm=comm, timeout=timeout), want):
                raise AssertionError(f"rank {comm.Get_rank()}: {algorithm} {where}differs from MPI's Allreduce")
            walls: list[float] = []
            seconds = time_collective(lambda: collectives.allreduce(x, algorithm, comm=comm, timeout=timeout), comm,
                                      warmup=0, iters=repeats, walls=walls)
            rows.append({"algorithm": algorithm, "bytes": x.nbytes, "time_s": seconds,
                         "busbw_Bps": x.nbytes / seconds * bus_factor("allreduce", n),
                         "wall_time_s": walls[0] if walls else seconds})
    return rows


def simulated_spec(per_node: int, link_Bps: float) -> str:
    """The emulated machine that simulated nodes of ``per_node`` ranks with a ``link_Bps`` link between them run on
    (``RINGLAB_NODE_LINK_GBPS``: free inside a node, a port of that rate per rank between nodes, no latency)."""
    return f"nodes:{per_node}:{float(link_Bps) / 1e9!r}:0"  # (a numpy scalar's repr is no number here)


def predicted_on_simulated(sizes: list[int], nranks: int, per_node: int, link_Bps: float) -> list[dict]:
    """Rows like :func:`measure_on_simulated_nodes`', predicted by the cost model on the same emulated machine
    (:func:`simulated_spec`): what its links alone take, without this CPU's additions."""
    topology, _ = from_spec(simulated_spec(per_node, link_Bps), nranks)
    rows = []
    for algorithm in ALGORITHMS:
        options = {"local": per_node} if algorithm == "hierarchical" else {}
        schedule = build(f"allreduce.{algorithm}", nranks, **options)
        for nbytes in sizes:
            seconds = predict(schedule, nbytes, topology, itemsize=8).seconds
            rows.append({"algorithm": algorithm, "bytes": nbytes, "time_s": seconds,
                         "busbw_Bps": nbytes / seconds * bus_factor("allreduce", nranks)})
    return rows


def describe_simulated(measured: list[dict], predicted: list[dict], link_gbps: float, nranks: int,
                       per_node: int) -> str:
    """The largest size's measured and predicted ratio, flat ring time over hierarchical time, worded,
    with the bytes each sends across the slow link (from the schedules' closed forms)."""
    def at(rows, algorithm, nbytes):
        return next(r["time_s"] for r in rows if r["algorithm"] == algorithm and r["bytes"] == nbytes)

    nbytes = max(r["bytes"] for r in measured)
    nodes = -(-nranks // per_node)
    ring_share, hier_share = 2 * (nranks - 1) / nranks, 2 * (nodes - 1) / nranks
    got = at(measured, "ring", nbytes) / at(measured, "hierarchical", nbytes)
    model = at(predicted, "ring", nbytes) / at(predicted, "hierarchical", nbytes)
    verdict = ("the hierarchical allreduce was faster, as predicted" if got > 1 and model > 1 else
               "the hierarchical allreduce was not faster, though the model predicts it would be" if model > 1 else
               "the model itself predicts no gain here")
    close = abs(np.log(got / model)) < np.log(1.5)
    walls = {r["algorithm"]: r["wall_time_s"] for r in measured if r["bytes"] == nbytes and "wall_time_s" in r}
    return (f"At {nbytes / 2**20:.2f} MiB per rank, with the link between the simulated nodes slowed to "
            f"{link_gbps:.3g} GB/s, the flat ring took {at(measured, 'ring', nbytes) * 1e3:.1f} ms and the hierarchical "
            f"allreduce {at(measured, 'hierarchical', nbytes) * 1e3:.1f} ms (measured here, in virtual time): {got:.2f}x; "
            f"the cost model predicted {model:.2f}x for the same links. So {verdict}"
            + (", and the measured ratio is within 1.5x of the predicted one." if close else
               f"; the measured ratio is {'above' if got > model else 'below'} the predicted one by more than 1.5x "
               "(this CPU's additions, counted as the CPU time they took, are not in the model).")
            + (f" This machine took {walls['ring'] * 1e3:.1f} and {walls['hierarchical'] * 1e3:.1f} ms of wall time to "
               "run the two calls: nobody waits for the slowed link." if len(walls) == 2 else "")
            + f" Across the slow link the flat ring's boundary ranks each send 2(n-1)/n = {ring_share:.2f} of the "
              f"buffer, one chunk every step; in the hierarchy every rank sends 2(G-1)/n = {hier_share:.2f} of it, "
              f"with G = {nodes} nodes.")


def side_by_side(measured: list[dict], predicted: list[dict], link_gbps: float, nranks: int, per_node: int,
                 h100: dict[str, list[dict]]) -> list[dict]:
    """Rows for ``table``: how much faster the hierarchy is than the flat ring (flat time over hierarchical
    time), measured and predicted on the simulated nodes here, and on 2 x 8 H100 predicted
    (``h100``: :func:`ringlab.lessons.lab05_scaling.predictions.hierarchical_against_flat`'s curves) and published
    (NCCL's own choice over ``NCCL_ALGO=Ring``), each at the largest size all of its figures share."""
    def ratio(rows_flat, rows_hier, key):
        sizes = sorted({r["bytes"] for r in rows_flat} & {r["bytes"] for r in rows_hier})
        if not sizes:
            return None, None
        nbytes = sizes[-1]
        flat = next(r[key] for r in rows_flat if r["bytes"] == nbytes)
        hier = next(r[key] for r in rows_hier if r["bytes"] == nbytes)
        return nbytes, (flat / hier if key == "time_s" else hier / flat)

    def of(rows, algorithm):
        return [r for r in rows if r["algorithm"] == algorithm]

    here = (f"{nranks} ranks as {-(-nranks // per_node)} simulated nodes here, link slowed to {link_gbps:.3g} GB/s")
    out = []
    for source, rows in (("measured here (virtual time)", measured),
                         ("predicted (cost model, on the same emulated links)", predicted)):
        nbytes, value = ratio(of(rows, "ring"), of(rows, "hierarchical"), "time_s")
        out.append({"setup": here, "source": source, "bytes": nbytes, "speedup": value})
    flat = next(rows for label, rows in h100.items() if label.startswith("flat"))
    hier = next(rows for label, rows in h100.items() if label.startswith("hierarchical"))
    forced = [rows for label, rows in h100.items() if label.startswith("published") and "NCCL_ALGO=RING" in label.upper()]
    chosen = [rows for label, rows in h100.items() if label.startswith("published") and "NCCL_ALGO=RING" not in label.upper()]
    published_bytes = ({r["bytes"] for r in forced[0]} & {r["bytes"] for r in chosen[0]}) if forced and chosen else set()
    common = sorted({r["bytes"] for r in flat} & published_bytes) or sorted(r["bytes"] for r in flat)
    at = common[-1]
    nbytes, value = ratio([r for r in flat if r["bytes"] == at], [r for r in hier if r["bytes"] == at], "busbw_Bps")
    out.append({"setup": "2 nodes x 8 H100, NDR InfiniBand", "source": "predicted (cost model, public figures)",
                "bytes": nbytes, "speedup": value})
    if forced and chosen:
        nbytes, value = ratio([r for r in forced[0] if r["bytes"] == at], [r for r in chosen[0] if r["bytes"] == at],
                              "busbw_Bps")
        out.append({"setup": "2 nodes x 8 H100, NDR InfiniBand",
                    "source": "published nccl-tests: NCCL's own choice over its ring forced (A02/A03)",
                    "bytes": nbytes, "speedup": value})
    return out


def _main(arguments: str) -> None:
    """The MPI job :func:`measure_here` starts: every rank measures, rank 0 writes the rows."""
    import json

    from mpi4py import MPI

    asked = json.loads(arguments)
    rows = measure_on_simulated_nodes(asked["sizes"], asked["per_node"], asked["link_gbps"], repeats=asked["repeats"])
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(asked["out"], "w") as fh:
            json.dump(rows, fh)


if __name__ == "__main__":
    import sys

    _main(sys.argv[1])
