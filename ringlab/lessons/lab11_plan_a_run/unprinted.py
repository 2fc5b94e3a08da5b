"""Lab 11's "what the source did not print": a published run whose source leaves a setting out, planned at every
value that setting can take (:func:`ringlab.train.runs.unprinted`), the ratios side by side, and what changes with
it, in words computed from the plans."""
from __future__ import annotations

import plotly.graph_objects as go

from ...lab.findings import Finding
from ...viz.axes import finish_layout
from .published import outside_edge

RUN = "megatroncore2024-gpt-32b-h100"  # Megatron-Core's 32B on 384 H100s: its README prints no micro-batch
LOW, HIGH = 0.8, 1.2                    # the benchmark's band: within 20%


def unprinted_rows(run_id: str = RUN) -> list[dict]:
    """One row per value of the unprinted settings: its label, predicted / published, whether it fits, the
    micro-batches a step, and the data-parallel time left exposed and hidden (seconds a step, predicted)."""
    from ...train import runs

    run = runs.find(run_id)
    rows = []
    for found in runs.unprinted(run):
        plan = found["plan"]
        rows.append({"setting": ", ".join(f"{k}={v}" for k, v in found["settings"].items()),
                     "settings": found["settings"], "ratio": found["ratio"], "fits": found["fits"],
                     "fits_word": "yes" if found["fits"] else "no",
                     "micro_batches": plan.layout["micro_batches"], "step": plan.step_seconds,
                     "dp_exposed": plan.time.get("dp", 0.0), "dp_hidden": plan.hidden.get("dp", 0.0)})
    if not rows:
        raise ValueError(f"run {run_id}: its source prints every setting the planner could vary")
    return rows


UNPRINTED_COLUMNS = {"setting (not printed)": "setting", "micro-batches a step": "micro_batches",
                     "predicted step (s)": ("step", ".2f"), "dp exposed (s)": ("dp_exposed", ".3f"),
                     "dp hidden (s)": ("dp_hidden", ".3f"), "predicted / published": ("ratio", ".2f"),
                     "fits in memory": "fits_word"}


def describe_unprinted(rows: list[dict], run_id: str = RUN) -> Finding:
    """What the assumed setting predicts, which values would bring the plan within 20%, and why, from the rows."""
    from ...train import runs

    run = runs.find(run_id)
    assumed, inside = rows[0], [r for r in rows if r["fits"] and LOW <= r["ratio"] <= HIGH]
    said = [f"{run['model'].get('name', run_id)} on {run['hardware']['gpus']} {run['hardware']['gpu'].upper()}s: "
            f"its source prints no {' or '.join(k.replace('_', '-') for k in assumed['settings'])}. Assumed "
            f"{assumed['setting']}, the plan is {outside_edge(assumed['ratio'], LOW, HIGH)} of the published "
            f"throughput, "
            f"{'within' if LOW <= assumed['ratio'] <= HIGH else 'outside'} 20%."]
    if inside:
        best = min(inside, key=lambda r: abs(r["ratio"] - 1))
        listed = "; ".join(r["setting"] for r in inside)
        said.append(f"Within 20% (and fitting in memory) at {len(inside)} settings ({listed}): "
                    f"closest at {best['setting']} ({best['ratio']:.2f})." if len(inside) > 1 else
                    f"Within 20% (and fitting in memory) at {best['setting']} ({best['ratio']:.2f}).")
        if best["dp_exposed"] < assumed["dp_exposed"] and best["micro_batches"] != assumed["micro_batches"]:
            said.append(f"What changes: {assumed['micro_batches']} micro-batch{'es' * (assumed['micro_batches'] > 1)} "
                        f"a step at {assumed['setting']}, {best['micro_batches']} at {best['setting']}. The "
                        f"data-parallel reduce-scatter runs during the last micro-batch's backward and the all-gather "
                        f"during the first one's forward, so the bigger the micro-batch the more they hide behind: "
                        f"{assumed['dp_exposed']:.3f} s exposed against {best['dp_exposed']:.3f} s.")
        said.append("That is a way the run may have been set, not a prediction: the planner keeps the assumed value, "
                    "and a setting picked because it matches the published number would be fitted to it.")
    else:
        said.append("No value of what the source leaves out brings the plan within 20%: the difference is "
                    "somewhere else.")
    return Finding(" ".join(said), ("within 20% at an unprinted setting" if inside else "no unprinted setting",))


def unprinted_bars(rows: list[dict], title: str) -> go.Figure:
    """Predicted / published at each value of the unprinted settings, the 20% band shaded, bars that do not fit
    hatched."""
    fig = go.Figure(go.Bar(x=[r["setting"] for r in rows], y=[r["ratio"] for r in rows],
                           text=[f"{r['ratio']:.2f}" + ("" if r["fits"] else " (does not fit)") for r in rows],
                           textposition="outside", marker_color="#4c78a8",
                           marker_pattern_shape=["" if r["fits"] else "/" for r in rows], name="predicted / published"))
    fig.add_hrect(y0=LOW, y1=HIGH, fillcolor="#54a24b", opacity=0.15, line_width=0, layer="below")
    fig.add_hline(y=1.0, line_dash="dot", line_color="#333")
    fig.update_layout(title=title, xaxis_title="the setting the source does not print (the first: as assumed)",
                      yaxis=dict(title="predicted / published (band: within 20%)", rangemode="tozero"), height=400,
                      showlegend=False)
    return finish_layout(fig)


# -- a setting in the source's words --------------------------------------------------------------------------------
WORDS_RUNS = ("llama3-405b-8192", "llama3-405b-16384")  # the Llama 3 paper's two 8k-token runs, 8,192 and 16,384 GPUs
WORDS_VIRTUAL = (1, 2, 4, 8)                           # virtual stages a GPU that divide their stages' 8 layer slots


