"""Pictures of collectives: step through a schedule, see a measured trace, bandwidths, topologies, scaling.

The figures need the ``lab`` extra (plotly, ipywidgets, and anywidget for plotly's FigureWidget) and load
when first used, so that ``terminal`` (the text walk-through behind ``ringlab demo``) needs none of it. In a
notebook call :func:`use_renderer` once: plotly figures then show in JupyterLab and in exported HTML alike.
"""
from __future__ import annotations

import importlib

_HOMES = {"StepThrough": "widget", "frames": "stepview", "step_figure": "stepview", "scale_plot": "scale"}
_PLOTS = ("algbw_busbw_plot", "bandwidth_heatmap", "busbw_plot", "fitted_busbw_plot", "fraction_bars",
          "host_device_figure", "links_figure", "measured_vs_predicted", "predicted_machines_plot", "segments_plot",
          "staleness_order_plot", "staleness_plot", "time_vs_ranks", "timeline", "topology_figure", "tree_ring_plot",
          "versus_plot")


def __getattr__(name):
    home = _HOMES.get(name, "plots" if name in _PLOTS else None)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)


def use_renderer(offline: bool = False) -> str:
    """Pick plotly's renderer on purpose: JupyterLab's own (mimetype) plus HTML for nbconvert.

    ``offline=False`` puts a script tag that loads plotly.js from its CDN into exported HTML (light,
    needs the network when the HTML is opened); ``offline=True`` embeds plotly.js once per notebook
    (about 4.6 MB, works anywhere). nbconvert's default leaves no plot in the HTML at all.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+" + ("notebook" if offline else "notebook_connected")
    return pio.renderers.default


__all__ = ["StepThrough", "algbw_busbw_plot", "scale_plot", "step_figure", "frames", "timeline", "bandwidth_heatmap", "host_device_figure",
           "topology_figure", "busbw_plot", "fitted_busbw_plot", "links_figure", "time_vs_ranks",
           "measured_vs_predicted", "segments_plot", "staleness_plot", "staleness_order_plot", "versus_plot",
           "fraction_bars", "predicted_machines_plot", "tree_ring_plot", "use_renderer"]
