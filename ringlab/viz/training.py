"""Pictures of training on several ranks: the speed-up measured against ranks, beside the ideal; the test
loss against wall-clock seconds of three trainers; a parameter server's load against its workers."""
from __future__ import annotations

import plotly.graph_objects as go

RACE_NAMES = {"sync": "synchronous server", "async": "asynchronous server", "ring": "ring allreduce"}


def speedup_plot(rows: list[dict], cores: int | None = None, title: str | None = None) -> go.Figure:
    """Speed-up against ranks from :func:`ringlab.train.scaling.measure_scaling`'s rows (measured here),
    with the ideal line (speed-up = ranks / the first run's ranks) and, where ``cores`` is fewer than
    the most ranks, the ideal that many cores allow (a rank per core at most)."""
    if not rows:
        raise ValueError("no rows to plot: measure_scaling returned none")
    ranks = [row["ranks"] for row in rows]
    first = ranks[0]
    fig = go.Figure()
    ideal = "ideal: speed-up = ranks" + (f" / {first}" if first != 1 else "")
    fig.add_scatter(x=ranks, y=[n / first for n in ranks], name=ideal, mode="lines",
                    line=dict(dash="dash", color="grey"))
    if cores is not None and cores < max(ranks):
        fig.add_scatter(x=ranks, y=[min(n, cores) / min(first, cores) for n in ranks],
                        name=f"ideal on {cores} cores: a rank per core at most", mode="lines",
                        line=dict(dash="dot", color="black"))
    fig.add_scatter(x=ranks, y=[row["speedup"] for row in rows], name="measured here", mode="lines+markers",
                    marker=dict(size=10), customdata=[[row["samples_per_s"], row["comm_share"]] for row in rows],
                    hovertemplate="%{x} ranks: %{y:.2f}x<br>%{customdata[0]:.0f} samples/s, "
                                  "%{customdata[1]:.0%} communicating<extra></extra>")
    fig.update_layout(title=title or _title(rows), legend=dict(x=0.01, y=0.99),
                      xaxis=dict(title="ranks", tickvals=ranks, rangemode="tozero"),
                      yaxis=dict(title=f"speed-up over {first} rank{'s' * (first != 1)} (×, samples/s ratio)",
                                 rangemode="tozero"))
    return fig


def _title(rows: list[dict]) -> str:
    """What was measured: the algorithm and what every run had in common (samples or steps)."""
    algorithms = {row.get("algorithm", "ring") for row in rows}
    samples, steps = {row.get("samples") for row in rows}, {row.get("steps") for row in rows}
    same = (f"{samples.pop():,} samples each" if len(samples) == 1 and None not in samples else
            f"{steps.pop()} steps each" if len(steps) == 1 and None not in steps else "")
    return ("measured here: data-parallel training speed-up against ranks ("
            + ", ".join([f"{'/'.join(sorted(algorithms))} allreduce"] + ([same] if same else [])) + ")")


def loss_against_time_plot(runs: dict, target: float | None = None) -> go.Figure:
    """Test loss against the seconds since the start, one line per run of
    :func:`ringlab.lessons.lab04_parameter_servers.wallclock.race` (``runs``: {method: run}), measured here; ``target`` as a dashed line;
    the runs' straggler in the title."""
    if not runs:
        raise ValueError("no runs to plot")
    fig = go.Figure()
    for method, run in runs.items():
        fig.add_scatter(x=run["seconds"], y=run["loss"], mode="lines+markers", marker=dict(size=4),
                        name=f"{RACE_NAMES.get(method, method)} ({len(run['seconds']) - 1} updates)",
                        hovertemplate="%{x:.3f} s: loss %{y:.3f}<extra></extra>")
    if target is not None:
        fig.add_hline(y=target, line=dict(dash="dash", color="grey"), annotation_text=f"target {target:.3f}")
    said = {(run.get("straggler") or {}).get("said") for run in runs.values()} - {None}
    slowed = f" ({', '.join(sorted(said))})" if said else ""
    fig.update_layout(title=f"measured here: test loss against wall-clock time{slowed}",
                      xaxis=dict(title="seconds since the start (measured)", rangemode="tozero"),
                      yaxis=dict(title="test loss (cross-entropy)"), legend=dict(x=0.55, y=0.99))
    return fig


def emulated_load_plot(rows: list[dict]) -> go.Figure:
    """A worker's communication per step against the number of workers, from
    :func:`ringlab.lessons.lab04_parameter_servers.serverload.measure_emulated_load`'s rows: under one server and
    under a ring allreduce, each measured on the emulated machine (solid) beside the cost model's prediction
    for that machine (dotted)."""
    if not rows:
        raise ValueError("no rows to plot: measure_emulated_load returned none")
    workers = [row["workers"] for row in rows]
    ring = [row for row in rows if row["ring_seconds"] is not None]
    fig = go.Figure()
    for name, key, shown in (("one server", "ps", rows), ("ring allreduce", "ring", ring)):
        fig.add_scatter(x=[r["workers"] for r in shown], y=[r[f"{key}_seconds"] * 1e3 for r in shown],
                        name=f"{name}: measured", mode="lines+markers")
        fig.add_scatter(x=[r["workers"] for r in shown], y=[r[f"{key}_predicted"] * 1e3 for r in shown],
                        name=f"{name}: predicted", mode="lines+markers", line=dict(dash="dot"))
    fig.update_xaxes(title_text="workers", tickvals=workers)
    fig.update_yaxes(title_text="a worker's communication per step (virtual ms)", rangemode="tozero")
    fig.update_layout(title=f"one server against a ring, on the {rows[0]['machine']} (measured here in virtual time, "
                            "and predicted)")
    return fig


def server_load_plot(rows: list[dict]) -> go.Figure:
    """Two panels against the number of workers, from :func:`ringlab.lessons.lab04_parameter_servers.serverload.measure_server_load`'s
    rows: bytes per step in units of K (the server's, counted from its messages, beside a ring rank's,
    counted from the schedule), and the server's busy time per step (measured here)."""
    from plotly.subplots import make_subplots

    if not rows:
        raise ValueError("no rows to plot: measure_server_load returned none")
    workers = [row["workers"] for row in rows]
    K = rows[0]["gradient_bytes"]
    fig = make_subplots(rows=1, cols=2,
                        subplot_titles=("bytes per step (counted)", "server busy per step (measured here)"))
    fig.add_scatter(x=workers, y=[row["received"] / K for row in rows], name="server receives", mode="lines+markers",
                    row=1, col=1)
    fig.add_scatter(x=workers, y=[row["sent"] / K for row in rows], name="server sends", mode="markers",
                    marker=dict(symbol="x", size=10), row=1, col=1)
    fig.add_scatter(x=workers, y=[row["ring_bytes"] / K for row in rows], name="a ring rank sends (and receives)",
                    mode="lines+markers", line=dict(dash="dash"), row=1, col=1)
    fig.add_scatter(x=workers, y=[row["busy_seconds"] * 1e3 for row in rows], name="server busy (median of steps)",
                    mode="lines+markers", row=1, col=2)
    fig.update_xaxes(title_text="workers", tickvals=workers)
    fig.update_yaxes(title_text=f"K (= {K:,} bytes of gradients)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="ms per step", rangemode="tozero", row=1, col=2)
    fig.update_layout(title="a parameter server's load against its workers")
    return fig
