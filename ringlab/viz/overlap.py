"""Pictures of buckets and overlap: step time against the bucket count, and one traced step per rank (the
backward pass layer by layer against each bucket's allreduce), from :mod:`ringlab.train.overlap`'s measurements."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..measure.units import format_bytes
from .axes import BELOW_AXIS_PX, finish_layout
from .plots import PALETTE

MODES = {False: ("overlap off", "#1f77b4"), True: ("overlap on", "#d62728")}


def _cap(bucket_bytes: int) -> str:
    return "1 B" if bucket_bytes == 1 else format_bytes(bucket_bytes)


def bucket_sweep_plot(rows: list[dict], title: str | None = None) -> go.Figure:
    """Step time (solid) and time waiting on communication (dotted) against the number of buckets, overlap off
    and on, from ``measure_overlap``'s rows (measured here); with ``predicted_s`` in the rows, the prediction
    too (dashed)."""
    if not rows:
        raise ValueError("no rows to plot: measure_overlap returned none")
    fig = go.Figure()
    predicted = all("predicted_s" in row for row in rows)
    for overlap, (label, color) in MODES.items():
        mine = sorted((r for r in rows if r["overlap"] == overlap), key=lambda r: r["buckets"])
        if not mine:
            continue
        x = [r["buckets"] for r in mine]
        hover = [f"{label}, {r['buckets']} buckets (bucket_bytes {_cap(r['bucket_bytes'])})" for r in mine]
        fig.add_scatter(x=x, y=[r["step_s"] * 1e3 for r in mine], name=f"step, {label}", mode="lines+markers",
                        line=dict(color=color), hovertext=hover,
                        hovertemplate="%{hovertext}: step %{y:.3g} ms<extra></extra>")
        fig.add_scatter(x=x, y=[r["waited_s"] * 1e3 for r in mine], name=f"waiting on communication, {label}",
                        mode="lines+markers", line=dict(color=color, dash="dot"), marker=dict(symbol="circle-open"),
                        hovertext=hover, hovertemplate="%{hovertext}: waited %{y:.3g} ms<extra></extra>")
        if predicted:
            fig.add_scatter(x=x, y=[r["predicted_s"] * 1e3 for r in mine], name=f"step predicted, {label}",
                            mode="lines", line=dict(color=color, dash="dash"), hovertext=hover,
                            hovertemplate="%{hovertext}: predicted %{y:.3g} ms<extra></extra>")
    settings = sorted({(r["buckets"], r["bucket_bytes"]) for r in rows})
    first = rows[0]
    fig.update_layout(
        title=title or (f"measured here: a training step on {first['ranks']} ranks against its bucket count "
                        f"({format_bytes(first['gradient_bytes'])} of gradients)"
                        + ("; dashed: predicted, alpha and B fitted here" if predicted else "")),
        xaxis=dict(title="buckets (bucket_bytes)", type="log", tickvals=[k for k, _ in settings],
                   ticktext=[f"{k}<br>({_cap(b)})" for k, b in settings]),
        yaxis=dict(title="time per step (ms)", rangemode="tozero"))
    # the legend under the axis title, below tick labels of two lines (buckets, then bucket_bytes)
    return finish_layout(fig, legend="below", axis_px=BELOW_AXIS_PX + 16)


def overlap_timeline(traces: dict, step: int | None = None, title: str | None = None,
                     clock: str | None = None) -> go.Figure:
    """One panel per trace of ``traces`` ({label: ``DistributedOptimizer.trace_records`` rows of every rank}):
    for each rank a lane of backward rows (one bar a parameter, coloured by the bucket its gradient fills) and
    a lane of allreduce rows (one bar a bucket, a diamond where it was handed over), of step ``step`` (default:
    each trace's step of median length), in ms from that step's first backward start on any rank. ``clock``
    (``measure_overlap``'s rows' ``clock``) says what the times are: "virtual (...)" puts the emulated machine in
    the title; None or this machine's clock, "measured here"."""
    if not traces:
        raise ValueError("no traces to draw")
    fig = make_subplots(rows=len(traces), cols=1, shared_xaxes=True, subplot_titles=list(traces),
                        vertical_spacing=0.12)
    shown, steps = set(), []
    for panel, records in enumerate(traces.values(), start=1):
        steps.append(median_step(records) if step is None else step)
        rows = records[records["step"] == steps[-1]]
        if not len(rows):
            raise ValueError(f"no rows of step {step}; the trace has steps {sorted(set(records['step'].tolist()))}")
        origin = rows[rows["kind"] == "backward"]["start"].min()
        for kind in ("backward", "allreduce"):
            for bucket in np.unique(rows["bucket"]):
                mine = rows[(rows["kind"] == kind) & (rows["bucket"] == bucket)]
                lanes = [f"rank {r} {kind}" for r in mine["rank"]]
                color = PALETTE[int(bucket) % len(PALETTE)]
                fig.add_bar(y=lanes, x=(mine["end"] - mine["start"]) * 1e3, base=(mine["start"] - origin) * 1e3,
                            orientation="h", marker_color=color, opacity=0.85 if kind == "backward" else 1.0,
                            marker_line=dict(color="white", width=0.5), name=f"bucket {bucket}",
                            legendgroup=f"bucket {bucket}", showlegend=f"bucket {bucket}" not in shown,
                            hovertext=[_hover(row) for row in mine], hoverinfo="text", row=panel, col=1)
                shown.add(f"bucket {bucket}")
                if kind == "allreduce":
                    fig.add_scatter(y=lanes, x=(mine["issued"] - origin) * 1e3, mode="markers",
                                    marker=dict(symbol="diamond", color=color, size=8,
                                                line=dict(color="black", width=1)),
                                    legendgroup=f"bucket {bucket}", showlegend=False, hoverinfo="text",
                                    hovertext=[f"bucket {row['bucket']} handed to communication" for row in mine],
                                    row=panel, col=1)
        ranks = sorted(set(rows["rank"].tolist()))
        fig.update_yaxes(categoryorder="array", autorange="reversed", row=panel, col=1,
                         categoryarray=[f"rank {r} {k}" for r in ranks for k in ("backward", "allreduce")])
    fig.update_xaxes(title_text="time since the step's backward pass began (ms)", row=len(traces), col=1)
    fig.update_layout(
        title=title or (_where(clock) + ": backward layer by layer against each bucket's allreduce, every rank ("
                        + "; ".join(f"{label}: step {s}" for label, s in zip(traces, steps))
                        + ")<br>colour: the bucket; diamond: when the bucket was handed to communication"),
        barmode="overlay", height=260 * len(traces) + 120)
    return finish_layout(fig, legend="below")


def _where(clock: str | None) -> str:
    """Where a trace's times come from, for a title: an emulated machine's virtual time, or this machine."""
    if clock and clock.startswith("virtual (") and clock.endswith(")"):
        return f"in virtual time on the {clock[len('virtual ('):-1]}"
    return "measured here"


def median_step(records) -> int:
    """The step whose length (first backward start to last allreduce end, over all ranks) is the median."""
    steps = np.unique(records["step"])
    lengths = [records[records["step"] == s]["end"].max() - records[records["step"] == s]["start"].min() for s in steps]
    return int(steps[np.argsort(lengths)[(len(steps) - 1) // 2]])


def _hover(row) -> str:
    took = (row["end"] - row["start"]) * 1e3
    if row["kind"] == "backward":
        return (f"rank {row['rank']}: backward of {row['name']} ({format_bytes(int(row['bytes']))} of gradient, "
                f"into bucket {row['bucket']}): {took:.3g} ms")
    return (f"rank {row['rank']}: allreduce of bucket {row['bucket']} ({format_bytes(int(row['bytes']))}): "
            f"{took:.3g} ms; step() waited {row['waited'] * 1e3:.3g} ms for it")
