"""Published measurements of real GPU machines, shipped with ringlab as data.

Each entry is one measurement a public source printed (nccl-tests sweeps, p2pBandwidthLatencyTest
matrices, bandwidthTest and nvbandwidth copy rates, ``nvidia-smi topo -m``), carried over as
numbers in the structures ``ringlab import`` gives: the same rows, plots and fits work on them.
Every entry names its source, the machine (GPU, count, interconnect, nodes), the tool and its
command, the NCCL version and the date where the source printed them (None where it did not).
They are published figures, never measured here: :attr:`Published.label` says so.

    from ringlab.measure import published
    published.names()                        # what there is
    sweep = published.load("A05_azure_nd_h100_v5_8xh100_allreduce_busbw")
    sweep.label, sweep.data["rows"][0]["inplace_busbw_Bps"]

``python -m ringlab.measure.published build FOLDER...`` rebuilds the data set from the transcribed
source files (the project's ``shared/published``, and ``ringlab/data/transcribed`` for those
transcribed here), keeping numbers and dropping their prose.

:data:`MODELLED` says which topology preset stands for each sweep's machine and what stands for
what NCCL ran there, so that ``ringlab.predict.versus`` can set a prediction beside it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "published"
TRANSCRIBED = DATA.parent / "transcribed"  # sources transcribed for ringlab, beside ../shared/published
GB = 1e9
MACHINE_FIELDS = ("gpu", "count", "interconnect", "nodes", "gpus_per_node", "nic")
# The benchmarks whose sweeps ship in nccl-tests' columns, and the library each runs (RCCL on AMD GPUs).
# all_reduce_bench.py (PyTorch's torch.distributed) prints busbw and algbw, no time: its algbw is the mean
# over calls of size / time, not size / mean time as nccl-tests prints it.
SWEEP_TOOLS = {"nccl-tests": "NCCL", "rccl-tests": "RCCL", "all_reduce_bench.py": "NCCL"}
# A busbw the source printed beside the default one, for the same size and ranks, under another setting.
VARIANT_COLUMNS = {"busbw_nvls_off_GBps": "NCCL_NVLS_ENABLE=0"}
_P2P_NAMES = {"p2p_connectivity": "connectivity", "uni_p2p_disabled_GBps": "unidirectional_disabled",
              "uni_p2p_enabled_writes_GBps": "unidirectional_enabled", "uni_p2p_enabled_GBps": "unidirectional_enabled",
              "bidir_p2p_disabled_GBps": "bidirectional_disabled", "bidir_p2p_enabled_GBps": "bidirectional_enabled",
              "latency_p2p_disabled_us": "latency_{}_disabled", "latency_p2p_enabled_writes_us": "latency_{}_enabled",
              "latency_p2p_enabled_us": "latency_{}_enabled"}


@dataclass(frozen=True)
class Published:
    """One published measurement: ``data`` in ringlab's structures, ``label`` to show beside it."""

    name: str
    data: dict

    @property
    def machine(self) -> str:
        m = self.data["machine"]
        nodes = f"{m['nodes']} nodes x {m['gpus_per_node']}" if (m.get("nodes") or 1) > 1 else f"{m['count']}x"
        return f"{nodes} {m['gpu']}, {m['interconnect']}"

    @property
    def short(self) -> str:
        """The measurement's code and its GPUs, short enough for a legend: ``"A02: 2 nodes x 8 H100 80GB HBM3 (SXM)"``."""
        m = self.data["machine"]
        nodes = f"{m['nodes']} nodes x {m['gpus_per_node']}" if (m.get("nodes") or 1) > 1 else f"{m['count']}x"
        return f"{self.name[:3]}: {nodes} {m['gpu']}"

    @property
    def label(self) -> str:
        return f"published measurement, {self.machine}, {self.data['source']}"

    @property
    def format(self) -> str:
        return self.data["format"]


def names(format: str | None = None) -> list[str]:
    """The shipped measurements (all, or those of one ``format``: nccl-tests, p2pBandwidthLatencyTest,
    bandwidthTest, nvbandwidth, topo)."""
    every = sorted(p.stem for p in DATA.glob("*.json"))
    return every if format is None else [n for n in every if load(n).format == format]


