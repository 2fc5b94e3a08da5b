"""Widgets and figures built and driven without a browser: their data, not their pixels."""
import numpy as np
import pytest

import ringlab as rl
from ringlab.mpi.run import Trace
from ringlab.viz import (StepThrough, bandwidth_heatmap, busbw_plot, frames, measured_vs_predicted, step_figure,
                         time_vs_ranks, timeline, topology_figure, use_renderer)


def test_frames_follow_the_ring():
    ring = rl.build("allreduce.ring", 4)
    moments = frames(ring, nbytes=4096)
    assert len(moments) == 7 and moments[0].arrows == ()
    assert np.allclose(moments[0].fill, 0.25) and np.allclose(moments[-1].fill, 1.0)
    assert sorted(moments[1].arrows) == [(0, 1, "+c0"), (1, 2, "+c1"), (2, 3, "+c2"), (3, 0, "+c3")]
    assert sorted(moments[4].arrows)[0] == (0, 1, "=c1")  # allgather step 0: rank 0 passes chunk 1
    assert moments[-1].sent.tolist() == rl.traffic(ring, 4096)["sent"]
    assert moments[2].provenance[2][0] == "r0+r1+r2"


def test_widget_state_drives_every_view():
    ring = rl.build("allreduce.ring", 4)
    w = StepThrough(ring)
    assert len(w.slider.options) == 7 and w.play.max == 6  # the start, then after each of 6 steps
    w.step = 3
    assert w.slider.index == 3 and w.slider.value == "2"  # the readout names the step just done
    assert np.allclose(np.array(w.figure.data[2].z), w.frames[3].fill)
    assert len(w.figure.layout.annotations) == 2 * 4  # an arrow and a chunk label per message
    assert list(w.figure.data[1].text) == ["↑768 KiB ↓768 KiB"] * 4  # 3 steps of a 1 MiB ring: 3 chunks of 256 KiB
    assert "after step 2 (reduce-scatter)" in w.caption.value
    w.slider.index = 5  # the slider moves the state too
    assert w.step == 5
    w.next.click()
    assert w.step == 6
    w.next.click()
    assert w.step == 6  # stays at the end
    w.previous.click()
    assert w.step == 5 and "after step 4" in w.figure.layout.title.text
    w.step = 0
    assert len(w.figure.layout.annotations) == 0


def test_a_wrong_schedule_stops_at_the_failing_step_with_the_message():
    # rank 2 forwards chunk 0 before it has it
    wrong = rl.make_schedule("broadcast", 3, 1, [[(0, 1, 0, "copy")], [(2, 0, 0, "copy")], [(1, 2, 0, "copy")]],
                             root=0)
    w = StepThrough(wrong)
    assert w.slider.options == ("start", "0")  # the start, then step 0; step 1 is where it fails
    w.step = 1
    assert "step 1: rank 2 sends chunk 0 to rank 0, but rank 2 holds no data" in w.caption.value
    assert any("rank 2 holds no data" in (a.text or "") for a in w.figure.layout.annotations)


def test_drawing_errors_are_shown_not_swallowed(capsys, monkeypatch):
    w = StepThrough(rl.build("allreduce.ring", 3))

    def broken(index):
        raise RuntimeError("cannot draw this step")

    monkeypatch.setattr(w, "_draw", broken)
    with pytest.raises(RuntimeError, match="cannot draw this step"):
        w.step = 2
    assert "cannot draw this step" in capsys.readouterr().err


def test_64_ranks_render_with_fewer_labels():
    w = StepThrough(rl.build("allreduce.ring", 64))
    w.step = 10
    assert len(w.figure.layout.annotations) == 64  # arrows only, no chunk labels
    assert w.figure.data[2].texttemplate is None
    assert np.array(w.figure.data[2].z).shape == (64, 64)


def test_static_figure_plays_without_a_kernel():
    fig = step_figure(rl.build("reduce.tree", 5, root=2))
    assert len(fig.frames) == 4  # start + 3 levels
    assert [s.label for s in fig.layout.sliders[0].steps] == ["start", "0", "1", "2"]
    assert fig.layout.updatemenus[0].buttons[0].label == "play"
    assert len(fig.frames[1].layout.annotations) == 2 * 2 + 1  # two messages in the first level, and the legend
    html = fig.to_html(include_plotlyjs=False, full_html=False)
    assert "Plotly.newPlot" in html and "Plotly.addFrames" in html


