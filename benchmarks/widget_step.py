"""How long the step-through widget takes to move one step (the Python side: rebuilding the frame's
data and sending the update), for rings of 16 and 64 ranks. Target: under 100 ms at 16 ranks.

    python benchmarks/widget_step.py
"""
import time

import ringlab as rl
from ringlab.viz import StepThrough

for n in (16, 64):
    widget = StepThrough(rl.build("allreduce.ring", n))
    steps = range(1, len(widget.frames))
    start = time.perf_counter()
    for s in steps:
        widget.step = s
    per_step = (time.perf_counter() - start) / len(steps)
    print(f"allreduce.ring, {n:>2} ranks: {per_step * 1e3:6.1f} ms per step ({len(steps)} steps)")
