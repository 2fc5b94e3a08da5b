"""The pipelined chain that reduce.chain and broadcast.chain share."""
from __future__ import annotations

import numpy as np

from ..schedule import Step


def pipeline(hops: list[tuple[int, int]], segments: int, op: str, label: str) -> list[Step]:
    """Steps that pass ``segments`` segments along a chain of ``hops`` ((src, dst) pairs, in order).

    Segment s crosses hop h at step s + h, one step after it crossed hop h-1: S + len(hops) - 1 steps.
    """
    if not hops:
        return []
    src, dst = np.array(hops).T
    hop = np.arange(len(hops))
    steps = []
    for t in range(segments + len(hops) - 1):
        segment = t - hop  # the segment on each hop at step t
        moving = (segment >= 0) & (segment < segments)
        steps.append(Step.columns(src[moving], dst[moving], segment[moving], op, label))
    return steps
