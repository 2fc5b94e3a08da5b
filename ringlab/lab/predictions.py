"""The cost model's predictions for machines nobody here can run, with the published sweeps of those
machines beside them, as rows for the plots of ``ringlab.viz`` and the summaries lab 05 prints.

Predictions come from ``ringlab.predict`` on the topology presets; published figures from the
nccl-tests sweeps of ``ringlab.measure.published`` whose machine a preset models (its ``MODELLED``
table). A published sweep is what NCCL reached with its own choice of algorithm, not ringlab's ring
or tree: the two sit side by side, never one in place of the other.
"""
from __future__ import annotations

from ..algorithms import build
from ..measure import published
from ..predict.costmodel import crossover, predict, whatif
from ..schedule import bus_factor
from ..topology import preset


def published_sweeps(preset_name: str, collective: str = "allreduce") -> dict[str, list[dict]]:
    """{label: rows (``bytes``, ``busbw_Bps``)} of every shipped nccl-tests sweep of ``collective`` on a
    machine that the preset ``preset_name`` models; the out-of-place busbw where printed, else in place."""
    out = {}
    for name in published.modelled():
        entry = published.load(name)
        if published.model_for(name)[0] != preset_name or entry.data["collective"] != collective:
            continue
        rows = [{"bytes": r["bytes"], "busbw_Bps": r["busbw_Bps"] if r["busbw_Bps"] is not None else
                 r["inplace_busbw_Bps"]} for r in entry.data["rows"] if r["bytes"]]
        out[f"{entry.machine} ({name[:3]})"] = [r for r in rows if r["busbw_Bps"]]
    return out


def machines_at(presets: list[str], nbytes: int, algorithms: list[str]) -> tuple[list[dict], list[dict]]:
    """(predicted, published) for an allreduce of ``nbytes`` per GPU on each preset: the predicted rows are
    :func:`ringlab.predict.costmodel.whatif`'s (``topology``, ``algorithm``, ``seconds``, ``busbw``,
    ``bottleneck``); the published rows (``topology``, ``label``, ``bytes``, ``busbw_Bps``) are the sweeps of
    those machines that measured exactly ``nbytes``."""
    predicted = whatif(algorithms, nbytes, [preset(p) for p in presets])
    found = [{"topology": p, "label": label, "bytes": r["bytes"], "busbw_Bps": r["busbw_Bps"]}
             for p in presets for label, rows in published_sweeps(p).items() for r in rows if r["bytes"] == nbytes]
    return predicted, found


def with_ranks(algorithms: list[str], nbytes: int, ranks: list[int], bandwidth: float, latency: float
               ) -> dict[str, list[float]]:
    """{algorithm: predicted seconds at each rank count} of an allreduce of ``nbytes`` per rank, every pair
    of ranks linked alike (``bandwidth`` bytes/s each way, ``latency`` s a message)."""
    from ..topology import uniform

    return {name: [predict(build(name, n), nbytes, uniform(n, bandwidth=bandwidth, latency=latency)).seconds
                   for n in ranks] for name in algorithms}


def tree_against_ring(preset_name: str, sizes: list[int]) -> dict:
    """One machine's panel for ``ringlab.viz.tree_ring_plot``: the predicted busbw of ``allreduce.tree`` and
    ``allreduce.ring`` at ``sizes`` (``predicted``: rows of ``bytes``, ``busbw_Bps``, ``algorithm``), the size
    from which the ring is predicted faster (``crossover``, bytes, or None) with the ring's busbw there
    (``crossover_busbw_Bps``), and the machine's published sweeps (``published``: rows of ``bytes``,
    ``busbw_Bps``, ``algorithm`` = the sweep's label)."""
    topology = preset(preset_name)
    factor = bus_factor("allreduce", topology.nranks)
    rows = []
    for name in ("allreduce.tree", "allreduce.ring"):
        schedule = build(name, topology.nranks)
        for nbytes in sizes:
            seconds = predict(schedule, nbytes, topology).seconds
            rows.append({"bytes": nbytes, "busbw_Bps": nbytes / seconds * factor, "algorithm": name.split(".")[1]})
    found = [dict(r, algorithm=label) for label, sweep in published_sweeps(preset_name).items() for r in sweep]
    size = crossover("allreduce.tree", "allreduce.ring", topology)
    at = (size / predict(build("allreduce.ring", topology.nranks), size, topology).seconds * factor
          if size is not None else None)
    return {"predicted": rows, "crossover": size, "crossover_busbw_Bps": at, "published": found,
            "nranks": topology.nranks}


