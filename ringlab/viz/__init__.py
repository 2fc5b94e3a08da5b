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


# JupyterLab breaks a printed line too long for the output area anywhere, mid-word ("traffi" / "c", "0." / "006":
# word-break: break-all on output text); with this, printed sentences and tables break at spaces
TEXT_OUTPUT_CSS = ".jp-Notebook .jp-OutputArea-output pre, .jp-OutputArea-output pre { word-break: normal; }"


def use_renderer(offline: bool = False) -> str:
    """Pick plotly's renderer on purpose: JupyterLab's own (mimetype) plus HTML for nbconvert; and, in a
    notebook, make printed text wrap at spaces rather than inside words (:data:`TEXT_OUTPUT_CSS`).

    ``offline=False`` puts a script tag that loads plotly.js from its CDN into exported HTML (light,
    needs the network when the HTML is opened); ``offline=True`` embeds plotly.js once per notebook
    (about 4.6 MB, works anywhere). nbconvert's default leaves no plot in the HTML at all.
    """
    import plotly.io as pio

    pio.renderers.default = "plotly_mimetype+" + ("notebook" if offline else "notebook_connected")
    _wrap_text_at_words()
    return pio.renderers.default


def _wrap_text_at_words() -> None:
    """Show :data:`TEXT_OUTPUT_CSS` as this cell's output, where a kernel's front end shows HTML (not in a terminal,
    where display() would print the object's repr)."""
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or getattr(shell, "kernel", None) is None:
        return
    display(HTML(f"<style>{TEXT_OUTPUT_CSS}</style>"))


__all__ = ["StepThrough", "algbw_busbw_plot", "scale_plot", "step_figure", "frames", "timeline", "bandwidth_heatmap", "host_device_figure",
           "topology_figure", "busbw_plot", "fitted_busbw_plot", "links_figure", "time_vs_ranks",
           "measured_vs_predicted", "segments_plot", "staleness_plot", "staleness_order_plot", "versus_plot",
           "fraction_bars", "predicted_machines_plot", "tree_ring_plot", "use_renderer"]