def load(name: str) -> Published:
    """One shipped measurement by name (see :func:`names`)."""
    return _load(name)


@lru_cache(maxsize=None)
def _load(name: str) -> Published:
    path = DATA / f"{name}.json"
    if not path.exists():
        raise ValueError(f"no published measurement {name!r}; there are: {', '.join(names())}")
    return Published(name, json.loads(path.read_text()))


def peer_matrix(name: str, key: str = "unidirectional_enabled"):
    """A p2pBandwidthLatencyTest bandwidth matrix in bytes per second, row = source GPU, with the
    diagonal (a copy within one GPU) left out as NaN so that it does not drown the links."""
    import numpy as np

    entry = load(name)
    if entry.format != "p2pBandwidthLatencyTest" or key not in entry.data["matrices"]:
        have = ", ".join(entry.data.get("matrices", {})) or "none"
        raise ValueError(f"{name} has no {key!r} matrix (it has: {have})")
    matrix = np.array(entry.data["matrices"][key], dtype=float) * GB
    np.fill_diagonal(matrix, np.nan)
    return matrix


def peer_latency(name: str) -> dict:
    """The median GPU-to-GPU latency over all pairs of a shipped p2pBandwidthLatencyTest, in seconds, with peer access
    off and on (its "GPU" latency matrices, timed on the GPU): ``{"off_s", "on_s", "pairs"}``."""
    import numpy as np

    entry = load(name)
    keys = {"off_s": "latency_gpu_disabled", "on_s": "latency_gpu_enabled"}
    matrices = entry.data.get("matrices", {})
    if entry.format != "p2pBandwidthLatencyTest" or any(key not in matrices for key in keys.values()):
        raise ValueError(f"{name} has no latency matrices with peer access off and on (it has: "
                         f"{', '.join(matrices) or 'none'})")
    out = {}
    for state, key in keys.items():
        matrix = np.array(matrices[key], dtype=float)
        np.fill_diagonal(matrix, np.nan)  # a GPU to itself is no pair
        out[state], out["pairs"] = float(np.nanmedian(matrix)) * 1e-6, int(np.count_nonzero(~np.isnan(matrix)))
    return out


def peer_rows(name: str, machine: str, peak_on_Bps: float, peak_off_Bps: float) -> list[dict]:
    """Two rows for ``ringlab.viz.fraction_bars`` from a shipped p2pBandwidthLatencyTest: the median
    unidirectional copy rate over all GPU pairs with peer access off and with it on, each beside the peak
    of the link it crosses (give them: the matrix does not say; with peer access off a copy goes through
    host memory, so its link is the GPU's PCIe one)."""
    import numpy as np

    rows = []
    for key, state, peak in (("unidirectional_disabled", "P2P off", peak_off_Bps),
                             ("unidirectional_enabled", "P2P on", peak_on_Bps)):
        matrix = peer_matrix(name, key)
        rows.append({"what": f"{machine}, {state}", "Bps": float(np.nanmedian(matrix)), "peak_Bps": peak,
                     "note": f"median of {np.count_nonzero(~np.isnan(matrix))} pairs; {load(name).label}"})
    return rows


def topo_table(name: str) -> str:
    """A shipped ``nvidia-smi topo -m`` as it prints: one row per GPU, its codes, its NUMA node."""
    entry = load(name)
    if entry.format != "topo":
        raise ValueError(f"{name} is a {entry.format} measurement, not nvidia-smi topo -m")
    codes, numa = entry.data["codes"], entry.data.get("numa") or [None] * len(entry.data["codes"])
    head = "      " + "".join(f"{f'GPU{j}':>6}" for j in range(len(codes))) + "   NUMA node"
    rows = [f"GPU{i:<3}" + "".join(f"{code:>6}" for code in row) + f"   {'?' if node is None else node}"
            for i, (row, node) in enumerate(zip(codes, numa))]
    return "\n".join([head, *rows])


