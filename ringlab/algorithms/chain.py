"""The pipelined chain that reduce.chain and broadcast.chain share."""
from __future__ import annotations

import numpy as np

from .pattern import Pattern


def pipeline(pattern: Pattern, hops: list[tuple[int, int]], segments: int, op: str, label: str) -> Pattern:
    """Pass ``segments`` segments along a chain of ``hops`` ((src, dst) pairs, in order): segment s crosses
    hop h at step s + h, one step after it crossed hop h-1, so S + len(hops) - 1 steps; each hop is one term."""
    pattern.label(0, label)
    if hops:
        src, dst = np.array(hops).T
        hop = np.arange(len(hops))
        pattern.add(src, dst, hop, hop + segments, 0, op, stride=1, order=hop)
    return pattern
