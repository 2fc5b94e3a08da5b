"""The step-through widget: play, pause, a step slider, previous and next, over any schedule."""
from __future__ import annotations

import copy
import traceback

import ipywidgets as widgets
import plotly.graph_objects as go
import traitlets

from ..schedule import Schedule
from .stepview import (LEGEND, RANK_TEXT_UP_TO, step_names, _annotations, _checked, base_layout, default_positions,
                       frame_traces, frames)


class StepThrough(widgets.VBox):
    """Step through ``schedule`` one step at a time (``positions``: (x, y) per rank, default a circle, or a tree for
    the double binary tree).

    ``step`` (0 = the start, s+1 = just after step s) is the state; the slider (whose readout shows
    "start", then the number of the step just done, as the caption does), the play button and the
    figure all follow it, and setting it from code moves them too. A legend
    under the buttons says what each colour, arrow and label means; with more than
    :data:`~ringlab.viz.stepview.RANK_TEXT_UP_TO` ranks the per-rank text moves into the hover. For a wrong schedule
    the slider ends at the failing step, where the checker's message is shown. Errors raised
    while drawing appear under the widget instead of vanishing.
    """

    step = traitlets.Int(0)

    def __init__(self, schedule: Schedule, nbytes: int = 1 << 20, interval_ms: int = 900, height: int | None = None,
                 positions=None):
        self.schedule = schedule
        self.frames = frames(schedule, nbytes)
        self.labels = schedule.nranks <= RANK_TEXT_UP_TO
        self._x, self._y = default_positions(schedule) if positions is None else _checked(positions, schedule.nranks)
        last = len(self.frames) - 1
        self.play = widgets.Play(value=0, min=0, max=last, interval=interval_ms, description="play",
                                 tooltip="play the steps one after another; pause stops, the square goes back to the start")
        self.slider = widgets.SelectionSlider(options=step_names(len(self.frames)), index=0, description="after step",
                                              continuous_update=True, layout=widgets.Layout(width="420px"),
                                              tooltip="drag through the steps: the state after each one")
        self.previous = widgets.Button(description="◀ previous", layout=widgets.Layout(width="110px"),
                                       tooltip="one step back")
        self.next = widgets.Button(description="next ▶", layout=widgets.Layout(width="110px"),
                                   tooltip="one step forward")
        self.caption = widgets.HTML()
        self.legend = widgets.HTML(f"<span style='font-size:12px;color:#444'>{LEGEND}</span>")
        self.errors = widgets.Output()
        first = self.frames[0]
        figure = go.Figure(data=frame_traces(first, self._x, self._y, self.labels),
                           layout=base_layout(schedule, height))
        self.figure = go.FigureWidget(figure)
        widgets.jslink((self.play, "value"), (self.slider, "index"))
        traitlets.link((self.slider, "index"), (self, "step"))
        self.previous.on_click(lambda _: self._move(-1))
        self.next.on_click(lambda _: self._move(+1))
        self.observe(self._on_step, names=["step"])
        super().__init__([widgets.HBox([self.play, self.previous, self.slider, self.next]), self.caption,
                          self.legend, self.figure, self.errors])
        self._draw(0)

    def _keep_state(self) -> None:
        """Make the figure's synced state the figure as drawn now. plotly's FigureWidget sends each change to
        the page as a message and keeps, as the state JupyterLab saves with a notebook, the figure it was
        created with: reopened, the widget drew the start under controls at another step. Its own display
        does the same copy (``FigureWidget._repr_mimebundle_``)."""
        self.figure._widget_data = copy.deepcopy(self.figure._data)
        self.figure._widget_layout = copy.deepcopy(self.figure._layout_obj._props)

    def _move(self, delta: int) -> None:
        self.step = min(max(self.step + delta, 0), len(self.frames) - 1)

    def _on_step(self, change) -> None:
        with self.errors:  # shown under the widget, not swallowed by the comm
            try:
                self._draw(change["new"])
            except Exception:
                traceback.print_exc()
                raise

    def _draw(self, index: int) -> None:
        frame = self.frames[index]
        ranks, sent, grid, changed = frame_traces(frame, self._x, self._y, self.labels)
        with self.figure.batch_update():
            self.figure.data[0].hovertext = ranks.hovertext
            self.figure.data[1].text = sent.text
            self.figure.data[2].z = grid.z
            self.figure.data[2].text = grid.text
            self.figure.data[2].customdata = grid.customdata
            self.figure.data[3].x, self.figure.data[3].y = changed.x, changed.y
            self.figure.layout.annotations = _annotations(frame, self._x, self._y, self.labels)
            self.figure.layout.title = frame.title
        self._keep_state()
        moves = len(frame.arrows)
        note = f"<b>{frame.title}</b>" + (f": {moves} message{'s' * (moves != 1)}, {len(frame.changed)} "
                                          f"cell{'s' * (len(frame.changed) != 1)} changed" if index else "")
        if frame.error:
            note += f"<br><span style='color:#b00020'>{frame.error}</span>"
        self.caption.value = note
