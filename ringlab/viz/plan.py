"""Pictures of a planned training run (``rl.plan``): memory per GPU against its capacity, one step laid out in
time, the plan against a published run, and a widget that re-plans as its controls move. Every number drawn is
the planner's prediction, or a published figure, and the figures say which."""
from __future__ import annotations

import copy
import traceback

import ipywidgets as widgets
import plotly.graph_objects as go
import traitlets
from plotly.colors import qualitative

from ..lab.words import article, plural
from .axes import finish_layout, reference_line

GIB = 2 ** 30
MEMORY_KINDS = {"weights": "weights (bf16)", "gradients": "gradients (fp32)", "optimizer": "optimizer (fp32 master, Adam)",
                "activations": "activations", "buffers": "NCCL buffers"}
TIME_KINDS = {"compute": "compute", "tp": "tensor-parallel collectives", "cp": "context-parallel ring",
              "ep": "expert all-to-all", "pp": "pipeline sends", "bubble": "pipeline bubble",
              "dp": "data-parallel gradients", "optimizer": "optimizer step"}
COLOURS = dict(zip(list(MEMORY_KINDS) + ["compute", "tp", "cp", "ep", "pp", "bubble", "dp", "optimizer_time"],
                   qualitative.Plotly[:5] + ["#4c78a8", "#e45756", "#f58518", "#b279a2", "#9d755d", "#d0d0d0",
                                             "#54a24b", "#79706e"]))
LEGEND_BELOW = dict(orientation="h", y=-0.3, x=0, yanchor="top")  # under the plot, never over the controls above
LEGEND_RIGHT = dict(x=1.02, y=1, xanchor="left", yanchor="top")  # beside bars whose labels take the space below
TEXT_SHARE = 0.06  # a timeline segment shorter than this share of the step keeps its text for the hover
LABEL_WIDTH = 16  # characters of a bar's label on one line before it breaks at a space


def _wrap(label: str) -> str:
    """A bar's label broken at spaces into lines of about :data:`LABEL_WIDTH` characters (plotly's <br>)."""
    lines, line = [], ""
    for word in str(label).split():
        if line and len(line) + 1 + len(word) > LABEL_WIDTH:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "<br>".join(lines + [line])


def _time_colour(kind: str) -> str:
    return COLOURS["optimizer_time" if kind == "optimizer" else kind]


def memory_bars(plans, names=None, title: str | None = None) -> go.Figure:
    """GiB per GPU of each plan (a :class:`~ringlab.train.planner.Plan` or several), stacked by kind, against the
    GPU's capacity (a dashed line for each capacity). Predicted."""
    plans = list(plans) if isinstance(plans, (list, tuple)) else [plans]
    names = [_wrap(n) for n in (names if names is not None else [p.layout_str() for p in plans])]
    fig = go.Figure()
    for kind, label in MEMORY_KINDS.items():
        fig.add_bar(x=names, y=[p.memory.get(kind, 0.0) / GIB for p in plans], name=label,
                    marker_color=COLOURS[kind], hovertemplate="%{x}: %{y:.1f} GiB<extra>" + label + "</extra>")
    for capacity in sorted({p.capacity for p in plans}):
        gpus = " or ".join(sorted({p.gpu.upper() for p in plans if p.capacity == capacity}))
        reference_line(fig, capacity / GIB, f"{article(gpus)}'s {capacity / GIB:.0f} GiB (published)",
                       line_color="black")
    top = max(max(p.memory_total for p in plans), max(p.capacity for p in plans)) / GIB
    fig.update_layout(barmode="stack", legend=LEGEND_RIGHT, margin=dict(t=60, b=40), height=460,
                      bargap=0.75 if len(plans) == 1 else 0.3,
                      title=title or f"predicted: memory per GPU, {plans[0].model.name or 'the model'}",
                      xaxis_title="layout", yaxis=dict(title="GiB per GPU (predicted)", range=[0, top * 1.12]))
    return finish_layout(fig, legend="keep")  # a long title wrapped to the width


def timeline_segments(plan) -> list[dict]:
    """The step as the timeline draws it: what the GPU waits on, end to end ({kind, label, start, seconds, row}),
    then what runs hidden behind compute (row "hidden behind compute", from 0)."""
    out, at = [], 0.0
    for kind, seconds in plan.time.items():
        out.append({"kind": kind, "label": TIME_KINDS.get(kind, kind), "start": at, "seconds": seconds,
                    "row": "the step (exposed)"})
        at += seconds
    for kind, seconds in plan.hidden.items():
        if seconds > 0:
            out.append({"kind": kind, "label": f"{TIME_KINDS.get(kind, kind)}, hidden", "start": 0.0,
                        "seconds": seconds, "row": "hidden behind compute"})
    return out


