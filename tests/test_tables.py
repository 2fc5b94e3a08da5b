"""The labs' text tables: units in the headers convert ringlab's seconds, bytes and bytes per second."""
import io

import numpy as np

from ringlab.measure.tables import table

ROWS = [{"algorithm": "ring", "bytes": 8, "time_s": 2.5e-6, "busbw_Bps": 4e6, "share": 0.373},
        {"algorithm": "mpi", "bytes": np.int64(1 << 20), "time_s": 1.2e-3, "busbw_Bps": 3.1e9, "share": 0.5}]


def test_a_table_is_aligned_with_its_units_applied():
    out = io.StringIO()
    table(ROWS, {"algorithm": "algorithm", "size (B)": "bytes", "time (us)": "time_s", "busbw (GB/s)": "busbw_Bps",
                 "communicating": ("share", ".0%")}, out=out)
    assert out.getvalue().splitlines() == [
        "# algorithm  size (B)  time (us)  busbw (GB/s)  communicating",
        "  ring              8       2.50         0.004            37%",
        "  mpi         1048576    1200.00         3.100            50%",
    ]


def test_rows_read_back_by_skipping_the_header():
    out = io.StringIO()
    table(ROWS, {"size (B)": "bytes", "time (ms)": "time_s", "left (KiB)": "bytes"}, out=out)
    lines = [line.split() for line in out.getvalue().splitlines() if not line.startswith("#")]
    assert lines == [["8", "0.00", "0"], ["1048576", "1.20", "1024"]]


def test_an_unknown_unit_leaves_the_value_alone():
    out = io.StringIO()
    table([{"x": 1.23456, "n": 7}], {"ratio (x)": "x", "ranks": "n"}, out=out)
    assert out.getvalue().splitlines()[1].split() == ["1.23", "7"]


def test_in_a_notebook_a_table_is_html_with_its_text_kept():
    """JupyterLab wraps printed text wider than the output at any letter; in a kernel the table is HTML, its cells
    escaped and aligned as the text's, with the printed text as its plain form."""
    import nbformat
    from nbclient import NotebookClient

    code = ("from ringlab.measure.tables import table\n"
            "table([{'t': 1.5e-6, 'what': 'a <b> & c'}, {'t': 2.25e-6, 'what': 'd'}], "
            "{'time (us)': 't', 'what': 'what'})")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)], metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    outputs = NotebookClient(notebook, timeout=60, kernel_name="python3").execute().cells[0].outputs
    assert [o.output_type for o in outputs] == ["display_data"]
    data = outputs[0].data
    assert data["text/plain"].splitlines() == ["# time (us)  what", "       1.50  a <b> & c", "       2.25  d"]
    page = data["text/html"]
    assert page.count("<tr>") == 3 and "a &lt;b&gt; &amp; c" in page and "<b>" not in page
    assert ('<td style="text-align: right; white-space: nowrap">1.50</td><td style="text-align: left">a &lt;b&gt; &amp; '
            'c</td>') in page  # a number never wraps (5.2e-16 did, after its minus sign); text and headers may


def test_a_short_label_stays_on_one_line_and_a_sentence_may_wrap():
    from ringlab.measure.tables import _html

    page = _html(["size", "why"], [["64 MiB", "the ring is faster at every size here"]], [False, False])
    assert '<td style="text-align: left; white-space: nowrap">64 MiB</td>' in page  # never "64" over "MiB"
    assert '<td style="text-align: left">the ring is faster at every size here</td>' in page
    assert '<th style="text-align: left">size</th>' in page  # headers wrap between words
