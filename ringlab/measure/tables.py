"""Aligned text tables for the labs, with each column's unit in its header.

    table(rows, {"size (B)": "bytes", "time (us)": "time_s", "busbw (GB/s)": "busbw_Bps"})

Rows keep ringlab's units (seconds, bytes, bytes per second); a header's unit in brackets says how
a column shows them, so a lab never multiplies by 1e6 or divides by 1e9 itself.

In a notebook the table is an HTML table (the same text kept as its plain form): JupyterLab wraps a printed
line wider than the output (at any letter, or at spaces once :func:`ringlab.viz.use_renderer` ran), which
breaks a wide table's rows across lines; an HTML table keeps each row on one line, its cells whole, and scrolls.
"""
from __future__ import annotations

import html
import numbers
import re
import sys

# unit in a header -> (factor from seconds, bytes or bytes/s, format)
UNITS = {"s": (1.0, ".2f"), "ms": (1e3, ".2f"), "us": (1e6, ".2f"), "GB/s": (1e-9, ".3f"),
         "KiB": (2.0 ** -10, ".0f"), "MiB": (2.0 ** -20, ".1f")}


def table(rows, columns: dict, out=None) -> None:
    """Print ``rows`` (dicts) as an aligned table, one column per entry of ``columns``.

    ``columns`` maps a header to a row key, or to ``(key, format spec)``. A header ending in one of
    :data:`UNITS`, as in ``"time (us)"``, converts the value into that unit. Text is aligned left,
    numbers right; the header line starts with ``#``, as nccl-tests' does, so that a program can
    read the rows back by skipping the lines that start with ``#``.
    """
    specs = [(header, *_spec(header, column)) for header, column in columns.items()]
    cells = [[_cell(row[key], scale, spec) for _, key, scale, spec in specs] for row in rows]
    widths = [max([len(header)] + [len(line[i]) for line in cells]) for i, (header, *_) in enumerate(specs)]
    numeric = [all(_is_number(row[key]) for row in rows) for _, key, _, _ in specs]

    def line(texts):
        return "  ".join(t.rjust(w) if right else t.ljust(w) for t, w, right in zip(texts, widths, numeric)).rstrip()

    text = "\n".join(["# " + line([header for header, *_ in specs])] + ["  " + line(texts) for texts in cells])
    if out is None and _in_notebook():
        from IPython.display import display
        display({"text/plain": text, "text/html": _html([header for header, *_ in specs], cells, numeric)}, raw=True)
        return
    print(text, file=sys.stdout if out is None else out)


ALIGN = {True: "right", False: "left"}  # a column of numbers, of text


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter kernel (a notebook, or a console on one), where HTML is shown."""
    shell = sys.modules.get("IPython")
    shell = shell.get_ipython() if shell is not None else None
    return getattr(shell, "kernel", None) is not None


def _html(headers: list[str], cells: list[list[str]], numeric: list[bool]) -> str:
    """The table as HTML: numbers right, text left, as in the printed form; a number is never broken across lines
    (a narrow column would wrap "5.2e-16" after its minus sign), nor is a short label of two words at most ("64
    MiB", "ring/LL128": :data:`SHORT` characters or fewer); headers and longer text may wrap between words."""
    def row(tag: str, texts) -> str:
        return "<tr>" + "".join(f'<{tag} style="{_style(tag, right, t)}">{html.escape(t)}</{tag}>'
                                for t, right in zip(texts, numeric)) + "</tr>"
    return ('<table class="ringlab-table">\n<thead>' + row("th", headers) + "</thead>\n<tbody>\n"
            + "\n".join(row("td", texts) for texts in cells) + "\n</tbody>\n</table>")


SHORT = 16  # characters of a text cell kept on one line, when it has two words at most


def _style(tag: str, right: bool, text: str = "") -> str:
    whole = tag == "td" and (right or (len(text) <= SHORT and text.count(" ") <= 1))
    return f"text-align: {ALIGN[right]}" + ("; white-space: nowrap" if whole else "")


def _spec(header: str, column) -> tuple[str, float, str | None]:
    """(row key, scale, format) for one column."""
    key, spec = column if isinstance(column, tuple) else (column, None)
    unit = re.search(r"\(([^()]+)\)$", header)
    scale, default = UNITS.get(unit.group(1), (1.0, None)) if unit else (1.0, None)
    return key, scale, spec or default


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _cell(value, scale: float, spec: str | None) -> str:
    if not _is_number(value):
        return str(value)
    if isinstance(value, numbers.Integral) and scale == 1.0 and spec is None:
        return str(value)
    return format(value * scale, spec or ".2f")
