"""Is my number normal? A measured sweep against what healthy hardware of its kind gives, and why not.

:func:`explain` takes an nccl-tests sweep (a log as ``ringlab.measure.logs`` reads it, ``ringlab bench
--json`` output, or a shipped published sweep), finds its machine (from the log's GPUs and hosts, or
as given: a preset or a description such as ``h100:2x8``), and sets every size's measured busbw
beside what NCCL's own model predicts for healthy hardware of that kind (``ringlab.predict.nccl``, as
the log's benchmark times it) and beside the nearest published sweep of a healthy machine like it;
alltoall and sendrecv beside the grouped sends and receives NCCL runs them as (``ringlab.predict.p2p``: each
link's bytes over its rate, no tuner). ``ratio`` is measured / expected.

Where a sweep is well below, the model tells causes apart by predicting the same machine with one
thing wrong and asking which of those the measurement matches (:data:`CAUSES`):

- rails not used: one NIC's worth per node instead of all of them (NCCL found, or was given, one NIC);
- the rails at a quarter of their rate: GPUDirect RDMA not in use, PCIe ACS or the IOMMU in the path,
  NICs on the far NUMA node. Without GPUDirect the data is staged through host memory, "dividing
  bandwidth by 2 or even 4" (NCCL's maintainer in NVIDIA/nccl#756); the quarter is the symptom
  NVIDIA's replies describe (nccl#1412, nccl-tests#319): :data:`RAILS_DEGRADED`;
- NVLS off: the switch does not add (NCCL_NVLS_ENABLE=0, or multicast not set up);
- P2P off on a PCIe box: every copy staged through host memory;
- a GPU on a lower PCIe generation than it supports.

Verdicts: healthy when the large sizes reach at least :data:`HEALTHY` of the expectation; below its
hardware otherwise, with the causes whose machine the measurement matches (within :data:`MATCH`). A
healthy verdict rests on the large sizes; where sizes below them reach less than :data:`MIDDLE_LOW` of the
model, ``notes`` says so, and what in the way the log was timed to look at first (:func:`middle_notes`).
Everything expected is a prediction or a published figure, labelled; only the log is a measurement.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from statistics import median

from ..predict.harness import Harness, harness
from ..predict.nccl import P2P_COLLECTIVES
from ..predict.versus import versus
from ..topology import GPUS, Topology, cluster, preset, preset_names
from ..topology.machines import variant
from ..topology.spec import CLUSTER_FORM, cluster_from
from . import published
from .logs import _PROGRAMS, read_log, read_logs
from .nccltests import is_json
from .units import format_bytes

HEALTHY = 0.8          # measured / expected at the large sizes, at least, for a healthy verdict
MATCH = (0.8, 1.25)    # measured / a cause's expectation, within, for that cause to match
LARGE = 64 << 20       # the sizes a verdict rests on: from 64 MiB (or the largest half, if none is that big)
SMALLEST = 64 << 10    # sizes shown from here: below it, launch and timing dominate
MIDDLE_LOW = 1 / 1.5   # measured / expected below which a size under the large ones is called low (the model's
                       # own goal there: within 1.5x, benchmarks/model_vs_published.py)
RAILS_DEGRADED = 1 / 4  # the rails' share without GPUDirect RDMA (nccl#756: "by 2 or even 4"; nccl#1412)
CAUSES = {
    "rails": "rails not used: one NIC's worth a node (NCCL found or was given one NIC: NCCL_IB_HCA, "
             "NCCL_SOCKET_IFNAME, NICs it cannot see)",
    "gdr": "rails at a quarter of their rate: GPUDirect RDMA not in use, PCIe ACS or the IOMMU in the path, "
           "or NICs on the far NUMA node",
    "nvls": "NVLS off: the switch does not add (NCCL_NVLS_ENABLE=0, or multicast not set up)",
    "p2p": "P2P off: every copy staged through host memory (no peer access between the GPUs)",
    "pcie": "a lower PCIe generation than the GPU supports (a slot or riser that trained at PCIe 3.0)",
}
# what a device line of nccl-tests or rccl-tests names, and the GPU it is (first match wins: GH200 before H200)
_GPU_NAMES = (("GB200", "gb200"), ("GH200", "gh200"), ("B200", "b200"), ("H200", "h200"), ("H100", "h100"),
              ("A100", "a100"), ("MI355X", "mi355x"), ("MI325X", "mi325x"), ("MI300X", "mi300x"), ("MI250X", "mi250x"),
              ("RTX 5090", "rtx5090"), ("RTX 4090", "rtx4090"), ("RTX 3090", "rtx3090"), ("2080 Ti", "rtx2080ti"))
# the most GPUs one node (one host's NVLink domain, or PCIe box) of a kind holds where it is not 8
DOMAIN = {"gh200": 4, "gb200": 72}
# the family a GPU name belongs to where the name alone does not tell the GPU (rccl-tests may print "gfx942")
_FAMILIES = (("gfx9", "AMD Instinct"), ("Instinct", "AMD Instinct"), ("AMD", "AMD Instinct"),
             ("GeForce", "GeForce"), ("RTX", "GeForce"), ("Grace", "Grace"))


def explain(result: dict, machine: Topology | str | None = None, name: str | None = None) -> dict:
    """``result`` (an nccl-tests log read by ``read_log``, a ``ringlab bench --json`` result, or a published
    sweep's data; ``name`` its published name) against healthy hardware: ``rows`` (bytes, measured_busbw,
    expected_busbw, ratio, predicted, published_busbw), ``verdict``, ``causes``, ``machine``, ``benchmark``,
    ``published``."""
    if result.get("format") != "nccl-tests" and result.get("kind") != "ringlab-bench":
        raise ValueError(f"only nccl-tests sweeps can be explained, not a {result.get('format')} log")
    if result.get("ranks") == 1:
        raise ValueError("this run had one rank (processes x threads x GPUs a thread = 1): nothing crossed a link, "
                         "so there is nothing to judge. Give the test more GPUs: -g N in one process, or mpirun -np N "
                         "with nccl-tests built with `make MPI=1` (built without it, every process started by mpirun "
                         "runs alone, with one rank)")
    topology = _machine(result, machine, name)
    bench, model, rows = _measured(result, name, topology)
    expected = _expect(rows, topology, bench, model)
    verdict, ratio = judge(expected)
    causes = [] if verdict == "healthy" else match_causes(rows, topology, bench, model)
    reference = nearest_published(topology, rows[0]["collective"], rows[0]["ranks"], exclude=name,
                                  sizes={r["bytes"] for r in rows})
    by_size = {r["bytes"]: r["busbw_Bps"] for r in reference["rows"]} if reference else {}
    for r in expected:
        r["published_busbw"] = by_size.get(r["bytes"])
    said = (f"healthy: {ratio:.0%} of what the model expects of healthy hardware at the large sizes"
            if verdict == "healthy" else
            f"below its hardware: {ratio:.0%} of what the model expects at the large sizes; " +
            (f"it matches {causes[0]['cause']}" if causes else "no modelled cause matches"))
    notes = middle_notes(expected, bench, verdict)
    m = topology.machine
    if machine is None and name is None and m is not None and m.nodes > 1 and not result.get("network"):
        notes.append(f"the log names no network (NCCL_DEBUG=INFO lines would): the model assumed {m.nics_per_node} x "
                     f"{m.nic_bandwidth * 8 / 1e9:g} Gbit/s {m.fabric} NICs a node; if yours differ, give the machine: "
                     f"--machine {m.gpu}:{m.nodes}x{m.gpus_per_node}:nics=N:nic=GBPS:fabric=ib|roce|efa|slingshot")
    return {"rows": expected, "verdict": verdict, "summary": said, "ratio": ratio, "causes": causes,
            "notes": notes, "machine": topology.name, "benchmark": bench.name,
            "published": reference["label"] if reference else None}


def judge(rows: list[dict]) -> tuple[str, float]:
    """("healthy" or "below its hardware", the median measured / expected over the large sizes)."""
    ratio = median(r["ratio"] for r in large(rows))
    return ("healthy" if ratio >= HEALTHY else "below its hardware"), ratio


def middle_notes(rows: list[dict], bench: Harness, verdict: str) -> list[str]:
    """What a healthy verdict, resting on the large sizes, does not say: the sizes below them that reach less
    than :data:`MIDDLE_LOW` of the model, and what in the way ``bench`` timed the calls to look at first.
    Nothing for a sweep below its hardware: its causes are named."""
    big = large(rows)
    low = [r for r in rows if r not in big and r["ratio"] < MIDDLE_LOW]
    if verdict != "healthy" or not low:
        return []
    worst = min(low, key=lambda r: r["ratio"])
    span = format_bytes(low[0]["bytes"]) + ("" if len(low) == 1 else f" to {format_bytes(low[-1]['bytes'])}")
    said = (f"the large sizes are healthy, but {len(low)} of the sizes below them reach less than "
            f"{MIDDLE_LOW:.0%} of the model ({span}; {worst['ratio']:.0%} at {format_bytes(worst['bytes'])}). "
            "Below the large sizes a call's time holds fixed costs (launches, synchronisation, each step's latency) "
            "beside the links' rate. ")
    gpus, ranks = bench.gpus_per_process, rows[0]["ranks"]
    if bench.tool in ("nccl-tests", "rccl-tests") and gpus > 1:
        said += (f"This log drove {gpus} GPUs from one thread (-g {gpus}): no call ends before that thread has "
                 f"launched NCCL on all {gpus} (nccl-tests#333), and the model holds only the launch floor measured "
                 f"there. Run one process per GPU (mpirun -np {ranks} {_perf(rows)} ... -g 1) to see NCCL's own "
                 "time at these sizes.")
    elif bench.tool == "all_reduce_bench.py":
        said += ("all_reduce_bench.py times one call at a time, each after a barrier: a rank's time holds the host's "
                 "issue of the call and its wait for the last rank to leave the barrier. nccl-tests, its calls "
                 "back to back, shows NCCL's own time.")
    else:
        said += ("Look at the channels NCCL used at these sizes (NCCL_DEBUG=INFO prints them; NCCL_MIN_NCHANNELS "
                 "and NCCL_MAX_NCHANNELS bound them) and at what else runs on the hosts' cores.")
    return [said]


def _perf(rows: list[dict]) -> str:
    """The nccl-tests program that runs the rows' collective (all_reduce_perf for allreduce)."""
    program = {ours: theirs for theirs, ours in _PROGRAMS.items()}.get(rows[0]["collective"], rows[0]["collective"])
    return f"{program}_perf"