def test_timeline_of_a_trace_with_predicted_step_ends():
    ring = rl.build("allreduce.ring", 3)
    rows = []  # made-up times: this test checks the drawing, not a measurement
    for step_index, step in enumerate(ring.steps):
        for t in step:
            rows.append((t.src, step_index, t.dst, t.chunk, 100, "send", step_index * 1e-5, step_index * 1e-5 + 8e-6))
            rows.append((t.dst, step_index, t.src, t.chunk, 100, "recv", step_index * 1e-5, step_index * 1e-5 + 9e-6))
    trace = Trace(rows, ring, clock="test")
    predicted = rl.predict(ring, 300, rl.topology.uniform(3, bandwidth=1e9, latency=1e-6))
    fig = timeline(trace, predicted)
    assert sum(len(bar.x) for bar in fig.data) == len(rows)
    assert len(fig.layout.shapes) == len(ring.steps)
    assert fig.layout.xaxis.title.text == "time since the start (µs)"
    assert fig.layout.title.text.startswith("measured:")


def test_bandwidth_heatmap_shows_the_peak_and_the_ratio():
    measured = np.array([[0, 20e9], [19e9, 0]])
    peak = np.array([[0, 25e9], [25e9, 0]])
    fig = bandwidth_heatmap(measured, peak, names=["gpu0", "gpu1"])
    assert fig.data[0].hovertext[0][1] == "gpu0 → gpu1: 20.00 GB/s<br>link peak 25.00 GB/s (80% of it)"
    assert fig.data[0].colorbar.title.text == "GB/s"


@pytest.mark.parametrize("name", rl.topology.preset_names())
def test_topology_drawings(name):
    topo = rl.topology.preset(name)
    fig = topology_figure(topo)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert len(lines) == len(topo.links)
    assert topo.source in fig.layout.title.text.replace("<br>", " ")  # a long title is wrapped at spaces (issue 51)


def test_topology_figures_tell_link_kinds_apart_and_call_gpus_gpus():
    import math

    dgx = rl.topology.preset("dgx1-v100")
    fig = topology_figure(dgx)
    legend = {t.name for t in fig.data if t.showlegend is not False}
    assert {"NVLink (×k: k links bonded)", "PCIe", "CPU interconnect (QPI/UPI)", "GPUs"} <= legend
    colours = {t.name: t.line.color for t in fig.data if t.mode == "lines"}
    assert len(set(colours.values())) == 3  # NVLink, PCIe and QPI look different
    bonded = next(t for t in fig.data if t.mode == "text")
    assert list(bonded.text).count("×2") == sum(1 for link in dgx.links if link.kind == "nvlink" and
                                                link.bandwidth > min(k.bandwidth for k in dgx.links if k.kind == "nvlink"))
    gpus = next(t for t in fig.data if t.name == "GPUs")
    assert list(gpus.text) == [f"GPU {i}" for i in range(8)]
    assert "rank" not in " ".join(t.hovertext or "" for t in fig.data if t.mode == "lines")
    xy = {i: (gpus.x[i], gpus.y[i]) for i in range(8)}  # the cube-mesh: GPU i+4 straight behind GPU i
    offsets = {(round(xy[i + 4][0] - xy[i][0], 6), round(xy[i + 4][1] - xy[i][1], 6)) for i in range(4)}
    assert len(offsets) == 1
    front = [math.dist(xy[a], xy[b]) for a, b in ((0, 1), (2, 3), (0, 2), (1, 3))]
    assert max(front) - min(front) < 1e-9  # GPUs 0-3 on a square face
    peer_off = topology_figure(rl.topology.preset("rtx4090-8-p2p-off"))
    assert any(t.line.dash == "dot" for t in peer_off.data if t.mode == "lines")
    assert "network (InfiniBand)" in {t.name for t in topology_figure(rl.topology.preset("ib-2x4")).data}


