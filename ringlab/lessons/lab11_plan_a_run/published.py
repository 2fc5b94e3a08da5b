"""Lab 11's check against a published run: the transcribed run closest to the lab's (:mod:`ringlab.train.runs`),
the planner's prediction for its exact layout, and the two side by side, each labelled."""
from __future__ import annotations

import math
import re

from ...lab.findings import Finding

CLOSE = 0.10  # a prediction within 10% of the published figure agrees with it
SHAPE = ("layers", "hidden", "heads", "ffn", "vocab")
# what the planner leaves out (its module's docstring), by which way each would move a real run against it
SLOWER_IN_REALITY = "data loading, expert load imbalance and NICs shared by several parallelisms at once"
FASTER_IN_REALITY = "tensor-parallel communication overlapped with the matrix multiplications, and zero-bubble schedules"


def outside_edge(value: float, low: float, high: float, spec: str = ".2f") -> str:
    """``value`` formatted by ``spec`` ('.2f', '.0%'), with more decimals where it lies outside [low, high] but would
    print as one of the edges: 1.2004 against a band up to 1.2 is '1.2004', not '1.20' beside the word 'outside'."""
    digits, kind = int(spec[1:-1]), spec[-1]
    scale = 100 if kind == "%" else 1
    while (digits < 6 and not low <= value <= high
           and round(value * scale, digits) in (round(low * scale, digits), round(high * scale, digits))):
        digits += 1
    return f"{value:.{digits}{kind}}"


def closest_run(model, gpu: str, gpus: int, runs: list[dict] | None = None) -> dict:
    """The transcribed run nearest to ``model`` on ``gpus`` GPUs of kind ``gpu``: the same shape first, then the same
    GPU, then the nearest GPU count (by ratio). Runs on GPUs the planner has no figures for are left out."""
    from ...train import runs as published

    runs = [run for run in (published.load() if runs is None else runs) if not published.not_modelled(run)]
    if not runs:
        raise ValueError("no published runs to compare with")

    def distance(run):
        shape = sum(run["model"].get(k) != getattr(model, k) for k in SHAPE)
        return (shape, run["hardware"]["gpu"] != gpu, abs(math.log2(run["hardware"]["gpus"] / gpus)))

    return min(runs, key=distance)


def against_published(run: dict) -> dict:
    """The planner's plan of ``run``'s own model, machine and layout, with the published throughput beside it:
    {run, plan, predicted, published, how, ratio, assumed}."""
    from ...train import runs as published

    planned, ratio, assumed = published.predict(run)
    tps, how = published.published_tokens_per_second_per_gpu(run)
    return {"run": run, "plan": planned, "predicted": planned.tokens_per_second_per_gpu, "published": tps, "how": how,
            "ratio": ratio, "assumed": list(assumed)}


def source_label(run: dict) -> str:
    """'published: <title>' for a figure's legend and a table's rows."""
    return f"published: {run['source']['title']}"


def published_rows(result: dict) -> list[dict]:
    """Each quantity the source printed that the planner predicts too: tokens/s per GPU always; TFLOP/s per GPU and
    MFU where printed (MFU in %)."""
    run, p = result["run"], result["plan"]
    rows = [{"quantity": "tokens/s per GPU", "unit": "tokens/s", "published": result["published"],
             "predicted": result["predicted"], "source": source_label(run)}]
    measured = run["measured"]
    if measured.get("tflops_per_gpu"):
        rows.append({"quantity": "TFLOP/s per GPU", "unit": "TFLOP/s", "published": measured["tflops_per_gpu"],
                     "predicted": p.tflops_per_gpu, "source": source_label(run)})
    if measured.get("mfu"):
        rows.append({"quantity": "MFU", "unit": "%", "published": 100 * measured["mfu"], "predicted": 100 * p.mfu,
                     "source": source_label(run)})
    for row in rows:
        row["ratio"] = row["predicted"] / row["published"]
    return rows


PUBLISHED_COLUMNS = {"quantity": "quantity", "published": ("published", ",.4g"), "predicted": ("predicted", ",.4g"),
                     "predicted / published": ("ratio", ".2f")}


def short_source(run: dict) -> str:
    """The source's title without its parenthesised asides (file paths, venues): 'NVIDIA NeMo Framework Performance
    Benchmarks, NeMo 24.07 container, DGX-H100, FP8'. The full title stays in :func:`source_label`."""
    return re.sub(r"\s*\([^)]*\)", "", run["source"]["title"]).strip(" ,;")


PARALLELISMS = ("tp", "pp", "cp", "ep", "vp", "dp")  # in the order of the planner's own layout string


