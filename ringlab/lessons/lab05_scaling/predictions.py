"""The cost model's predictions for machines nobody here can run, with the published sweeps of those
machines beside them, as rows for the plots of ``ringlab.viz`` and the summaries lab 05 prints.

Predictions come from ``ringlab.predict`` on the topology presets; published figures from the
nccl-tests sweeps of ``ringlab.measure.published`` whose machine a preset models (its ``MODELLED``
table). A published sweep is what NCCL reached with its own choice of algorithm, not ringlab's ring
or tree: the two sit side by side, never one in place of the other.
"""
from __future__ import annotations

from ...algorithms import build
from ...lab.exercises import compare, exercise
from ...lab.words import and_join
from ...measure import published
from ...predict.costmodel import predict, whatif
from ...predict.nccl import predict_nccl
from .sizes import microseconds
from ...schedule import bus_factor
from ...topology import preset, uniform


def published_sweeps(preset_name: str, collective: str = "allreduce", algorithm: bool = False) -> dict[str, list[dict]]:
    """{label: rows (``bytes``, ``busbw_Bps``)} of every shipped nccl-tests sweep of ``collective`` on a
    machine that the preset ``preset_name`` models; the out-of-place busbw where printed, else in place.
    With ``algorithm``, each label also says what NCCL was told to use, where the source says."""
    out = {}
    for sweep in published.sweeps(collective, [n for n in published.modelled() if published.model_for(n)[0] == preset_name]):
        told = published.load(sweep["name"]).data.get("nccl_algorithm") if algorithm else None
        out[sweep["label"][:-1] + (f", {told})" if told else ")")] = sweep["rows"]
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
    of ranks linked alike (``bandwidth`` bytes/s each way, ``latency`` s a message); the double binary tree at
    its best segment count (:func:`dbtree_seconds`)."""
    def seconds(name: str, n: int) -> float:
        network = uniform(n, bandwidth=bandwidth, latency=latency)
        if name == "allreduce.dbtree":
            return dbtree_seconds(network, nbytes)[0]
        return predict(build(name, n), nbytes, network).seconds

    return {name: [seconds(name, n) for n in ranks] for name in algorithms}


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
                     f"{microseconds(lat0)} to {microseconds(lat1)}, its bandwidth part from {microseconds(bw0)} to "
                     f"{microseconds(bw1)}; at {n} ranks latency is {lat1 / (lat1 + bw1):.0%} of its time.")
    return "\n".join(lines)


def _size_ranges(runs: list[tuple[int, int]], top: int) -> str:
    """Runs of sizes ``(first, last)`` in words: 'at 4 KiB', 'from 256 KiB to 1 MiB', 'from 1 MiB up' (a run that
    reaches ``top``, the largest size predicted), joined with 'and'."""
    from ...measure.units import format_bytes

    return and_join([f"at {format_bytes(a)}" if a == b else f"from {format_bytes(a)} up" if b == top else
                     f"from {format_bytes(a)} to {format_bytes(b)}" for a, b in runs])


def describe_crossovers(panels: dict) -> str:
    """One line per machine: at which sizes the ring is predicted to beat NCCL's double binary tree and at which the
    double binary tree leads (every run of sizes of the panel's ``leads``, so a ring that leads in a middle range
    only is said so), and how the binomial tree compares at the largest size."""
    from ...measure.units import format_bytes

    lines = []
    for name, panel in panels.items():
        sizes = sorted({r["bytes"] for r in panel["predicted"]})
        low, top = sizes[0], sizes[-1]
        at = {r["algorithm"]: r["busbw_Bps"] for r in panel["predicted"] if r["bytes"] == top}
        ring = [(a, b) for a, b, leader in panel["leads"] if leader == "ring"]
        tree = [(a, b) for a, b, leader in panel["leads"] if leader == "dbtree"]
        line = f"{name} ({panel['nranks']} GPUs): the ring (in the plain order 0..n-1) is "
        if not ring:
            line += (f"never predicted faster than the double binary tree here, at any size from {format_bytes(low)} "
                     f"to {format_bytes(top)}.")
        elif not tree:
            line += (f"predicted at least as fast as the double binary tree at every size here, from "
                     f"{format_bytes(low)} to {format_bytes(top)}.")
        else:
            line += (f"predicted faster than the double binary tree {_size_ranges(ring, top)}"
                     + ("" if ring[-1][1] == top else " only")
                     + f"; the double binary tree leads {_size_ranges(tree, top)}.")
        line += (f" At {format_bytes(top)} the binomial tree reaches {at['tree'] / at['dbtree']:.0%} of the double "
                 "binary tree's busbw: it sends the whole buffer on every step.")
        lines.append(line)
    return "\n".join(lines)


DBTREE_SEGMENTS = (1, 2, 4, 8, 16, 32, 64)  # NCCL pipelines in fixed-size pieces: more of them for larger buffers


def dbtree_seconds(topology, nbytes: int) -> tuple[float, int]:
    """(predicted seconds, segments) of ``allreduce.dbtree`` on ``topology`` at its best segment count,
    as NCCL's fixed-size pipelining picks more segments for larger buffers."""
    return min((predict(build("allreduce.dbtree", topology.nranks, segments=s), nbytes, topology).seconds, s)
               for s in DBTREE_SEGMENTS)


