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
MAJOR_TICK_PX, MINOR_TICK_PX = 6, 3  # tick marks: the labelled ones longer, so that their labels clear both
LABEL_SPACING_PX = {"x": 64, "y": 34}  # a log axis labels at most one decade in this many pixels
SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def tick_label(value: float) -> str:
    """A tick's full label: ``20``, ``0.5``, ``1k``, ``200M``, ``1e-05`` (never a bare digit for 2x10^k)."""
    for scale, prefix in SI:
        if value >= scale:
            return f"{value / scale:g}{prefix}"
    return f"{value:g}"


def log_ticks(low: float, high: float, most: int = MAX_DECADE_LABELS) -> tuple[list[float], list[str], list[float]]:
    """(labelled values, their labels, unlabelled minor values) for a log axis showing ``low`` to ``high``,
    with at most ``most`` decades labelled (every second, third, ... decade where more would crowd)."""
    if not 0 < low <= high:
        raise ValueError(f"a log axis needs 0 < low <= high, got {low}, {high}")
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    candidates = [sorted(m * 10.0 ** k for k in range(first, last + 1) for m in mantissas) for mantissas in MANTISSAS]
    inside = [[v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)] for values in candidates]
    labelled = next((values for values in inside if len(values) >= MIN_LABELS), inside[-1])
    most = max(MIN_LABELS, most)
    if labelled is inside[0] and len(labelled) > most:
        every = math.ceil(len(labelled) / most)
        aligned = [v for v in labelled if round(math.log10(v)) % every == 0]  # 0.01, 1, 100: decades a reader counts
        labelled = aligned if len(aligned) >= MIN_LABELS else labelled[::every]
    minor = [v for v in inside[-1] if v not in labelled]
    labels = [tick_label(v) for v in labelled]
    if any("e" in text for text in labels):  # "1e-05" beside "0.0001": every label below 1 as a power of ten
        labels = [power_label(v) if v < 1 else text for v, text in zip(labelled, labels)]
    return labelled, labels, minor


