"""What every ringlab figure draws alike: log axes labelled at whole numbers, ranged to their data, and
reference lines whose label lands at their value on log axes too.

On a log axis plotly labels the minor ticks with bare digits ("2", "5", "0.1" beside "9") and takes an
annotation's position as log10 of the value (an annotation meant for y=80 sits at 10^80 and stretches the
autorange to 10^85). :func:`finish_log_axes` gives every log axis of a figure full labels at the decades
(at 1, 2 and 5 of each decade when the data span too few decades for three labels), unlabelled minor
ticks between, and a range that covers what the axis shows and no more; :func:`reference_line` draws a
labelled line at a value on a linear or log axis alike.
"""
from __future__ import annotations

import math
import re

import plotly.graph_objects as go

MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 4, 5, 6, 7, 8, 9))  # tried in turn until at least 3 labels fit
MIN_LABELS = 3
MAX_DECADE_LABELS = 10  # above, every second (third, ...) decade is labelled
PAD = 0.05  # of the axis's span in decades, at least 0.05 decade, either side of the data
MIN_SPAN = 0.4  # decades an axis shows at least
SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def tick_label(value: float) -> str:
    """A tick's full label: ``20``, ``0.5``, ``1k``, ``200M``, ``1e-05`` (never a bare digit for 2x10^k)."""
    for scale, prefix in SI:
        if value >= scale:
            return f"{value / scale:g}{prefix}"
    return f"{value:g}"


def log_ticks(low: float, high: float) -> tuple[list[float], list[str], list[float]]:
    """(labelled values, their labels, unlabelled minor values) for a log axis showing ``low`` to ``high``."""
    if not 0 < low <= high:
        raise ValueError(f"a log axis needs 0 < low <= high, got {low}, {high}")
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    candidates = [sorted(m * 10.0 ** k for k in range(first, last + 1) for m in mantissas) for mantissas in MANTISSAS]
    inside = [[v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)] for values in candidates]
    labelled = next((values for values in inside if len(values) >= MIN_LABELS), inside[-1])
    if labelled is inside[0] and len(labelled) > MAX_DECADE_LABELS:
        every = math.ceil(len(labelled) / MAX_DECADE_LABELS)
        labelled = labelled[::every]
    minor = [v for v in inside[-1] if v not in labelled]
    return labelled, [tick_label(v) for v in labelled], minor


def _axis_names(fig: go.Figure) -> list[str]:
    return [name for name in fig.layout.to_plotly_json() if re.fullmatch(r"[xy]axis\d*", name)]


def _ref(name: str) -> str:
    """``"yaxis3"`` -> ``"y3"``: how traces, shapes and annotations name an axis."""
    return name[0] + name[5:]


def _numbers(values) -> list[float]:
    out = []
    for v in values if values is not None else ():
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(v) and v > 0:
            out.append(v)
    return out


def axis_values(fig: go.Figure, name: str) -> list[float]:
    """The positive values the axis ``name`` (``"xaxis"``, ``"yaxis2"``) shows: its traces' coordinates (bars'
    ends, from their base) and the positions of the shapes drawn on it (reference lines)."""
    letter, ref = name[0], _ref(name)
    values = []
    for trace in fig.data:
        if (getattr(trace, f"{letter}axis", None) or letter) != ref:
            continue
        data = getattr(trace, letter, None)
        base = getattr(trace, "base", None) if trace.type == "bar" else None
        along = (trace.orientation == "h") == (letter == "x") if trace.type == "bar" else False
        if along and base is not None:
            bases = list(base) if isinstance(base, (list, tuple)) else [base] * len(data or ())
            values += _numbers(bases) + _numbers([b + v for b, v in zip(bases, data or ())])
        else:
            values += _numbers(data)
    for shape in fig.layout.shapes:
        if getattr(shape, f"{letter}ref") == ref:
            values += _numbers([getattr(shape, f"{letter}0"), getattr(shape, f"{letter}1")])
    return values


def _has_bars(fig: go.Figure, name: str) -> bool:
    """Whether bars stand along the axis ``name`` (their length, not their category, is on it)."""
    letter, ref = name[0], _ref(name)
    return any(trace.type == "bar" and (getattr(trace, f"{letter}axis", None) or letter) == ref
               and (trace.orientation == "h") == (letter == "x") for trace in fig.data)


def finish_log_axes(fig: go.Figure, room: float = 0.0) -> go.Figure:
    """Every log axis of ``fig``: labels at decades (or 1-2-5) in full, minor ticks unlabelled, and a range
    covering its data (and that of the axes it matches) with a little room (``room``: a share of the data's
    span more above it, for text written beyond the bars' ends). Axes given their own tick values are left
    as they are. Call it once the traces are in; returns ``fig``."""
    layout = fig.layout
    logs = [name for name in _axis_names(fig) if layout[name].type == "log" and layout[name].tickvals is None]
    groups: dict[str, list[str]] = {}
    for name in logs:
        target = layout[name].matches
        groups.setdefault(target[0] + "axis" + target[1:] if target else name, []).append(name)
    for members in groups.values():
        values = [v for member in members for v in axis_values(fig, member)]
        if not values:
            continue
        low, high = min(values), max(values)
        span = math.log10(high) - math.log10(low)
        pad = max(PAD * span, 0.05, (MIN_SPAN - span) / 2)  # data all alike still get a few labelled ticks
        lo, hi = math.log10(low) - pad, math.log10(high) + pad + room * max(span, 1.0)
        if any(_has_bars(fig, member) for member in members):  # bars rise from the decade below their lowest
            lo = min(lo, math.floor(math.log10(low)))
        ticks, labels, minor = log_ticks(10 ** lo, 10 ** hi)
        for member in members:
            layout[member].update(range=[lo, hi], autorange=False, tickmode="array", tickvals=ticks, ticktext=labels,
                                  minor=dict(tickmode="array", tickvals=minor, ticks="outside", ticklen=3,
                                             showgrid=True, gridcolor="rgba(0,0,0,0.04)"))
    return fig


def reference_line(fig: go.Figure, y: float, text: str, row=None, col=None, **line) -> go.Figure:
    """A dashed horizontal line at ``y`` across the plot with ``text`` at its right end, placed right on a linear
    and on a log y axis (where plotly takes an annotation's y as log10 of the value); returns ``fig``."""
    fig.add_hline(y=y, line_dash=line.pop("line_dash", "dash"), row=row, col=col, **line)
    shape = fig.layout.shapes[-1]
    axis = fig.layout["yaxis" + shape.yref[1:]]
    at = math.log10(y) if axis.type == "log" else y
    fig.add_annotation(x=1, xref=shape.xref, y=at, yref=shape.yref, text=text, showarrow=False, xanchor="right",
                       yanchor="bottom")
    return fig