def trees_against_ring(preset_name: str, sizes: list[int]) -> dict:
    """One machine's panel for ``ringlab.viz.tree_ring_plot``: predicted busbw of the binomial tree (``tree``,
    lab 02's, the whole buffer on every step), NCCL's double binary tree (``dbtree``, at its best segment
    count per size) and the ring at ``sizes``; who is predicted faster, the ring (at least as fast) or the double
    binary tree, over each run of sizes in order (``leads``: (first, last, ``"ring"`` or ``"dbtree"``)); every size
    where the lead changes (``crossovers``: ``bytes``, the new ``leader``, the ring's busbw there); the first size where
    the ring takes the lead from the double binary tree (``crossover``, None if it never does) and its busbw there
    (``crossover_busbw_Bps``); the published sweeps."""
    topology = preset(preset_name)
    factor = bus_factor("allreduce", topology.nranks)
    rows, ring, dbtree = [], {}, {}
    for nbytes in sizes:
        seconds = {"tree": predict(build("allreduce.tree", topology.nranks), nbytes, topology).seconds,
                   "dbtree": dbtree_seconds(topology, nbytes)[0],
                   "ring": predict(build("allreduce.ring", topology.nranks), nbytes, topology).seconds}
        ring[nbytes], dbtree[nbytes] = seconds["ring"], seconds["dbtree"]
        rows += [{"bytes": nbytes, "busbw_Bps": nbytes / s * factor, "algorithm": name} for name, s in seconds.items()]
    leads = []  # runs of sizes, in order, each with who is predicted faster there (the ring if at least as fast)
    for nbytes in sorted(sizes):
        leader = "ring" if ring[nbytes] <= dbtree[nbytes] else "dbtree"
        if leads and leads[-1][2] == leader:
            leads[-1][1] = nbytes
        else:
            leads.append([nbytes, nbytes, leader])
    leads = [tuple(run) for run in leads]
    crossovers = [{"bytes": first, "leader": leader, "ring_busbw_Bps": first / ring[first] * factor}
                  for first, _, leader in leads[1:]]
    size = next((c["bytes"] for c in crossovers if c["leader"] == "ring"), None)
    found = [dict(r, algorithm=label) for label, sweep in published_sweeps(preset_name).items() for r in sweep]
    return {"predicted": rows, "leads": leads, "crossovers": crossovers, "crossover": size,
            "crossover_busbw_Bps": size / ring[size] * factor if size else None,
            "published": found, "nranks": topology.nranks}


def rings_on(preset_name: str, nbytes: int, counts=(1, 2)) -> list[dict]:
    """Predicted allreduce of ``nbytes`` on a preset with one ring in the plain order 0..n-1, and with k rings
    in the orders the ring search picks (the best ring, and it backwards): rows of ``rings``, ``orders``,
    ``seconds``, ``busbw_Bps``."""
    from ...predict.rings import ring_orders

    topology = preset(preset_name)
    n, factor = topology.nranks, bus_factor("allreduce", topology.nranks)
    plain = predict(build("allreduce.ring", n), nbytes, topology).seconds
    rows = [{"rings": 1, "orders": "plain 0..n-1", "seconds": plain, "busbw_Bps": nbytes / plain * factor}]
    for k in counts:
        orders = ring_orders(topology, k)
        seconds = predict(build("allreduce.rings", n, rings=k, orders=orders), nbytes, topology).seconds
        shown = "; ".join(dict.fromkeys(" ".join(map(str, o)) for o in orders))
        rows.append({"rings": k, "orders": f"searched: {shown}", "seconds": seconds, "busbw_Bps": nbytes / seconds * factor})
    return rows


