"""Issue 51, figures read at a JupyterLab output's width: legends off the data and clear of axis titles, every
entry of a long legend shown, long titles wrapped to the width with room above the plot, y axis titles no longer
than their axis, log axes whose labels clear the minor ticks and do not crowd, series that never look alike, a
topology whose labels do not coincide, and a step-through tree whose ranks and byte counts do not overlap."""
import math

import numpy as np
import pytest

import ringlab as rl
from ringlab.viz.axes import (BELOW_AXIS_PX, CHAR_EM, FIGURE_WIDTH_PX, TITLE_SIZE, axis_px,
                              legend_rows, log_ticks, text_px, wrap_text)

LONG = ["2 nodes x 8 H100 80GB HBM3 (SXM), NVLink4/NVSwitch intra-node; IB NDR 400G CX-7 inter-node (A%02d)" % i
        for i in range(20)]


def _rows(names):
    return [{"algorithm": a, "bytes": b, "busbw_Bps": b * (i + 1) * 1e3} for i, a in enumerate(names)
            for b in (1 << 10, 1 << 20, 1 << 30)]


def _legend_below_the_axis(fig):
    """The legend hangs under the x axis's ticks and title (their pixels below the plot's bottom edge), in a
    bottom margin tall enough for all of its rows: never over the plot or the axis title."""
    legend, margin = fig.layout.legend, fig.layout.margin
    plot = fig.layout.height - margin.b - (margin.t or 100)
    assert legend.orientation == "h" and legend.yanchor == "top" and -legend.y * plot >= BELOW_AXIS_PX - 1
    names = [t.name for t in fig.data if t.showlegend is not False and t.name]
    rows = legend_rows(names, FIGURE_WIDTH_PX - (margin.l or 80) - (margin.r or 80))
    assert margin.b >= BELOW_AXIS_PX + rows * 20, (margin.b, rows)
    return rows


def test_many_long_names_go_under_the_plot_and_the_figure_grows_for_them():
    from ringlab.viz import busbw_plot

    fig = busbw_plot(_rows(LONG))
    rows = _legend_below_the_axis(fig)
    assert rows >= 20  # each name a row of its own: every entry shown, none scrolled away
    plot = fig.layout.height - fig.layout.margin.b - (fig.layout.margin.t or 100)
    assert plot >= 260  # the plot keeps its height; the figure grew for the legend
    short = busbw_plot(_rows(["ring", "mpi"]))
    assert short.layout.legend.orientation is None  # a short legend stays at plotly's place right of the plot


def test_no_two_of_twenty_series_look_alike():
    from ringlab.viz import busbw_plot, versus_plot

    fig = busbw_plot(_rows(LONG))
    looks = {(t.line.color, t.line.dash, t.marker.symbol) for t in fig.data}
    assert len(looks) == 20  # A01 and A11 share a colour, not a dash or a marker
    sweep = [{"bytes": b, "measured_busbw": 2e9, "predicted_busbw": 1e9, "ratio": 0.5, "predicted": "ring"}
             for b in (4096, 1 << 20)]
    fig = versus_plot({name: sweep for name in LONG})
    markers = {(t.marker.color, t.marker.symbol) for t in fig.data if t.mode == "markers"}
    lines = {(t.line.color, t.line.dash) for t in fig.data if t.mode == "lines"}
    assert len(markers) == len(lines) == 20


def test_payoff_legend_is_out_of_the_data():
    from ringlab.viz.dataparallel import payoff_plot

    rows = [{"hidden": h, "gradient_bytes": 23072, "compute_s": 4e-4, "ranks": r, "predicted": r * 0.9,
             "measured": r * 0.8 if r > 1 else None, "predicted_here": r * 0.85, "shares_cores": r > 2}
            for h in (64, 1024) for r in (1, 2, 3, 4)]
    fig = payoff_plot(rows)
    assert not (0 <= (fig.layout.legend.x or 1.02) <= 1 and 0 <= (fig.layout.legend.y or 1) <= 1), (
        "the legend sits inside the plot, over the markers")
    _legend_below_the_axis(fig)