def power_label(value: float) -> str:
    """A tick's label as a power of ten, as plotly draws HTML: ``10<sup>-5</sup>``, ``2×10<sup>-5</sup>``."""
    exponent = math.floor(math.log10(value) + 1e-9)
    mantissa = round(value / 10.0 ** exponent, 6)
    power = f"10<sup>{exponent}</sup>"
    return power if mantissa == 1 else f"{mantissa:g}×{power}"


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
        most = min(MAX_DECADE_LABELS, int(axis_px(fig, members[0]) // LABEL_SPACING_PX[members[0][0]]))
        ticks, labels, minor = log_ticks(10 ** lo, 10 ** hi, most=most)
        for member in members:
            # the labelled ticks are marked longer than the minor ones, and their labels stand off beyond both,
            # so that no minor tick is drawn across a label
            layout[member].update(range=[lo, hi], autorange=False, tickmode="array", tickvals=ticks, ticktext=labels,
                                  ticks="outside", ticklen=MAJOR_TICK_PX, ticklabelstandoff=2,
                                  minor=dict(tickmode="array", tickvals=minor, ticks="outside",
                                             ticklen=MINOR_TICK_PX, showgrid=True, gridcolor="rgba(0,0,0,0.04)"))
    return fig


def axis_px(fig: go.Figure, name: str) -> float:
    """About how many pixels long the axis ``name`` is drawn: the figure's height (or :data:`FIGURE_WIDTH_PX`)
    less its margins, times the axis's share of the plot area (its domain)."""
    layout, margin = fig.layout, fig.layout.margin
    if name[0] == "y":
        whole = (layout.height or DEFAULT_HEIGHT_PX) - _margin(margin.t, 100) - _margin(margin.b, 80)
    else:
        whole = (layout.width or FIGURE_WIDTH_PX) - _margin(margin.l, 80) - _margin(margin.r, 80)
    domain = layout[name].domain or (0, 1)
    return max(whole, 40) * (domain[1] - domain[0])


def _margin(value, default: float) -> float:
    return default if value is None else value


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


# --- laying a figure out for a JupyterLab output (issue 51): titles that fit its width, legends off the data ---
# plotly neither wraps text nor makes room for what it places in the margins, so these helpers estimate sizes
# in pixels from the number of characters, at the width a JupyterLab output area has in a 1400-px window with
# the file browser open.

FIGURE_WIDTH_PX = 960  # a notebook output's width in JupyterLab, about (the figure takes all of it)
DEFAULT_HEIGHT_PX = 450  # plotly's, where a figure sets none
CHAR_EM = 0.52  # an average character of plotly's fonts (Open Sans, else Arial-like), in ems: a little wide
TITLE_SIZE, AXIS_TITLE_SIZE, TEXT_SIZE = 17, 14, 12  # plotly's title, axis title and legend text, in px
LINE_EM = 1.3  # a line of text, in ems
LEGEND_ROW_PX = 21  # one row of a horizontal legend
LEGEND_SYMBOL_PX = 46  # an entry's symbol and the gaps around it
BELOW_AXIS_PX = 64  # an x axis's tick labels and its title, under the plot


def _plain(text: str) -> str:
    return re.sub(r"<[^>]+>", "", text)


def text_px(text: str, size: float = TEXT_SIZE) -> float:
    """About how wide ``text`` (one line, tags aside) is drawn at font ``size``, in pixels."""
    return len(_plain(text)) * CHAR_EM * size


def wrap_text(text: str, px: float, size: float = TEXT_SIZE) -> str:
    """``text`` broken with <br> at spaces into lines at most ``px`` wide at font ``size`` (lines it already
    breaks with <br> are kept; a word longer than a line stays whole)."""
    most = max(8, int(px / (CHAR_EM * size)))
    out = []
    for paragraph in re.split(r"<br\s*/?>", text):
        line = ""
        for word in paragraph.split(" "):
            if line and len(_plain(line)) + 1 + len(_plain(word)) > most:
                out.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        out.append(line)
    return "<br>".join(out)


def _lines(text: str) -> int:
    return len(re.findall(r"<br\s*/?>", text)) + 1


def _grow(fig: go.Figure, side: str, px: float) -> None:
    """Make margin ``side`` ``px`` tall and the figure taller by as much as it grew, so the plot keeps its size."""
    margin = fig.layout.margin
    before = _margin(margin[side], 100 if side == "t" else 80)
    if px <= before:
        return
    fig.update_layout(height=(fig.layout.height or DEFAULT_HEIGHT_PX) + px - before, margin={side: round(px)})


def _legend_entries(fig: go.Figure) -> list[str]:
    shown = [t for t in fig.data if t.showlegend is not False and t.name]
    if len(fig.data) < 2 and not any(t.showlegend for t in fig.data):
        return []  # plotly shows no legend for a single trace
    return [t.name for t in shown]


def legend_rows(names: list[str], width: float = FIGURE_WIDTH_PX) -> int:
    """How many rows a horizontal legend of ``names`` takes across ``width`` pixels (an entry of several lines
    takes as many rows)."""
    rows, used = 0, width
    for name in names:
        lines = re.split(r"<br\s*/?>", name)
        entry = LEGEND_SYMBOL_PX + max(text_px(line) for line in lines)
        if used + entry > width:
            rows, used = rows + 1, 0.0
        rows += len(lines) - 1
        used += entry
    return rows


def legend_below(fig: go.Figure, axis_px: float = BELOW_AXIS_PX) -> go.Figure:
    """A horizontal legend under the plot, below its x axis's ticks and title (``axis_px`` tall), in a bottom
    margin grown for its rows, and the figure as much taller: never over the data or the axis title, and every
    entry shown however many there are. Returns ``fig``."""
    names = _legend_entries(fig)
    if not names:
        return fig
    margin = fig.layout.margin
    plot = FIGURE_WIDTH_PX - _margin(margin.l, 80) - _margin(margin.r, 80)  # the plot's width
    for trace in fig.data:  # an entry wider than the plot is broken into lines, never cut off at its edge
        if trace.name and max(text_px(line) for line in re.split(r"<br\s*/?>", trace.name)) + LEGEND_SYMBOL_PX > plot:
            trace.name = wrap_text(trace.name, plot - LEGEND_SYMBOL_PX)
    names = _legend_entries(fig)
    rows = legend_rows(names, plot)
    title = 1 if fig.layout.legend.title.text else 0
    height = (rows + title) * LEGEND_ROW_PX + 8
    margin = fig.layout.margin
    fig.update_layout(height=(fig.layout.height or DEFAULT_HEIGHT_PX) - _margin(margin.b, 80) + axis_px + height + 10,
                      margin=dict(b=round(axis_px + height + 10)))
    # hung from the plot's bottom edge by its top, axis_px lower (paper units are shares of the plot's height,
    # which the margins above leave fixed)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-axis_px / axis_px_of_plot(fig),
                                  yanchor="top"))
    return fig


