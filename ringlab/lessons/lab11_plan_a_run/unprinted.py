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
        said.append(f"Within 20% (and fitting in memory) at {'; '.join(r['setting'] for r in inside)}: at "
                    f"{best['setting']} it is {best['ratio']:.2f}.")
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
