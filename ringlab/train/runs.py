"""Published training runs, as their sources printed them, and the planner's prediction of each.

``ringlab/data/training_runs.json`` holds runs transcribed from papers and vendors' performance tables (each with
its source, table and row): the model's shape, the machine, the exact layout and what was measured. They are data
to predict, never data to fit: nothing in :mod:`ringlab.train.planner` is taken from them.

Each source states its throughput its own way; :func:`published_tokens_per_second_per_gpu` turns it into tokens
per second per GPU with the source's own arithmetic, never the planner's:

- tokens per second per GPU, where printed; else all GPUs' tokens per second over the GPUs; else the batch's
  tokens over the printed step time;
- else TFLOP/s per GPU (or MFU times the peak the source names) over the source's own FLOPs per token:
  Megatron-LM 2021 (Narayanan et al., eq. 3, the recomputed forward counted): ``96 l h^2 (1 + s/(6h) +
  V/(16 l h))``; Korthikanti et al. 2022 (eq. 7, model FLOPs): ``72 l h^2 (1 + s/(6h) + V/(12 h l))``; PaLM's
  ``6 N + 12 l h s`` (the Llama 3 paper's MFU; Megatron-Core's, NeMo's and Megatron-Bridge's model FLOPs are the
  same sum written per layer).

Where a run leaves part of its layout unsaid (micro-batch, ZeRO stage, virtual stages, the network), the
prediction assumes the common default and says so in its notes. Memory settings a run's published recipe sets
(``grad_reduce_in_fp32``, ``precision_aware_optimizer``, ``offload_layers``, ``ends_in_pipeline_split``, each cited
in the run's ``recipe_settings``), and the loss's implementation the run's software used (``cross_entropy``, cited there
too), go to the planner as they are; where a run has none, Megatron-LM's defaults.

Where a run's ratio is far off and its source leaves the micro-batch or the virtual stages unprinted,
:func:`unprinted` plans it at every value those settings can take: a setting that brings the plan within 20% while
it fits is a way the run may have been set, said beside the run, never taken as the prediction.

A run can be below what its hardware allows, and its own source can show it: :func:`faster_twin` finds a run of the
same source on the same model, GPUs and layout that measured more (MegaScale's paper measures Megatron-LM and
MegaScale on one cluster, one layout). Such a run's software left speed unused; the planner predicts healthy
software, so its ratio to the faster twin is the one that judges it.
"""
from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

from ..topology.machines import cluster
from .planner import Plan, compute_data, plan
from .transformer import Transformer

LAYOUT_KEYS = ("tp", "pp", "cp", "ep", "dp", "global_batch", "seq", "precision")  # what a twin must share
SHAPE_KEYS = ("layers", "hidden", "heads", "ffn", "vocab", "kv_heads", "gated", "experts", "top_k")
DEFAULT_NIC_GBPS = {"a100": 200}  # HDR InfiniBand, one per GPU (DGX A100); 400 (NDR) for later GPUs


@lru_cache(maxsize=1)
def _data() -> dict:
    with resources.files("ringlab").joinpath("data/training_runs.json").open() as f:
        return json.load(f)


def load() -> list[dict]:
    """Every transcribed run (a dict each, as in the file)."""
    return list(_data()["runs"])


def find(run_id: str) -> dict:
    """The run of that id."""
    for run in _data()["runs"]:
        if run["id"] == run_id:
            return run
    raise ValueError(f"no published run {run_id!r}; known: {', '.join(r['id'] for r in _data()['runs'])}")


def model_of(run: dict) -> Transformer:
    """The run's model, by the shape its source (or the model's own paper) gives."""
    shape = {k: run["model"][k] for k in SHAPE_KEYS if run["model"].get(k) is not None}
    return Transformer(**shape, name=run["model"].get("name", run["id"]))