def host_device(name: str, device: str | None = None, peak_Bps: float | None = None) -> dict:
    """A shipped bandwidthTest's host<->device rates in the shape ``ringlab bandwidth`` gives them
    (``{"host_device": [{"what", "pinned", "Bps", "peak_Bps"}]}``), for one device (default: the
    first), with the link's peak where you give it (the tools do not print it)."""
    entry = load(name)
    if entry.format != "bandwidthTest":
        raise ValueError(f"{name} is a {entry.format} measurement, not bandwidthTest")
    devices = list(dict.fromkeys(r["device"] for r in entry.data["rows"]))
    device = devices[0] if device is None else device
    if device not in devices:
        raise ValueError(f"{name} has no device {device!r}; it has: {', '.join(map(str, devices))}")
    names = {"host_to_device": "host->device", "device_to_host": "device->host"}
    rows = [{"what": names[r["direction"]], "pinned": r["memory"] == "pinned", "Bps": r["Bps"], "peak_Bps": peak_Bps}
            for r in entry.data["rows"] if r["device"] == device and r["direction"] in names]
    return {"host_device": rows, "source": entry.label, "device": device}


def sweeps(collective: str = "allreduce", names_: list[str] | None = None) -> list[dict]:
    """Every size sweep of ``collective`` in the shipped nccl-tests-format data (or in ``names_``): the
    rows of one file with the same ranks and setting, over two sizes or more, as ``{"name", "label",
    "ranks", "setting", "rows"}`` with rows ``{"bytes", "busbw_Bps"}`` (out of place where printed, else
    in place). Single points (a table by GPU count, one payload per setting) are not sweeps."""
    out = []
    for name in names("nccl-tests") if names_ is None else names_:
        entry = load(name)
        series: dict[tuple, list[dict]] = {}
        for r in entry.data["rows"]:
            busbw = r["busbw_Bps"] if r["busbw_Bps"] is not None else r["inplace_busbw_Bps"]
            if r["collective"] == collective and r["bytes"] and busbw:
                series.setdefault((r["ranks"], r["setting"]), []).append({"bytes": r["bytes"], "busbw_Bps": busbw})
        bench = entry.data["bench"]
        for (ranks, setting), rows in series.items():
            if len({r["bytes"] for r in rows}) < 2:
                continue
            how = ", ".join(x for x in (None if bench == "nccl-tests" else bench, setting) if x)
            out.append({"name": name, "ranks": ranks, "setting": setting, "rows": rows,
                        "label": f"{entry.machine} ({name[:3]}{', ' + how if how else ''})"})
    return out


def busbw_rows(collective: str = "allreduce") -> list[dict]:
    """Every shipped sweep of ``collective`` (:func:`sweeps`) as rows for ``ringlab.viz.busbw_plot``: one
    line per sweep, named by its machine, with the out-of-place busbw where the source printed it and
    the in-place one otherwise."""
    return [dict(r, algorithm=sweep["label"]) for sweep in sweeps(collective) for r in sweep["rows"]]


