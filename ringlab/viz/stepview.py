"""What one moment of a schedule looks like: ranks on a circle with the step's transfers as arrows,
every rank's buffer as a row of chunks coloured by provenance (the cells the step changed outlined),
and the bytes each rank has sent and received so far.

:func:`frames` turns a schedule into plain data, one frame per moment (the start, then after each
step); :func:`step_figure` draws them as a plotly figure with animation frames that plays without
a kernel; :class:`ringlab.viz.StepThrough` draws the same frames as a live widget.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from ..schedule import REDUCE, Schedule
from ..simulate import ScheduleError, check, provenance_str, traffic_by_step
from ..measure.units import format_bytes

LABELS_UP_TO = 12     # ranks; above this, cells lose their text (it stays in the hover)
RANK_TEXT_UP_TO = 8   # ranks; above this, arrows lose their chunk labels and ranks their byte counts (hover)
LEGEND = ("cells: grey = nothing of what the collective needs there yet; orange = part of it (darker = more); "
          "green = all of it; outlined = changed by this step. Arrows: orange +c2 = chunk 2 added into the "
          "receiver's copy; blue =c2 = chunk 2 copied over it. Under each rank: bytes sent (↑) and received (↓) "
          "so far; hover a rank or a cell for the details.")
CONTROLS_GAP_PX = 8    # between the plot's bottom edge and step_figure's buttons and slider
BUTTONS_PX = 130       # room for the play and pause buttons left of the slider, whatever the figure's width
CONTROLS_PX = 110      # from the plot's bottom edge to below the slider's step labels (plotly draws it ~90 px high)
LEGEND_FONT, LEGEND_LINE_PX = 11, 16  # the legend under step_figure's controls, and the height of one of its lines
COLORSCALE = [[0.0, "#f4f4f4"], [1e-9, "#fde2c4"], [0.5, "#f59b42"], [0.999, "#c4541b"], [1.0, "#2a7f3f"]]


@dataclass(frozen=True)
class Frame:
    """One moment: ``index`` 0 is the start, ``index`` s+1 is just after step s."""

    index: int
    title: str
    arrows: tuple            # (src, dst, label) for the step that led here
    fill: np.ndarray         # [rank][chunk]: share of what the collective needs there (1 = complete)
    provenance: tuple        # [rank][chunk]: provenance as text, e.g. "r0+r1+r2"
    sent: np.ndarray         # bytes each rank has sent so far
    error: str = ""          # the checker's message, on the frame where a wrong schedule stops
    received: np.ndarray | None = None  # bytes each rank has received so far
    changed: tuple = ()      # (rank, chunk) cells whose contents this step changed


def circle(nranks: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank positions on a unit circle, rank 0 on top, going clockwise."""
    angle = math.pi / 2 - 2 * math.pi * np.arange(nranks) / max(nranks, 1)
    return np.cos(angle), np.sin(angle)


TREE_X, TREE_TOP, TREE_BOTTOM = 1.2, 1.35, -1.1  # where a tree's ranks go: its columns across +-TREE_X, its
# rows from TREE_TOP down to TREE_BOTTOM (room left under the lowest row for its byte counts)
TREE_SHARE, TREE_PLOT_PX = 0.5, 470  # a tree's panel takes half the width, and a plot this tall lets its width bind


