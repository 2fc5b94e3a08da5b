"""Pictures of pipeline parallelism: a schedule's stages against time slots, and the bubble against micro-batches."""
from __future__ import annotations

import plotly.graph_objects as go

from ..predict.pipeline import BACKWARD, FORWARD, bubble_fraction, idle_slots

COLOURS = {FORWARD: "#4c78a8", BACKWARD: "#f58518", None: "#e0e0e0"}
NAMES = {FORWARD: "forward", BACKWARD: "backward", None: "idle (the bubble)"}


def pipeline_chart(grid, title: str | None = None) -> go.Figure:
    """Stages (rows) against time slots, from ``grid[stage][slot]`` (:func:`ringlab.predict.pipeline.gpipe_schedule`):
    each micro-batch's forward and backward pass as a labelled box, the idle slots in grey."""
    if not grid or not grid[0]:
        raise ValueError("an empty schedule: no stages or no slots")
    stages, slots = len(grid), len(grid[0])
    fig = go.Figure()
    for kind in (FORWARD, BACKWARD, None):
        cells = [(stage, slot, cell) for stage, row in enumerate(grid) for slot, cell in enumerate(row)
                 if (cell is None if kind is None else cell is not None and cell[0] == kind)]
        fig.add_bar(y=[f"stage {stage}" for stage, _, _ in cells], x=[1] * len(cells),
                    base=[slot for _, slot, _ in cells], orientation="h", name=NAMES[kind],
                    marker=dict(color=COLOURS[kind], line=dict(color="white", width=1)),
                    text=["" if cell is None else f"{cell[0]}{cell[1]}" for _, _, cell in cells],
                    textposition="inside", insidetextanchor="middle",
                    hovertemplate="%{y}, slot %{base}: %{text}<extra>" + NAMES[kind] + "</extra>")
    idle = idle_slots(grid)
    fig.update_layout(title=title or f"{stages} stages, {slots} slots: {idle} of {stages * slots} stage-slots idle "
                                     f"({idle / (stages * slots):.0%})",
                      barmode="overlay", bargap=0.15, height=140 + 40 * stages,
                      xaxis=dict(title="time slot (one forward or backward pass of one micro-batch)", dtick=1,
                                 range=[0, slots]),
                      yaxis=dict(autorange="reversed"), legend=dict(orientation="h", y=-0.35))
    return fig


def bubble_plot(stage_counts=(4, 8), max_microbatches: int = 32) -> go.Figure:
    """The predicted bubble fraction (n-1)/(m+n-1) against micro-batches m, one line per stage count n."""
    fig = go.Figure()
    microbatches = list(range(1, max_microbatches + 1))
    for n in stage_counts:
        fig.add_scatter(x=microbatches, y=[bubble_fraction(n, m) for m in microbatches], name=f"{n} stages",
                        mode="lines+markers", marker=dict(size=4))
    fig.update_layout(title="predicted: the GPipe bubble, (n-1)/(m+n-1), against micro-batches",
                      xaxis_title="micro-batches per step (m)",
                      yaxis=dict(title="idle share of a step", tickformat=".0%", range=[0, 1]))
    return fig