def hierarchical_against_flat(preset_name: str, sizes: list[int], local: int) -> dict[str, list[dict]]:
    """{label: rows of ``bytes``, ``busbw_Bps``} for ``ringlab.viz.busbw_plot``-style drawing: the flat ring
    and the hierarchical allreduce (``local`` GPUs per node) predicted on a multi-node preset, and the
    machine's published sweeps, each label saying which it is."""
    topology = preset(preset_name)
    n, factor = topology.nranks, bus_factor("allreduce", topology.nranks)
    out = {}
    for label, schedule in (("flat ring: predicted", build("allreduce.ring", n)),
                            (f"hierarchical ({local} per node): predicted", build("allreduce.hierarchical", n, local=local))):
        out[label] = [{"bytes": k, "busbw_Bps": k / predict(schedule, k, topology).seconds * factor} for k in sizes]
    for label, rows in published_sweeps(preset_name, algorithm=True).items():
        out[f"published: {label}"] = rows
    return out


def describe_hierarchy(curves: dict[str, list[dict]], nbytes: int, machine: str | None = None) -> str:
    """The predicted flat ring, hierarchical allreduce and each published sweep at ``nbytes``, worded from
    their ratios; with ``machine`` (the preset the curves were predicted on), each published sweep is also set
    beside NCCL's model of what it ran there (``rl.predict_nccl``: the ring when the sweep forced it, NCCL's own
    choice otherwise), since NCCL's ring is not the one flat ring above."""
    at = {label: next((r["busbw_Bps"] for r in rows if r["bytes"] == nbytes), None) for label, rows in curves.items()}
    flat = next(v for k, v in at.items() if k.startswith("flat"))
    hier = next(v for k, v in at.items() if k.startswith("hierarchical"))
    lines = [f"At {nbytes / 2**20:.0f} MiB per GPU the hierarchical allreduce is predicted at {hier / 1e9:.0f} GB/s of "
             f"busbw, {hier / flat:.1f}x the flat ring's {flat / 1e9:.0f}: " + (
                 "inside a node the shards move over NVLink, and each GPU's shard crosses the network through its "
                 "own card, instead of one ring squeezing through one card per node boundary." if hier > flat else
                 "here the hierarchy does not pay.")]
    topology = preset(machine) if machine else None
    for label, value in at.items():
        if not (label.startswith("published") and value):
            continue
        line = f"{label[11:]}: {value / 1e9:.0f} GB/s, " + (
            "between the two predictions." if min(flat, hier) <= value <= max(flat, hier) else
            "above both predictions." if value > max(flat, hier) else "below both predictions.")
        if topology is not None:
            forced = "NCCL_ALGO=RING" in label.upper()
            model = predict_nccl("allreduce", nbytes, topology, algorithm="ring" if forced else None)
            expected = nbytes / model.seconds * bus_factor("allreduce", topology.nranks)
            nics = topology.machine.nics_per_node if topology.machine else None
            line += (" But NCCL's ring is not the one flat ring above: it runs a ring channel through every network "
                     f"card{f' ({nics} a node)' if nics else ''}, so its bytes cross the nodes on every card at once, "
                     "as the hierarchy's shards do." if forced else
                     f" NCCL's model picks {model.algorithm}/{model.protocol} at this size.")
            line += (f" NCCL's model of that on healthy hardware ({machine}) expects {expected / 1e9:.0f} GB/s; the "
                     f"published run reached {value / expected:.0%} of it"
                     + (", well below its hardware: the section on rails below finds why." if value < 0.5 * expected
                        else "."))
        lines.append(line)
    return "\n".join(lines)


def describe_forced_ring(sweeps: dict[str, list[dict]]) -> str:
    """Two published sweeps of one machine, NCCL's own choice against ``NCCL_ALGO=Ring`` (labels as
    :func:`published_sweeps` gives them with ``algorithm=True``), compared size by size."""
    from ...measure.units import format_bytes

    forced = [label for label in sweeps if "NCCL_ALGO=RING" in label.upper()]
    chosen = [label for label in sweeps if label not in forced]
    if not forced or not chosen:
        raise ValueError("need a sweep with NCCL_ALGO=Ring forced and one without: got " + "; ".join(sweeps))
    ring = {r["bytes"]: r["busbw_Bps"] for r in sweeps[forced[0]]}
    own = {r["bytes"]: r["busbw_Bps"] for r in sweeps[chosen[0]]}
    sizes = sorted(set(ring) & set(own))
    if not sizes:
        raise ValueError("the two sweeps share no message size")
    ratio = {k: own[k] / ring[k] for k in sizes}
    ahead = [k for k in sizes if ratio[k] > 1.1]
    behind = [k for k in sizes if ratio[k] < 1 / 1.1]
    best = max(sizes, key=lambda k: ratio[k])
    lines = [f"Published, {len(sizes)} sizes from {format_bytes(sizes[0])} to {format_bytes(sizes[-1])}: NCCL's own "
             f"choice was more than 10% faster than the forced ring at {len(ahead)} of them"
             + (f" ({format_bytes(ahead[0])} to {format_bytes(ahead[-1])})" if ahead else "")
             + f", and more than 10% slower at {len(behind) or 'none'}."]
    lines.append(f"The largest gap: {ratio[best]:.2f}x at {format_bytes(best)} ({own[best] / 1e9:.1f} against "
                 f"{ring[best] / 1e9:.1f} GB/s of busbw)." if ratio[best] > 1 else
                 "The forced ring was never slower: NCCL chose the ring, or as good, everywhere.")
    return "\n".join(lines)