def convert(raw: dict) -> dict:
    """A transcribed source file (shared/published's format) as ringlab data: numbers, no prose."""
    tool = raw["tool"]
    entry = {"source": raw["source"], "source_url": raw.get("source_url"), "tool": tool,
             "command": raw.get("command"), "command_header": raw.get("command_header"), "nccl_version": raw.get("nccl_version"), "date": raw.get("date"),
             "machine": {k: raw["machine"].get(k) for k in MACHINE_FIELDS}}
    bench = next((b for b in SWEEP_TOOLS if tool.startswith(b)), None)
    if bench:
        rows = [row for r in raw["rows"] for row in _sweep_rows(r, raw)]
        library = "RCCL" if "AMD" in raw["machine"]["gpu"] else SWEEP_TOOLS[bench]
        entry.update(format="nccl-tests", bench=bench, library=library,
                     collective=_uniform(rows, "collective"), ranks=_uniform(rows, "ranks"),
                     dtype=raw.get("dtype"), nccl_algorithm=raw.get("algorithm"), sides=_sides(raw["rows"]),
                     rows=rows + [row for r in raw.get("extra_points", []) for row in _sweep_rows(r, raw)])
    elif "p2pBandwidthLatencyTest" in tool:
        entry.update(format="p2pBandwidthLatencyTest", matrices=_p2p_matrices(raw["rows"]))
    elif "bandwidthTest" in tool:
        entry.update(format="bandwidthTest", rows=[
            {"device": r.get("device"), "direction": r["direction"].lower().replace(" ", "_"), "memory": r.get("memory"),
             "bytes": r.get("transfer_size_bytes"), "Bps": r["bandwidth_GBps"] * GB} for r in raw["rows"]])
    elif "nvbandwidth" in tool:
        entry.update(format="nvbandwidth", testcases=[_nvbandwidth_case(r) for r in raw["rows"]])
    elif "topo" in tool:
        row = raw["rows"][0]
        gpus = [i for i, label in enumerate(row["order"]) if label.startswith("GPU")]
        affinity = row.get("affinity_columns") or {}
        numa = [_integer((affinity.get(row["order"][i]) or [None, None])[1]) for i in gpus]
        entry.update(format="topo", codes=[[row["matrix"][i][j] for j in gpus] for i in gpus], numa=numa)
    else:
        raise ValueError(f"no conversion for a {tool!r} measurement")
    return entry


def _collective(named: str) -> str:
    from .logs import _PROGRAMS

    return _PROGRAMS.get(named.removesuffix("_perf"), named)


def _integer(text):
    return int(text) if isinstance(text, str) and text.isdigit() else None


def _scaled(value, scale):
    return None if value is None else value * scale


def _uniform(rows: list[dict], key: str):
    """The value every row shares for ``key``, or None where the rows differ."""
    values = {r[key] for r in rows}
    return values.pop() if len(values) == 1 else None


def _sides(rows: list[dict]) -> list[str]:
    """Which of nccl-tests' column sets the source printed: out-of-place, in-place, or one set it did not label."""
    keys = {k for r in rows for k in r if r.get(k) is not None}
    return [side for side, prefix in (("out-of-place", "oop_"), ("in-place", "ip_"), ("unlabelled", ""))
            if any(f"{prefix}{column}" in keys for column in ("time_us", "algbw_GBps", "busbw_GBps"))]


def _sweep_rows(r: dict, raw: dict) -> list[dict]:
    """The rows of one source row: one, or one per setting where the source printed a busbw per setting
    (``busbw_nvls_off_GBps`` beside ``busbw_GBps``: NCCL's default and NVLS switched off)."""
    named = r.get("collective") or raw.get("collective") or raw["tool"].split()[1]
    common = {"ranks": r.get("nranks") or raw.get("nranks") or raw["machine"]["count"],
              "collective": _collective(named),
              "nccl_algorithm": r.get("algo_printed") or r.get("algo_default"),  # where printed per row
              "setting": r.get("env")}
    rows = [dict(_nccl_row(r), **common)]
    for key, setting in VARIANT_COLUMNS.items():
        if r.get(key) is not None:
            variant = {"size_bytes": r["size_bytes"], "busbw_GBps": r[key]}
            rows.append(dict(_nccl_row(variant), **common | {"setting": setting, "nccl_algorithm": None}))
    return rows


def _nccl_row(r: dict) -> dict:
    """One size: the out-of-place columns (or the one set a source printed unlabelled), then the in-place ones."""
    def column(prefix, name):
        return r.get(f"{prefix}{name}") if prefix else r.get(f"oop_{name}", r.get(name))

    return {"bytes": r["size_bytes"], "count": r.get("count"), "dtype": r.get("type"),
            "time_s": _scaled(column("", "time_us"), 1e-6), "algbw_Bps": _scaled(column("", "algbw_GBps"), GB),
            "busbw_Bps": _scaled(column("", "busbw_GBps"), GB), "wrong": column("", "wrong"),
            "inplace_time_s": _scaled(r.get("ip_time_us"), 1e-6),
            "inplace_algbw_Bps": _scaled(r.get("ip_algbw_GBps"), GB),
            "inplace_busbw_Bps": _scaled(r.get("ip_busbw_GBps"), GB), "inplace_wrong": r.get("ip_wrong")}