def test_a_published_topology_has_the_numa_nodes_its_printout_says():
    topo = rl.topology.published("rtx4090x8")  # its NUMA Affinity column: 0 for GPUs 0-3, 1 for GPUs 4-7
    assert sorted(n for n in topo.nodes if n.startswith("numa-node")) == ["numa-node0", "numa-node1"]
    assert {link.b for link in topo.links if link.a in ("gpu0", "gpu3")} == {"numa-node0"}
    assert {link.b for link in topo.links if link.a in ("gpu4", "gpu7")} == {"numa-node1"}


def test_scaling_plots_have_log_axes_and_units():
    rows = [{"algorithm": a, "bytes": b, "busbw_Bps": b / 1e3} for a in ("mpi", "ring") for b in (1024, 4096)]
    fig = busbw_plot(rows)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.title.text == "bus bandwidth (GB/s)"
    assert [t.name for t in fig.data] == ["mpi", "ring"]
    fig = time_vs_ranks([2, 4, 8], {"ring": [1e-3, 2e-3, 3e-3]})
    assert fig.layout.yaxis.title.text == "time (µs)" and fig.data[0].y == (1000.0, 2000.0, 3000.0)
    fig = measured_vs_predicted([1024, 2048], [2e-5, 3e-5], [1e-5, 3e-5], label="ring")
    assert "measured/predicted = 2.00" in fig.data[0].hovertext[0]


def test_renderer_is_chosen_on_purpose():
    import plotly.io as pio

    before = pio.renderers.default
    try:
        assert use_renderer() == "plotly_mimetype+notebook_connected"
        assert use_renderer(offline=True) == "plotly_mimetype+notebook"
    finally:
        pio.renderers.default = before


def test_the_animated_figure_survives_export_to_html(tmp_path):
    """nbconvert's HTML of lab 03's opening (up to its step figure) carries the animation and loads
    plotly.js (the renderer chosen by use_renderer), so it plays with no kernel."""
    import subprocess
    import sys

    import nbformat

    from ringlab.lab import notebooks

    lab = nbformat.read(notebooks.LABS / "solutions" / "03_allreduce.ipynb", as_version=4)
    nbformat.write(notebooks.cut(lab, "step_figure(ring)"), tmp_path / "lab.ipynb")
    done = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "html", "--execute",
                           str(tmp_path / "lab.ipynb")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    html = (tmp_path / "lab.html").read_text()
    assert "Plotly.newPlot" in html and "Plotly.addFrames" in html
    assert "cdn.plot.ly/plotly-" in html


def test_a_lab_can_be_cut_after_a_cell():
    import nbformat

    from ringlab.lab import notebooks

    lab = nbformat.read(notebooks.LABS / "solutions" / "03_allreduce.ipynb", as_version=4)
    opening = notebooks.cut(lab, "StepThrough(ring)")
    assert "StepThrough(ring)" in opening.cells[-1].source
    assert not any("%%px" in c.source for c in opening.cells)  # no MPI engines needed
    with pytest.raises(ValueError, match="no code cell contains 'nowhere to be found'"):
        notebooks.cut(lab, "nowhere to be found")


def test_ranks_can_sit_where_the_topology_puts_them():
    grid = ([0, 1, 0, 1], [0, 0, 1, 1])  # a 2x2 layout instead of a circle
    w = StepThrough(rl.build("allreduce.ring", 4), positions=grid)
    assert list(w.figure.data[0].x) == [-1 / 2 ** 0.5, 1 / 2 ** 0.5, -1 / 2 ** 0.5, 1 / 2 ** 0.5]
    with pytest.raises(ValueError, match="positions must be \\(x, y\\) with 4 values each"):
        step_figure(rl.build("allreduce.ring", 4), positions=([0, 1], [0, 1]))


def test_versus_plot_draws_measured_markers_and_predicted_lines_per_sweep():
    from ringlab.viz import versus_plot

    rows = [{"bytes": b, "measured_busbw": 2e9 * i, "predicted_busbw": 1e9 * i, "ratio": 0.5, "predicted": "ring"}
            for i, b in enumerate((4096, 1024), start=1)]
    fig = versus_plot({"box A": rows, "box B": rows[:1]})
    assert [t.mode for t in fig.data] == ["markers", "lines", "markers", "lines"]
    assert list(fig.data[0].x) == [1024, 4096] and list(fig.data[0].y) == [4.0, 2.0]  # sorted by size, in GB/s
    assert list(fig.data[1].y) == [2.0, 1.0] and fig.data[0].marker.color == fig.data[1].line.color
    assert "ratio 0.50" in fig.data[0].hovertext[0]


