"""Pictures of when data parallelism pays: speed-up against ranks per model width, predicted (lines) and
measured (markers); and large batches: test accuracy against steps and against samples seen."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from ..measure.units import format_bytes
from .axes import BELOW_AXIS_PX, finish_layout


def payoff_plot(rows: list[dict], title: str | None = None) -> go.Figure:
    """Speed-up against ranks from :func:`ringlab.lessons.lab06_training.payoff.speedup_rows`: per width, the cost model's
    line (a core per rank), the speed-up measured here (filled markers; open where ranks shared cores),
    and where ranks shared cores the model's prediction for that (crosses); the ideal dashed."""
    if not rows:
        raise ValueError("no rows to plot: speedup_rows returned none")
    ranks = sorted({row["ranks"] for row in rows})
    fig = go.Figure()
    fig.add_scatter(x=ranks, y=ranks, name="ideal: speed-up = ranks", mode="lines",
                    line=dict(dash="dash", color="grey"))
    for i, hidden in enumerate(sorted({row["hidden"] for row in rows})):
        mine = [row for row in rows if row["hidden"] == hidden]
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        label = f"width {hidden} ({format_bytes(mine[0]['gradient_bytes'])}, {mine[0]['compute_s'] * 1e6:.0f} us)"
        fig.add_scatter(x=[r["ranks"] for r in mine], y=[r["predicted"] for r in mine], mode="lines",
                        line=dict(color=colour), name=f"{label}: predicted", legendgroup=str(hidden),
                        hovertemplate="%{x} ranks: %{y:.2f}x predicted<extra></extra>")
        done = [r for r in mine if r["measured"] is not None]
        fig.add_scatter(x=[r["ranks"] for r in done], y=[r["measured"] for r in done], mode="markers",
                        marker=dict(color=colour, size=11, line=dict(color=colour, width=2),
                                    symbol=["circle-open" if r["shares_cores"] else "circle" for r in done]),
                        name=f"{label}: measured here", legendgroup=str(hidden),
                        hovertemplate="%{x} ranks: %{y:.2f}x measured<extra></extra>")
        shared = [r for r in done if r["shares_cores"]]
        if shared:
            fig.add_scatter(x=[r["ranks"] for r in shared], y=[r["predicted_here"] for r in shared], mode="markers",
                            marker=dict(color=colour, size=9, symbol="x"), legendgroup=str(hidden),
                            name=f"{label}: predicted, ranks sharing cores",
                            hovertemplate="%{x} ranks: %{y:.2f}x predicted with cores shared<extra></extra>")
    fig.update_layout(title=title or "speed-up against ranks: lines predicted (cost model, alpha and B fitted "
                                     "here), markers measured here",
                      xaxis=dict(title="ranks", tickvals=ranks, rangemode="tozero"),
                      yaxis=dict(title="speed-up over 1 rank (×, samples/s ratio)", rangemode="tozero"))
    return finish_layout(fig, legend="below")  # under the plot: inside it, it hid the markers measured at 2 ranks


def large_batch_plot(runs: list[dict], measure: str = "accuracy") -> go.Figure:
    """Test ``measure`` ("accuracy" or "loss") of :func:`ringlab.train.large_batch.large_batch_runs`'s runs,
    against steps (left) and against samples seen (right); measured here."""
    from plotly.subplots import make_subplots

    if not runs:
        raise ValueError("no runs to plot")
    if measure not in ("accuracy", "loss"):
        raise ValueError(f"measure must be 'accuracy' or 'loss', got {measure!r}")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("against steps", "against samples seen"))
    for i, run in enumerate(runs):
        colour = qualitative.Plotly[i % len(qualitative.Plotly)]
        for col, x in ((1, "step"), (2, "samples")):
            fig.add_scatter(x=[p[x] for p in run["points"]], y=[p[measure] for p in run["points"]],
                            mode="lines+markers", marker=dict(size=4), line=dict(color=colour), name=run["name"],
                            legendgroup=run["name"], showlegend=col == 1, row=1, col=col,
                            hovertemplate=f"%{{x}} {x}s: {measure} %{{y:.3f}}<extra></extra>")
    fig.update_xaxes(title_text="steps", row=1, col=1)
    fig.update_xaxes(title_text="samples seen", row=1, col=2)
    fig.update_yaxes(title_text=f"test {measure}" + (" (cross-entropy)" if measure == "loss" else ""))
    fig.update_layout(title=f"measured here: test {measure} of large batches against the batch-{runs[0]['batch']} "
                            "baseline")
    return finish_layout(fig, legend="below", axis_px=BELOW_AXIS_PX)  # below the x axis titles, not over them