def _ring_time(n, K, alpha, B):
    return 2 * (n - 1) * (alpha + K / (n * B))


@exercise(_ring_time, "formula")
def check_ring_time(ring_time):
    """Compare ``ring_time(n, K, alpha, B)`` with the cost model's ring allreduce on a uniform network."""
    def cost_model(n, K, alpha, B):
        return predict(build("allreduce.ring", n), K, uniform(n, bandwidth=B, latency=alpha)).seconds

    cases = [dict(n=2, K=1 << 20, alpha=5e-6, B=10e9), dict(n=8, K=1 << 24, alpha=2e-6, B=25e9),
             dict(n=64, K=1 << 26, alpha=10e-6, B=12.5e9)]
    compare(ring_time, "ring_time", cases, cost_model, "2(n-1) steps, each one latency plus one chunk of K/n bytes at B.")
    print("Correct: 2(n-1)(alpha + K/(nB)) matches the cost model.")


def against_published(collective: str = "allreduce") -> dict[str, list[dict]]:
    """Every shipped sweep of ``collective`` that a preset models, beside the model's prediction
    (:func:`ringlab.measure.published.against_model`): {short label: rows}, one entry per sweep over sizes
    (rows of other collectives, and single points of a table by GPU count, left out)."""
    out = {}
    for name in published.modelled():
        entry = published.load(name)
        series: dict[tuple, list[dict]] = {}
        for row in published.against_model(name):
            if row["collective"] == collective:
                series.setdefault((row["ranks"], row["setting"]), []).append(row)
        for (_, setting), rows in series.items():
            if len({r["bytes"] for r in rows}) > 1:
                out[entry.short + (f", {setting}" if setting else "")] = rows
    return out


def largest_rows(against: dict[str, list[dict]]) -> list[dict]:
    """Each sweep of :func:`against_published` at its largest message: the preset that models it, measured
    (published) and predicted busbw, what the model predicts there, and predicted / measured."""
    rows = []
    for label, sweep in against.items():
        big = max(sweep, key=lambda r: r["bytes"])
        rows.append({"sweep": label, "preset": big["preset"], "bytes": big["bytes"],
                     "measured_Bps": big["measured_busbw"], "predicted_Bps": big["predicted_busbw"],
                     "predicted_by": big["predicted"], "ratio": big["ratio"]})
    return rows


LARGEST_COLUMNS = {"published sweep": "sweep", "preset": "preset", "size (MiB)": ("bytes", ".0f"),
                   "measured (GB/s)": ("measured_Bps", ".1f"), "predicted (GB/s)": ("predicted_Bps", ".1f"),
                   "predicted by": "predicted_by", "predicted / measured": ("ratio", ".2f")}


CLOSE = 0.25  # predicted within 25% of published counts as the model having found what bounds the machine


def describe_against(against: dict[str, list[dict]]) -> str:
    """What :func:`against_published`'s rows say, sweep by sweep (labels start with the sweep's code), at its largest
    size: close to the model, well below it (a machine below its hardware, or a benchmark's overhead), or
    above it (something NCCL does that the model leaves out); worded from the ratios."""
    groups: dict[str, list[str]] = {"close": [], "below": [], "above": []}
    for label, rows in against.items():
        big = max(rows, key=lambda r: r["bytes"])
        ratio = big["ratio"]  # predicted / measured
        kind = "close" if abs(ratio - 1) <= CLOSE else "below" if ratio > 1 else "above"
        groups[kind].append(f"{label.split(':')[0]} ({ratio:.2f})")
    said = []
    if groups["close"]:
        said.append(f"Within {CLOSE:.0%} of the model at their largest size, so the model has found what bounds those "
                    f"machines: {and_join(groups['close'])}.")
    if groups["below"]:
        said.append(f"Measured more than {CLOSE:.0%} below what the model predicts for healthy hardware of their kind: "
                    f"{and_join(groups['below'])}. The model predicts those machines as built; the section 'Is my "
                    "number normal?' below asks which fault a measurement matches.")
    if groups["above"]:
        said.append(f"Measured above the model: {and_join(groups['above'])}: NCCL does something there that the "
                    "model leaves out.")
    return " ".join(said) + " (Ratios are predicted / published busbw.)"
