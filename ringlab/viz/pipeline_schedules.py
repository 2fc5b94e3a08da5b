"""A pipeline schedule's timeline as a picture: stages as rows, time across, each pass a labelled block, idle grey."""
from __future__ import annotations

import plotly.graph_objects as go

from ..predict.pipeline import BACKWARD, FORWARD
from ..predict.schedules import WEIGHT, Timeline
from .plan import LEGEND_BELOW
COLOURS = {FORWARD: "#4c78a8", BACKWARD: "#f58518", WEIGHT: "#54a24b", None: "#e0e0e0"}
NAMES = {FORWARD: "F: forward", BACKWARD: "B: backward", WEIGHT: "W: weight gradient", None: "idle (the bubble)"}
SPLIT_NAME = "B: input gradient"  # the name of B where W has been split off it

TITLES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B", "zero-bubble": "zero-bubble ZB-H1",
          "custom": "a custom order"}


def _idle(row, makespan: float) -> list[tuple[float, float]]:
    gaps, t = [], 0.0
    for p in sorted(row, key=lambda p: p.start):
        if p.start > t + 1e-9 * max(1.0, makespan):
            gaps.append((t, p.start))
        t = max(t, p.end)
    return gaps + ([(t, makespan)] if makespan > t + 1e-9 * max(1.0, makespan) else [])


def schedule_chart(timeline: Timeline, title: str | None = None) -> go.Figure:
    """Stages (rows) against time, from a :class:`~ringlab.predict.schedules.Timeline`: one trace a kind of block
    (F, B, W where the backward is split, and idle), each block labelled with its micro-batch (and chunk, when a
    stage holds several, as ``3.1``: micro-batch 3 on chunk 1, whose blocks are drawn paler)."""
    t = timeline
    if not isinstance(t, Timeline):
        raise TypeError(f"schedule_chart draws a Timeline (ringlab.predict.schedules), got {type(t).__name__}")
    makespan = t.makespan
    fig = go.Figure()
    kinds = [FORWARD, BACKWARD] + ([WEIGHT] if WEIGHT in t.durations else [])
    for kind in kinds:
        blocks = [p for row in t.passes for p in row if p.kind == kind]
        name = SPLIT_NAME if kind == BACKWARD and WEIGHT in t.durations else NAMES[kind]
        fig.add_bar(y=[f"stage {p.stage}" for p in blocks], x=[p.end - p.start for p in blocks],
                    base=[p.start for p in blocks], orientation="h", name=name,
                    marker=dict(color=COLOURS[kind], line=dict(color="white", width=1),
                                opacity=[1.0 - 0.45 * p.chunk / max(1, t.chunks - 1) for p in blocks]),
                    text=[f"{p.microbatch}.{p.chunk}" if t.chunks > 1 else str(p.microbatch) for p in blocks],
                    textposition="inside", insidetextanchor="middle", textangle=0,
                    customdata=[[p.microbatch, p.chunk, p.end] for p in blocks],
                    hovertemplate="%{y}: micro-batch %{customdata[0]}, chunk %{customdata[1]}, "
                                  "from %{base:.3g} to %{customdata[2]:.3g}<extra>" + name + "</extra>")
    gaps = [(stage, a, b) for stage, row in enumerate(t.passes) for a, b in _idle(row, makespan)]
    fig.add_bar(y=[f"stage {s}" for s, _, _ in gaps], x=[b - a for _, a, b in gaps], base=[a for _, a, _ in gaps],
                orientation="h", name=NAMES[None], marker=dict(color=COLOURS[None], line=dict(color="white", width=1)),
                hovertemplate="%{y}: idle from %{base:.3g} for %{x:.3g}<extra>the bubble</extra>")
    times = ", ".join(f"{k}={v * t.chunks:g}" for k, v in t.durations.items())
    send = f", send {t.send:g} a hop" if t.send else ""
    fig.update_layout(
        title=title or (f"{TITLES.get(t.schedule, t.schedule)}: {t.stages} stages, {t.microbatches} micro-batches"
                        + (f", {t.chunks} chunks a stage" if t.chunks > 1 else "")
                        + f"; step {makespan:g}, bubble {t.bubble_fraction:.1%} of it<br><sup>counted from the "
                          f"schedule's dependencies (passes of a stage: {times}{send}), not measured"
                        + ("; blocks labelled micro-batch.chunk" if t.chunks > 1 else "") + "</sup>"),
        barmode="overlay", bargap=0.15, height=170 + 40 * t.stages, margin=dict(t=80, b=40),
        xaxis=dict(title="time (the unit of the pass lengths above)", range=[0, makespan], rangemode="tozero"),
        yaxis=dict(title="pipeline stage", autorange="reversed", categoryorder="array",
                   categoryarray=[f"stage {s}" for s in range(t.stages)]),
        legend=LEGEND_BELOW)
    return fig
