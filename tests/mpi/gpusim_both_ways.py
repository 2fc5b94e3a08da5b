"""Both ways at once from pageable memory, on the cupy stand-in (one process): the two copies in flight together.

A copy from or to pageable memory holds the thread that asks for it (CUDA stages it through pinned
memory), so two asked for by one thread run one after the other, whatever their streams. The stand-in
holds the thread for nbytes / RINGLAB_GPUSIM_PAGEABLE_BPS (sleeping) and records each hold in
``_sim.HOLDS``. Prints 'ok' when every timed pair overlapped and the rate shows it.
"""
import os

import cupy as cp
from cupy import _sim

from ringlab.measure.bandwidth import REPEATS, _host_device_rows

rate = float(os.environ["RINGLAB_GPUSIM_PAGEABLE_BPS"])
nbytes = 1 << 20
rows = _host_device_rows(cp, nbytes, None)
assert [(r["what"], r["pinned"]) for r in rows] == [(w, p) for p in (True, False) for w in (
    "host->device", "device->host", "both ways at once")], rows
assert all(set(r) == {"what", "pinned", "Bps", "spread_Bps", "peak_Bps"} for r in rows), rows
# the holds of a pageable copy to the device and one from it that overlapped in time: none if one thread asked for both
to_device = [h for h in _sim.HOLDS if h[1] == "host->device"]
from_device = [h for h in _sim.HOLDS if h[1] == "device->host"]
together = [(a, b) for a in to_device for b in from_device if a[2] < b[3] and b[2] < a[3]]
assert len(together) >= REPEATS, f"{len(together)} of {REPEATS} + 1 pairs overlapped"
assert all(a[0] != b[0] for a, b in together)  # each from its own thread
# ... and the rates say so: each way alone at the stand-in's rate, and both at once twice a copy's bytes in
# a copy's time (one after the other, they would move them at a copy's rate)
pageable = {r["what"]: r["Bps"] for r in rows if not r["pinned"]}
assert all(0.8 * rate < pageable[w] < 1.05 * rate for w in ("host->device", "device->host")), (pageable, rate)
ratio = pageable["both ways at once"] / max(pageable["host->device"], pageable["device->host"])
assert 1.5 < ratio < 2.1, (ratio, pageable)
print(f"ok: {len(together)} pairs in flight together; both ways at once {ratio:.2f}x one way's rate")