def test_legends_under_an_axis_title_leave_it_room():
    """bucket_sweep_plot's legend (y=-0.25) and large_batch_plot's (y=-0.2) sat on the x axis title."""
    from ringlab.viz.dataparallel import large_batch_plot
    from ringlab.viz.overlap import bucket_sweep_plot

    rows = [{"bucket_bytes": cap, "buckets": k, "overlap": o, "ranks": 2, "gradient_bytes": 5 << 20, "step_s": 0.1,
             "waited_s": 0.03} for k, cap in ((1, 5 << 20), (4, 1 << 20)) for o in (False, True)]
    fig = bucket_sweep_plot(rows)
    _legend_below_the_axis(fig)
    assert fig.layout.margin.b >= BELOW_AXIS_PX + 16  # its tick labels are two lines high
    plot = fig.layout.height - fig.layout.margin.b - (fig.layout.margin.t or 100)
    assert -fig.layout.legend.y * plot >= BELOW_AXIS_PX + 16 - 1
    runs = [{"name": f"batch {b}", "batch": b, "points": [{"step": s, "samples": s * b, "accuracy": 0.5, "loss": 1}
                                                          for s in range(3)]} for b in (32, 256)]
    _legend_below_the_axis(large_batch_plot(runs))


def test_the_timeline_legend_stands_above_the_plot():
    from ringlab.viz import timeline

    class Schedule:
        nranks, name = 2, "allreduce.ring"

    class Trace:
        schedule, clock = Schedule(), "wall"
        records = np.array([(0, "send", 0, 0, 1, 100, 0.0, 1e-5), (1, "recv", 0, 0, 0, 100, 0.0, 1e-5)],
                           dtype=[("rank", int), ("side", "U4"), ("step", int), ("chunk", int), ("peer", int),
                                  ("nbytes", int), ("start", float), ("end", float)])

    legend = timeline(Trace()).layout.legend
    assert legend.y >= 1 and legend.yanchor == "bottom"  # hanging from y=1.02 by its middle, it covered rank 0


def test_a_long_title_is_wrapped_to_the_width_with_room_above_the_plot():
    from ringlab.viz import bandwidth_heatmap

    title = ("peer copies, P2P on: 8x H100 80GB HBM3 (SXM), NVLink4/NVSwitch, nvbandwidth "
             "device_to_device_memcpy_read_ce, recorded 2025-03-04 on a machine with a long name")
    fig = bandwidth_heatmap(np.ones((4, 4)), title=title)
    lines = fig.layout.title.text.split("<br>")
    assert len(lines) >= 2 and " ".join(lines) == title
    room = FIGURE_WIDTH_PX * 0.95
    assert all(len(line) * CHAR_EM * TITLE_SIZE <= room for line in lines)
    assert fig.layout.title.yref == "container" and fig.layout.title.yanchor == "top"
    assert (fig.layout.margin.t or 100) >= 14 + len(lines) * TITLE_SIZE * 1.2  # plotly: 100 where unset
    short = bandwidth_heatmap(np.ones((4, 4)), title="short")
    assert short.layout.title.text == "short" and short.layout.margin.t is None


@pytest.mark.parametrize("make", ["overlap_timeline", "tree_ring_plot"])
def test_a_wrapped_title_clears_the_subplot_titles(make):
    from ringlab.viz import tree_ring_plot
    from ringlab.viz.overlap import overlap_timeline

    if make == "tree_ring_plot":
        panel = {"predicted": [{"algorithm": "ring", "bytes": b, "busbw_Bps": b * 1e3} for b in (1 << 10, 1 << 20)]}
        fig = tree_ring_plot({"A": panel, "B": panel}, title="predicted (cost model): binomial tree (dotted), double "
                             "binary tree (dashed), ring (solid); crosses: where the ring overtakes the double tree")
    else:
        from tests.test_overlap_plots import records
        fig = overlap_timeline({"overlap off, 7 buckets": records(), "overlap on, 7 buckets": records()})
    lines = fig.layout.title.text.count("<br>") + 1
    assert lines >= 2
    # the title's lines, its padding, and the subplot titles over the plot all fit the top margin
    assert (fig.layout.margin.t or 100) >= 14 + lines * TITLE_SIZE * 1.3 + 12 + 14


def test_a_y_axis_title_longer_than_its_axis_is_wrapped():
    from ringlab.viz import staleness_order_plot

    fig = staleness_order_plot([(w, s) for s in range(5) for w in range(4)], straggler=3)
    title = fig.layout.yaxis.title.text
    assert "<br>" in title and title.replace("<br>", " ") == "staleness (updates the shard saw meanwhile)"
    assert max(text_px(line, 14) for line in title.split("<br>")) <= axis_px(fig, "yaxis")


def test_wrap_text_breaks_at_spaces_only():
    text = wrap_text("a " * 30 + "unbreakable_" * 5, 100)
    assert all(len(line) <= 100 / (CHAR_EM * 12) or " " not in line for line in text.split("<br>"))
    assert text.replace("<br>", " ") == ("a " * 30 + "unbreakable_" * 5).strip()