def topology_of(run: dict) -> tuple[object, list[str]]:
    """The run's machine as ``rl.topology.cluster`` builds it, and what had to be assumed."""
    hw, assumed = run["hardware"], []
    gpu, gpus = hw["gpu"], hw["gpus"]
    per_node = hw.get("gpus_per_node") or 8
    if hw.get("nvlink_domain"):  # GB200 NVL72: the NVLink domain is the node for NCCL
        per_node = max(d for d in range(4, min(gpus, hw["nvlink_domain"]) + 1, 4) if gpus % d == 0) \
            if gpus >= 4 else gpus
        assumed.append(f"the job's {gpus} GPUs in NVLink domains of {per_node}")
    nic = hw.get("nic_gbps")
    if nic is None and hw.get("node_network_gbps"):
        nic = hw["node_network_gbps"] / per_node
    if nic is None:
        nic = DEFAULT_NIC_GBPS.get(gpu, 400)
        assumed.append(f"{nic:g} Gbit/s a GPU (the network is not printed)")
    fabric = hw.get("fabric") or "ib"
    if not hw.get("fabric"):
        assumed.append("InfiniBand (the fabric is not printed)")
    per_node = min(per_node, gpus)
    return cluster(gpu, gpus // per_node, per_node, nic_gbps=nic, fabric=fabric), assumed


def layout_of(run: dict) -> tuple[dict, list[str]]:
    """The keywords of :func:`ringlab.train.plan` for the run, and what had to be assumed."""
    L, assumed = run["layout"], []
    out = {k: L.get(k) or 1 for k in ("tp", "pp", "cp", "ep")}
    out["vp"] = L.get("vp") or 1
    if L.get("vp") is None and out["pp"] > 1:
        if L.get("interleaved"):  # the source says interleaved, and no more: the least interleaving
            out["vp"] = LEAST_INTERLEAVING
            assumed.append(f"the least interleaving, vp={LEAST_INTERLEAVING} (its source runs an interleaved schedule "
                           "and prints no number of virtual stages)")
        else:
            assumed.append("no interleaving (vp=1; not printed)")
    if L.get("micro_batch") is None:
        assumed.append("micro-batch 1 (not printed)")
    out["micro_batch"] = L.get("micro_batch") or 1
    if L.get("zero") is None:
        assumed.append("ZeRO 1, Megatron's distributed optimizer (not printed)")
    out["zero"] = 1 if L.get("zero") is None else L["zero"]
    out.update(global_batch=L["global_batch"], seq=L["seq"], precision=L.get("precision") or "bf16",
               recompute=L.get("recompute"), attention=L.get("attention") or "flash")
    # the recipe's memory settings, where the run's published recipe sets them (cited in its recipe_settings)
    out.update(grad_reduce_in_fp32=L.get("grad_reduce_in_fp32", True),
               precision_aware_optimizer=L.get("precision_aware_optimizer", False),
               offload_layers=L.get("offload_layers") or 0,
               ends_in_pipeline_split=L.get("ends_in_pipeline_split", False))
    out["optimizer_dtype"] = L.get("optimizer_dtype") or "fp32"
    out["cp_comm"] = L.get("cp_comm") or "p2p"  # Megatron-Core's default: a ring, hidden behind attention
    out["cross_entropy"] = L.get("cross_entropy") or "unfused"
    if L.get("cross_entropy") is None:
        assumed.append("the loss unfused, Megatron-LM's default (its implementation is not printed)")
    if out["precision"] == "fp16":
        out["precision"] = "bf16" if "fp16" not in compute_data()[run["hardware"]["gpu"]]["peak_tflops"] else "fp16"
    return out, assumed


def source_flops_per_token(run: dict) -> float | None:
    """FLOPs per token as the run's source counts them (None where it counts none the planner can repeat)."""
    m, L = run["model"], run["layout"]
    convention = (run["measured"].get("flops_convention") or "").lower()
    l, h, s, V = m["layers"], m["hidden"], L["seq"], m["vocab"]
    if "megatron 2021" in convention:
        return 96 * l * h ** 2 * (1 + s / (6 * h) + V / (16 * l * h))
    if "korthikanti" in convention:
        return 72 * l * h ** 2 * (1 + s / (6 * h) + V / (12 * h * l))
    if any(word in convention for word in ("chowdhery", "palm", "6n", "megatron-core", "model tflop")):
        # Megatron-Core's num_floating_point_operations, NeMo's and Megatron-Bridge's "Model TFLOP/s": per token
        # 12 l h^2 (1 + kv/a + s/h + g f/h) + 6 h V, which is PaLM's 6 N + 12 l h s term for term
        return model_of(run).flops_per_token(s)
    return None


def published_tokens_per_second_per_gpu(run: dict) -> tuple[float, str]:
    """Tokens per second per GPU the run measured, and how it follows from what the source printed."""
    got, gpus = run["measured"], run["hardware"]["gpus"]
    tokens = run["layout"]["global_batch"] * run["layout"]["seq"]
    if got.get("tokens_per_second_per_gpu"):
        return float(got["tokens_per_second_per_gpu"]), "printed"
    if got.get("tokens_per_second_total"):
        return got["tokens_per_second_total"] / gpus, "all GPUs' tokens/s, printed, over the GPUs"
    if got.get("step_seconds"):
        return tokens / got["step_seconds"] / gpus, "the batch's tokens over the printed step time"
    per_token = source_flops_per_token(run)
    if per_token is None:
        raise ValueError(f"run {run['id']}: no throughput the planner can compare (its FLOP convention is not one "
                         f"it can repeat: {got.get('flops_convention')!r})")
    if got.get("tflops_per_gpu"):
        return got["tflops_per_gpu"] * 1e12 / per_token, "printed TFLOP/s per GPU over the source's FLOPs a token"
    if got.get("mfu"):
        peak = compute_data()[run["hardware"]["gpu"]]["peak_tflops"]["bf16"]
        return got["mfu"] * peak * 1e12 / per_token, "printed MFU x the bf16 peak over the source's FLOPs a token"
    raise ValueError(f"run {run['id']}: no throughput printed")


MEASURED_FIGURES = ("tflops_per_gpu", "mfu", "tokens_per_second_per_gpu", "tokens_per_second_total", "step_seconds")


def earlier_revisions(run: dict) -> list[tuple[dict, float]]:
    """Each earlier revision of the table the run is quoted from (``source.earlier_revisions``: a source revised after
    it first appeared, each revision with its commit, date and the row as it printed it) and the tokens per second per
    GPU that revision printed for the run, by the source's own arithmetic. The run's ``measured`` figures are its
    cited revision's, the last; the earlier ones are kept so that the prediction can be judged on each."""
    out = []
    for revision in run["source"].get("earlier_revisions", []):
        measured = dict(run["measured"], **{k: revision[k] for k in MEASURED_FIGURES if k in revision})
        out.append((revision, published_tokens_per_second_per_gpu(dict(run, measured=measured))[0]))
    return out


def not_modelled(run: dict) -> str | None:
    """Why the planner cannot model the run's machine (a GPU variant it has no figures for), or None."""
    variant = run["hardware"].get("variant")
    return f"its GPUs are not a model ringlab has figures for: {variant}" if variant else None


def predict(run: dict) -> tuple[Plan, float, list[str]]:
    """The planner's plan for the run, predicted / published tokens per second per GPU, and what was assumed.
    A run on a machine the planner does not model raises ValueError saying why."""
    why = not_modelled(run)
    if why:
        raise ValueError(f"run {run['id']}: not modelled: {why}")
    topology, assumed = topology_of(run)
    layout, more = layout_of(run)
    result = plan(model_of(run), topology, **layout)
    published, _ = published_tokens_per_second_per_gpu(run)
    return result, result.tokens_per_second_per_gpu / published, assumed + more


def faster_twin(run: dict, others: list[dict] | None = None) -> tuple[dict, float] | None:
    """The run of the same source with the same model shape, GPU, GPU count and layout (:data:`LAYOUT_KEYS`) that
    measured the most tokens per second per GPU, and how many times faster than ``run`` it was; None where no such
    run measured more. ``others``: the runs to look in (all transcribed runs by default)."""
    def key(r):
        return (r["source"]["url"], tuple(r["model"].get(k) for k in SHAPE_KEYS), r["hardware"]["gpu"],
                r["hardware"]["gpus"], tuple(r["layout"].get(k) for k in LAYOUT_KEYS))

    mine, best = published_tokens_per_second_per_gpu(run)[0], None
    for other in load() if others is None else others:
        if other["id"] != run["id"] and key(other) == key(run):
            theirs = published_tokens_per_second_per_gpu(other)[0]
            if theirs > mine and (best is None or theirs > best[1]):
                best = (other, theirs)
    return None if best is None else (best[0], best[1] / mine)


def faster_elsewhere(run: dict, others: list[dict] | None = None) -> tuple[dict, float] | None:
    """The run of another source with the same model shape, GPU, precision and sequence length (any layout and GPU
    count) that measured the most tokens per second per GPU, and how many times faster than ``run`` it was; None
    where none measured more. Context for a run the plan misses, never a verdict: the layouts differ."""
    def key(r):
        return (tuple(r["model"].get(k) for k in SHAPE_KEYS), r["hardware"]["gpu"],
                r["layout"].get("precision") or "bf16", r["layout"]["seq"])

    mine, best = published_tokens_per_second_per_gpu(run)[0], None
    for other in load() if others is None else others:
        if other["source"]["url"] != run["source"]["url"] and key(other) == key(run) and not not_modelled(other):
            theirs = published_tokens_per_second_per_gpu(other)[0]
            if theirs > mine and (best is None or theirs > best[1]):
                best = (other, theirs)
    return None if best is None else (best[0], best[1] / mine)

UNPRINTED_MICRO_BATCHES = (1, 2, 4, 8, 16)  # micro-batch sizes tried where a source prints none
UNPRINTED_VIRTUAL = (1, 2, 3, 4, 6, 8)      # virtual stages a GPU, tried where a pipelined run prints none
LEAST_INTERLEAVING = 2  # virtual stages a GPU where a source says its schedule is interleaved and prints no number


def unprinted(run: dict) -> list[dict]:
    """The plan at each value of the settings the run's source does not print (the micro-batch: the sizes of
    :data:`UNPRINTED_MICRO_BATCHES` that divide the sequences a data-parallel rank takes a step; the virtual stages
    of a pipelined run: :data:`UNPRINTED_VIRTUAL` that divide the layers a stage holds, over 1 where the source says
    its schedule is interleaved), every combination: each as
    ``{"settings": {...}, "ratio": predicted / published, "fits": bool, "plan": Plan}``, the assumed values first.
    Empty where the source prints them all."""
    L = run["layout"]
    layout, _ = layout_of(run)
    choices = {}
    if L.get("micro_batch") is None:
        per_rank = L["global_batch"] // (run["hardware"]["gpus"] // (layout["tp"] * layout["pp"] * layout["cp"]))
        choices["micro_batch"] = [m for m in UNPRINTED_MICRO_BATCHES if per_rank % m == 0]
    if L.get("vp") is None and layout["pp"] > 1:
        per_stage = -(-run["model"]["layers"] // layout["pp"])
        choices["vp"] = [v for v in UNPRINTED_VIRTUAL if per_stage % v == 0 and (v > 1 or not L.get("interleaved"))]
    if not choices:
        return []
    published, _ = published_tokens_per_second_per_gpu(run)
    topology, _ = topology_of(run)
    model = model_of(run)
    out = []
    combos = [{}]
    for key, values in choices.items():
        combos = [{**c, key: v} for c in combos for v in values]
    for settings in combos:
        try:
            result = plan(model, topology, **{**layout, **settings})
        except ValueError:  # a combination the planner refuses (more stages than layers)
            continue
        out.append({"settings": settings, "ratio": result.tokens_per_second_per_gpu / published,
                    "fits": result.fits, "plan": result})
    return out