def large(rows: list[dict]) -> list[dict]:
    """The rows a verdict rests on: from 64 MiB, or the largest half when no size is that big."""
    big = [r for r in rows if r["bytes"] >= LARGE]
    return big or sorted(rows, key=lambda r: r["bytes"])[len(rows) // 2:]


def match_causes(rows: list[dict], topology: Topology, bench: Harness, model: str) -> list[dict]:
    """Every cause whose machine the measurement matches, closest first: ``cause``, ``key``, ``machine``, ``ratio``
    (measured / that machine's prediction at the large sizes) and ``expected_busbw`` (its prediction, size by size)."""
    found = []
    for key, changed in variants(topology, rows[0]["collective"]).items():
        expected = _expect(rows, changed, bench, model)
        _, ratio = judge(expected)
        if MATCH[0] <= ratio <= MATCH[1]:
            found.append({"key": key, "cause": CAUSES[key], "machine": changed.name, "ratio": ratio,
                          "expected_busbw": [r["expected_busbw"] for r in expected]})
    return sorted(found, key=lambda c: abs(c["ratio"] - 1))


def variants(topology: Topology, collective: str | None = None) -> dict[str, Topology]:
    """The same machine with one thing wrong, for each cause the model can tell apart there (for ``collective``:
    alltoall and sendrecv, NCCL's sends and receives, never add in the switch, so NVLS off is no cause of theirs)."""
    m, out = topology.machine, {}
    if m is not None and m.gpu in GPUS:
        if m.nodes > 1 and m.nics_per_node > 1:
            out["rails"] = variant(topology, nics_per_node=1)
        if m.nodes > 1:
            out["gdr"] = variant(topology, nic_gbps=m.nic_bandwidth * 8 / 1e9 * RAILS_DEGRADED)
        if topology.switch_reduce and collective not in P2P_COLLECTIVES:
            out["nvls"] = variant(topology, nvls=False)
        if GPUS[m.gpu].layout == "sockets" and m.p2p:  # a PCIe box of consumer cards
            out["p2p"] = variant(topology, p2p=False)
        if GPUS[m.gpu].layout == "sockets" and not m.pcie and GPUS[m.gpu].pcie > 3:
            out["pcie"] = variant(topology, pcie=3)
    elif topology.name == "pcie3-switch-2":
        out["p2p"] = preset("pcie3-switch-2-p2p-off")
    return out


def machine_from(spec: str) -> Topology:
    """A preset by name, or a machine by description as :func:`ringlab.topology.cluster` builds it,
    ``GPU:NODESxGPUS[:nics=N][:nic=GBPS][:fabric=F][:sharp][:nvls=on|off][:p2p=on|off][:pcie=GEN]`` with GPU any
    of ``GPUS`` (``ringlab.topology.spec.cluster_from``): e.g. ``h100:2x8``, ``a100:16x8:nic=200``,
    ``mi300x:1x8``, ``gh200:4x4:fabric=slingshot:nic=200``, ``rtx4090:1x8:p2p=off``."""
    if spec in preset_names():
        return preset(spec)
    try:
        return cluster_from(spec)
    except ValueError as err:
        raise ValueError(f"{err}; or give a preset ({', '.join(preset_names())})") from None


def guess_machine(result: dict) -> Topology:
    """The machine a log ran on, from its GPUs' names and hosts (a bench result's: its machine's), and the
    network NCCL's INFO lines name (EFA: an AWS machine, whose plugin sets some of NCCL's parameters): healthy
    hardware of that kind (a PCIe box of consumer cards: with P2P on). Where the log does not tell the machine, a
    ValueError names the presets nearest it (:func:`nearest_presets`) and the ``--machine`` form to give."""
    described = result.get("machine") if isinstance(result.get("machine"), dict) else {}
    devices = result.get("devices") or [{"name": g.get("name", ""), "host": described.get("host")}
                                        for g in described.get("gpus") or []]
    names = {d["name"] for d in devices}
    kind = next((key for text, key in _GPU_NAMES if any(text in n for n in names)), None)
    ranks = result.get("ranks") or len(devices)
    hosts = len({d["host"] for d in devices}) or 1

    def cannot(why: str) -> ValueError:
        amd = "AMD Instinct" if result.get("tool") == "rccl-tests" else None  # RCCL ran it: AMD GPUs
        near = nearest_presets(kind or _family(names) or amd, ranks or 0)
        per = min(max(ranks // hosts, 1), DOMAIN.get(kind, 8)) if ranks else 8
        example = f"{kind}:{-(-ranks // per)}x{per}" if kind in GPUS and ranks else "mi300x:1x8 or h100:2x8"
        return ValueError(f"cannot tell the machine from this log (GPUs: {', '.join(sorted(names)) or 'none'}; "
                          f"{ranks or '?'} ranks on {hosts} host(s)): {why}; the presets nearest it: "
                          f"{', '.join(near) or 'none'}. Give it with --machine: a preset, or {CLUSTER_FORM} with "
                          f"GPU one of {', '.join(GPUS)}, e.g. {example}")
    if kind is None or not ranks:
        raise cannot("no GPU ringlab knows by that name" if kind is None else "no rank count")
    seen = {}
    for d in devices:
        if d.get("bus") and d.get("device") is not None:
            seen.setdefault((d["host"], d["device"], d["bus"]), []).append(d.get("rank"))
    shared = next((ranks_ for ranks_ in seen.values() if len(ranks_) > 1), None)
    if shared:
        raise ValueError(f"ranks {', '.join(map(str, shared))} ran on one GPU (the same host, device and bus id in "
                         "their device lines): ranks that share a GPU take turns on it, so their sweep says nothing "
                         "of the links. Run one rank per GPU (mpirun -np <number of GPUs>, or -g <GPUs> in one "
                         "process)")
    if kind == "rtx2080ti" and ranks == 2:
        return preset("pcie3-switch-2")
    if kind not in GPUS:
        raise cannot(f"no machine of {ranks} x {kind}")
    whole = result.get("ranks_from") in (None, "device lines") and not any("cut" in n or "lost" in n
                                                                          for n in result.get("notes", []))
    if not whole and kind != "gb200" and ranks > DOMAIN.get(kind, 8):
        raise cannot(f"the device lines were cut, so the log does not say over how many nodes its {ranks} ranks ran")
    nodes = -(-ranks // 72) if kind == "gb200" else hosts  # a GB200 node is an NVLink domain of up to 72
    if ranks % nodes:
        raise cannot(f"{ranks} ranks do not share out evenly over {nodes} nodes")
    try:
        return cluster(kind, nodes, ranks // nodes, fabric=result.get("network") or "ib")
    except ValueError as err:
        raise cannot(str(err)) from None


def nearest_presets(gpu: str | None, ranks: int, count: int = 4) -> list[str]:
    """The presets nearest a machine of ``ranks`` GPUs of the kind ``gpu`` (a key of ``GPUS``, or a family such as
    "AMD Instinct"): the same GPU first, then the same family, then the same number of GPUs; nearest in GPUs
    within each."""
    family = GPUS[gpu].family if gpu in GPUS else gpu
    scored = []
    for name in preset_names():
        topology = preset(name)
        theirs = topology.machine.gpu if topology.machine is not None else None
        rank = (0 if theirs == gpu else 1 if theirs in GPUS and GPUS[theirs].family == family else
                2 if topology.nranks == ranks else None)
        if rank is not None:
            scored.append((rank, abs(topology.nranks - ranks), name))
    return [name for *_, name in sorted(scored)[:count]]


def _family(names: set) -> str | None:
    """The family of GPUs named (AMD Instinct, GeForce, Grace) where no name tells the GPU itself."""
    return next((family for text, family in _FAMILIES if any(text in n for n in names)), None)


def nearest_published(topology: Topology, collective: str, ranks: int, exclude: str | None = None,
                      sizes: set | frozenset = frozenset()) -> dict | None:
    """The shipped sweep of healthy hardware nearest this machine: the same preset, else (for machines
    :func:`ringlab.topology.cluster` builds) the same GPU, the ranks nearest, then the most of ``sizes``
    measured; None if there is none. Healthy:
    its own verdict against its model (:func:`judge`)."""
    gpu = topology.machine.gpu if topology.machine and topology.machine.gpu in GPUS else None
    best = None
    for sweep in published.sweeps(collective):
        match = published.model_for(sweep["name"])
        if sweep["name"] == exclude or isinstance(match, str) or not _healthy(sweep["name"]):
            continue
        theirs = preset(match[0])
        same = match[0] == topology.name
        if not same and (gpu is None or theirs.machine is None or theirs.machine.gpu != gpu
                         or theirs.switch_reduce != topology.switch_reduce
                         or theirs.machine.p2p != topology.machine.p2p):
            continue
        key = (not same, abs(sweep["ranks"] - ranks), -len(sizes & {r["bytes"] for r in sweep["rows"]}))
        if best is None or key < best[0]:
            best = (key, sweep)
    return best[1] if best else None


@lru_cache(maxsize=None)
def _healthy(name: str) -> bool:
    """Whether the shipped sweep ``name`` reaches what the model expects of its machine."""
    return judge([dict(r, ratio=1 / r["ratio"]) for r in published.against_model(name)])[0] == "healthy"


def _machine(result: dict, machine: Topology | str | None, name: str | None) -> Topology:
    if isinstance(machine, Topology):
        return machine
    if machine:
        return machine_from(machine)
    if name:
        match = published.model_for(name)
        if isinstance(match, str):
            raise ValueError(f"ringlab models no machine like {name[:3]}'s ({match}); give one with --machine")
        return preset(match[0])
    if "machine" in result and result.get("format") == "nccl-tests" and not result.get("devices"):
        m = result["machine"]
        kind = next((key for text, key in _GPU_NAMES if text in (m.get("gpu") or "")), None)
        if kind in GPUS:
            return cluster(kind, m.get("nodes") or 1, m.get("gpus_per_node") or m["count"])
    return guess_machine(result)


def _measured(result: dict, name: str | None, topology: Topology) -> tuple[Harness, str, list[dict]]:
    """(how it was timed, what NCCL ran, rows of bytes, busbw_Bps, ranks, collective, model) from any input."""
    if name:
        bench, match = published.benchmark(name), published.model_for(name)
        model = "best" if isinstance(match, str) else match[1]
        rows = [dict(r, model=published.row_model(r, model)) for r in result["rows"]]
    elif result.get("kind") == "ringlab-bench":
        bench, model = harness(), "best"
        rows = [dict(r, ranks=result["ranks"], collective=result["collective"], model=model)
                for r in result["rows"] if r.get("algorithm") == "nccl"]
        if not rows:
            raise ValueError("this ringlab bench result has no NCCL rows to set against NCCL's model "
                             "(run it with -a nccl on GPUs)")
    else:
        bench, model = harness("nccl-tests", result.get("gpus_per_thread") or 1), "best"
        ranks = result.get("ranks") or topology.nranks
        rows = [dict(r, ranks=ranks, collective=result["collective"], model=model) for r in result["rows"]]
    rows = [r for r in rows if r["bytes"] >= SMALLEST and (r.get("busbw_Bps") or r.get("inplace_busbw_Bps"))]
    if not rows:
        raise ValueError(f"no sizes of {SMALLEST >> 10} KiB or more with a busbw to explain")
    return bench, model, rows


def _expect(rows: list[dict], topology: Topology, bench: Harness, model: str) -> list[dict]:
    """Each row's measured busbw beside the model's on ``topology``; ``ratio`` measured / expected."""
    out = []
    for row in rows:
        for r in versus([row], topology, row["collective"], row["model"], nranks=row["ranks"], bench=bench):
            out.append({"bytes": r["bytes"], "measured_busbw": r["measured_busbw"],
                        "expected_busbw": r["predicted_busbw"], "ratio": r["measured_busbw"] / r["predicted_busbw"],
                        "predicted": r["predicted"], "ranks": row["ranks"], "collective": row["collective"]})
    return out


def describe(e: dict, what: str = "this sweep") -> list[str]:
    """:func:`explain`'s answer as lines of text: size by size, then the verdict and the causes it matches."""
    lines = [f"# {what}: set against a healthy {e['machine']} (NCCL's model, predicted; timed as {e['benchmark']})",
             f"#   published beside it: {e['published'] or 'no published sweep of healthy hardware of this kind'}",
             f"# {'size (B)':>12} {'measured':>9} {'expected':>9} {'ratio':>6}  {'NCCL would run':<16} "
             f"{'published':>9}   (GB/s; ratio = measured / expected)"]
    for r in e["rows"]:
        shown = "-" if r["published_busbw"] is None else f"{r['published_busbw'] / 1e9:.1f}"
        lines.append(f"  {r['bytes']:>12} {r['measured_busbw'] / 1e9:>9.1f} {r['expected_busbw'] / 1e9:>9.1f} "
                     f"{r['ratio']:>6.2f}  {r['predicted']:<16} {shown:>9}")
    lines.append(f"# verdict: {e['summary']}")
    for c in e["causes"]:
        lines.append(f"# likely cause: {c['cause']} (measured is {c['ratio']:.0%} of what {c['machine']} would give)")
    lines += [f"# note: {note}" for note in e.get("notes", [])]
    return lines


def plot_rows(e: dict, label: str) -> list[dict]:
    """:func:`explain`'s answer as rows for ``ringlab.viz.busbw_plot``: the measurement, the healthy machine's
    prediction and that of the cause it matches best, each line named after ``label``."""
    rows = [{"algorithm": f"{label}: measured", "bytes": r["bytes"], "busbw_Bps": r["measured_busbw"]}
            for r in e["rows"]]
    rows += [{"algorithm": f"{label}: predicted, healthy {e['machine']}", "bytes": r["bytes"],
              "busbw_Bps": r["expected_busbw"]} for r in e["rows"]]
    for cause in e["causes"][:1]:
        rows += [{"algorithm": f"{label}: predicted, {cause['machine']} ({cause['key']})", "bytes": r["bytes"],
                  "busbw_Bps": busbw} for r, busbw in zip(e["rows"], cause["expected_busbw"])]
    return rows


def read(path: str | Path, collective: str | None = None) -> tuple[dict, str | None]:
    """(what a file holds, its published name or None): an nccl-tests log, ``ringlab import --json`` or
    ``ringlab bench --json`` output, or a shipped published sweep."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    if text.lstrip().startswith(("{", "[")):
        data = json.loads(text)
        data = data[0] if isinstance(data, list) and len(data) == 1 else data
        if isinstance(data, dict) and (data.get("format") == "nccl-tests" or data.get("kind") == "ringlab-bench"):
            return data, (path.stem if path.stem in published.MODELLED else None)
        raise ValueError(f"{path}: not an nccl-tests result ringlab can explain (one log, ringlab bench's or "
                         "import's JSON, or a published sweep)")
    return read_log(text, collective=collective), None


def read_all(path: str | Path, collective: str | None = None) -> list[tuple[dict, str | None, str]]:
    """Every sweep a file holds, each as (result, its published name or None, a label): the runs of an nccl-tests
    or rccl-tests log (several in one file, each its own), the logs of a ``ringlab import --json`` list, or one
    result as :func:`read` gives it. ``collective``: for logs that do not name it, one per run (``A,B``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    if text.lstrip().startswith("[") or (text.lstrip().startswith("{") and not is_json(text)):
        data = json.loads(text)
        if isinstance(data, list) and len(data) > 1 and all(isinstance(d, dict) and d.get("format") == "nccl-tests"
                                                            for d in data):
            return [(d, None, f"{path} (log {i + 1} of {len(data)})") for i, d in enumerate(data)]
        result, name = read(path, collective)
        return [(result, name, str(path))]
    runs = read_logs(text, collective=collective)
    return [(r, None, str(path) if len(runs) == 1 else f"{path} (run {i + 1} of {len(runs)})")
            for i, r in enumerate(runs)]


__all__ = ["explain", "describe", "plot_rows", "judge", "match_causes", "variants", "machine_from", "guess_machine",
           "nearest_presets", "nearest_published", "middle_notes", "read", "read_all", "CAUSES", "HEALTHY", "MATCH", "MIDDLE_LOW",
           "RAILS_DEGRADED"]
