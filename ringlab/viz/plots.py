"""Plots of measurements and predictions: trace timelines, peer-bandwidth heatmaps, topologies, scaling.

Every figure says in its title whether it shows measurements, predictions or published figures,
and every axis carries its unit.
"""
from __future__ import annotations

import math
import re

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..measure.units import format_bytes
from ..schedule import bus_factor
from .axes import TEXT_SIZE, finish_layout, finish_log_axes, text_px

SIDE_COLORS = {"send": "#2a6fbf", "recv": "#c4541b"}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")  # one colour per series, where markers and a line must share it
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")  # past every colour of PALETTE, a new marker
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")  # ... and a new dash


def series_style(i: int) -> tuple[str, str, str]:
    """(colour, marker symbol, line dash) of the ``i``-th series: the first ones differ by colour, and once the
    colours of :data:`PALETTE` run out each round of them gets its own marker and dash, so that no two series of
    up to 50 look alike (A01 and A11 share a colour, not a marker or a dash)."""
    turn = i // len(PALETTE)
    return PALETTE[i % len(PALETTE)], SYMBOLS[turn % len(SYMBOLS)], DASHES[turn % len(DASHES)]


def timeline(trace, predicted=None, title: str | None = None) -> go.Figure:
    """One lane per rank, one bar per transfer side (send or receive) of a measured Trace.

    ``predicted`` (a :class:`ringlab.predict.costmodel.Prediction` of the same schedule) adds its step
    boundaries as dashed lines, so each step's measured length sits next to the predicted one.
    """
    rows = trace.records
    fig = go.Figure()
    for side in ("send", "recv"):
        mine = rows[rows["side"] == side]
        lane = mine["rank"] + (0.2 if side == "send" else -0.2)
        hover = [f"rank {r['rank']} {side} step {r['step']} chunk {r['chunk']} {'to' if side == 'send' else 'from'} "
                 f"rank {r['peer']}: {r['nbytes']:,} B in {(r['end'] - r['start']) * 1e6:.1f} us" for r in mine]
        fig.add_bar(y=lane, x=(mine["end"] - mine["start"]) * 1e6, base=mine["start"] * 1e6, orientation="h",
                    width=0.35, name=side, marker_color=SIDE_COLORS[side], hovertext=hover, hoverinfo="text")
    if predicted is not None:
        ends = np.cumsum(predicted.steps["time"]) * 1e6
        for i, end in enumerate(ends):
            fig.add_vline(x=end, line_dash="dash", line_color="#888", line_width=1,
                          annotation_text=f"{i}" if len(ends) <= 32 else None, annotation_position="top")
    nranks = trace.schedule.nranks
    fig.update_layout(
        title=title or f"measured: {trace.schedule.name} on {nranks} ranks ({trace.clock})"
                       + (f"; dashed: predicted step ends on {predicted.topology.name}" if predicted is not None else ""),
        xaxis_title="time since the start (µs)", yaxis=dict(title="rank", tickvals=list(range(nranks)),
                                                           autorange="reversed"),
        barmode="overlay", height=max(300, 40 * nranks + 140),
        legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"))  # above the plot, not in it
    return finish_layout(fig, legend="keep")


def bandwidth_heatmap(matrix, peak=None, names=None, title: str = "measured peer-to-peer bandwidth") -> go.Figure:
    """A sender-by-receiver heatmap in GB/s; with ``peak`` (same shape) the hover gives the link's
    theoretical peak and the measured fraction of it. A cell with no figure (NaN, or a zero on the diagonal: a GPU
    to itself, which a peer-copy measurement leaves out) is blank and hovers as not measured, not "nan GB/s" or a
    0 GB/s link."""
    matrix = np.array(matrix, dtype=float)
    n = len(matrix)
    matrix[np.eye(n, dtype=bool) & (matrix == 0)] = np.nan
    names = list(names or (f"gpu{i}" for i in range(n)))
    hover = []
    for i in range(n):
        row = []
        for j in range(n):
            if not np.isfinite(matrix[i, j]):
                row.append(f"{names[i]} → {names[j]}: not measured")
                continue
            text = f"{names[i]} → {names[j]}: {matrix[i, j] / 1e9:.2f} GB/s"
            if peak is not None and i != j and peak[i][j] > 0:
                text += f"<br>link peak {peak[i][j] / 1e9:.2f} GB/s ({matrix[i, j] / peak[i][j]:.0%} of it)"
            row.append(text)
        hover.append(row)
    fig = go.Figure(go.Heatmap(z=matrix / 1e9, x=names, y=names, hovertext=hover, hoverinfo="text",
                               colorscale="Viridis", colorbar=dict(title="GB/s")))
    fig.update_layout(title=title, xaxis_title="receiver", yaxis=dict(title="sender", autorange="reversed"),
                      height=max(360, 40 * n + 160))
    return finish_layout(fig)


def host_device_figure(gpu: dict, title: str) -> go.Figure:
    """Bars: host<->device rates, pinned against pageable, with the PCIe peak as a line (``gpu``: the GPU
    part of a ``ringlab bandwidth`` result, as :func:`ringlab.measure.recorded.gpu_bandwidth` returns it)."""
    rows = gpu.get("host_device", [])
    fig = go.Figure()
    for pinned in (True, False):
        mine = [r for r in rows if r["pinned"] == pinned]
        fig.add_bar(name="pinned" if pinned else "pageable", x=[r["what"] for r in mine],
                    y=[r["Bps"] / 1e9 for r in mine])
    peaks = [r for r in rows if r.get("peak_Bps") and r["pinned"]]
    if peaks:
        fig.add_scatter(name="link peak (from generation and width)", x=[r["what"] for r in peaks],
                        y=[r["peak_Bps"] / 1e9 for r in peaks], mode="markers", marker={"symbol": "line-ew-open",
                                                                                      "size": 40})
    fig.update_layout(title=title, yaxis_title="GB/s", barmode="group", height=380)
    return finish_layout(fig)


# how each kind of link is drawn: (legend name, colour, dash)
LINK_STYLES = {
    "nvlink": ("NVLink (×k: k links bonded)", "#76b900", "solid"),
    "nvswitch": ("NVLink to an NVSwitch", "#2f7d32", "solid"),
    "xgmi": ("Infinity Fabric (xGMI) between GPUs", "#d0021b", "solid"),
    "pcie": ("PCIe", "#3b75c4", "solid"),
    "host": ("PCIe, peer access off: through host memory", "#3b75c4", "dot"),
    "qpi": ("CPU interconnect (QPI/UPI)", "#c4541b", "solid"),
    "fabric": ("CPU interconnect (QPI/UPI)", "#c4541b", "solid"),
    "ib": ("network (InfiniBand)", "#7b3fa0", "solid"),
    "roce": ("network (RoCE)", "#7b3fa0", "dash"),
    "efa": ("network (AWS EFA)", "#7b3fa0", "dot"),
    "slingshot": ("network (HPE Slingshot)", "#7b3fa0", "dashdot"),
}


def _shown(node: str) -> str:
    """A node's label in figures: GPUs as "GPU 3", other nodes as named."""
    match = re.fullmatch(r"gpu(\d+)", node)
    return f"GPU {match.group(1)}" if match else node


def _cube_mesh(gpus: list[str], others: list[str]) -> dict:
    """DGX-1 positions as its published drawing: two fully linked quads as the front and back faces
    of a cube (GPU i's partner i+4 straight behind it), PCIe switches and CPUs in rows below."""
    face = {0: (-0.75, 0.15), 1: (0.05, 0.15), 2: (-0.75, -0.65), 3: (0.05, -0.65)}
    pos = {gpus[i]: face[i] for i in range(4)}
    pos.update({gpus[i + 4]: (face[i][0] + 0.95, face[i][1] + 0.35) for i in range(4)})  # the back face
    switches = [o for o in others if o.startswith("pcie")]
    rest = [o for o in others if o not in switches]
    for row, names in ((-1.05, switches), (-1.4, rest)):
        for i, name in enumerate(names):
            pos[name] = (-0.9 + 2.0 * (i + 0.5) / len(names), row)
    return pos


INNER = 0.75  # how far an inner node goes towards the middle of the nodes it links to


def _inside(pos: dict, others: list[str], links) -> None:
    """Place switches, CPUs and NICs inside the circle of GPUs, each three quarters of the way towards the middle
    of what it links to (a NUMA node near its own GPUs, with room between it and the next for their labels), nodes
    linked to none of those on a small circle."""
    for _ in range(3):  # nodes linked only to other inner nodes are placed once those are
        for name in others:
            if name in pos:
                continue
            near = [pos[o] for link in links for o in (link.a, link.b)
                    if name in (link.a, link.b) and o != name and o in pos]
            if near:
                pos[name] = (INNER * sum(x for x, _ in near) / len(near), INNER * sum(y for _, y in near) / len(near))
    left = [name for name in others if name not in pos]
    for i, name in enumerate(left):
        angle = math.pi / 2 - 2 * math.pi * i / len(left)
        radius = 0.0 if len(left) == 1 else 0.45
        pos[name] = (radius * math.cos(angle), radius * math.sin(angle))


def topology_figure(topology) -> go.Figure:
    """The topology's graph, links coloured by kind with a legend (NVLink with its multiplicity,
    NVSwitch, PCIe, peer access off, QPI/UPI, network); line width grows with bandwidth, and the hover
    gives each link's kind, bandwidth and latency. GPUs sit on a circle (a DGX-1 as its hybrid
    cube-mesh), switches, CPUs and NICs inside."""
    gpus = list(topology.ranks)
    others = [node for node in topology.nodes if node not in gpus]
    if topology.name.startswith("dgx1") and len(gpus) == 8:
        pos = _cube_mesh(gpus, others)
    else:
        pos = {}
        for i, name in enumerate(gpus):
            angle = math.pi / 2 - 2 * math.pi * i / len(gpus)
            pos[name] = (math.cos(angle), math.sin(angle))
        _inside(pos, others, topology.links)
    fig = go.Figure()
    widest = max(link.bandwidth for link in topology.links)
    one_nvlink = min((link.bandwidth for link in topology.links if link.kind == "nvlink"), default=None)
    shown_kinds, bonded = set(), []
    for link in topology.links:
        name, colour, dash = LINK_STYLES.get(link.kind, (link.kind or "link", "#888888", "solid"))
        (x0, y0), (x1, y1) = pos[link.a], pos[link.b]
        count = round(link.bandwidth / one_nvlink) if link.kind == "nvlink" and one_nvlink else 1
        what = f"NVLink ×{count}" if link.kind == "nvlink" else name
        fig.add_scatter(x=[x0, (x0 + x1) / 2, x1], y=[y0, (y0 + y1) / 2, y1], mode="lines",
                        line=dict(width=1 + 6 * link.bandwidth / widest, color=colour, dash=dash), hoverinfo="text",
                        hovertext=f"{_shown(link.a)} – {_shown(link.b)}: {what}, {link.bandwidth / 1e9:g} GB/s each way, "
                                  f"{link.latency * 1e6:g} µs", name=name, legendgroup=name,
                        showlegend=name not in shown_kinds)
        shown_kinds.add(name)
        if count > 1:
            bonded.append(((x0, y0), (x1, y1), f"×{count}"))
    unit = _topology_unit_px(pos)
    if bonded:
        labels = _edge_labels(bonded, list(pos.values()), unit)
        fig.add_scatter(x=[b[0] for b in labels], y=[b[1] for b in labels], mode="text", text=[b[2] for b in labels],
                        textfont=dict(size=12, color="#2f5d00", weight="bold", shadow=HALO), hoverinfo="skip",
                        showlegend=False)
    fig.add_scatter(x=[pos[g][0] for g in gpus], y=[pos[g][1] for g in gpus], mode="markers+text",
                    text=[_shown(g) for g in gpus], textposition="middle center", textfont=dict(size=10),
                    marker=dict(size=40, color="white", line=dict(width=2, color="#333")), name="GPUs")
    if others:
        segments = [(pos[link.a], pos[link.b]) for link in topology.links]
        fig.add_scatter(x=[pos[o][0] for o in others], y=[pos[o][1] for o in others], mode="markers",
                        hovertext=others, hoverinfo="text", marker=dict(size=14, symbol="square", color="#999"),
                        name="switches, CPUs, NICs")
        # all at once: add_annotation one by one re-checks every label added before (seconds at 128 GPUs)
        fig.update_layout(annotations=[
            dict(x=pos[name][0], y=pos[name][1], xshift=dx, yshift=dy, text=name, showarrow=False,
                 font=dict(size=TEXT_SIZE), bgcolor=LABEL_BACKGROUND)  # over a link, still readable
            for name, (dx, dy) in zip(others, _node_label_shifts(others, pos, segments, unit))])
    xs, ys = [x for x, _ in pos.values()], [y for _, y in pos.values()]
    fig.update_layout(title=f"{topology.name}: {topology.source}",
                      xaxis=dict(visible=False, range=[min(xs) - TOPOLOGY_PAD, max(xs) + TOPOLOGY_PAD]),
                      yaxis=dict(visible=False, scaleanchor="x", range=[min(ys) - TOPOLOGY_PAD, max(ys) + TOPOLOGY_PAD]),
                      height=TOPOLOGY_HEIGHT, plot_bgcolor="white", legend=dict(title="links (width: GB/s)"))
    return finish_layout(fig, legend="keep")


TOPOLOGY_HEIGHT = 560
LABEL_BACKGROUND = "rgba(255, 255, 255, 0.85)"  # behind a node's label: where no place is clear, the link fades
HALO = "1px 1px 2px white, -1px -1px 2px white, 1px -1px 2px white, -1px 1px 2px white"  # text over a thick link
TOPOLOGY_PAD = 0.4  # room around the outermost nodes for their markers and labels, in layout units
LABEL_FRACTIONS = (0.5, 0.38, 0.62, 0.28, 0.72, 0.2, 0.8)  # where along a link its "×k" may go, tried in turn
LABEL_DIRECTIONS = ((0, -1), (0, 1), (1, 0), (-1, 0), (1, -1), (1, 1), (-1, -1), (-1, 1))  # a node's label: below, ...
LABEL_GAPS_PX = (6, 18, 32)  # between a node's marker and its label, tried nearest first


def _topology_unit_px(pos: dict) -> float:
    """Pixels per layout unit of topology_figure: the plot's height over the span it shows (the y axis binds)."""
    ys = [y for _, y in pos.values()]
    return (TOPOLOGY_HEIGHT - 180) / (max(ys) - min(ys) + 2 * TOPOLOGY_PAD)


def _edge_labels(bonded, nodes, unit: float) -> list[tuple[float, float, str]]:
    """Where each bonded link's "×k" goes: at the first of :data:`LABEL_FRACTIONS` along it that lies clear of
    the labels already placed and of the nodes' markers, so that the labels of two crossing links never land on
    the same point (the DGX-1's GPU0-3 and GPU1-2 cross at their middles)."""
    placed = []
    clear_label, clear_node = 30 / unit, 30 / unit  # px: a label's width, a GPU marker's radius and a gap
    for (x0, y0), (x1, y1), text in bonded:
        best, room = None, -1.0
        for t in LABEL_FRACTIONS:
            x, y = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
            gap = min([math.hypot(x - px, y - py) / clear_label for px, py, _ in placed]
                      + [math.hypot(x - nx, y - ny) / clear_node for nx, ny in nodes] + [9.0])
            if gap >= 1:
                best = (x, y)
                break
            if gap > room:
                best, room = (x, y), gap
        placed.append((*best, text))
    return placed


LINK_SAMPLES = 60  # points along a link at which _inside_box asks whether it runs through a label's box


def _inside_box(segment, box, samples: int = LINK_SAMPLES) -> float:
    """How much of the segment ((x0, y0), (x1, y1)) runs through the box (left, bottom, right, top), in layout
    units: the share of ``samples`` evenly spaced points along it that lie in the box, times its length."""
    return float(_Links([segment], samples).inside(box)[0])


class _Links:
    """The links' sample points (:func:`_inside_box`'s), held as arrays so that asking how much of every link
    runs through one box is one numpy expression, not a Python loop over links and points (a 128-GPU machine
    has hundreds of links and its labels try 24 places each)."""

    def __init__(self, segments, samples: int = LINK_SAMPLES):
        ends = np.asarray(segments, dtype=float).reshape(-1, 2, 2)
        along = (np.arange(samples) + 0.5) / samples
        start, span = ends[:, 0, :], ends[:, 1, :] - ends[:, 0, :]
        self.x = start[:, :1] + along * span[:, :1]  # (links, samples)
        self.y = start[:, 1:] + along * span[:, 1:]
        self.length = np.hypot(span[:, 0], span[:, 1])
        self.samples = samples

    def inside(self, box) -> np.ndarray:
        """For each link, the length of it that runs through ``box`` (left, bottom, right, top)."""
        left, bottom, right, top = box
        hits = ((left <= self.x) & (self.x <= right) & (bottom <= self.y) & (self.y <= top)).sum(axis=1)
        return hits / self.samples * self.length


def _node_label_shifts(names, pos, segments, unit: float) -> list[tuple[float, float]]:
    """Where each of ``names``'s labels goes, as its centre's (x, y) offset in pixels from its marker: of eight
    directions at three distances, the one whose box has the least length of links running through it, covers
    no node and no label placed before it, and is nearest (a label across a thick link is unreadable, and one
    between two markers reads as the other's)."""
    placed, out = [], []
    height = 16
    links = _Links(segments) if segments else None
    nodes = list(pos)
    node_xy = np.array([pos[o] for o in nodes], dtype=float).reshape(-1, 2)
    reach = 22 / unit
    for name in names:
        x, y = pos[name]
        others_xy = node_xy[[o != name for o in nodes]]
        width = text_px(name) + 6
        best, cost = None, None
        for gap in LABEL_GAPS_PX:
            for dx, dy in LABEL_DIRECTIONS:
                sx, sy = dx * (width / 2 + gap), dy * (height / 2 + gap)
                cx, cy = x + sx / unit, y + sy / unit
                box = (cx - width / 2 / unit, cy - height / 2 / unit, cx + width / 2 / unit, cy + height / 2 / unit)
                under = float(links.inside(box).sum()) if links is not None else 0.0
                mine = under * unit + gap / 4  # px of links under it
                near = ((box[0] - reach <= others_xy[:, 0]) & (others_xy[:, 0] <= box[2] + reach)
                        & (box[1] - reach <= others_xy[:, 1]) & (others_xy[:, 1] <= box[3] + reach))
                mine += 500 * int(near.sum())  # a marker there would touch the label
                mine += 500 * sum(not (box[2] < b[0] or b[2] < box[0] or box[3] < b[1] or b[3] < box[1])
                                  for b in placed)
                if cost is None or mine < cost - 1e-9:
                    best, cost, chosen = (sx, sy), mine, box
        placed.append(chosen)
        out.append(best)
    return out


def busbw_plot(rows: list[dict], title: str = "measured bus bandwidth") -> go.Figure:
    """Bus bandwidth against message size, one line per algorithm (rows: bytes, busbw_Bps, algorithm)."""
    fig = go.Figure()
    for i, algorithm in enumerate(dict.fromkeys(r["algorithm"] for r in rows)):
        mine = sorted((r for r in rows if r["algorithm"] == algorithm), key=lambda r: r["bytes"])
        color, symbol, dash = series_style(i)
        fig.add_scatter(x=[r["bytes"] for r in mine], y=[r["busbw_Bps"] / 1e9 for r in mine], mode="lines+markers",
                        name=algorithm, hoverinfo="text", line=dict(color=color, dash=dash),
                        marker=dict(color=color, symbol=symbol, size=7),
                        hovertext=[f"{algorithm}: {format_bytes(r['bytes'])}, {r['busbw_Bps'] / 1e9:.3g} GB/s"
                                   for r in mine])
    fig.update_layout(title=title, xaxis=dict(type="log", title="message size per rank (bytes)"),
                      yaxis=dict(type="log", title="bus bandwidth (GB/s)"))
    return finish_log_axes(finish_layout(fig))


FITTED_TITLE = "markers: bus bandwidth measured here; lines: the cost model fitted to those measurements"


def fitted_busbw_plot(rows: list[dict], fits: dict, title: str = FITTED_TITLE, points: int = 60) -> go.Figure:
    """Measured bus bandwidth as markers, one colour per algorithm (rows: bytes, busbw_Bps, algorithm), and
    for each algorithm in ``fits`` (name -> :class:`ringlab.predict.fitting.Fit`, as ``fit_rows`` returns
    it) the fit's prediction as a line of the same colour across the measured sizes."""
    fig = go.Figure()
    for i, algorithm in enumerate(dict.fromkeys(r["algorithm"] for r in rows)):
        mine = sorted((r for r in rows if r["algorithm"] == algorithm), key=lambda r: r["bytes"])
        color, fit = PALETTE[i % len(PALETTE)], fits.get(algorithm)
        # a noisy sweep can fit best with no cost per byte (an infinite bandwidth): no line to draw, and said so
        linkless = fit is not None and not 0 < fit.bandwidth < np.inf
        fig.add_scatter(x=[r["bytes"] for r in mine], y=[r["busbw_Bps"] / 1e9 for r in mine], mode="markers",
                        name=f"{algorithm}: measured" + (" (the fit found no cost per byte: no line)" if linkless
                                                         else ""),
                        legendgroup=algorithm, marker=dict(color=color, size=8),
                        hoverinfo="text", hovertext=[f"{algorithm}: {format_bytes(r['bytes'])}, measured "
                                                     f"{r['busbw_Bps'] / 1e9:.3g} GB/s" for r in mine])
        if fit is None or linkless:
            continue
        factor = bus_factor(fit.schedule.collective.kind, fit.schedule.nranks)
        sizes = np.unique(np.geomspace(mine[0]["bytes"], mine[-1]["bytes"], points).astype(np.int64))
        busbw = [int(k) / fit.seconds(k) * factor / 1e9 for k in sizes]
        fig.add_scatter(x=sizes, y=busbw, mode="lines", legendgroup=algorithm, line=dict(color=color),
                        name=f"{algorithm}: fitted ({fit.alpha * 1e6:.3g} µs, {fit.bandwidth / 1e9:.3g} GB/s)",
                        hoverinfo="text", hovertext=[f"{algorithm}, fitted: {format_bytes(k)}, {b:.3g} GB/s"
                                                     for k, b in zip(sizes, busbw)])
    fig.update_layout(title=title, xaxis=dict(type="log", title="message size per rank (bytes)"),
                      yaxis=dict(type="log", title="bus bandwidth (GB/s)"))
    return finish_log_axes(finish_layout(fig))


TIME_UNITS = {"µs": 1e6, "ms": 1e3, "s": 1.0}


def time_vs_ranks(ranks, seconds: dict, title: str = "predicted time against ranks", unit: str = "µs") -> go.Figure:
    """Time against rank count, one line per label in ``seconds`` ({label: [seconds per rank count]}),
    shown in ``unit`` (µs, ms or s); the hover gives each point's time."""
    if unit not in TIME_UNITS:
        raise ValueError(f"unit must be one of {', '.join(TIME_UNITS)}, got {unit!r}")
    scale = TIME_UNITS[unit]
    fig = go.Figure()
    for label, values in seconds.items():
        fig.add_scatter(x=list(ranks), y=[v * scale for v in values], mode="lines+markers", name=label,
                        hoverinfo="text", hovertext=[f"{label}: {n} ranks, {v * scale:.3g} {unit}"
                                                     for n, v in zip(ranks, values)])
    fig.update_layout(title=title, xaxis=dict(type="log", title="ranks"),
                      yaxis=dict(type="log", title=f"time ({unit})"))
    return finish_log_axes(finish_layout(fig))


def measured_vs_predicted(sizes, measured, predicted, label: str = "",
                          title: str = "measured against predicted") -> go.Figure:
    """Measured and predicted time against size, on log axes, with the ratio in the hover."""
    sizes, measured, predicted = (np.asarray(v, dtype=float) for v in (sizes, measured, predicted))
    ratio = [f"{format_bytes(s)}: measured/predicted = {m / p:.2f}" for s, m, p in zip(sizes, measured, predicted)]
    fig = go.Figure()
    fig.add_scatter(x=sizes, y=measured * 1e6, mode="markers", name=f"measured {label}".strip(), hovertext=ratio,
                    hoverinfo="text")
    fig.add_scatter(x=sizes, y=predicted * 1e6, mode="lines", name=f"predicted {label}".strip())
    fig.update_layout(title=title, xaxis=dict(type="log", title="message size per rank (bytes)"),
                      yaxis=dict(type="log", title="time (µs)"))
    return finish_log_axes(finish_layout(fig))


def segments_plot(segments, measured, predicted=None, title: str = "chain broadcast against segment count") -> go.Figure:
    """Time against the number of pipeline segments S: measured points, predicted line."""
    fig = go.Figure()
    fig.add_scatter(x=list(segments), y=[m * 1e6 for m in measured], mode="markers+lines", name="measured")
    if predicted is not None:
        fig.add_scatter(x=list(segments), y=[p * 1e6 for p in predicted], mode="lines", name="predicted",
                        line=dict(dash="dash"))
    fig.update_layout(title=title, xaxis=dict(type="log", title="segments S"), yaxis=dict(title="time (µs)"))
    return finish_log_axes(finish_layout(fig))


def _worker_name(worker: int, straggler: int | None) -> str:
    return f"worker {worker} (straggler)" if worker == straggler else f"worker {worker}"


def staleness_plot(pushes, title: str = "measured here: staleness of every push", straggler: int | None = None
                   ) -> go.Figure:
    """A histogram of push staleness per worker; ``pushes`` is a list of (worker, staleness), and
    ``straggler`` names the slowed worker in the legend."""
    fig = go.Figure()
    for worker in sorted({w for w, _ in pushes}):
        fig.add_histogram(x=[s for w, s in pushes if w == worker], name=_worker_name(worker, straggler),
                          xbins=dict(size=1))
    fig.update_layout(title=title, barmode="group", xaxis_title="staleness (updates the shard saw meanwhile)",
                      yaxis_title="pushes")
    return finish_layout(fig)


def staleness_order_plot(pushes, straggler: int | None = None,
                         title: str = "measured here: staleness of every push, in the order the server applied them"
                         ) -> go.Figure:
    """Staleness against the push's place in the server's order, one colour per worker: who pushed when,
    and how stale (``pushes``: (worker, staleness) in the order applied, as the server records them)."""
    fig = go.Figure()
    for i, worker in enumerate(sorted({w for w, _ in pushes})):
        mine = [(order, s) for order, (w, s) in enumerate(pushes) if w == worker]
        fig.add_scatter(x=[o for o, _ in mine], y=[s for _, s in mine], mode="markers",
                        name=_worker_name(worker, straggler), marker=dict(color=PALETTE[i % len(PALETTE)], size=7,
                                                                          symbol="diamond" if worker == straggler
                                                                          else "circle"))
    fig.update_layout(title=title, xaxis_title="push number (the server's order, 0 = first)",
                      yaxis_title="staleness (updates the shard saw meanwhile)")
    return finish_layout(fig)


def links_figure(published, measured=None, title: str = "link bandwidth per direction") -> go.Figure:
    """Horizontal bars: published link figures (``(what, bytes/s, note)``, e.g. presets.PUBLISHED_LINKS)
    and, in another colour, measured figures (``{what: bytes/s}``, each ``what`` saying where: here, or recorded
    on another machine); log scale, GB/s."""
    fig = go.Figure()
    fig.add_bar(y=[w for w, _, _ in published], x=[b / 1e9 for _, b, _ in published], orientation="h",
                name="published figure", hovertext=[f"{w}: {b / 1e9:.3g} GB/s ({note})" for w, b, note in published],
                hoverinfo="text")
    if measured:
        fig.add_bar(y=list(measured), x=[b / 1e9 for b in measured.values()], orientation="h",
                    name="measured (where each label says)",
                    hovertext=[f"{w}: {b / 1e9:.3g} GB/s" for w, b in measured.items()],
                    hoverinfo="text")
    fig.update_layout(title=title, xaxis=dict(type="log", title="GB/s per direction"), height=120 + 28 * (
        len(published) + len(measured or {})), margin=dict(l=260), yaxis=dict(autorange="reversed"))
    return finish_log_axes(finish_layout(fig, legend="keep"))


def versus_plot(sweeps: dict, title: str = "published busbw (markers) against the cost model's prediction (lines)"
                ) -> go.Figure:
    """Measured against predicted bus bandwidth over message size, one colour per sweep: ``sweeps`` maps a
    label to the rows of ``ringlab.predict.versus.versus`` (``bytes``, ``measured_busbw``, ``predicted_busbw``,
    ``ratio``, ``predicted``); markers are the measurement, a dashed line of the same colour the prediction."""
    fig = go.Figure()
    for i, (label, rows) in enumerate(sweeps.items()):
        rows = sorted(rows, key=lambda r: r["bytes"])
        color, symbol, _ = series_style(i)
        dash = ("dash", "dot", "dashdot", "longdash")[i // len(PALETTE) % 4]  # a colour's second sweep: dotted
        sizes = [r["bytes"] for r in rows]
        fig.add_scatter(x=sizes, y=[r["measured_busbw"] / 1e9 for r in rows], mode="markers", name=label,
                        legendgroup=label, marker=dict(color=color, size=7, symbol=symbol), hoverinfo="text",
                        hovertext=[f"{label}<br>{format_bytes(r['bytes'])}: measured {r['measured_busbw'] / 1e9:.3g} GB/s,"
                                   f" predicted {r['predicted_busbw'] / 1e9:.3g} ({r['predicted']}), ratio "
                                   f"{r['ratio']:.2f}" for r in rows])
        fig.add_scatter(x=sizes, y=[r["predicted_busbw"] / 1e9 for r in rows], mode="lines", name=f"{label}: predicted",
                        legendgroup=label, showlegend=False, line=dict(color=color, dash=dash), hoverinfo="skip")
    fig.update_layout(title=title, xaxis=dict(type="log", title="message size per rank (bytes)"),
                      yaxis=dict(type="log", title="bus bandwidth (GB/s)"), height=560)
    return finish_log_axes(finish_layout(fig))


def fraction_bars(rows: list[dict], title: str) -> go.Figure:
    """Horizontal bars of copy rates (``what``, ``Bps``, ``peak_Bps``, optional ``note``), each over its link's
    theoretical peak and labelled with the fraction of it; GB/s on a linear axis from zero, so that a bar's share
    of its peak bar is the fraction written beside it (on a log axis a 41% bar looked like two thirds)."""
    fig = go.Figure()
    labels = [r["what"] for r in rows]
    fig.add_bar(y=labels, x=[r["peak_Bps"] / 1e9 for r in rows], orientation="h", name="link's theoretical peak",
                marker_color="#d9d9d9", hoverinfo="text",
                hovertext=[f"{r['what']}: peak {r['peak_Bps'] / 1e9:.3g} GB/s" for r in rows])
    fig.add_bar(y=labels, x=[r["Bps"] / 1e9 for r in rows], orientation="h", name="copy rate", marker_color="#2a6fbf",
                text=[f"{r['Bps'] / r['peak_Bps']:.0%} of peak" for r in rows], textposition="outside",
                hoverinfo="text", hovertext=[f"{r['what']}: {r['Bps'] / 1e9:.3g} GB/s, {r['Bps'] / r['peak_Bps']:.0%} of "
                                             f"{r['peak_Bps'] / 1e9:.3g}" + (f"<br>{r['note']}" if r.get("note") else "")
                                             for r in rows])
    top = max(max(r["peak_Bps"], r["Bps"]) for r in rows) / 1e9
    fig.update_layout(title=title, barmode="overlay",
                      xaxis=dict(title="GB/s per direction (linear: a bar's share of its peak is the fraction)",
                                 range=[0, top * 1.18], rangemode="tozero"),  # room for the text beyond the longest bar
                      yaxis=dict(autorange="reversed"), margin=dict(l=320), height=140 + 34 * len(rows))
    return finish_layout(fig)


PUBLISHED_MARKER = dict(symbol="diamond", size=11, color="#222", line=dict(width=1, color="white"))


def predicted_machines_plot(predicted: list[dict], published: list[dict] = (),
                            title: str = "predicted (cost model): allreduce bus bandwidth per machine") -> go.Figure:
    """Bars of predicted bus bandwidth, one group per machine and one colour per algorithm (``predicted``:
    rows of ``topology``, ``algorithm``, ``busbw``, ``seconds``, ``bottleneck``, as ``whatif`` gives them);
    ``published`` busbw (rows of ``topology``, ``label``, ``bytes``, ``busbw_Bps``) as diamonds on their
    machine. GB/s on a linear scale, so that a bar's height is its value."""
    fig = go.Figure()
    for i, algorithm in enumerate(dict.fromkeys(r["algorithm"] for r in predicted)):
        mine = [r for r in predicted if r["algorithm"] == algorithm]
        fig.add_bar(x=[r["topology"] for r in mine], y=[r["busbw"] / 1e9 for r in mine],
                    name=f"{algorithm}: predicted", marker_color=PALETTE[i % len(PALETTE)],
                    text=[f"{r['busbw'] / 1e9:.3g}" for r in mine], textposition="outside", hoverinfo="text",
                    hovertext=[f"{r['topology']}, {algorithm}, predicted: {r['seconds'] * 1e3:.3g} ms, "
                               f"{r['busbw'] / 1e9:.3g} GB/s busbw<br>bounded by {r['bottleneck']}" for r in mine])
    if published:
        fig.add_scatter(x=[r["topology"] for r in published], y=[r["busbw_Bps"] / 1e9 for r in published],
                        mode="markers", name="published: nccl-tests (NCCL's own algorithm)", marker=PUBLISHED_MARKER,
                        hoverinfo="text", hovertext=[f"published: {r['label']}<br>{format_bytes(r['bytes'])}: "
                                                     f"{r['busbw_Bps'] / 1e9:.3g} GB/s busbw" for r in published])
    fig.update_layout(title=title, barmode="group", xaxis_title="machine (ringlab preset)",
                      yaxis=dict(title="bus bandwidth (GB/s)", rangemode="tozero"), height=460)
    return finish_layout(fig)


TREE_RING_STYLES = (("tree", "dot", PALETTE[1]), ("dbtree", "dash", PALETTE[3]), ("ring", "solid", PALETTE[0]))
TREE_RING_NAMES = {"tree": "binomial tree", "dbtree": "double binary tree", "ring": "ring"}


def tree_ring_plot(panels: dict, title: str = "predicted (cost model): tree against ring allreduce",
                   columns: int = 2) -> go.Figure:
    """One panel per machine (``panels``: name -> what ``ringlab.lessons.lab05_scaling.predictions.trees_against_ring`` returns):
    predicted busbw of the binomial tree (dotted), NCCL's double binary tree (dashed) and the ring (solid)
    over message size, a cross where the ring is predicted to overtake the double binary tree, and the
    machine's published sweeps as diamonds. Log axes."""
    names = list(panels)
    rows = -(-len(names) // columns)
    fig = make_subplots(rows=rows, cols=columns, subplot_titles=names, shared_yaxes=True,
                        horizontal_spacing=0.06, vertical_spacing=0.14)
    shown = set()
    for i, name in enumerate(names):
        row, col = i // columns + 1, i % columns + 1
        panel = panels[name]
        for algorithm, dash, color in TREE_RING_STYLES:
            mine = sorted((r for r in panel["predicted"] if r["algorithm"] == algorithm), key=lambda r: r["bytes"])
            if not mine:
                continue
            label = f"{TREE_RING_NAMES[algorithm]}: predicted"
            fig.add_scatter(x=[r["bytes"] for r in mine], y=[r["busbw_Bps"] / 1e9 for r in mine], mode="lines",
                            name=label, legendgroup=label, showlegend=label not in shown,
                            line=dict(color=color, dash=dash), hoverinfo="text",
                            hovertext=[f"{name}, {algorithm}, predicted: {format_bytes(r['bytes'])}, "
                                       f"{r['busbw_Bps'] / 1e9:.3g} GB/s" for r in mine], row=row, col=col)
            shown.add(label)
        found = panel.get("published") or []
        if found:
            label = "published: nccl-tests (NCCL's own algorithm)"
            fig.add_scatter(x=[r["bytes"] for r in found], y=[r["busbw_Bps"] / 1e9 for r in found], mode="markers",
                            name=label, legendgroup=label, showlegend=label not in shown,
                            marker=dict(PUBLISHED_MARKER, size=7), hoverinfo="text",
                            hovertext=[f"published: {r['algorithm']}<br>{format_bytes(r['bytes'])}: "
                                       f"{r['busbw_Bps'] / 1e9:.3g} GB/s" for r in found], row=row, col=col)
            shown.add(label)
        crossovers = panel.get("crossovers")
        if crossovers is None and panel.get("crossover"):  # a panel that names only the ring's first lead
            crossovers = [{"bytes": panel["crossover"], "leader": "ring",
                           "ring_busbw_Bps": panel["crossover_busbw_Bps"]}]
        leads = {first: last for first, last, _ in panel.get("leads", ())}
        for cross in crossovers or ():  # every size where the lead changes, each with the run of sizes it leads
            ring_leads = cross["leader"] == "ring"
            label = ("ring overtakes the double binary tree (predicted)" if ring_leads else
                     "double binary tree overtakes the ring (predicted)")
            winner, loser = ("ring", "the double binary tree") if ring_leads else ("double binary tree", "the ring")
            last = leads.get(cross["bytes"])
            span = (f"from {format_bytes(cross['bytes'])}" + (f" to {format_bytes(last)}" if last and
                                                               last != max(leads.values()) else " up")
                    if last else f"from {format_bytes(cross['bytes'])}")
            fig.add_scatter(x=[cross["bytes"]], y=[cross["ring_busbw_Bps"] / 1e9], mode="markers+text",
                            name=label, legendgroup=label, showlegend=label not in shown,
                            marker=dict(symbol="x" if ring_leads else "cross", size=11, color="#555"),
                            text=[format_bytes(cross["bytes"])], textposition="top left", hoverinfo="text",
                            hovertext=f"{name}: {winner} predicted faster than {loser} {span}", row=row, col=col)
            shown.add(label)
        fig.update_xaxes(type="log", title_text="message size per rank (bytes)", row=row, col=col)
        fig.update_yaxes(type="log", row=row, col=col)
    for row in range(1, rows + 1):
        fig.update_yaxes(title_text="bus bandwidth (GB/s)", row=row, col=1)
    fig.update_layout(title=title, height=340 * rows + 120)
    return finish_log_axes(finish_layout(fig))


def algbw_busbw_plot(rows: list[dict], title: str = "predicted (cost model): algbw and busbw of the ring allreduce",
                     measured: list[dict] = ()) -> go.Figure:
    """Two panels over message size, one line per rank count (rows: ranks, bytes, algbw_Bps, busbw_Bps, as
    :func:`ringlab.lessons.lab03_allreduce.scaling_rows` gives them): algbw on the left, busbw on the right. ``measured``
    rows (bytes, algbw_Bps, busbw_Bps, and ranks) are added as markers, labelled measured here."""
    fig = make_subplots(rows=1, cols=2, shared_xaxes=True, horizontal_spacing=0.1,
                        subplot_titles=("algbw = size / time", "busbw = algbw × 2(n-1)/n"))
    counts = sorted({r["ranks"] for r in rows} | {r["ranks"] for r in measured})
    for i, n in enumerate(counts):
        color = PALETTE[i % len(PALETTE)]
        mine = sorted((r for r in rows if r["ranks"] == n), key=lambda r: r["bytes"])
        seen = sorted((r for r in measured if r["ranks"] == n), key=lambda r: r["bytes"])
        for col, key in ((1, "algbw_Bps"), (2, "busbw_Bps")):
            if mine:
                fig.add_scatter(x=[r["bytes"] for r in mine], y=[r[key] / 1e9 for r in mine], mode="lines",
                                line=dict(color=color), name=f"{n} ranks: predicted", legendgroup=str(n),
                                showlegend=col == 1, row=1, col=col, hoverinfo="text",
                                hovertext=[f"{n} ranks, predicted: {format_bytes(r['bytes'])}, {r[key] / 1e9:.3g} GB/s"
                                           for r in mine])
            if seen:
                fig.add_scatter(x=[r["bytes"] for r in seen], y=[r[key] / 1e9 for r in seen], mode="markers",
                                marker=dict(color=color, size=8), name=f"{n} ranks: measured here",
                                legendgroup=str(n), showlegend=col == 1, row=1, col=col, hoverinfo="text",
                                hovertext=[f"{n} ranks, measured here: {format_bytes(r['bytes'])}, "
                                           f"{r[key] / 1e9:.3g} GB/s" for r in seen])
    for col in (1, 2):
        fig.update_xaxes(type="log", title_text="message size per rank (bytes)", row=1, col=col)
        fig.update_yaxes(title_text="GB/s", row=1, col=col)
    fig.update_layout(title=title, height=430)
    return finish_log_axes(finish_layout(fig))