def test_log_axes_mark_their_labelled_ticks_longer_than_the_minor_ones_and_do_not_crowd():
    from ringlab.viz import busbw_plot

    rows = [{"algorithm": a, "bytes": b, "busbw_Bps": b * f} for a, f in (("slices", 1e-1), ("mps", 1e3))
            for b in (8, 1 << 25)]
    fig = busbw_plot(rows)  # 8 decades of GB/s in a plot about 270 px tall
    for name in ("xaxis", "yaxis"):
        axis = fig.layout[name]
        assert axis.ticks == "outside" and axis.ticklen > axis.minor.ticklen  # minor ticks never reach a label
        shown = [v for v in axis.tickvals if axis.range[0] <= math.log10(v) <= axis.range[1]]
        spacing = axis_px(fig, name) / (len(shown) - 1)
        assert spacing >= (30 if name == "yaxis" else 60), f"{name}: labels {spacing:.0f} px apart"
    exps = [round(math.log10(v)) for v in fig.layout.yaxis.tickvals]
    step = exps[1] - exps[0]
    assert all(e % step == 0 for e in exps)  # every other decade: 0.01, 1, 100, not 0.1, 10, 1k at random
    assert log_ticks(1e3, 1e9, most=3)[1] == ["1k", "1M", "1G"]


def test_the_scale_plot_note_is_not_drawn_on_a_subplot_title():
    from ringlab.lessons.lab05_scaling.datacenter import at_scale
    from ringlab.viz import scale_plot

    fig = scale_plot(at_scale([8, 64, 1024], 1 << 20), {"gpus": 256})
    titles = [a for a in fig.layout.annotations if a.text in ("bus bandwidth (GB/s)", "time of one allreduce (ms)")]
    note = next(a for a in fig.layout.annotations if "256 GPUs" in a.text)
    assert note.yref == "paper" and note.y == 0 and note.yanchor == "top" and note.yshift <= -BELOW_AXIS_PX
    assert all(t.y >= 1 for t in titles)  # above the plot; the note is under the axis titles


def test_edge_labels_of_crossing_links_do_not_coincide_and_node_labels_stay_off_links():
    from ringlab.viz import topology_figure

    fig = topology_figure(rl.topology.preset("dgx1-v100"))
    bonded = next(t for t in fig.data if t.mode == "text")
    points = list(zip(bonded.x, bonded.y))
    for i, a in enumerate(points):
        for b in points[i + 1:]:
            assert math.dist(a, b) > 0.15, f"two ×k labels at {a} and {b}"
    fig = topology_figure(rl.topology.published("rtx4090x8"))
    notes = {a.text: a for a in fig.layout.annotations}
    assert {"numa-node0", "numa-node1", "smp-interconnect"} <= set(notes)
    for note in notes.values():
        assert (note.xshift, note.yshift) != (0, 0)  # beside its marker, not on it


def test_a_node_label_that_no_place_keeps_clear_of_links_covers_them():
    """DGX-1's PCIe switches sit between the GPUs above and the CPUs below, their neighbours at either side: every
    place for "pcie-switch2" has a link under it, so its label has a background that hides the link."""
    from ringlab.viz import plots

    topo = rl.topology.preset("dgx1-v100")
    gpus = list(topo.ranks)
    others = [n for n in topo.nodes if n not in gpus]
    pos = plots._cube_mesh(gpus, others)
    unit = plots._topology_unit_px(pos)
    segments = [(pos[link.a], pos[link.b]) for link in topo.links]
    covered = []
    for name, (sx, sy) in zip(others, plots._node_label_shifts(others, pos, segments, unit)):
        cx, cy, half = pos[name][0] + sx / unit, pos[name][1] + sy / unit, (plots.text_px(name) + 6) / 2 / unit
        box = (cx - half, cy - 8 / unit, cx + half, cy + 8 / unit)
        if sum(plots._inside_box(seg, box) for seg in segments) > 0:
            covered.append(name)
    assert "pcie-switch2" in covered  # (the case this test is about: if the layout changes, find another)
    notes = {a.text: a for a in plots.topology_figure(topo).layout.annotations}
    for name in others:
        colour = notes[name].bgcolor
        assert colour and colour.startswith("rgba(255, 255, 255") and float(colour.split(",")[-1][:-1]) >= 0.8