def test_fraction_bars_label_each_rate_with_its_share_of_the_peak():
    from ringlab.viz import fraction_bars

    fig = fraction_bars([{"what": "NVLink", "Bps": 250e9, "peak_Bps": 300e9, "note": "median"},
                         {"what": "PCIe", "Bps": 25e9, "peak_Bps": 63e9}], "t")
    peak, rate = fig.data
    assert list(peak.x) == [300.0, 63.0] and list(rate.x) == [250.0, 25.0]
    assert list(rate.text) == ["83% of peak", "40% of peak"] and "median" in rate.hovertext[0]


def test_fitted_busbw_plot_draws_measured_markers_and_the_fit_through_them():
    from ringlab.predict.fitting import fit_rows
    from ringlab.topology import uniform
    from ringlab.viz import fitted_busbw_plot

    n, sizes = 4, [1 << k for k in range(16, 27, 2)]
    truths = {"ring": uniform(n, bandwidth=2e9, latency=30e-6), "naive": uniform(n, bandwidth=2e9, latency=10e-6)}
    rows = []
    for name, truth in [*truths.items(), ("mpi", truths["ring"])]:  # mpi: measured only, never fitted
        for k in sizes:
            seconds = rl.predict(rl.build(f"allreduce.{'naive' if name == 'naive' else 'ring'}", n), k, truth).seconds
            rows.append({"algorithm": name, "bytes": k, "time_s": seconds, "busbw_Bps": k / seconds * 1.5})
    fits = {name: fit_rows(rows, name, n) for name in ("ring", "naive")}
    fig = fitted_busbw_plot(rows, fits)
    assert [(t.name.split(":")[0], t.mode) for t in fig.data] == [
        ("ring", "markers"), ("ring", "lines"), ("naive", "markers"), ("naive", "lines"), ("mpi", "markers")]
    ring_measured, ring_fitted = fig.data[0], fig.data[1]
    assert ring_measured.marker.color == ring_fitted.line.color != fig.data[2].marker.color
    assert list(ring_measured.x) == sizes and ring_measured.y[-1] == pytest.approx(rows[5]["busbw_Bps"] / 1e9)
    assert ring_fitted.x[0] == sizes[0] and ring_fitted.x[-1] == sizes[-1]  # across the measured sizes
    assert ring_fitted.y[-1] == pytest.approx(ring_measured.y[-1], rel=1e-6)  # exact data: the line hits the marker
    assert fig.data[3].y[0] == pytest.approx(fig.data[2].y[0], rel=1e-6)
    assert "30 µs, 2 GB/s" in ring_fitted.name
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    assert "(bytes)" in fig.layout.xaxis.title.text and "(GB/s)" in fig.layout.yaxis.title.text
    assert "measured here" in fig.layout.title.text and "fitted" in fig.layout.title.text


def test_predicted_machines_plot_draws_bars_per_algorithm_and_published_diamonds():
    from ringlab.viz import predicted_machines_plot

    predicted = [{"topology": t, "algorithm": a, "busbw": b, "seconds": s, "bottleneck": "gpu0->gpu1"}
                 for t, a, b, s in (("box A", "allreduce.ring", 20e9, 6e-3), ("box A", "allreduce.tree", 7e9, 17e-3),
                                    ("box B", "allreduce.ring", 300e9, 4e-4), ("box B", "allreduce.tree", 90e9, 1e-3))]
    found = [{"topology": "box B", "label": "8x GPU (A05)", "bytes": 64 << 20, "busbw_Bps": 360e9}]
    fig = predicted_machines_plot(predicted, found)
    ring, tree, pub = fig.data
    assert (ring.type, tree.type, pub.type) == ("bar", "bar", "scatter")
    assert ring.name == "allreduce.ring: predicted" and list(ring.x) == ["box A", "box B"]
    assert list(ring.y) == [20.0, 300.0] and list(tree.y) == [7.0, 90.0]  # GB/s
    assert list(pub.x) == ["box B"] and list(pub.y) == [360.0] and pub.marker.symbol == "diamond"
    assert pub.name.startswith("published") and "(A05)" in pub.hovertext[0] and "64 MiB" in pub.hovertext[0]
    assert "6 ms" in ring.hovertext[0] and "gpu0->gpu1" in ring.hovertext[0]
    assert fig.layout.title.text.startswith("predicted (cost model)")
    assert fig.layout.yaxis.type != "log" and fig.layout.yaxis.rangemode == "tozero"  # a bar's height is its value
    assert fig.layout.yaxis.title.text == "bus bandwidth (GB/s)"
    assert len(predicted_machines_plot(predicted).data) == 2  # no published rows: no diamonds


