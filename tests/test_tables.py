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
