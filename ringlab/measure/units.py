"""Sizes as people type and read them: ``64M`` in, ``64 MiB`` out (powers of 1024, as nccl-tests)."""
from __future__ import annotations

from ..schedule import parse_size  # noqa: F401  (its home is the core: ringlab.mpi reads sizes too)


def format_bytes(nbytes: float) -> str:
    """``1536`` -> ``"1.5 KiB"``; whole numbers lose their decimals."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(nbytes) >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} B" if nbytes == int(nbytes) else f"{nbytes:.3g} B"
