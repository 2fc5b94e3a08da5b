"""Collectives at datacenter scale: bus bandwidth and time against the number of GPUs, one line per algorithm."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .axes import BELOW_AXIS_PX, finish_layout, finish_log_axes
from .plots import PALETTE

CAPTION_PX = 24  # a line of caption under the axis titles


def scale_plot(rows: list[dict], turning: dict | None = None,
               title: str = "predicted (cost model): allreduce against the number of GPUs") -> go.Figure:
    """Two panels over GPU count (rows: gpus, algorithm, busbw_Bps, seconds, as
    ``ringlab.lessons.lab05_scaling.datacenter.at_scale`` gives them): busbw on the left, time on the right,
    log axes; ``turning`` (its ``ring_turning_point``) marks where the ring's latency passes its transfer time."""
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("bus bandwidth (GB/s)", "time of one allreduce (ms)"))
    for i, algorithm in enumerate(dict.fromkeys(r["algorithm"] for r in rows)):
        mine = sorted((r for r in rows if r["algorithm"] == algorithm), key=lambda r: r["gpus"])
        for col, value, unit in ((1, lambda r: r["busbw_Bps"] / 1e9, "GB/s"), (2, lambda r: r["seconds"] * 1e3, "ms")):
            fig.add_scatter(x=[r["gpus"] for r in mine], y=[value(r) for r in mine], mode="lines+markers",
                            name=algorithm, legendgroup=algorithm, showlegend=col == 1,
                            line=dict(color=PALETTE[i % len(PALETTE)]), hoverinfo="text",
                            hovertext=[f"{algorithm}, predicted: {r['gpus']:,} GPUs, {value(r):.3g} {unit}"
                                       for r in mine], row=1, col=col)
    if turning:
        for col in (1, 2):
            fig.add_vline(x=turning["gpus"], line=dict(dash="dot", color="#555"), row=1, col=col)
        # the dotted lines are named in a caption under the axis titles: a label over the plot sat on the panel's
        # title, and one inside it would sit on the lines
        fig.add_annotation(x=0, xref="paper", xanchor="left", y=0, yref="paper", yanchor="top", yshift=-BELOW_AXIS_PX,
                           showarrow=False, align="left",
                           text=f"dotted: the ring's latency passes its transfer time at {turning['gpus']:,} GPUs")
    fig.update_xaxes(type="log", title_text="GPUs")
    fig.update_yaxes(type="log")
    fig.update_layout(title=title, height=460 + (CAPTION_PX if turning else 0),
                      margin=dict(b=80 + CAPTION_PX) if turning else None)
    return finish_log_axes(finish_layout(fig))