def step_timeline(plan, title: str | None = None) -> go.Figure:
    """One training step of ``plan`` in time: compute, then what each parallelism leaves exposed, the pipeline
    bubble and the optimizer, laid end to end (each kind summed over the step); below, the communication hidden
    behind compute. Predicted."""
    fig = go.Figure()
    for seg in timeline_segments(plan):
        hidden = seg["row"] != "the step (exposed)"
        fig.add_bar(y=[seg["row"]], x=[seg["seconds"]], base=[seg["start"]], orientation="h", name=seg["label"],
                    marker=dict(color=_time_colour(seg["kind"]), pattern_shape="/" if hidden else "",
                                line=dict(color="white", width=1)),
                    text=[f"{seg['kind']} {seg['seconds']:.2f} s" if seg["seconds"] >= TEXT_SHARE * plan.step_seconds
                          else ""], textposition="inside", insidetextanchor="middle",
                    hovertemplate=f"{seg['label']}: %{{x:.3f}} s<extra></extra>")
    fig.update_layout(barmode="overlay", legend=LEGEND_BELOW, height=300, margin=dict(t=60, b=40),
                      title=title or (f"predicted: one step, {plan.step_seconds:.2f} s, MFU {plan.mfu:.0%} "
                                      f"({plan.layout_str()})"),
                      xaxis=dict(title="seconds into the step (predicted)", rangemode="tozero"),
                      yaxis=dict(autorange="reversed", title=dict(text="one GPU", standoff=12), automargin=True))
    return finish_layout(fig, legend="keep")  # a long title wrapped to the width


def published_bars(rows: list[dict], title: str) -> go.Figure:
    """Published figures beside predicted ones, one group per quantity (rows: {quantity, published, predicted,
    unit}), each bar labelled with its value."""
    fig = go.Figure()
    names = [f"{r['quantity']} ({r['unit']})" for r in rows]
    for key, colour in (("published", "#54a24b"), ("predicted", "#4c78a8")):
        fig.add_bar(x=names, y=[r[key] for r in rows], name=key if key == "predicted" else rows[0]["source"],
                    marker_color=colour, text=[f"{r[key]:,.0f}" if r[key] >= 100 else f"{r[key]:.3g}" for r in rows],
                    textposition="outside")
    fig.update_layout(barmode="group", title=title, xaxis_title="quantity", height=420,
                      yaxis=dict(title="value in the unit named below each group", rangemode="tozero"))
    return finish_layout(fig, legend="below")  # the title wrapped to the width; the legend under the axis title


