"""Pictures of labs 08 to 10: what each rank holds under ZeRO, the mesh's two mappings, experts' loads, NCCL's choices."""
from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from ..measure.units import format_bytes
from .axes import finish_log_axes, reference_line

KINDS = {"parameters": "parameters", "gradients": "gradients", "optimizer_state": "optimizer state"}
CELL_FONT = 11  # px: the choice map's labels, readable at the figure's default size


def memory_bars(result: dict) -> go.Figure:
    """Bytes each rank held, per variant, stacked by kind (measured from the tensors), with the paper's formula
    (``ringlab.lessons.lab08_sharding_and_memory.sharding.measure_sharding``'s result)."""
    rows = result["rows"]
    x = [[r["variant"] for r in rows for _ in r["held"]], [f"rank {i}" for r in rows for i in range(len(r["held"]))]]
    fig = go.Figure()
    for i, (kind, label) in enumerate(KINDS.items()):
        values = [held[kind] / 2**20 for r in rows for held in r["held"]]
        fig.add_bar(x=x, y=values, name=f"{label} (measured)", marker_color=qualitative.Plotly[i],
                    hovertemplate="%{x}: %{y:.3f} MiB<extra>" + label + "</extra>")
    formula = [r["formula"] / 2**20 for r in rows for _ in r["held"]]
    fig.add_scatter(x=x, y=formula, mode="markers", marker=dict(symbol="line-ew-open", size=28, color="black"),
                    name="the paper's formula (Psi/n a rank)", hovertemplate="formula: %{y:.3f} MiB<extra></extra>")
    fig.update_layout(barmode="stack", title=f"measured here: what each of {result['ranks']} ranks holds after a step "
                                             "(Adam, float64)",
                      yaxis_title="MiB", legend=dict(orientation="h", y=-0.25))
    return fig


def mapping_bars(rows: list[dict]) -> go.Figure:
    """A step of each mapping: measured on the emulated links, and predicted (tensor group, data group)."""
    names = [r["mapping"] for r in rows]
    fig = go.Figure()
    fig.add_bar(x=names, y=[r["measured_s"] * 1e6 for r in rows], name="measured on emulated links",
                marker_color=qualitative.Plotly[0], offsetgroup="measured")
    fig.add_bar(x=names, y=[r["predicted_tensor_s"] * 1e6 for r in rows], name="predicted: tensor group's allreduces",
                marker_color=qualitative.Plotly[1], offsetgroup="predicted")
    fig.add_bar(x=names, y=[r["predicted_data_s"] * 1e6 for r in rows], name="predicted: data group's allreduce",
                marker_color=qualitative.Plotly[2], offsetgroup="predicted", base=[r["predicted_tensor_s"] * 1e6 for r in rows])
    fig.update_layout(title=f"a training step on 4 GPUs of {rows[0]['machine']} (emulated links, virtual time)",
                      yaxis_title="microseconds a step", legend=dict(orientation="h", y=-0.2))
    return fig


def expert_load_bars(rows: list[dict]) -> go.Figure:
    """Tokens per expert for each router (measured here), and the mean."""
    fig = go.Figure()
    for i, r in enumerate(rows):
        fig.add_bar(x=[f"expert {e}" for e in range(len(r["per_expert"]))], y=r["per_expert"],
                    name=f"router {r['router']} (busiest {r['imbalance']:.1f}x the mean)",
                    marker_color=qualitative.Plotly[i])
    mean = sum(rows[0]["per_expert"]) / len(rows[0]["per_expert"])
    reference_line(fig, mean, f"the mean, {mean:.0f}")
    fig.update_layout(barmode="group", title="measured here: tokens each expert received in one step",
                      yaxis_title="tokens", legend=dict(orientation="h", y=-0.2))
    return fig