def place_legend(fig: go.Figure, axis_px: float = BELOW_AXIS_PX) -> go.Figure:
    """Leave a short legend at plotly's place right of the plot; move one that would take much of the figure's
    width (long names) or overflow the plot's height (many entries) under the plot (:func:`legend_below`)."""
    names = _legend_entries(fig)
    if not names:
        return fig
    widest = max(text_px(line) for name in names for line in re.split(r"<br\s*/?>", name)) + LEGEND_SYMBOL_PX
    tall = len(names) * LEGEND_ROW_PX > axis_px_of_plot(fig)
    if widest > 0.25 * FIGURE_WIDTH_PX or tall:
        legend_below(fig, axis_px)
    return fig


def axis_px_of_plot(fig: go.Figure) -> float:
    """The plot area's height in pixels, about."""
    margin = fig.layout.margin
    return (fig.layout.height or DEFAULT_HEIGHT_PX) - _margin(margin.t, 100) - _margin(margin.b, 80)


def wrap_axis_titles(fig: go.Figure) -> go.Figure:
    """Every y axis title longer than its axis is drawn broken into lines (at spaces) that fit along it."""
    for name in _axis_names(fig):
        if name[0] != "y":
            continue
        title = fig.layout[name].title
        if not title.text:
            continue
        size = title.font.size or AXIS_TITLE_SIZE
        room = axis_px(fig, name) * 0.95
        if max(text_px(line, size) for line in re.split(r"<br\s*/?>", title.text)) > room:
            fig.layout[name].title.text = wrap_text(title.text, room, size)
    return fig


def _above_plot_px(fig: go.Figure) -> float:
    """What plotly draws between the title and the plot's top edge: subplot titles, a legend above the plot."""
    above = 0.0
    for note in fig.layout.annotations:
        if note.yref == "paper" and note.y is not None and note.y >= 0.98 and note.yanchor == "bottom":
            above = max(above, _lines(note.text or "") * LINE_EM * (note.font.size or AXIS_TITLE_SIZE) + 6)
    legend = fig.layout.legend
    if legend.y is not None and legend.y >= 1:
        above = max(above, LEGEND_ROW_PX + 8)
    return above


def wrap_title(fig: go.Figure, width: float = FIGURE_WIDTH_PX) -> go.Figure:
    """The figure's title broken with <br> at spaces into lines that fit ``width`` pixels; a title of more than
    one line is hung from the figure's top edge with a top margin grown for its lines (and the figure taller by
    as much), above the subplot titles or legend that sit over the plot. Returns ``fig``."""
    title = fig.layout.title
    if not title.text:
        return fig
    size = title.font.size or TITLE_SIZE
    start = 0.05 if title.x is None else title.x  # plotly's template puts titles at 5% of the width
    text = wrap_text(title.text, width * (1 - start) - 30, size)
    lines = _lines(text)
    if lines == 1:
        return fig
    pad = 14
    fig.update_layout(title=dict(text=text, y=1, yref="container", yanchor="top", pad=dict(t=pad)))
    _grow(fig, "t", pad + lines * LINE_EM * size + 12 + _above_plot_px(fig))
    return fig


def finish_layout(fig: go.Figure, legend: str = "auto", axis_px: float = BELOW_AXIS_PX) -> go.Figure:
    """Lay ``fig`` out for a notebook's width: its legend placed (``legend``: ``"auto"``, see
    :func:`place_legend`; ``"below"``, :func:`legend_below`; ``"keep"``, as the figure set it), long y axis
    titles wrapped along their axis, and its title wrapped to the width with room above the plot. Call it once
    the traces and the title are in; returns ``fig``."""
    if legend == "below":
        legend_below(fig, axis_px)
    elif legend == "auto":
        place_legend(fig, axis_px)
    wrap_axis_titles(fig)
    return wrap_title(fig)
