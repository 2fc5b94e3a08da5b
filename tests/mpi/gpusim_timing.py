"""What ringlab's GPU clocks count, on the cupy stand-in (one process: MPI's singleton world).

Device work that the timed function only queues must be counted; warm-up work must not. The
stand-in's queued work takes RINGLAB_GPUSIM_WORK_SECONDS when it runs. Prints 'ok' when all hold.
"""
import os
import time

import cupy as cp
import numpy as np
from mpi4py import MPI

from ringlab.measure.bandwidth import _median_event_seconds, gpu_report
from ringlab.measure.timing import time_collective

comm = MPI.COMM_WORLD
buffer = cp.zeros(1000)


def queue(seconds):
    """A call that queues `seconds` of device work and returns at once."""
    os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = str(seconds)
    buffer[...] = 1  # a kernel, queued on the current stream
    os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0"


calls = []


def slow_warmup_then_fast():
    calls.append(1)
    queue(0.3 if len(calls) == 1 else 0.0)


# a timed call's queued work is counted (the end event is waited for) ...
per_call = time_collective(lambda: queue(0.05), comm, warmup=0, iters=3, buffer=buffer)
assert per_call >= 0.05, per_call
# ... a warm-up's is not
first = time_collective(slow_warmup_then_fast, comm, warmup=1, iters=1, buffer=buffer)
assert first < 0.1, first
# back to back (as nccl-tests times NCCL): the stream is waited for once, after the last call
calls.clear()
mean = time_collective(lambda: queue(0.03), comm, warmup=1, iters=3, buffer=buffer, back_to_back=True)
assert 0.03 <= mean < 0.06, mean
calls.clear()
after_slow_warmup = time_collective(slow_warmup_then_fast, comm, warmup=1, iters=3, buffer=buffer, back_to_back=True)
assert after_slow_warmup < 0.05, after_slow_warmup  # the warm-up's 0.3 s is not spread over the calls
# bandwidth's event clock: the copy's time, without its warm-up
calls.clear()
assert _median_event_seconds(cp, lambda: queue(0.02), repeats=3) >= 0.02
calls.clear()
assert _median_event_seconds(cp, slow_warmup_then_fast, repeats=3) < 0.1

# every rate `ringlab bandwidth` reports counts the copies it times: with each copy taking 20 ms,
# no rate can exceed nbytes / 20 ms
os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0.02"
nbytes = 1 << 16
with open(os.devnull, "w") as out:
    report = gpu_report(out, nbytes)
os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0"
limit = nbytes / 0.02 * 1.05
rates = [r["Bps"] / (2 if r["what"].startswith("both") else 1) for r in report["host_device"]]
rates += [report["device_copy_Bps"]] + [v for m in report["p2p"].values() if not isinstance(m[0][0], bool)
                                        for row in m for v in row if v]
assert max(rates) <= limit, (max(rates), limit)
assert report["small_h2d_latency_s"] >= 0.02
print(f"ok: per call {per_call * 1e3:.1f} ms, first after a slow warm-up {first * 1e3:.1f} ms, "
      f"back to back {mean * 1e3:.1f} ms, {len(rates)} bandwidth rates under {limit / 1e6:.1f} MB/s")