def words_rows(run_ids: tuple[str, str] = WORDS_RUNS, values: tuple[int, ...] = WORDS_VIRTUAL) -> list[dict]:
    """The two runs of one source planned at each number of virtual stages a GPU (``values``), their other settings
    as transcribed: per value, each run's predicted / published, whether both fit, and the second run's predicted
    tokens/s per GPU over the first's, beside the same relation of their published figures."""
    import copy

    from ...train import runs

    pair = [runs.find(r) for r in run_ids]
    if len(pair) != 2:
        raise ValueError(f"run_ids takes two runs of one source, got {len(pair)}")
    published = [runs.published_tokens_per_second_per_gpu(r)[0] for r in pair]
    rows = []
    for vp in values:
        plans = []
        for run in pair:
            changed = copy.deepcopy(run)
            changed["layout"]["vp"] = vp
            plans.append(runs.predict(changed))
        (first, r1, _), (second, r2, _) = plans
        rows.append({"vp": vp, "first_ratio": r1, "second_ratio": r2,
                     "fits": first.fits and second.fits, "fits_word": "yes" if first.fits and second.fits else "no",
                     "pair": second.tokens_per_second_per_gpu / first.tokens_per_second_per_gpu,
                     "published_pair": published[1] / published[0]})
    return rows


WORDS_COLUMNS = {"virtual stages a GPU": "vp", "predicted 16,384 / 8,192 GPUs": ("pair", ".2f"),
                 "published 16,384 / 8,192 GPUs": ("published_pair", ".2f"),
                 "8,192 GPUs: predicted / published": ("first_ratio", ".2f"),
                 "16,384 GPUs: predicted / published": ("second_ratio", ".2f"), "both fit": "fits_word"}


def describe_words(rows: list[dict], run_ids: tuple[str, str] = WORDS_RUNS) -> Finding:
    """Which number of virtual stages the source's words give, which of the values planned puts the two runs'
    throughputs in the relation the source measured, and where the words' value puts the plan against each run."""
    from ...train import runs

    first, second = (runs.find(r) for r in run_ids)
    words = first["layout"].get("vp")
    measured = rows[0]["published_pair"]
    closest = min(rows, key=lambda r: abs(r["pair"] - measured))
    layers, pp = first["model"]["layers"], first["layout"]["pp"]
    said = [f"The source prints no number of virtual stages, but its words give one: taking a layer off the first "
            f"stage leaves that stage's first model chunk only the embedding, so a chunk holds one layer, and with "
            f"the embedding and the loss counted as layers vp = ({layers} + 2) / {pp} = {words}."
            if words and "vp" in first.get("derived", {}) else
            "The source gives no number of virtual stages, in its table or its words."]
    said.append(f"Its two runs measured {measured:.2f} between them ({second['hardware']['gpus']:,} GPUs' tokens/s a "
                f"GPU over {first['hardware']['gpus']:,} GPUs'); the plan puts "
                + "; ".join(f"{r['pair']:.2f} at vp={r['vp']}" for r in rows)
                + f": closest at vp={closest['vp']}.")
    at_words = next((r for r in rows if r["vp"] == words), None)
    conclusions = [f"closest at vp={closest['vp']}"]
    if at_words:
        within = [LOW <= r <= HIGH for r in (at_words["first_ratio"], at_words["second_ratio"])]
        said.append(f"At the words' vp={words} the plan is {outside_edge(at_words['first_ratio'], LOW, HIGH)} and "
                    f"{outside_edge(at_words['second_ratio'], LOW, HIGH)} of the published throughputs: "
                    + ("both within 20%." if all(within) else "both outside 20%." if not any(within) else
                       "one within 20% and one outside."))
        conclusions.append("the words' value is the closest" if closest is at_words else
                           "the words' value is not the closest")
        conclusions.append("within 20% at the words' value" if all(within) else "outside 20% at the words' value")
        both = (at_words["first_ratio"], at_words["second_ratio"])
        if not all(within):
            way = ("optimistic: what these runs paid, the planner does not price" if min(both) > HIGH else
                   "pessimistic: these runs had something the planner does not count" if max(both) < LOW else
                   "off one way for one run and not the other")
            said.append(f"A relation between two runs of one source is a check an assumed setting can pass or fail; "
                        f"the level is the planner's own to get right, and here it is {way}.")
    return Finding(" ".join(said), tuple(conclusions))


def words_bars(rows: list[dict], title: str) -> go.Figure:
    """The second run's predicted throughput a GPU over the first's at each number of virtual stages, beside the
    relation their published figures show (a dashed line)."""
    fig = go.Figure(go.Bar(x=[f"vp={r['vp']}" for r in rows], y=[r["pair"] for r in rows],
                           text=[f"{r['pair']:.2f}" + ("" if r["fits"] else " (does not fit)") for r in rows],
                           textposition="inside", insidetextanchor="middle", textfont_color="white",
                           marker_color="#4c78a8", marker_pattern_shape=["" if r["fits"] else "/" for r in rows],
                           name="predicted"))
    measured = rows[0]["published_pair"]
    fig.add_hline(y=measured, line_dash="dash", line_color="#e45756",
                  annotation_text=f"published: {measured:.2f}", annotation_position="top left")
    top = max([measured] + [r["pair"] for r in rows]) * 1.15
    fig.update_layout(title=title, xaxis_title="virtual stages a GPU (the source prints none)",
                      yaxis=dict(title="second run's tokens/s a GPU over the first's", range=[0, top]),
                      height=400, showlegend=False)
    return finish_layout(fig)