def _tree_boxes(n: int):
    """Pixel boxes of every rank's circle and byte-count label in step_figure's tree, over all its frames."""
    from ringlab.measure.units import format_bytes
    from ringlab.viz.stepview import base_layout, default_positions, frames

    schedule = rl.build("allreduce.dbtree", n)
    layout = base_layout(schedule)
    x, y = default_positions(schedule)
    share = layout["xaxis"]["domain"][1]
    reach = layout["xaxis"]["range"][1]
    plot_h = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    unit = min(share * (FIGURE_WIDTH_PX - 40) / (2 * reach), plot_h / (2 * reach))
    widest = max(text_px(f"↑{format_bytes(int(s))} ↓{format_bytes(int(r))}", 10)
                 for f in frames(schedule) for s, r in zip(f.sent, f.received))
    radius = 17
    circles = [(xi * unit, yi * unit) for xi, yi in zip(x, y)]
    labels = [(cx - widest / 2, cy - 0.3 * unit - 7, cx + widest / 2, cy - 0.3 * unit + 7) for cx, cy in circles]
    return circles, labels, radius


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8])
def test_the_step_through_tree_leaves_room_for_every_rank_and_its_byte_counts(n):
    """Issue 51: in StepThrough(dbtree, 6) r4 sat on r5, r1 and r3 touched r2, and the byte counts under each
    rank ran across its neighbours."""
    circles, labels, radius = _tree_boxes(n)
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            if i < j:
                assert math.dist(circles[i], circles[j]) >= 2 * radius + 4, f"r{i} and r{j} overlap"
                a, b = labels[i], labels[j]
                assert a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1], f"labels of r{i} and r{j} overlap"
            (cx, cy), box = circles[j], labels[i]
            nearest = (min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3]))
            assert math.dist(nearest, (cx, cy)) >= radius, f"r{i}'s byte counts run over r{j}"


def test_a_legend_entry_wider_than_the_plot_is_broken_into_lines_not_cut_off():
    import plotly.graph_objects as go

    from ringlab.viz.axes import FIGURE_WIDTH_PX, LEGEND_SYMBOL_PX, legend_below, text_px

    long = ("32 nodes x 4 NVIDIA GB200 (Blackwell, Grace-Blackwell superchip), NVLink5 inside each NVL72 rack; "
            "InfiniBand between the two racks (HCA speed not stated) (A16)")
    fig = go.Figure([go.Scatter(x=[1, 2], y=[1, 2], name=long), go.Scatter(x=[1, 2], y=[2, 3], name="short")])
    legend_below(fig)
    name = fig.data[0].name
    assert "<br>" in name and name.replace("<br>", " ") == long
    plot = FIGURE_WIDTH_PX - 160
    assert all(text_px(line) + LEGEND_SYMBOL_PX <= plot for line in name.split("<br>"))


def test_the_links_under_a_label_are_counted_as_point_by_point():
    """The label placement asks, for each of a label's 24 places, how much of every link runs through its box, with
    numpy over all links at once (``_Links``): the same sample points, counted one by one in plain Python, give
    the same lengths, for links across, along the edge of, beside and inside the box, and for a link of no length."""
    import math
    import random

    from ringlab.viz import plots

    def by_hand(segment, box, samples=plots.LINK_SAMPLES):
        (x0, y0), (x1, y1) = segment
        left, bottom, right, top = box
        inside = sum(left <= x0 + (i + 0.5) / samples * (x1 - x0) <= right
                     and bottom <= y0 + (i + 0.5) / samples * (y1 - y0) <= top for i in range(samples))
        return inside / samples * math.hypot(x1 - x0, y1 - y0)

    box = (-0.5, -0.25, 0.5, 0.25)
    rng = random.Random(7)
    segments = [((-1, 0), (1, 0)), ((-0.5, -1), (-0.5, 1)), ((2, 2), (3, 3)), ((-0.1, 0), (0.1, 0.1)),
                ((0.2, 0.2), (0.2, 0.2))]
    segments += [((rng.uniform(-1, 1), rng.uniform(-1, 1)), (rng.uniform(-1, 1), rng.uniform(-1, 1)))
                 for _ in range(200)]
    expected = [by_hand(seg, box) for seg in segments]
    assert plots._Links(segments).inside(box).tolist() == pytest.approx(expected, abs=1e-12)
    assert expected[0] == pytest.approx(1.0) and expected[2] == 0 and expected[3] == pytest.approx(math.hypot(0.2, 0.1))
    assert [plots._inside_box(seg, box) for seg in segments[:5]] == pytest.approx(expected[:5], abs=1e-12)


def test_a_128_gpu_machine_labels_every_switch_and_nic_beside_its_marker():
    """The 16-node InfiniBand machine (128 GPUs, hundreds of links): every switch, CPU and NIC has its label, each
    beside its marker (placing them took 20 s before the links were counted with numpy; now well under one)."""
    from ringlab.viz import topology_figure

    topo = rl.topology.preset("ib-16x8-h100")
    fig = topology_figure(topo)
    others = [n for n in topo.nodes if n not in set(topo.ranks)]
    notes = {a.text: a for a in fig.layout.annotations}
    assert set(others) <= set(notes)
    assert all((notes[n].xshift, notes[n].yshift) != (0, 0) for n in others)
