"""Pictures of lab 09's sequence splits: sequence parallelism's bytes and kept activations, Ulysses against ring
attention, causal work by layout, and the block size that hides a ring step's transfer."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from .axes import finish_log_axes, reference_line
from .plan import LEGEND_BELOW

COLLECTIVE_NAMES = {"allreduce": "allreduce", "allgather": "all-gather", "reduce_scatter": "reduce-scatter",
                    "regather": "re-gather in backward (Megatron's)"}
PARTS = {"norm": "norm regions (LayerNorm, dropout)", "column input": "column-parallel inputs",
         "attention": "attention", "mlp": "MLP"}


def _configs(rows: list[dict]) -> list[list[str]]:
    return [[f"t = {r['ranks']}" for r in rows], [f"{r['mode']} parallelism" for r in rows]]


def sequence_bytes_bars(rows: list[dict]) -> go.Figure:
    """Bytes rank 0 sent for one layer's forward and backward, by collective: the allreduces, the all-gathers and
    reduce-scatters stacked beside them, the re-gather apart (``measure_sequence_parallel``'s rows)."""
    x = _configs(rows)
    fig = go.Figure()
    base = [0.0] * len(rows)
    for i, collective in enumerate(("allreduce", "allgather", "reduce_scatter")):
        values = [r["sent"].get(collective, 0) / 2**10 for r in rows]
        fig.add_bar(x=x, y=values, base=list(base), name=COLLECTIVE_NAMES[collective], offsetgroup="layer",
                    marker_color=qualitative.Plotly[i],
                    hovertemplate="%{x}: %{y:.2f} KiB<extra>" + COLLECTIVE_NAMES[collective] + "</extra>")
        base = [b + v for b, v in zip(base, values)]
    fig.add_bar(x=x, y=[r["sent"].get("regather", 0) / 2**10 for r in rows], name=COLLECTIVE_NAMES["regather"],
                offsetgroup="regather", marker_color=qualitative.Plotly[3], marker_pattern_shape="/",
                hovertemplate="%{x}: %{y:.2f} KiB<extra>re-gather</extra>")
    fig.update_layout(title="counted: bytes rank 0 sends for one layer, forward and backward (16-bit, "
                            f"{rows[0]['tokens']} tokens x {rows[0]['batch']} x {rows[0]['hidden']})<br><sup>from "
                            "ringlab's schedules as the layer ran on simulated ranks</sup>",
                      yaxis_title="KiB sent by rank 0", xaxis_title="ranks and split", legend=LEGEND_BELOW,
                      margin=dict(t=80))
    return fig


def activation_bars(rows: list[dict], paper: list[float] | None = None) -> go.Figure:
    """Bytes rank 0 kept for backward, by part, stacked (measured with saved_tensors_hooks), with the paper's
    10 s b h (its norm and column-input pieces, ``paper``: one total a row) as a mark."""
    x = _configs(rows)
    fig = go.Figure()
    for i, (part, name) in enumerate(PARTS.items()):
        fig.add_bar(x=x, y=[r["saved"].get(part, 0) / 2**10 for r in rows], name=name,
                    marker_color=qualitative.Plotly[i + 4],
                    hovertemplate="%{x}: %{y:.2f} KiB<extra>" + name + "</extra>")
    if paper is not None:
        fig.add_scatter(x=x, y=[p / 2**10 for p in paper], mode="markers", name="the paper: 10 s b h (norm + column "
                        "inputs; / t with sequence parallelism)",
                        marker=dict(symbol="line-ew-open", size=34, color="black", line=dict(width=3)),
                        hovertemplate="the paper's formula: %{y:.2f} KiB<extra></extra>")
    fig.update_layout(barmode="stack", title="measured here: activations rank 0 keeps for backward, by part "
                                             "(float16, 1-byte dropout masks)",
                      yaxis_title="KiB kept by rank 0", xaxis_title="ranks and split", legend=LEGEND_BELOW,
                      margin=dict(t=60))
    return fig


def ulysses_bytes_chart(rows: list[dict]) -> go.Figure:
    """Bytes a rank sends for one attention's forward as the sequence grows with the ranks (``ulysses_rows``)."""
    fig = go.Figure()
    fig.add_scatter(x=[r["ranks"] for r in rows], y=[r["ring"] / 2**20 for r in rows], mode="lines+markers",
                    name="ring attention: K and V round the ring", marker_color=qualitative.Plotly[0])
    able = [r for r in rows if r["ulysses"] is not None]
    fig.add_scatter(x=[r["ranks"] for r in able], y=[r["ulysses"] / 2**20 for r in able], mode="lines+markers",
                    name="Ulysses: two all-to-alls", marker_color=qualitative.Plotly[1])
    fig.update_yaxes(type="log")  # before the line: its label lands at log10 of its value
    reference_line(fig, rows[0]["bound"] / 2**20, "4 s0 h b: Ulysses' limit", line_color="grey")
    per_rank = rows[0]["tokens"] // rows[0]["ranks"]
    fig.update_layout(title=f"counted: bytes a rank sends in one attention's forward, {per_rank} tokens a rank "
                            f"({rows[0]['heads']} heads, bf16)<br><sup>ring from allgather.ring's schedule, Ulysses "
                            "from ulysses_bytes; no Ulysses point where the heads do not divide by n</sup>",
                      xaxis=dict(title="ranks n (the sequence n x tokens a rank)", type="log",
                                 tickvals=[r["ranks"] for r in rows], ticktext=[str(r["ranks"]) for r in rows]),
                      yaxis=dict(title="MiB sent by a rank", type="log"), legend=LEGEND_BELOW, margin=dict(t=80))
    return finish_log_axes(fig)


def causal_work_bars(rows: list[dict]) -> go.Figure:
    """Unmasked blocks of the 2n grid per rank by layout (counted), the simulated ring's computed blocks as marks."""
    fig = go.Figure()
    for i, layout in enumerate(("contiguous", "zigzag")):
        mine = [r for r in rows if r["layout"] == layout]
        x = [[f"n = {r['ranks']}" for r in mine for _ in r["counted"]],
             [f"rank {k}" for r in mine for k in range(len(r["counted"]))]]
        fig.add_bar(x=x, y=[c for r in mine for c in r["counted"]], name=f"{layout}: unmasked blocks (counted)",
                    marker_color=qualitative.Plotly[i], offsetgroup=layout)
        fig.add_scatter(x=x, y=[c for r in mine for c in r["computed"]], mode="markers", offsetgroup=layout,
                        name=f"{layout}: blocks the simulated ring computed",
                        marker=dict(symbol="line-ew-open", size=14, color=qualitative.Plotly[i], line=dict(width=3)))
        timed = [r for r in mine if "measured" in r]
        if timed:
            fig.add_scatter(x=[[f"n = {r['ranks']}" for r in timed for _ in r["measured"]],
                               [f"rank {k}" for r in timed for k in range(len(r["measured"]))]],
                            y=[w for r in timed for w in r["measured"]], mode="markers", offsetgroup=layout,
                            name=f"{layout}: RingAttention.work measured on the MPI ranks",
                            marker=dict(symbol="x-thin-open", size=10, color="black", line=dict(width=2)))
    measured = any("measured" in r for r in rows)
    fig.update_layout(barmode="group", scattermode="group",
                      title=("counted and measured here" if measured else "counted")
                            + ": causal attention's work per rank, contiguous blocks against zigzag chunks<br>"
                            "<sup>blocks of the 2n-chunk grid; the dashes are what the simulated ring computed"
                            + ("; the crosses RingAttention.work measured on the MPI ranks" if measured else "")
                            + "</sup>",
                      yaxis_title="score blocks (a chunk x a chunk)", xaxis_title="ranks and rank",
                      legend=LEGEND_BELOW, margin=dict(t=80))
    return fig


def hiding_bars(rows: list[dict], block: int | None = None) -> go.Figure:
    """Tokens a ring-attention block needs for its compute to hide its transfer, by link (published peaks), with a
    sequence's block as a line."""
    links = [r["link"] for r in rows]
    fig = go.Figure()
    fig.add_bar(x=links, y=[r["tokens"] for r in rows], name="no mask", marker_color=qualitative.Plotly[0])
    fig.add_bar(x=links, y=[r["tokens_causal_zigzag"] for r in rows], name="causal zigzag blocks (half masked)",
                marker_color=qualitative.Plotly[1])
    fig.update_yaxes(type="log")  # before the line: its label lands at log10 of its value
    if block is not None:
        reference_line(fig, block, f"a block of this sequence: {block:,} tokens", line_color="black")
    fig.update_layout(barmode="group", title=f"published peaks: the block at which compute hides the transfer "
                                             f"(H100, {rows[0]['flops'] / 1e12:.0f} TFLOP/s bf16 dense)<br><sup>"
                                             f"{rows[0]['label']}; not measured</sup>",
                      xaxis_title="link", yaxis=dict(title="tokens a block", type="log"), legend=LEGEND_BELOW,
                      margin=dict(t=80))
    return finish_log_axes(fig)
