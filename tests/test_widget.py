"""The step-through widget explains itself: legend, counting, tooltips, changed cells, bytes both ways, scale."""
import numpy as np

import ringlab as rl
from ringlab.viz import StepThrough, step_figure
from ringlab.viz.stepview import LEGEND, RANK_TEXT_UP_TO, frames


def test_the_slider_reads_the_step_the_caption_names():
    w = StepThrough(rl.build("allreduce.ring", 4))
    assert w.slider.value == "start" and "start" in w.caption.value
    for index in range(1, len(w.frames)):
        w.step = index
        assert w.slider.index == index
        assert f"after step {w.slider.value} " in w.caption.value  # "2" on the slider, "after step 2" above
    w.slider.index = 2
    assert w.step == 2 and "after step 1" in w.figure.layout.title.text


def test_a_legend_and_tooltips_say_what_everything_means():
    w = StepThrough(rl.build("allreduce.ring", 4))
    for words in ("orange", "green", "outlined", "+c2", "=c2", "sent (↑)", "received (↓)"):
        assert words in LEGEND and words in w.legend.value
    assert all(control.tooltip for control in (w.play, w.previous, w.next, w.slider))
    fig = step_figure(rl.build("allreduce.ring", 4))
    assert any("outlined" in (a.text or "") for a in fig.layout.annotations)  # the static figure has it too
    assert [s.label for s in fig.layout.sliders[0].steps][:3] == ["start", "0", "1"]


def test_the_cells_a_step_changed_are_outlined():
    ring = rl.build("allreduce.ring", 4)
    moments = frames(ring)
    assert moments[0].changed == ()
    assert sorted(moments[1].changed) == sorted([(1, 0), (2, 1), (3, 2), (0, 3)])  # rank j+1 adds into chunk j
    w = StepThrough(ring)
    w.step = 1
    assert sorted(zip(w.figure.data[3].y, w.figure.data[3].x)) == sorted(moments[1].changed)
    assert "4 cells changed" in w.caption.value


def test_ranks_show_bytes_received_as_well_as_sent():
    naive = rl.build("allreduce.naive", 4)
    last = frames(naive, nbytes=1 << 20)[-1]
    traffic = rl.traffic(naive, 1 << 20)
    assert last.received.tolist() == traffic["received"] and last.sent.tolist() == traffic["sent"]
    w = StepThrough(naive)
    w.step = 1  # the root has received every rank's buffer and sent nothing yet
    assert w.figure.data[1].text[0] == "↑0 B ↓3 MiB"
    assert "0 B sent, 3 MiB received so far" in w.figure.data[0].hovertext[0]


def test_sixteen_and_thirty_two_ranks_move_per_rank_text_into_the_hover():
    for n in (16, 32):
        w = StepThrough(rl.build("allreduce.ring", n))
        w.step = 3
        assert n > RANK_TEXT_UP_TO and set(w.figure.data[1].text) == {""}  # no text piled under the markers
        assert all("sent" in h and "received" in h for h in w.figure.data[0].hovertext)
        assert len(w.figure.layout.annotations) == n  # arrows, no chunk labels
        assert w.figure.data[2].texttemplate is None and np.array(w.figure.data[2].z).shape == (n, n)
        assert w.figure.layout.yaxis2.side == "right"  # the grid's rank axis beside the grid, not the ring