def test_tree_ring_plot_has_a_panel_per_machine_with_the_crossover_and_published_points():
    from ringlab.lessons.lab05_scaling.predictions import trees_against_ring
    from ringlab.viz import tree_ring_plot

    sizes = [1 << k for k in range(10, 29, 2)]
    panels = {p: trees_against_ring(p, sizes) for p in ("dgx1-v100", "hgx-h100-8")}
    fig = tree_ring_plot(panels)
    assert [a.text for a in fig.layout.annotations][:2] == ["dgx1-v100", "hgx-h100-8"]  # panel titles
    names = [(t.name, t.xaxis) for t in fig.data]
    lines = [("binomial tree: predicted", "x"), ("double binary tree: predicted", "x"), ("ring: predicted", "x")]
    assert names[:3] == lines
    assert ("published: nccl-tests (NCCL's own algorithm)", "x2") in names
    assert ("ring overtakes the double binary tree (predicted)", "x2") in names
    assert sum(t.showlegend for t in fig.data) == len({t.name for t in fig.data})  # each name once in the legend
    tree, dbtree, ring = fig.data[:3]
    assert tree.line.dash == "dot" and dbtree.line.dash == "dash" and list(ring.x) == sizes
    cross = next(t for t in fig.data if t.xaxis == "x2" and t.name.startswith("ring overtakes"))
    assert cross.x[0] == panels["hgx-h100-8"]["crossover"]
    published = next(t for t in fig.data if t.xaxis == "x2" and t.name.startswith("published"))
    assert len(published.x) == len(panels["hgx-h100-8"]["published"])


def test_time_vs_ranks_in_milliseconds():
    fig = time_vs_ranks([2, 1024], {"ring": [0.005, 0.021]}, unit="ms", title="predicted (cost model): t")
    assert list(fig.data[0].y) == [5.0, 21.0] and fig.layout.yaxis.title.text == "time (ms)"
    assert fig.data[0].hovertext[1] == "ring: 1024 ranks, 21 ms"
    with pytest.raises(ValueError, match="unit must be one of"):
        time_vs_ranks([2], {"ring": [1.0]}, unit="minutes")


def test_staleness_figures_name_the_straggler():
    from ringlab.viz import staleness_order_plot, staleness_plot

    pushes = [(0, 0), (1, 1), (3, 2), (0, 2), (1, 1), (3, 0)]
    fig = staleness_plot(pushes, straggler=3)
    assert [t.name for t in fig.data] == ["worker 0", "worker 1", "worker 3 (straggler)"]
    assert list(fig.data[2].x) == [2, 0]
    fig = staleness_order_plot(pushes, straggler=3)
    assert [t.name for t in fig.data] == ["worker 0", "worker 1", "worker 3 (straggler)"]
    assert list(fig.data[2].x) == [2, 5] and list(fig.data[2].y) == [2, 0]  # place in the server's order
    assert fig.data[2].marker.symbol == "diamond" and fig.data[0].marker.symbol == "circle"
    assert fig.layout.title.text.startswith("measured here")
    assert "staleness" in fig.layout.yaxis.title.text and "push number" in fig.layout.xaxis.title.text


