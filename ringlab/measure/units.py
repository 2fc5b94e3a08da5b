"""Sizes as people type and read them: ``64M`` in, ``64 MiB`` out (powers of 1024, as nccl-tests)."""
from __future__ import annotations

import re

from ..schedule import MAX_BYTES

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int) -> int:
    """Bytes from ``"8"``, ``"1K"``, ``"64M"``, ``"1GiB"`` or ``"2 MB"`` (K, M, G are powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size must be >= 0, got {text}")
        return _at_most_max(text, text)
    match = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"cannot read {text!r} as a size: write bytes like 8, 1K, 64M or 1G")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value > MAX_BYTES:
        return _at_most_max(value, text)
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def _at_most_max(value, text) -> int:
    if value > MAX_BYTES:
        raise ValueError(f"{text!r} is more than 1 PiB: no rank holds a buffer that large")
    return int(value)


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; whole numbers lose their decimals."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} B" if nbytes == int(nbytes) else f"{nbytes:.3g} B"