def tree_positions(parents: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Rank positions that draw a tree (``parents[r]``: rank r's parent, -1 at the root): ranks left to right
    in rank order, one column each, each a row below its parent, the root on top; the columns spread across the
    panel's width and the rows down its height, so that two ranks of a row (two columns apart at least, in rank
    order) leave room between them for the byte counts under each."""
    n = len(parents)
    depth = np.zeros(n)
    for rank in range(n):
        up = parents[rank]
        while up >= 0:
            depth[rank] += 1
            up = parents[up]
    x = np.linspace(-TREE_X, TREE_X, n) if n > 1 else np.zeros(1)
    y = TREE_TOP - depth * (TREE_TOP - TREE_BOTTOM) / max(depth.max(), 1)
    return x, y


def default_positions(schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """Where a schedule's ranks are drawn: the double binary tree as its first tree (the second tree's arrows
    are the ones that run the other way), every other schedule on a circle."""
    if _is_tree(schedule):
        from ..algorithms.dbtree import btree

        return tree_positions(btree(schedule.nranks))
    return circle(schedule.nranks)


def _is_tree(schedule: Schedule) -> bool:
    return schedule.name == "allreduce.dbtree"


def _checked(positions, nranks: int):
    """(x, y) arrays from ``positions``, scaled into the unit circle the axes expect."""
    x, y = (np.asarray(v, dtype=float) for v in positions)
    if x.shape != (nranks,) or y.shape != (nranks,):
        raise ValueError(f"positions must be (x, y) with {nranks} values each")
    x, y = x - x.mean(), y - y.mean()
    scale = max(np.hypot(x, y).max(), 1e-12)
    return x / scale, y / scale


def _arrows(step) -> tuple:
    """One arrow per (src, dst, op) in the step, labelled with its chunks ('+' adds, '=' copies)."""
    groups: dict[tuple[int, int, str], list[int]] = {}
    for t in step:
        groups.setdefault((t.src, t.dst, t.op), []).append(t.chunk)
    out = []
    for (src, dst, op), chunks in groups.items():
        chunks.sort()
        text = f"c{chunks[0]}" if len(chunks) == 1 else f"c{chunks[0]}..{chunks[-1]}"
        out.append((src, dst, ("+" if op == REDUCE else "=") + text))
    return tuple(out)


def frames(schedule: Schedule, nbytes: int = 1 << 20) -> list[Frame]:
    """Every moment of ``schedule`` as a Frame; a wrong schedule stops at the failing step with the message."""
    error, failed_at = "", None
    try:
        history = check(schedule)
    except ScheduleError as err:
        history, error = err.provenance, str(err)
        failed_at = len(history) - 1  # the last state that was reached
    coll = schedule.collective
    n, k = coll.nranks, coll.nchunks
    need = [[len(coll.end(r, c) or coll.everyone) for c in range(k)] for r in range(n)]
    traffic = traffic_by_step(schedule, nbytes)
    sent_by_step, received_by_step = (np.cumsum(traffic[key], axis=0) for key in ("sent", "received"))
    out, before = [], None
    for index, state in enumerate(history):
        arrows = _arrows(schedule.steps[index - 1]) if index else ()
        sent = sent_by_step[index - 1] if index else np.zeros(n, dtype=np.int64)
        received = received_by_step[index - 1] if index else np.zeros(n, dtype=np.int64)
        fill = np.array([[len(state[r][c]) / need[r][c] for c in range(k)] for r in range(n)])
        provenance = tuple(tuple(provenance_str(state[r][c]) for c in range(k)) for r in range(n))
        changed = () if before is None else tuple((r, c) for r in range(n) for c in range(k)
                                                  if provenance[r][c] != before[r][c])
        # steps count from 0, as in the textbook formulas (rank j sends chunk (j - i) mod n at step i) and
        # in `ringlab demo`; the slider's readout shows the same number
        label = "start" if index == 0 else f"after step {index - 1}" + (
            f" ({schedule.steps[index - 1].label})" if schedule.steps[index - 1].label else "")
        title = f"{schedule.name} on {n} ranks: {label}"
        message = error if index == failed_at else ""
        out.append(Frame(index, title, arrows, fill, provenance, sent, message, received, changed))
        before = provenance
    return out


def _annotations(frame: Frame, x, y, labels: bool, error: bool = True) -> list[dict]:
    """Arrows from sender to receiver, stopping short of the markers, with a chunk label midway
    (``labels``: up to :data:`RANK_TEXT_UP_TO` ranks), and the checker's message under the plot (``error``)."""
    notes = []
    for src, dst, text in frame.arrows:
        x0, y0, x1, y1 = x[src], y[src], x[dst], y[dst]
        dx, dy = x1 - x0, y1 - y0
        length = math.hypot(dx, dy) or 1.0
        shrink = min(0.12, length / 3) / length
        notes.append(dict(x=x1 - dx * shrink, y=y1 - dy * shrink, ax=x0 + dx * shrink, ay=y0 + dy * shrink,
                          xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=3,
                          arrowsize=1.2, arrowwidth=1.8, arrowcolor="#c4541b" if text[0] == "+" else "#2a6fbf",
                          text=""))
        if labels:  # the label sits beside the middle of the arrow, off to its left
            nx, ny = -dy / length, dx / length
            notes.append(dict(x=(x0 + x1) / 2 + 0.07 * nx, y=(y0 + y1) / 2 + 0.07 * ny, xref="x", yref="y",
                              text=text, showarrow=False, font=dict(size=11)))
    if frame.error and error:
        notes.append(dict(x=0.5, y=-0.12, xref="paper", yref="paper", showarrow=False, text=frame.error,
                          font=dict(color="#b00020", size=13)))
    return notes


