"""Log axes as a learner reads them: full labels (never a bare "2" for 2x10^k), a range that covers the data and
no more, and reference lines whose label sits at their value on a log axis too (not at 10^value)."""
import math
import re

import pytest

from ringlab.viz.axes import axis_values, finish_log_axes, log_ticks, reference_line, tick_label


def _value(label: str) -> float:
    """A tick label read back as a number: "20" -> 20, "1k" -> 1000, "500M" -> 5e8, "2×10<sup>-5</sup>" -> 2e-5."""
    power = re.fullmatch(r"(?:([\d.]+)×)?10<sup>(-?\d+)</sup>", label)
    if power:
        return float(power.group(1) or 1) * 10.0 ** int(power.group(2))
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
    return float(label[:-1]) * scale[label[-1]] if label[-1] in scale else float(label)


def log_axes(fig) -> list[str]:
    return [name for name in fig.layout.to_plotly_json() if re.fullmatch(r"[xy]axis\d*", name)
            and fig.layout[name].type == "log"]


def assert_log_axes_readable(fig, room: float = 0.0):
    """Every log axis: labels in full at the values they name, at least two of them, minor ticks unlabelled,
    a range from just below to just above its data, and no annotation outside that range."""
    names = log_axes(fig)
    assert names, "the figure has no log axis"
    for name in names:
        axis = fig.layout[name]
        if axis.matches:  # drawn with the axis it matches
            continue
        values = axis_values(fig, name) + [v for other in names if fig.layout[other].matches == name[0] + name[5:]
                                           for v in axis_values(fig, other)]
        low, high = math.log10(min(values)), math.log10(max(values))
        lo, hi = axis.range
        assert lo < low and hi > high, f"{name}: range {axis.range} leaves out data from {low:.2f} to {high:.2f}"
        span, least = max(high - low, 1.0), (0.4 - (high - low)) / 2 + 0.01  # an axis shows 0.4 decade at least
        floor = math.floor(low) if any(t.type == "bar" for t in fig.data) else low  # bars rise from a whole decade
        assert (floor - lo) <= max(0.1 * span + 0.06, least) and (hi - high) <= max((0.1 + room) * span + 0.06, least), (
            f"{name}: range {axis.range} runs far past its data ({low:.2f} to {high:.2f})")
        shown = [(v, t) for v, t in zip(axis.tickvals, axis.ticktext) if lo <= math.log10(v) <= hi]
        assert len(shown) >= 2, f"{name}: {len(shown)} labelled ticks in its range"
        for value, text in zip(axis.tickvals, axis.ticktext):
            assert _value(text) == pytest.approx(value), f"{name}: {text!r} labels {value}"
        assert axis.minor.tickvals and not set(axis.minor.tickvals) & set(axis.tickvals)
        ref = name[0] + name[5:]
        for note in fig.layout.annotations:  # on a log axis an annotation's position is log10 of the value
            if getattr(note, f"{name[0]}ref") == ref:
                at = getattr(note, name[0])
                assert lo <= at <= hi, f"{name}: annotation {note.text!r} at {at}, outside the range {axis.range}"


def test_labels_are_whole_numbers_at_decades_or_one_two_five():
    ticks, labels, minor = log_ticks(1e3, 1e9)
    assert labels == ["1k", "10k", "100k", "1M", "10M", "100M", "1G"] and 2e3 in minor
    assert log_ticks(3, 40)[1] == ["5", "10", "20"]  # under three decades' labels: 1, 2 and 5 of each
    assert log_ticks(0.02, 0.09)[1][:3] == ["0.02", "0.03", "0.04"]  # every digit, written in full
    assert tick_label(2e-5) == "2e-05" and tick_label(250e6) == "250M"
    assert len(log_ticks(1, 1e20)[1]) <= 11  # 21 decades: every second one labelled
    # below 1e-4 a label would read "1e-05" beside "0.0001": then every label below 1 is a power of ten
    assert log_ticks(1e-5, 0.1)[1] == ["10<sup>-5</sup>", "10<sup>-4</sup>", "10<sup>-3</sup>", "10<sup>-2</sup>",
                                       "10<sup>-1</sup>"]
    assert log_ticks(2e-5, 1e-4)[1] == ["2×10<sup>-5</sup>", "5×10<sup>-5</sup>", "10<sup>-4</sup>"]
    assert log_ticks(1e-5, 100)[1][-4:] == ["10<sup>-1</sup>", "1", "10", "100"]
    assert log_ticks(1e-3, 1)[1] == ["0.001", "0.01", "0.1", "1"]  # decimals where none needs an exponent
    assert [_value(t) for t in log_ticks(2e-5, 1e-4)[1]] == pytest.approx([2e-5, 5e-5, 1e-4])
    with pytest.raises(ValueError):
        log_ticks(0, 10)