def layout_words(layout: dict, gpus: int | None = None) -> str:
    """A published layout in words, whole: every parallelism that is not 1 (dp always), in the order of
    ``Plan.layout_str``, with (given ``gpus``) whether tp x pp x cp x dp makes those GPUs; then ZeRO, the micro-batch,
    the batch, the precision and recomputation, each unknown (a null in the transcription: not printed by the
    source) said so in words, never as 'None'."""
    L = layout
    parts = [f"{k}={L[k]}" for k in PARALLELISMS if L.get(k) is not None and (L[k] > 1 or k == "dp")]
    said = [" ".join(parts) if L.get("dp") is not None else " ".join(parts + ["dp not printed"])]
    if gpus is not None:
        product = math.prod(L.get(k) or 1 for k in ("tp", "pp", "cp", "dp"))
        said[0] += (f" (tp x pp x cp x dp = {product}, the {gpus} GPU{'s' * (gpus != 1)})" if product == gpus else
                    f" (tp x pp x cp x dp = {product}, not the {gpus} GPU{'s' * (gpus != 1)}: the transcribed layout "
                    "is not whole)")
    if L.get("vp") is None and (L.get("pp") or 1) > 1:
        said.append("interleaving not printed")
    zero = L.get("zero")
    said.append("ZeRO not printed by the source" if zero is None else
                "no ZeRO (optimizer state replicated)" if zero == 0 else f"ZeRO {zero}")
    said.append("micro-batch not printed" if L.get("micro_batch") is None else f"micro-batch {L['micro_batch']}")
    said.append(f"{L['global_batch']} x {L['seq']} tokens a step")
    said.append(L.get("precision") or "precision not printed")
    recompute = L.get("recompute")
    said.append("no recomputation stated" if recompute is None else f"{recompute} recomputation")
    return ", ".join(said)


def describe_published(result: dict) -> Finding:
    """The published run and the prediction of it, and which way and how far they differ. The layout whole (every
    parallelism, so that their product is the GPUs named); the source by its short name, its address on a line of its
    own at the end."""
    from ...train import runs as published

    run, p, ratio = result["run"], result["plan"], result["ratio"]
    gpus = run["hardware"]["gpus"]
    said = [f"Published in {short_source(run)} ({run['source']['where']}): "
            f"{run['model'].get('name', run['id'])} on {gpus} {run['hardware']['gpu'].upper()}s at "
            f"{layout_words(run['layout'], gpus)}: {result['published']:,.0f} tokens/s per GPU "
            f"({result['how']})."]
    said.append(f"Predicted by the planner for the same layout: {result['predicted']:,.0f} tokens/s per GPU, a step of "
                f"{p.step_seconds:.2f} s, {p.memory_total / 2 ** 30:.1f} GiB a GPU"
                f"{'' if p.fits else ' (more than the GPU holds)'}.")
    if 1 - CLOSE <= ratio <= 1 + CLOSE:  # the band as outside_edge prints it: 1.1 is inside, as 0.9 is
        verdict = "agrees"
        said.append(f"Predicted / published = {ratio:.2f}: within {CLOSE:.0%}.")
    else:
        verdict = "optimistic" if ratio > 1 else "pessimistic"
        said.append(f"Predicted / published = {outside_edge(ratio, 1 - CLOSE, 1 + CLOSE)}: the planner is {verdict} by "
                    f"{outside_edge(abs(ratio - 1) if ratio > 1 else 1 / ratio - 1, 0, CLOSE, '.0%')}.")
        said.append(f"The planner leaves out {SLOWER_IN_REALITY if ratio > 1 else FASTER_IN_REALITY}: where a real run "
                    f"{'pays for' if ratio > 1 else 'uses'} those, it runs {'slower' if ratio > 1 else 'faster'} than "
                    "predicted.")
    earlier = published.earlier_revisions(run)
    if earlier:  # a table revised after it first appeared: the figure cited is its last revision's
        said.append("The source revised this row after it first appeared: "
                    + ", ".join(f"{theirs:,.0f} on {rev['date']}" for rev, theirs in earlier)
                    + f", then the {result['published']:,.0f} above ({run['source'].get('revision_date') or 'last'}); "
                    "predicted / those = " + ", ".join(f"{result['predicted'] / theirs:.2f}" for _, theirs in earlier)
                    + ".")
    if result["assumed"]:
        said.append(f"Assumed where the source is silent: {'; '.join(result['assumed'])}.")
    note = run["hardware"].get("hardware_note")
    if note:
        said.append(f"The source's hardware: {note}; the planner plans the GPU's published figures.")
    return Finding(" ".join(said) + f"\nSource: {run['source']['url']}", (f"the planner {verdict}",))