def frame_traces(frame: Frame, x, y, labels: bool) -> list:
    """The four traces of a frame: the ranks (bytes sent and received in the hover, and under each
    marker when ``labels``), that text, the chunk grid (text in the cells up to :data:`LABELS_UP_TO`
    ranks), and outlines on the cells this step changed."""
    n = len(frame.sent)
    received = frame.received if frame.received is not None else np.zeros(n, dtype=np.int64)
    cell_text = n <= LABELS_UP_TO
    ranks = go.Scatter(x=x, y=y, mode="markers+text", text=[f"r{r}" for r in range(n)], textposition="middle center",
                       marker=dict(size=34 if labels else rank_marker(n)[0], color="#ffffff",
                                   line=dict(width=2, color="#444")),
                       hovertext=[f"rank {r}: {format_bytes(int(s))} sent, {format_bytes(int(v))} received so far"
                                  for r, (s, v) in enumerate(zip(frame.sent, received))],
                       hoverinfo="text", xaxis="x", yaxis="y", textfont=dict(size=12 if labels else rank_marker(n)[1]))
    bytes_text = go.Scatter(x=np.asarray(x) * 1.0, y=np.asarray(y) - 0.3, mode="text", hoverinfo="skip",
                            xaxis="x", yaxis="y",
                            text=[f"↑{format_bytes(int(s))} ↓{format_bytes(int(v))}" if labels else ""
                                  for s, v in zip(frame.sent, received)],
                            textfont=dict(size=10, color="#555"))
    grid = go.Heatmap(z=frame.fill, zmin=0, zmax=1, colorscale=COLORSCALE, showscale=False,
                      text=[list(row) for row in frame.provenance], texttemplate="%{text}" if cell_text else None,
                      customdata=[list(row) for row in frame.provenance], xgap=2, ygap=2,
                      hovertemplate="rank %{y}, chunk %{x}: %{customdata}<extra></extra>",
                      x=list(range(frame.fill.shape[1])), y=list(range(n)), xaxis="x2", yaxis="y2")
    changed = go.Scatter(x=[c for _, c in frame.changed], y=[r for r, _ in frame.changed], mode="markers",
                         marker=dict(symbol="square-open", size=max(8, 30 - n), color="#1a1a1a", line=dict(width=2)),
                         hoverinfo="skip", xaxis="x2", yaxis="y2", name="changed by this step")
    return [ranks, bytes_text, grid, changed]


def rank_marker(nranks: int) -> tuple[int, int]:
    """(marker size, label font size) of a rank on a ring too full for text around it: as large as the circle
    leaves room for, so that "r31" stays readable."""
    return (24, 10) if nranks <= 16 else (19, 8) if nranks <= 32 else (12, 6)


def base_layout(schedule: Schedule, height: int | None = None) -> dict:
    """The figure's frame: the ring on the left, the chunk grid on the right. Up to
    :data:`RANK_TEXT_UP_TO` ranks the ring leaves room for the byte counts under each rank; above, it
    has no text around it, so it grows to fill its panel and the panel takes half the width."""
    n = schedule.nranks
    reach, share = (1.55, 0.42) if n <= RANK_TEXT_UP_TO else (1.15, 0.5)
    tall = max(420, min(900, 26 * n + 260))
    if _is_tree(schedule):  # a tree is wider than a ring: its panel takes half the width, and the plot its height
        reach, share, tall = 1.55, TREE_SHARE, max(tall, TREE_PLOT_PX + 130)
    return dict(
        height=height or tall,
        margin=dict(l=20, r=20, t=60, b=70), showlegend=False, plot_bgcolor="white",
        xaxis=dict(domain=[0, share], range=[-reach, reach], visible=False),
        yaxis=dict(range=[-reach, reach], visible=False, scaleanchor="x"),
        xaxis2=dict(domain=[share + 0.06, 1], title="chunk", range=[-0.5, schedule.nchunks - 0.5], side="top",
                    dtick=_every(schedule.nchunks)),
        # an explicit range: the rows are the ranks that exist, 0 at the top, and no axis padding adds a row -1 or n
        yaxis2=dict(title="rank", range=[n - 0.5, -0.5], side="right", dtick=_every(n)),
    )


