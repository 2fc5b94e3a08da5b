"""Lab 11's check against a published run: the transcribed run closest to the lab's (:mod:`ringlab.train.runs`),
the planner's prediction for its exact layout, and the two side by side, each labelled."""
from __future__ import annotations

import math

from ...lab.findings import Finding

CLOSE = 0.10  # a prediction within 10% of the published figure agrees with it
SHAPE = ("layers", "hidden", "heads", "ffn", "vocab")
# what the planner leaves out (its module's docstring), by which way each would move a real run against it
SLOWER_IN_REALITY = "data loading, expert load imbalance and NICs shared by several parallelisms at once"
FASTER_IN_REALITY = "tensor-parallel communication overlapped with the matrix multiplications, and zero-bubble schedules"


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


def describe_published(result: dict) -> Finding:
    """The published run and the prediction of it, and which way and how far they differ."""
    run, p, ratio = result["run"], result["plan"], result["ratio"]
    L = run["layout"]
    said = [f"Published ({run['source']['title']}; {run['source']['where']}; {run['source']['url']}): "
            f"{run['model'].get('name', run['id'])} on {run['hardware']['gpus']} {run['hardware']['gpu'].upper()}s at "
            f"tp={L.get('tp') or 1} pp={L.get('pp') or 1} dp={L.get('dp')} zero={L.get('zero')} micro-batch "
            f"{L.get('micro_batch')}, {L['global_batch']} x {L['seq']} tokens a step, {L.get('precision')}, "
            f"recompute {L.get('recompute')}: {result['published']:,.0f} tokens/s per GPU ({result['how']})."]
    said.append(f"Predicted by the planner for the same layout: {result['predicted']:,.0f} tokens/s per GPU, a step of "
                f"{p.step_seconds:.2f} s, {p.memory_total / 2 ** 30:.1f} GiB a GPU"
                f"{'' if p.fits else ' (more than the GPU holds)'}.")
    if abs(ratio - 1) <= CLOSE:
        verdict = "agrees"
        said.append(f"Predicted / published = {ratio:.2f}: within {CLOSE:.0%}.")
    else:
        verdict = "optimistic" if ratio > 1 else "pessimistic"
        said.append(f"Predicted / published = {ratio:.2f}: the planner is {verdict} by "
                    f"{(ratio if ratio > 1 else 1 / ratio) - 1:.0%}.")
        said.append(f"The planner leaves out {SLOWER_IN_REALITY if ratio > 1 else FASTER_IN_REALITY}: where a real run "
                    f"{'pays for' if ratio > 1 else 'uses'} those, it runs {'slower' if ratio > 1 else 'faster'} than "
                    "predicted.")
    if result["assumed"]:
        said.append(f"Assumed where the source is silent: {'; '.join(result['assumed'])}.")
    note = run["hardware"].get("hardware_note")
    if note:
        said.append(f"The source's hardware: {note}; the planner plans the GPU's published figures.")
    return Finding(" ".join(said), (f"the planner {verdict}",))
