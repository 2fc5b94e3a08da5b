"""What every reader of the tools' logs shares: lines without the rank prefixes mpirun adds, numbers that may
be N/A, and the error for a log that is not what it claims."""
from __future__ import annotations

import re

GB = 1e9

# mpirun --tag-output ("[1,0]<stdout>:"), mpiexec -prepend-rank ("[0] "), srun --label ("0: ")
_RANK_PREFIX = re.compile(r"^(\[\d+(,\d+)?\](<stdout>|<stderr>)?:?\s?|\d+:\s)")


class LogFormatError(ValueError):
    """The text is in none of the formats ringlab reads, or is broken within one."""


def lines_of(text: str) -> list[str]:
    """The lines of ``text`` without the rank prefixes of mpirun, mpiexec or srun."""
    return [_RANK_PREFIX.sub("", line.rstrip("\n")) for line in text.splitlines()]


def number(field) -> float | None:
    """A logged number, None where the tool printed N/A."""
    return None if field in ("N/A", "-", "nan") else float(field)