def _p2p_matrices(rows: list[dict]) -> dict:
    matrices = {}
    for r in rows:
        key = _P2P_NAMES.get(r["name"])
        if key is None:
            continue
        if "{}" in key:
            matrices[key.format("gpu")] = r["matrix"]
            if r.get("cpu_matrix_us"):
                matrices[key.format("cpu")] = r["cpu_matrix_us"]
        else:
            matrices[key] = r["matrix"]
    return matrices


def _nvbandwidth_case(r: dict) -> dict:
    return {"name": r["test"], "description": r.get("title"), "units": r.get("units", "GB/s"),
            "matrix": r.get("matrix"), "value": r.get("bandwidth_GBps"),
            "gpu": r.get("gpu"), "vm": r.get("vm")}


def build(*folders: str | Path, into: Path = DATA) -> list[str]:
    """Convert every transcribed file of ``folders`` into the shipped data set; the names written."""
    into.mkdir(parents=True, exist_ok=True)
    written = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")):
            entry = convert(json.loads(path.read_text()))
            (into / f"{path.stem}.json").write_text(json.dumps(entry, indent=1) + "\n")
            written.append(path.stem)
    _load.cache_clear()
    return sorted(written)


# For each nccl-tests sweep: (the preset that models its machine, what stands for what NCCL ran, as
# ringlab.predict.versus names it), or the reason there is none.
MODELLED = {
    "A01_nccltests290_h100x8_hgx_1node_allreduce": ("hgx-h100-8", "best"),
    "A02_nccltests290_h100_2x8_ib_ndr_allreduce_default": ("ib-2x8-h100", "best"),
    "A03_nccltests290_h100_2x8_ib_ndr_allreduce_ring": ("ib-2x8-h100", "ring"),
    "A05_azure_nd_h100_v5_8xh100_allreduce_busbw": ("hgx-h100-8", "nvls"),
    "A07_azure_nd_h200_v5_8xh200_allreduce_busbw": ("hgx-h200-8", "nvls"),
    "A08_coreweave_a100_16x8_ib_allreduce": ("ib-16x8-a100", "best"),
    "A09_a3mega_h100_2x8_tcpxo_allreduce": "GPUDirect-TCPXO over Ethernet: its NICs' speed is not in the source",
    "A10_chlc_rtx4090x8_pcie_p2poff_allreduce": ("rtx4090-8-p2p-off", "best"),
    "A11_chlc_rtx4090x8_pcie_p2pon_allreduce": ("rtx4090-8-p2p-on", "best"),
    "A13_autodl_rtx2080ti_x2_pcie3_allgather": ("pcie3-switch-2-p2p-off", "ring"),
    "A14_tinygrad_rtx4090x6_p2p_allreduce_32MiB": "six RTX 4090s whose PCIe topology was not published",
    "A15_coreweave_gb200_nvl72_1rack_72gpu_allreduce": ("gb200-nvl72", "best"),
    "A16_coreweave_gb200_nvl72_2rack_128gpu_allreduce": ("ib-2x64-gb200", "best"),
    "A17_mlengineering_h200x8_nvls_on_off_by_gpucount_8GiB": ("hgx-h200-8", "best"),
    "A18_mlengineering_b200x8_p6_nvls_on_off_by_gpucount_8GiB": ("efa-1x8-b200", "best"),
    "A19_mlengineering_h200x8_16GiB_allreduce_nvls_ring_allgather_reducescatter": ("hgx-h200-8", "best"),
    "A20_galvatron_dgx-a100-40gb_allreduce": ("hgx-a100-8", "best"),
    "A21_facebookresearch-gcm_a100-80gb_allreduce": ("hgx-a100-8", "best"),
    "A23_facebookresearch-gcm_a100-80gb_2x8_allreduce": ("ib-2x8-a100", "best"),
    "A24_mlengineering_b200x8_p6_4node_efa_allreduce_bench_busbw": ("efa-4x8-b200", "best"),
    "A40_mlengineering_h200x8_allreduce_bench_sweep": ("hgx-h200-8", "best"),
    "A41_mlengineering_a100x8_nvlink3_allreduce_sweep": ("hgx-a100-8", "best"),
    "A42_mlengineering_b200x8_p6_1node_allreduce_bench_busbw": ("efa-1x8-b200", "best"),
    # AMD Instinct nodes under RCCL (ringlab.predict.rccl): 8 GPUs joined pairwise by xGMI; A45 forced the ring
    "A43_mlengineering_mi300x_allreduce_4GB_2v8gpu": ("mi300x-8", "best"),
    "A44_hisohara_aac8_mi300x_x8_rccl_allreduce": ("mi300x-8", "best"),
    "A45_hisohara_aac11_mi325x_x8_rccl_allreduce_ring_4G-16G": ("mi325x-8", "ring"),
}
# GPUs one nccl-tests thread drove where neither command nor header is transcribed but the source says
GPUS_PER_PROCESS = {"A20_galvatron_dgx-a100-40gb_allreduce": 8}  # "driven by a single nccl-tests process (nGpus 8)"