def test_the_chunk_grid_shows_only_the_ranks_that_exist_with_readable_labels():
    """16 and 32 ranks: the grid's rows are ranks 0..n-1 (no padding row -1 or n), at most 16 tick labels per
    axis, and rank labels on the ring in a font one can read."""
    from ringlab.viz.stepview import step_figure

    for n in (16, 32):
        fig = step_figure(rl.build("allreduce.ring", n))
        assert tuple(fig.layout.yaxis2.range) == (n - 0.5, -0.5) and tuple(fig.layout.xaxis2.range) == (-0.5, n - 0.5)
        assert n / fig.layout.yaxis2.dtick <= 16 and n / fig.layout.xaxis2.dtick <= 16
        ranks = fig.data[0]
        assert list(ranks.text) == [f"r{r}" for r in range(n)] and ranks.textfont.size >= 8


def test_the_double_binary_tree_is_drawn_as_a_tree_not_on_a_circle():
    from ringlab.algorithms.dbtree import btree
    from ringlab.viz.stepview import default_positions

    x, y = default_positions(rl.build("allreduce.dbtree", 8, segments=2))
    parents = btree(8)
    assert list(np.argsort(x)) == list(range(8))  # ranks left to right
    assert y[0] == y.max() and all(y[r] < y[parents[r]] for r in range(1, 8))  # every rank below its parent
    ring_x, _ = default_positions(rl.build("allreduce.ring", 8))
    assert np.allclose(np.hypot(*default_positions(rl.build("allreduce.ring", 8))), 1.0) and len(ring_x) == 8


def test_a_saved_widget_reopens_at_the_step_its_controls_show():
    """Issue 51: the state JupyterLab saves with a notebook held the figure as first drawn, so a reopened widget
    showed the start, without the step's outlined cells, under controls that said "after step 4"."""
    w = StepThrough(rl.build("allreduce.ring", 4))
    w.step = 5
    figure, slider = w.figure.get_state(), w.slider.get_state()
    assert slider["index"] == 5 and "after step 4" in w.caption.get_state()["value"]
    assert figure["_widget_layout"]["title"]["text"] == w.frames[5].title
    outlined = figure["_widget_data"][3]
    assert sorted(zip(outlined["y"], outlined["x"])) == sorted(w.frames[5].changed) != []
    assert [list(row) for row in figure["_widget_data"][2]["text"]] == [list(row) for row in w.frames[5].provenance]
    assert len(figure["_widget_layout"]["annotations"]) == 2 * 4  # this step's arrows and chunk labels
    w.step = 0
    assert w.figure.get_state()["_widget_layout"]["title"]["text"] == w.frames[0].title


def test_the_static_figure_keeps_its_legend_clear_of_its_buttons_and_slider():
    """Issue 51: the legend sat at a share of the plot's height below it, over the play button and the slider.
    The controls hang from the plot's bottom edge and the legend starts CONTROLS_PX (pixels) below it, in a
    margin tall enough for its lines; the slider starts right of the buttons."""
    from ringlab.viz.stepview import BUTTONS_PX, CONTROLS_PX, LEGEND_LINE_PX

    wrong = rl.make_schedule("broadcast", 3, 1, [[(0, 1, 0, "copy")], [(2, 0, 0, "copy")], [(1, 2, 0, "copy")]],
                             root=0)
    for schedule in (rl.build("allreduce.ring", 4), rl.build("allreduce.ring", 16), wrong):
        fig = step_figure(schedule)
        slider, buttons = fig.layout.sliders[0], fig.layout.updatemenus[0]
        assert slider.y == buttons.y == 0 and slider.yanchor == buttons.yanchor == "top"
        assert slider.x == 0 and slider.xanchor == buttons.xanchor == "left" and slider.pad.l >= BUTTONS_PX
        legends = [fig.layout.annotations[-1]] + [frame.layout.annotations[-1] for frame in fig.frames]
        for legend in legends:
            assert "outlined" in legend.text and legend.yref == "paper" and legend.y == 0
            assert legend.yanchor == "top" and legend.yshift <= -CONTROLS_PX
            lines = legend.text.count("<br>") + 1
            assert fig.layout.margin.b >= CONTROLS_PX + lines * LEGEND_LINE_PX
        assert sum(note.yref == "paper" for note in fig.frames[-1].layout.annotations) == 1  # only the legend
    assert "rank 2 holds no data" in fig.frames[-1].layout.annotations[-1].text  # the failing step says why


