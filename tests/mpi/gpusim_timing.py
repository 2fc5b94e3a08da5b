"""What ringlab's GPU clocks count, on the cupy stand-in (one process: MPI's singleton world).

Device work that the timed function only queues must be counted; warm-up work must not. The
stand-in's queued work takes RINGLAB_GPUSIM_WORK_SECONDS when it runs. Prints 'ok' when all hold.
"""
import os

import cupy as cp
import numpy as np
from mpi4py import MPI

from ringlab.measure.bandwidth import REPEATS, _median_event_seconds, gpu_report
from ringlab.measure.timing import time_collective

comm = MPI.COMM_WORLD
buffer = cp.zeros(1000)
elapsed_calls = []
real_elapsed = cp.cuda.get_elapsed_time


def counted_elapsed(start, end):
    """cupy's event clock, counted: the GPU clocks must read events, not the host's time."""
    elapsed_calls.append(1)
    return real_elapsed(start, end)


cp.cuda.get_elapsed_time = counted_elapsed


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
assert len(elapsed_calls) == 3, elapsed_calls  # one pair of events per call
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
# ... on several streams: the work of each is counted, the warm-up's on none
s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
host = np.ones(1000)


def on_streams(seconds_1, seconds_2):
    for stream, seconds in ((s1, seconds_1), (s2, seconds_2)):
        os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = str(seconds)
        cp.empty(1000).set(host, stream=stream)  # a copy, queued on that stream
    os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0"


assert _median_event_seconds(cp, lambda: on_streams(0.0, 0.03), repeats=3, streams=(s1, s2)) >= 0.03
calls.clear()
slow_second_stream_warmup = _median_event_seconds(
    cp, lambda: (calls.append(1), on_streams(0.0, 0.3 if len(calls) == 1 else 0.0)), repeats=1, streams=(s1, s2))
assert slow_second_stream_warmup < 0.1, slow_second_stream_warmup

# every rate `ringlab bandwidth` reports counts the copies it times: with each copy taking 20 ms,
# no rate can exceed nbytes / 20 ms
os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0.02"
nbytes = 1 << 16
elapsed_calls.clear()
with open(os.devnull, "w") as out:
    report = gpu_report(out, nbytes)
os.environ["RINGLAB_GPUSIM_WORK_SECONDS"] = "0"
# host<->device from pinned memory (each way and both at once), the device copy and the 8-byte latency:
# 5 figures, each the median of REPEATS pairs of events (pageable copies are timed by the host, as
# bandwidthTest times them; both ways at once by two threads: see gpusim_both_ways.py)
assert len(elapsed_calls) >= 5 * REPEATS, len(elapsed_calls)
limit = nbytes / 0.02 * 1.05
# both ways at once is two copies, 20 ms each; the stand-in runs streams one after the other, so
# a clock that counts both (the second stream joined before the end event) sees 40 ms: the rate of
# 2 * nbytes can be no more than nbytes / 20 ms
rates = [r["Bps"] for r in report["host_device"]]
rates += [report["device_copy_Bps"]] + [v for m in report["p2p"].values() if not isinstance(m[0][0], bool)
                                        for row in m for v in row if v]
assert max(rates) <= limit, (max(rates), limit)
assert report["small_h2d_latency_s"] >= 0.02
print(f"ok: per call {per_call * 1e3:.1f} ms, first after a slow warm-up {first * 1e3:.1f} ms, "
      f"back to back {mean * 1e3:.1f} ms, {len(rates)} bandwidth rates under {limit / 1e6:.1f} MB/s")