def test_a_reference_line_on_a_log_axis_is_labelled_at_its_value():
    """Issue 51: the 80 GB line's label at y=80 on a log axis put the axis's top at 10^85."""
    from ringlab.lessons.lab08_sharding_and_memory import sharding
    from ringlab.viz.parallelism import scale_bars

    fig = scale_bars(sharding.at_scale())
    note = next(a for a in fig.layout.annotations if "80 GB" in a.text)
    assert note.y == pytest.approx(math.log10(80))
    assert fig.layout.yaxis.range[1] < 3.5  # GB a GPU: hundreds at most, not 10^85
    assert fig.layout.yaxis.range[0] <= math.floor(math.log10(min(min(t.y) for t in fig.data if t.type == "bar")))
    assert_log_axes_readable(fig)


def test_a_reference_line_on_a_linear_axis_stays_at_its_value():
    import plotly.graph_objects as go

    fig = reference_line(go.Figure(go.Bar(x=["a", "b"], y=[10, 30])), 20.0, "the mean, 20")
    assert fig.layout.annotations[0].y == 20.0 and fig.layout.shapes[0].y0 == 20.0


def test_every_log_axis_ringlab_draws_is_readable():
    from ringlab.lessons.lab05_scaling.datacenter import at_scale
    from ringlab.lessons.lab10_inside_nccl import nccl
    from ringlab.viz import (algbw_busbw_plot, busbw_plot, fraction_bars, links_figure, measured_vs_predicted,
                             scale_plot, segments_plot, time_vs_ranks, versus_plot)
    from ringlab.viz.parallelism import protocol_plot

    rows = [{"algorithm": a, "bytes": b, "busbw_Bps": b * f} for a, f in (("mpi", 1e3), ("ring", 2e3))
            for b in (1 << 10, 1 << 16, 1 << 22)]
    assert_log_axes_readable(busbw_plot(rows))
    assert_log_axes_readable(time_vs_ranks([2, 4, 8, 16], {"ring": [1e-3, 2e-3, 3e-3, 5e-3]}))
    assert_log_axes_readable(measured_vs_predicted([1024, 1 << 20], [2e-5, 3e-3], [1e-5, 3e-3]))
    assert_log_axes_readable(segments_plot([1, 2, 4, 8, 16, 32], [6e-3, 4e-3, 3e-3, 2.5e-3, 2.6e-3, 3e-3]))
    assert_log_axes_readable(links_figure([("PCIe 3.0 x16", 16e9, "spec"), ("NVLink", 300e9, "spec")],
                                          {"here": 11e9}))
    fraction = [{"what": "NVLink", "Bps": 250e9, "peak_Bps": 300e9}, {"what": "PCIe", "Bps": 25e9, "peak_Bps": 63e9}]
    # issue 51: a share of the peak is read off a linear axis (on a log one a 41% bar looked like two thirds)
    bars = fraction_bars(fraction, "t")
    assert bars.layout.xaxis.type in (None, "linear") and bars.layout.xaxis.range[0] == 0
    sweep = [{"bytes": b, "measured_busbw": 2e9 * i, "predicted_busbw": 1e9 * i, "ratio": 0.5, "predicted": "ring"}
             for i, b in enumerate((4096, 1 << 20, 1 << 26), start=1)]
    assert_log_axes_readable(versus_plot({"box": sweep}))
    scaling = [{"ranks": n, "bytes": b, "algbw_Bps": b / (1e-5 + b / 1e9), "busbw_Bps": 2 * b / (1e-5 + b / 1e9)}
               for n in (2, 8) for b in (1 << 10, 1 << 20, 1 << 28)]
    assert_log_axes_readable(algbw_busbw_plot(scaling))
    fig = scale_plot(at_scale([8, 64, 1024], 1 << 20), {"gpus": 256})
    assert_log_axes_readable(fig)  # the turning point's label at log10(256), not at 10^256
    assert_log_axes_readable(protocol_plot(nccl.protocol_rows(sizes=[1 << 10, 1 << 20, 1 << 30])))


def test_a_subplot_figure_with_shared_axes_gets_one_range_for_them():
    from ringlab.viz import tree_ring_plot

    panel = {"predicted": [{"algorithm": a, "bytes": b, "busbw_Bps": b * f} for a, f in (("ring", 1e3), ("tree", 1e4))
                           for b in (1 << 10, 1 << 20)]}
    fig = tree_ring_plot({"A": panel, "B": {"predicted": [dict(r, busbw_Bps=r["busbw_Bps"] * 10)
                                                          for r in panel["predicted"]]}})
    assert fig.layout.yaxis2.matches == "y"
    assert_log_axes_readable(fig)
    assert 10 ** fig.layout.yaxis.range[1] > max(fig.data[-1].y)  # panel B's data fits the shared axis


def test_axes_with_their_own_ticks_are_left_alone():
    import plotly.graph_objects as go

    fig = go.Figure(go.Scatter(x=[1, 10, 100], y=[1, 2, 3]))
    fig.update_layout(xaxis=dict(type="log", tickvals=[1, 100], ticktext=["one", "hundred"]))
    finish_log_axes(fig)
    assert fig.layout.xaxis.ticktext == ("one", "hundred") and fig.layout.xaxis.range is None
