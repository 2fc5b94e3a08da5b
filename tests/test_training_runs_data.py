"""The published training runs and GPU compute figures the planner (rl.plan) is checked against: every row has a
source, its layout multiplies out to its GPU count, its batch splits into micro-batches, its shapes are a real
transformer's, and its measured figures agree with each other and with the GPU's peak."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ringlab.train.planner import ATTENTION

DATA = Path(__file__).resolve().parent.parent / "ringlab" / "data"
RUNS = json.loads((DATA / "training_runs.json").read_text())["runs"]
GPUS = json.loads((DATA / "gpu_compute.json").read_text())["gpus"]

PRECISIONS = {"bf16", "fp16", "fp8"}
RECOMPUTE = {None, "full", "selective"}
GPU_KINDS = {"a100", "h100", "h200", "b200", "gb200", "gh200", "mi300x", "mi325x", "mi355x", "rtx3090", "rtx4090", "rtx5090"}


def ids(rows):
    return [r["id"] for r in rows]


def test_enough_runs_on_enough_gpu_kinds():
    assert len(RUNS) >= 12
    assert len(set(ids(RUNS))) == len(RUNS), "run ids must be unique"
    assert len({r["hardware"]["gpu"] for r in RUNS}) >= 3


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_run_has_a_source(run):
    src = run["source"]
    assert src["url"].startswith("https://"), src
    assert src["title"].strip() and src["where"].strip() and src["quote"].strip()
    assert run["notes"].strip()
    assert run["measured"]["flops_convention"].strip()


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_layout_multiplies_out(run):
    lay, hw = run["layout"], run["hardware"]
    tp, pp, cp, dp, ep = lay["tp"], lay["pp"], lay["cp"], lay["dp"], lay["ep"]
    assert min(tp, pp, cp, dp, ep) >= 1
    if lay.get("layout_product_exception"):  # a source whose printed layout does not multiply out says why
        assert lay.get("layout_note", "").strip()
    else:
        assert tp * pp * cp * dp == hw["gpus"], f"{tp}*{pp}*{cp}*{dp} != {hw['gpus']}"
    assert (tp * dp) % ep == 0, "experts are sharded inside the data (and tensor) parallel ranks"
    if lay["vp"] is not None:
        assert lay["vp"] >= 1 and (lay["vp"] == 1 or pp > 1), "virtual pipeline stages need a pipeline"
    assert lay["zero"] in (None, 0, 1, 2, 3)
    assert lay["precision"] in PRECISIONS
    assert lay["recompute"] in RECOMPUTE
    assert lay.get("attention") in (None, *ATTENTION)
    if lay.get("attention") in ("fa2", "fa1"):  # a kernel other than the GPU's fastest, from the run's own software
        assert "attention" in run.get("recipe_settings", {}), \
            f"attention={lay['attention']!r} needs its recipe's citation"
    assert hw["gpu"] in GPU_KINDS and hw["gpu"] in GPUS
    assert hw["gpus"] % hw["gpus_per_node"] == 0 or hw["gpus"] < hw["gpus_per_node"]


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_batch_splits_into_micro_batches(run):
    lay = run["layout"]
    gb, mb, dp = lay["global_batch"], lay["micro_batch"], lay["dp"]
    assert gb >= 1 and lay["seq"] >= 512
    assert gb % dp == 0, "every data-parallel rank gets whole sequences"
    if mb is not None:
        assert gb % (mb * dp) == 0, f"global batch {gb} is not a multiple of micro-batch {mb} * dp {dp}"
        if lay.get("grad_accum") is not None:
            assert mb * dp * lay["grad_accum"] == gb
    if lay.get("local_batch") is not None:
        assert lay["local_batch"] * dp == gb


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_model_shape_is_sane(run):
    m, lay = run["model"], run["layout"]
    layers, hidden, heads = m["layers"], m["hidden"], m["heads"]
    assert 8 <= layers <= 256 and 512 <= hidden <= 65536
    assert hidden % heads == 0 and (hidden // heads) in (64, 96, 128, 144, 160, 192, 256), "head dimension"
    assert heads % lay["tp"] == 0, f"{heads} heads do not split over tp={lay['tp']}"
    if m["kv_heads"] is not None:
        assert heads % m["kv_heads"] == 0 and m["kv_heads"] <= heads
    assert m["ffn"] >= hidden
    assert m["vocab"] is None or 30000 <= m["vocab"] <= 300000
    assert 1 <= m["top_k"] <= m["experts"]
    assert isinstance(m["gated"], bool)
    # pipeline stages each hold at least one layer (Llama 3 trims the end stages, so only the count is checked)
    stages = lay["pp"] * (lay["vp"] or 1)
    assert layers >= lay["pp"] and (lay["vp"] is None or layers >= stages - 2)


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_measured_figures_are_plausible_and_agree(run):
    meas, lay, gpu = run["measured"], run["layout"], GPUS[run["hardware"]["gpu"]]
    figures = ("tflops_per_gpu", "mfu", "tokens_per_second_per_gpu", "step_seconds")
    assert any(meas.get(k) is not None for k in figures), "a run records at least one measured figure"
    peak = gpu["peak_tflops"][lay["precision"]] or gpu["peak_tflops"]["bf16"]
    for key in ("mfu", "hfu", "percent_of_peak"):
        if meas.get(key) is not None:
            assert 0.05 < meas[key] < 1.0, key
    if meas.get("hfu") is not None and meas.get("mfu") is not None:
        assert meas["hfu"] >= meas["mfu"]
    tf = meas.get("tflops_per_gpu")
    if tf is not None:
        assert 0 < tf < peak, f"{tf} TFLOP/s is over the {lay['precision']} peak {peak}"
        ratio = meas.get("mfu") if meas.get("mfu") is not None else meas.get("percent_of_peak")
        if ratio is not None:  # sources print one rounded to the other: both against the bf16/fp16 peak
            assert math.isclose(tf / gpu["peak_tflops"]["bf16"], ratio, abs_tol=0.012), (tf, ratio)
    # throughput and step time, where both follow from the printed numbers
    if meas.get("step_seconds") is not None and meas.get("tokens_per_second_total") is not None:
        implied = lay["global_batch"] * lay["seq"] / meas["step_seconds"]
        assert math.isclose(implied, meas["tokens_per_second_total"], rel_tol=0.02)
    if meas.get("tokens_per_second_per_gpu") is not None and meas.get("tokens_per_second_total") is not None:
        implied = meas["tokens_per_second_total"] / run["hardware"]["gpus"]
        assert math.isclose(implied, meas["tokens_per_second_per_gpu"], rel_tol=0.02)


@pytest.mark.parametrize("run", RUNS, ids=ids(RUNS))
def test_measured_figures_are_the_quoted_ones(run):
    """Each figure a run records as measured is printed in the row it quotes (thousands' commas aside), or says how it
    was derived from what is printed: a figure updated without its quote (or a quote without its figure) fails."""
    import re
    printed = set(re.findall(r"\d+(?:\.\d+)?", run["source"]["quote"].replace(",", "")))
    for key in ("tokens_per_second_per_gpu", "tflops_per_gpu"):
        value = run["measured"].get(key)
        if value is None or key in run.get("derived", {}):
            continue
        assert f"{value:g}" in printed, f"{key} {value} is not in the quote {run['source']['quote']!r}"


def test_a_revised_source_keeps_every_revision():
    """The NeMo 24.07 table was revised twice on NeMo's main branch after it first appeared: its rows cite the last
    revision by commit and keep what the earlier two printed, each by commit, date and row, so that the prediction is
    judged on every figure the source printed for a run, not one chosen among them."""
    import re
    revised = [r for r in RUNS if r["source"].get("earlier_revisions")]
    assert {r["id"] for r in revised} == {r["id"] for r in RUNS if r["id"].startswith("nemo2407")}
    assert len(revised) == 12
    for run in revised:
        source = run["source"]
        assert "8e3d65dcfe3504689bfc5b6e67d502780aacad41" in source["url"] and source["revision_date"] == "2024-09-09"
        dates = [rev["date"] for rev in source["earlier_revisions"]]
        assert dates == sorted(dates) and dates[-1] < source["revision_date"]
        for rev in source["earlier_revisions"]:
            assert re.fullmatch(r"[0-9a-f]{40}", rev["commit"]) and rev["said"].strip()
            cells, last = rev["quote"].split(" | "), source["quote"].split(" | ")
            assert cells[:9] == last[:9], "a revision of the same row: the same model, GPUs and layout"
            assert cells[9] == str(rev["tokens_per_second_per_gpu"]) and cells[10] == str(rev["tflops_per_gpu"])


def test_every_ringlab_gpu_named_here_has_compute_figures():
    from ringlab.topology.machines import GPUS as RINGLAB_GPUS

    for key in GPUS:
        assert key in RINGLAB_GPUS, f"{key} is not a ringlab GPU name"
    for key in ("a100", "h100", "h200", "b200", "gb200", "gh200", "mi300x", "mi325x", "mi355x",
                "rtx3090", "rtx4090", "rtx5090"):
        assert key in GPUS, key


@pytest.mark.parametrize("key", sorted(GPUS))
def test_gpu_compute_entry(key):
    g = GPUS[key]
    assert g["peak_source"].startswith("https://") and g["peak_where"].strip()
    peaks = g["peak_tflops"]
    assert peaks["bf16"] and peaks["fp16"] and peaks["bf16"] > 0
    if peaks["fp8"] is not None:
        assert math.isclose(peaks["fp8"], 2 * peaks["bf16"], rel_tol=0.01), "fp8 dense is twice bf16 dense"
    assert g["memory_bytes"] == g["memory_gb"] * 10**9 and 16 <= g["memory_gb"] <= 512
    if g["matmul_tflops_bf16"] is not None:
        assert g["matmul_source"].startswith("https://")
        assert 0 < g["matmul_efficiency"] < 1
        assert g["matmul_tflops_bf16"] < peaks["bf16"]
        assert math.isclose(g["matmul_tflops_bf16"] / g["matmul_theory_tflops_bf16"], g["matmul_efficiency"],
                            abs_tol=0.0015), "efficiency is MAMF / theory as printed"
        if g.get("matmul_tflops_fp8") is not None:
            assert g["matmul_tflops_fp8"] < peaks["fp8"]


def test_a_table_is_transcribed_whole():
    """Where a run is one row of a source's table ("row k of N"), every row of that table is here: a table
    transcribed in part could leave out the rows a planner predicts worst (or best) and no one would see."""
    import re
    from collections import defaultdict
    tables = defaultdict(set)
    for run in RUNS:
        where = run["source"]["where"]
        found = re.search(r"\brow (\d+) of (\d+)\b", where)
        if found:
            table = (run["source"]["url"], where[:found.start()], int(found.group(2)))
            tables[table].add(int(found.group(1)))
    assert tables, "no run names its row of a table"
    for (url, where, rows), got in tables.items():
        assert got == set(range(1, rows + 1)), f"{url} {where}: rows {sorted(set(range(1, rows + 1)) - got)} missing"
