"""Pictures of data-parallel training: the speed-up measured against ranks, beside the ideal."""
from __future__ import annotations

import plotly.graph_objects as go


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