def _every(count: int) -> int | None:
    """A tick every 1, 2 or 4 rows, so that at most 16 labels share an axis (None: plotly's own choice)."""
    return 1 if count <= 16 else 2 if count <= 32 else 4 if count <= 64 else None


def step_names(nframes: int) -> list[str]:
    """What a slider shows at each frame: "start", then the number of the step just done (from 0)."""
    return ["start"] + [str(i) for i in range(nframes - 1)]


def _wrapped(text: str, width: int = 110) -> str:
    """``text`` broken into lines of about ``width`` characters with <br> (plotly does not wrap)."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, width))


def _legend(error: str = "") -> tuple[dict, int]:
    """The legend under :func:`step_figure`'s controls, led by the checker's message on a failing frame, and
    its height in pixels."""
    text = _wrapped(LEGEND)
    if error:
        text = f"<span style='color:#b00020'>{_wrapped(error)}</span><br>" + text
    lines = text.count("<br>") + 1
    note = dict(x=0, y=0, xref="paper", yref="paper", xanchor="left", yanchor="top", yshift=-CONTROLS_PX,
                align="left", showarrow=False, text=text, font=dict(size=LEGEND_FONT, color="#444"))
    return note, lines * LEGEND_LINE_PX


def step_figure(schedule: Schedule, nbytes: int = 1 << 20, height: int | None = None, positions=None) -> go.Figure:
    """The whole schedule as one plotly figure with a play button and a step slider (no kernel needed),
    with the legend (:data:`LEGEND`) under them. The slider counts like the titles: "0" is after step 0.

    Below the plot come the buttons and the slider (:data:`CONTROLS_PX` high), then the legend: placed in
    pixels from the plot's bottom edge, so that neither is drawn over the other at any height.
    """
    all_frames = frames(schedule, nbytes)
    labels = schedule.nranks <= RANK_TEXT_UP_TO
    x, y = default_positions(schedule) if positions is None else _checked(positions, schedule.nranks)
    first = all_frames[0]
    layout = base_layout(schedule, height)
    legends = [_legend(f.error) for f in all_frames]
    below = CONTROLS_PX + max(px for _, px in legends) + 10
    layout["height"] += below - layout["margin"]["b"]  # the plot keeps its size; the margin grows under it
    layout["margin"] = dict(layout["margin"], b=below)
    fig = go.Figure(data=frame_traces(first, x, y, labels), layout=layout)
    fig.update_layout(title=first.title, annotations=_annotations(first, x, y, labels, error=False) + [legends[0][0]])
    names = step_names(len(all_frames))
    fig.frames = [go.Frame(name=name, data=frame_traces(f, x, y, labels),
                           layout=dict(title=dict(text=f.title),
                                       annotations=_annotations(f, x, y, labels, error=False) + [legend]))
                  for name, f, (legend, _) in zip(names, all_frames, legends)]
    play = dict(label="play", method="animate", args=[None, dict(frame=dict(duration=900, redraw=True), fromcurrent=True)])
    pause = dict(label="pause", method="animate", args=[[None], dict(mode="immediate", frame=dict(duration=0))])
    fig.update_layout(
        updatemenus=[dict(type="buttons", direction="left", x=0, y=0, xanchor="left", yanchor="top",
                          pad=dict(t=CONTROLS_GAP_PX + 12, r=10), buttons=[play, pause])],
        sliders=[dict(active=0, x=0, y=0, len=1, xanchor="left", yanchor="top",  # starts BUTTONS_PX right of them
                      pad=dict(t=CONTROLS_GAP_PX, b=0, l=BUTTONS_PX), currentvalue=dict(prefix="step: "),
                      steps=[dict(label=name, method="animate",
                                  args=[[name], dict(mode="immediate", frame=dict(duration=0, redraw=True))])
                             for name in names])])
    return fig