def choice_map(rows: list[dict]) -> go.Figure:
    """NCCL's model's pick by size (columns) for every machine and collective (rows), coloured by the pick."""
    sizes = sorted({r["bytes"] for r in rows})
    lines = list(dict.fromkeys((r["machine"], r["collective"]) for r in rows))
    picks = sorted({r["choice"] for r in rows})
    index = {p: i for i, p in enumerate(picks)}
    cell = {(r["machine"], r["collective"], r["bytes"]): r["choice"] for r in rows}
    z = [[index[cell[(m, c, k)]] + 0.5 for k in sizes] for m, c in lines]  # the middle of its colour's band
    text = [[cell[(m, c, k)] for k in sizes] for m, c in lines]
    shown = [[t.replace("/", "<br>") for t in row] for row in text]  # algorithm over protocol: narrow enough for a cell
    colours = qualitative.Set3 + qualitative.Pastel
    scale = []
    for i in range(len(picks)):
        scale += [[i / len(picks), colours[i]], [(i + 1) / len(picks), colours[i]]]
    # plotly shrinks a heatmap's text to fit its cells unless given a size: a fixed size, the label on two lines and
    # rows tall enough for them keep it readable
    fig = go.Figure(go.Heatmap(z=z, x=[format_bytes(k) for k in sizes], y=[f"{m}<br>{c}" for m, c in lines], text=shown,
                               customdata=text, texttemplate="%{text}", textfont=dict(size=CELL_FONT), colorscale=scale,
                               zmin=0, zmax=len(picks), showscale=False, xgap=1, ygap=1,
                               hovertemplate="%{y} at %{x}: %{customdata}<extra></extra>"))
    fig.update_layout(title="predicted (NCCL's model): the algorithm/protocol NCCL picks by size",
                      xaxis=dict(title="size (nccl-tests' bytes)", tickfont=dict(size=CELL_FONT)),
                      yaxis=dict(autorange="reversed", tickfont=dict(size=CELL_FONT)),
                      height=140 + 2 * (CELL_FONT + 10) * len(lines), margin=dict(l=110, r=20))
    return fig


def protocol_plot(rows: list[dict]) -> go.Figure:
    """Time against size for each protocol forced (NCCL's model)."""
    fig = go.Figure()
    for i, proto in enumerate(dict.fromkeys(r["protocol"] for r in rows)):
        mine = [r for r in rows if r["protocol"] == proto]
        fig.add_scatter(x=[r["bytes"] for r in mine], y=[r["seconds"] * 1e6 for r in mine], name=proto,
                        mode="lines+markers", line=dict(color=qualitative.Plotly[i]),
                        hovertemplate="%{x:.3s}B: %{y:.1f} us<extra>" + proto + "</extra>")
    fig.update_layout(title=f"predicted (NCCL's model): ring allreduce on {rows[0]['machine']}, each protocol forced",
                      xaxis=dict(type="log", title="size (bytes)"), yaxis=dict(type="log", title="microseconds"))
    return finish_log_axes(fig)


def scale_bars(rows: list[dict], limit: float = 80e9) -> go.Figure:
    """Memory a GPU needs per variant and machine (the paper's formulas) against an H100's 80 GB."""
    fig = go.Figure()
    for i, name in enumerate(dict.fromkeys(r["machine"] for r in rows)):
        mine = [r for r in rows if r["machine"] == name]
        fig.add_bar(x=[r["variant"] for r in mine], y=[r["memory"] / 1e9 for r in mine],
                    name=f"{name} ({mine[0]['ranks']} GPUs)", marker_color=qualitative.Plotly[i],
                    customdata=[r["comm_s"] * 1e3 for r in mine],
                    hovertemplate="%{x}: %{y:.1f} GB a GPU, collectives %{customdata:.0f} ms a step<extra></extra>")
    fig.update_layout(barmode="group", yaxis=dict(type="log", title="GB a GPU (the paper's formulas)"),
                      title="predicted: a 7.5B-parameter model, mixed-precision Adam", legend=dict(orientation="h", y=-0.2))
    reference_line(fig, limit / 1e9, f"an H100's {limit / 1e9:g} GB (published)")
    return finish_log_axes(fig)