class PlanExplorer(widgets.VBox):
    """Change a run's layout and watch its plan change: dropdowns for tp, pp, cp, zero, micro_batch and recompute
    (the widget's traits, which the figures render from), a line of what the planner says, the memory bars and
    the step's timeline. A layout the planner refuses keeps the last figures and says why."""

    tp = traitlets.Int(8)
    pp = traitlets.Int(1)
    cp = traitlets.Int(1)
    zero = traitlets.Int(1)
    micro_batch = traitlets.Int(1)
    recompute = traitlets.Unicode("none")

    CHOICES = {"tp": (1, 2, 4, 8, 16, 32), "pp": (1, 2, 4, 8, 16), "cp": (1, 2, 4, 8), "zero": (0, 1, 2, 3),
               "micro_batch": (1, 2, 4, 8, 16), "recompute": ("none", "selective", "full")}
    HELP = {"tp": "tensor parallelism: GPUs splitting every layer's matrices", "pp": "pipeline stages",
            "cp": "context parallelism: GPUs splitting every sequence", "zero": "ZeRO stage over the data-parallel group",
            "micro_batch": "sequences in one micro-batch", "recompute": "activation recomputation"}

    def __init__(self, model, topology, *, global_batch: int, seq: int, planner=None, **layout):
        from ..train.planner import plan as default_plan

        self.model, self.topology, self.global_batch, self.seq = model, topology, global_batch, seq
        self._plan_fn = planner or default_plan
        self.plan = None
        self.controls = {}
        for name, options in self.CHOICES.items():
            value = layout.get(name, getattr(self, name))
            value = "none" if name == "recompute" and value is None else value
            setattr(self, name, value)
            options = options if value in options else tuple(sorted(set(options) | {value}))
            self.controls[name] = widgets.Dropdown(options=options, value=value, description=name,
                                                   tooltip=self.HELP[name],
                                                   layout=widgets.Layout(width="190px"))
            self.controls[name].observe(self._from_control, names="value")
        self.observe(self._to_control, names=list(self.CHOICES))
        self.summary = widgets.HTML()
        self.errors = widgets.Output()
        first = self._plan_now()
        if first is None:
            raise ValueError(f"the starting layout does not plan: {self._refusal}")
        self.memory_figure = go.FigureWidget(memory_bars(first))
        self.timeline_figure = go.FigureWidget(step_timeline(first))
        self.observe(self._on_change, names=list(self.CHOICES))
        rows = [widgets.HBox([self.controls[n] for n in ("tp", "pp", "cp")]),
                widgets.HBox([self.controls[n] for n in ("zero", "micro_batch", "recompute")])]
        super().__init__(rows + [self.summary, self.memory_figure, self.timeline_figure, self.errors])
        self._draw(first)

    def _from_control(self, change) -> None:
        setattr(self, change["owner"].description, change["new"])

    def _to_control(self, change) -> None:
        """A value set from code (``explorer.pp = 3``) that the dropdown does not offer joins its options, so that
        the planner, not the dropdown, says whether the layout plans."""
        control = self.controls[change["name"]]
        if change["new"] not in control.options:
            control.options = tuple(sorted(set(control.options) | {change["new"]}))
        control.value = change["new"]

    def layout_kwargs(self) -> dict:
        """The layout the controls show, as ``rl.plan`` takes it."""
        return {"tp": self.tp, "pp": self.pp, "cp": self.cp, "zero": self.zero, "micro_batch": self.micro_batch,
                "recompute": None if self.recompute == "none" else self.recompute}

    def _plan_now(self):
        try:
            self._refusal = ""
            return self._plan_fn(self.model, self.topology, global_batch=self.global_batch, seq=self.seq,
                                 **self.layout_kwargs())
        except ValueError as err:
            self._refusal = str(err)
            return None

    def _on_change(self, change) -> None:
        with self.errors:  # shown under the widget, not swallowed by the comm
            try:
                planned = self._plan_now()
                if planned is None:
                    self.summary.value = (f"<span style='color:#b00020'>the planner refuses this layout: "
                                          f"{self._refusal}</span> (figures: the last layout it planned)")
                    return
                self._draw(planned)
            except Exception:
                traceback.print_exc()
                raise

    def _draw(self, planned) -> None:
        self.plan = planned
        for target, fresh in ((self.memory_figure, memory_bars(planned)), (self.timeline_figure, step_timeline(planned))):
            target.data = []
            target.add_traces(fresh.data)
            target.layout = fresh.layout
            target._widget_data = copy.deepcopy(target._data)  # the saved state is the figure as drawn now
            target._widget_layout = copy.deepcopy(target._layout_obj._props)
        fits = "fits" if planned.fits else "<b style='color:#b00020'>does not fit</b>"
        micro = planned.layout["micro_batches"]
        self.summary.value = (f"predicted: {planned.memory_total / GIB:.1f} GiB of {planned.capacity / GIB:.0f} GiB a "
                              f"GPU, {fits}; a step {planned.step_seconds:.2f} s, "
                              f"{planned.tokens_per_second_per_gpu:,.0f} tokens/s per GPU, MFU {planned.mfu:.1%} "
                              f"(dp={planned.layout['dp']}, {plural(micro, 'micro-batch', 'micro-batches')} a step)")


def time_bars(plans, names=None, title: str | None = None, xaxis_title: str = "layout") -> go.Figure:
    """Seconds a step of each plan, stacked by kind (compute, what each parallelism leaves exposed, the bubble, the
    optimizer). Predicted."""
    plans = list(plans) if isinstance(plans, (list, tuple)) else [plans]
    names = [_wrap(n) for n in (names if names is not None else [p.layout_str() for p in plans])]
    kinds = [k for k in TIME_KINDS if any(k in p.time for p in plans)]
    fig = go.Figure()
    for kind in kinds:
        fig.add_bar(x=names, y=[p.time.get(kind, 0.0) for p in plans], name=TIME_KINDS[kind],
                    marker_color=_time_colour(kind), hovertemplate="%{x}: %{y:.3f} s<extra>" + TIME_KINDS[kind] + "</extra>")
    fig.update_layout(barmode="stack", legend=LEGEND_RIGHT, margin=dict(t=60, b=40), xaxis_title=xaxis_title, height=460,
                      title=title or "predicted: one step's seconds by kind",
                      yaxis=dict(title="seconds a step (predicted)", rangemode="tozero"))
    return finish_layout(fig, legend="keep")  # a long title wrapped to the width