def describe_machines(predicted: list[dict], published: list[dict]) -> str:
    """One line per machine: the predicted times and busbw of each algorithm, and each published busbw of the
    same size set against the ring's prediction, worded from the ratio."""
    lines = []
    for machine in dict.fromkeys(r["topology"] for r in predicted):
        mine = [r for r in predicted if r["topology"] == machine]
        said = ", ".join(f"{r['algorithm'].split('.')[-1]} {r['seconds'] * 1e3:.2f} ms ({r['busbw'] / 1e9:.1f} GB/s)"
                         for r in mine)
        line = f"{machine}, predicted: {said}."
        ring = next((r for r in mine if r["algorithm"] == "allreduce.ring"), None)
        found = [r for r in published if r["topology"] == machine]
        if not found:
            line += " No published sweep of this machine at this size in ringlab's data set."
        for r in found:
            line += f" Published {r['label']}: {r['busbw_Bps'] / 1e9:.1f} GB/s"
            if ring is not None:
                ratio = r["busbw_Bps"] / ring["busbw"]
                line += f", {ratio:.2f}x the ring's prediction" + (
                    ": close to it." if abs(ratio - 1) <= 0.1 else
                    ": NCCL reached more than the predicted ring" + (
                        " (this machine's switch can add the shards itself: NVLS)." if preset(machine).switch_reduce
                        else ".")
                    if ratio > 1 else ": the model is optimistic for this machine.")
            else:
                line += "."
        lines.append(line)
    return "\n".join(lines)


def describe_with_ranks(seconds: dict[str, list[float]], ranks: list[int], nbytes: int, bandwidth: float,
                        latency: float) -> str:
    """What :func:`with_ranks`'s predictions say at the largest rank count, and how the ring's time splits
    into its latency part and its bandwidth part there."""
    from ..topology import uniform

    n = ranks[-1]
    last = sorted(((values[-1], name) for name, values in seconds.items()))
    lines = [f"Predicted at {n} ranks, {nbytes / 2**20:.0f} MiB each, {bandwidth / 1e9:g} GB/s links and "
             f"{latency * 1e6:g} us a message: " + ", ".join(f"{name} {s * 1e3:.2f} ms" for s, name in last)
             + f"; {last[0][1]} is the fastest."]
    if "allreduce.ring" in seconds:
        parts = []
        for count in (ranks[0], n):
            p = predict(build("allreduce.ring", count), nbytes, uniform(count, bandwidth=bandwidth, latency=latency))
            parts.append((float(p.steps["latency"].sum()), p.seconds - float(p.steps["latency"].sum())))
        (lat0, bw0), (lat1, bw1) = parts
        lines.append(f"The ring: from {ranks[0]} to {n} ranks its latency part (2(n-1) messages) grows from "
                     f"{lat0 * 1e3:.2f} to {lat1 * 1e3:.2f} ms, its bandwidth part from {bw0 * 1e3:.2f} to "
                     f"{bw1 * 1e3:.2f} ms; at {n} ranks latency is {lat1 / (lat1 + bw1):.0%} of its time.")
    return "\n".join(lines)


def describe_crossovers(panels: dict) -> str:
    """One line per machine: from what size the ring is predicted to beat the tree."""
    from ..measure.units import format_bytes

    return "\n".join(f"{name} ({panel['nranks']} GPUs): " + (
        f"the ring is predicted faster from {format_bytes(panel['crossover'])}; below it the tree."
        if panel["crossover"] else "the ring is never predicted faster than the tree here.")
        for name, panel in panels.items())