def test_the_choice_map_labels_are_readable_at_the_default_size():
    """Issue 51: plotly shrank the labels to about 5 px to fit them in their cells."""
    from ringlab.lessons.lab10_inside_nccl.nccl import choice_rows
    from ringlab.viz.parallelism import choice_map

    fig = choice_map(choice_rows())
    heat = fig.data[0]
    assert heat.textfont.size >= 10 and fig.layout.xaxis.tickfont.size >= 10 and fig.layout.yaxis.tickfont.size >= 10
    assert max(len(line) for row in heat.text for cell in row for line in cell.split("<br>")) <= 8
    margin = fig.layout.margin
    plot = fig.layout.height - (margin.t if margin.t is not None else 100) - (margin.b if margin.b is not None else 80)
    assert plot / len(heat.y) >= 2 * 1.25 * heat.textfont.size  # two lines of a label fit a row
    assert "/" in heat.customdata[0][0] and "%{customdata}" in heat.hovertemplate  # the hover names it in full


def test_printed_text_wraps_at_words_in_a_notebook(monkeypatch, capsys):
    """Issue 51: JupyterLab breaks an overlong printed line anywhere ("traffi" / "c"); use_renderer, which every
    lab calls first, shows a style that breaks it at spaces, and only where a kernel's front end shows it."""
    import IPython
    import IPython.display

    from ringlab.viz import TEXT_OUTPUT_CSS

    shown = []
    use_renderer()
    assert capsys.readouterr().out == ""  # no kernel: nothing printed

    class Shell:
        kernel = object()

    monkeypatch.setattr(IPython, "get_ipython", lambda: Shell())
    monkeypatch.setattr(IPython.display, "display", shown.append)
    use_renderer()
    assert len(shown) == 1 and f"<style>{TEXT_OUTPUT_CSS}</style>" == shown[0].data
    assert "word-break: normal" in TEXT_OUTPUT_CSS and ".jp-OutputArea-output pre" in TEXT_OUTPUT_CSS


def test_tree_ring_plot_marks_every_change_of_lead_and_says_how_far_each_lead_runs():
    from ringlab.lessons.lab05_scaling.predictions import trees_against_ring
    from ringlab.measure.units import format_bytes
    from ringlab.viz import tree_ring_plot

    sizes = [1 << k for k in range(10, 31)]  # the lab's sizes: on dgx1-v100 the ring leads from 256 KiB to 1 MiB only
    panel = trees_against_ring("dgx1-v100", sizes)
    fig = tree_ring_plot({"dgx1-v100": panel})
    marks = [t for t in fig.data if "overtakes" in (t.name or "")]
    assert [t.x[0] for t in marks] == [c["bytes"] for c in panel["crossovers"]] and len(marks) >= 2
    ring = next(t for t in marks if t.name.startswith("ring overtakes"))
    first, last = next((a, b) for a, b, who in panel["leads"] if who == "ring")
    assert ring.hovertext.endswith(f"ring predicted faster than the double binary tree from {format_bytes(first)} "
                                   f"to {format_bytes(last)}")
    back = next(t for t in marks if t.name.startswith("double binary tree overtakes"))
    assert back.hovertext.endswith("up")


def test_a_fit_with_no_cost_per_byte_draws_no_line_and_says_so():
    """A noisy sweep (CI once measured lab 03's so) can fit best with an infinite bandwidth: the plot keeps the
    markers, draws no line and says why, rather than raising."""
    import dataclasses

    from ringlab.predict.fitting import fit_rows
    from ringlab.topology import uniform
    from ringlab.viz import fitted_busbw_plot

    n, sizes = 4, [1 << k for k in range(16, 21, 2)]
    truth = uniform(n, bandwidth=2e9, latency=30e-6)
    rows = [{"algorithm": "ring", "bytes": k, "time_s": s, "busbw_Bps": k / s * 1.5}
            for k in sizes for s in [rl.predict(rl.build("allreduce.ring", n), k, truth).seconds]]
    linkless = dataclasses.replace(fit_rows(rows, "ring", n), bandwidth=float("inf"))
    fig = fitted_busbw_plot(rows, {"ring": linkless})
    assert [t.mode for t in fig.data] == ["markers"]
    assert "no cost per byte" in fig.data[0].name
