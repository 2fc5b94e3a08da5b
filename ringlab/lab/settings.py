"""JupyterLab settings the labs rely on, written into the environment's overrides.json.

A notebook saved after its widgets ran shows them again when it is reopened only if JupyterLab
saved the widgets' state with it; JupyterLab's widget manager does that when its ``saveState``
setting is on (it is off by default, and a reopened notebook then says "Error displaying widget:
model not found" until it is run again). :func:`write_overrides` turns it on for the JupyterLab of
one environment (``<prefix>/share/jupyter/lab/settings/overrides.json``, the application settings
JupyterLab reads at start), keeping whatever else that file holds. It also answers JupyterLab's
first-start question about fetching Jupyter's news (no, and no update checks), so that a lab opens on
the lab; and it opens markdown files rendered (JupyterLab's Markdown Preview), so that a lab's link to a term of
``labs/glossary.md`` shows the glossary scrolled to that term rather than its source text. ``python3 dev.py`` and Binder's ``postBuild`` run it; ``python -m ringlab.lab settings`` does it
by hand.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

OVERRIDES = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
             "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
             "@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"markdown": "Markdown Preview"}}}


def overrides_path(prefix: str | Path | None = None) -> Path:
    """Where JupyterLab of the environment at ``prefix`` (default: this Python's) reads its overrides."""
    return Path(prefix or sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"


def write_overrides(prefix: str | Path | None = None) -> Path:
    """Merge :data:`OVERRIDES` into the environment's overrides.json (created if missing); return its path.
    A file that is not a JSON object is an error naming it, not something to overwrite."""
    path = overrides_path(prefix)
    settings = {}
    if path.exists():
        try:
            settings = json.loads(path.read_text() or "{}")
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON ({err}); fix or remove it, then run this again") from None
        if not isinstance(settings, dict):
            raise ValueError(f"{path}: holds {type(settings).__name__}, not a JSON object of settings")
    for plugin, values in OVERRIDES.items():
        settings[plugin] = {**settings.get(plugin, {}), **values}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=2) + "\n")
    return path