def modelled() -> list[str]:
    """The nccl-tests sweeps that a preset models (see :data:`MODELLED`)."""
    return [name for name in names("nccl-tests") if not isinstance(model_for(name), str)]


def model_for(name: str) -> tuple[str, str] | str:
    """(preset, model) for the nccl-tests sweep ``name``, or why none models it."""
    if name not in MODELLED:
        raise ValueError(f"{name!r} is not a shipped nccl-tests sweep; there are: {', '.join(names('nccl-tests'))}")
    return MODELLED[name]


def against_model(name: str) -> list[dict]:
    """The shipped nccl-tests sweep ``name`` beside the cost model's prediction for its preset, one row
    per size (``ringlab.predict.versus.versus``'s rows, each with ``preset``, ``model``, ``ranks``,
    ``collective`` and ``setting`` added). Each row is predicted for its own ranks and collective, and
    as what ran there: the ring where NVLS was switched off or the source printed Ring, NVLS where it
    printed NVLS, else the sweep's model; as its benchmark timed it (:func:`benchmark`). A sweep that no
    preset models is a ValueError saying why."""
    from ..predict.versus import versus
    from ..topology import preset

    match = model_for(name)
    if isinstance(match, str):
        raise ValueError(f"no preset models {name}: {match}")
    preset_name, model = match
    topology, bench = preset(preset_name), benchmark(name)
    out = []
    for row in load(name).data["rows"]:
        ran = row_model(row, model)
        for r in versus([row], topology, row["collective"], ran, nranks=row["ranks"], bench=bench):
            out.append(dict(r, preset=preset_name, model=ran, ranks=row["ranks"], collective=row["collective"],
                            setting=row["setting"]))
    return out


def benchmark(name: str):
    """How the shipped sweep ``name`` was timed (``ringlab.predict.harness``): its tool, and the GPUs one
    nccl-tests thread drove (``-g`` in its command, ``nGpus`` in its header)."""
    from ..predict.harness import gpus_per_process, harness

    data = load(name).data
    gpus = GPUS_PER_PROCESS.get(name) or gpus_per_process(data.get("command"), data.get("command_header"))
    return harness(data.get("bench") or "nccl-tests", gpus)


def row_model(row: dict, model: str) -> str:
    """What stands for what NCCL ran for one row (``ringlab.predict.versus``'s names): what the row says
    ran, where it says (NVLS switched off, or the algorithm printed), else ``model``."""
    if (row.get("setting") or "").replace(" ", "") == "NCCL_NVLS_ENABLE=0" or row.get("nccl_algorithm") == "Ring":
        return "ring"
    return "nvls" if row.get("nccl_algorithm") == "NVLS" else model


if __name__ == "__main__":  # python -m ringlab.measure.published build FOLDER...
    if len(sys.argv) < 3 or sys.argv[1] != "build":
        sys.exit("usage: python -m ringlab.measure.published build FOLDER...")
    print("\n".join(build(*sys.argv[2:])))
