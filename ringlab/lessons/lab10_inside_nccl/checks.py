"""Lab 10's exercises: the message size at which NCCL's model switches protocol, solved from each protocol's latency and
bandwidth; and one-shot or two-shot, chosen from what their schedules count (waits and bytes read)."""
from __future__ import annotations

import math

from ...lab.exercises import NotDoneYet, exercise
from ...predict import predict_nccl
from ...predict import tuning as T
from ...topology import preset
from .symmetric import counted_rows

OPTIONS_AT = 1 << 30  # the size whose latency and bandwidth each protocol is given at: past NCCL's narrowing of small
                      # calls' channels, so that latency + bytes / bandwidth is the model's time at every size above 1 MiB


def protocol_options(machine: str = "hgx-h100-8", collective: str = "allreduce", algorithm: str = "ring") -> dict:
    """{protocol: (latency in seconds, algbw in bytes/s)} by NCCL's model, ``algorithm`` forced, at 1 GiB."""
    topology = preset(machine)
    options = {}
    for protocol in T.PROTOCOLS:
        p = predict_nccl(collective, OPTIONS_AT, topology, algorithm=algorithm, protocol=protocol)
        options[protocol] = (p.latency, p.algbw)
    return options


def fastest_protocol(nbytes, options) -> str:
    """NCCL's rule: of ``options`` ({protocol: (latency, bandwidth)}), the least latency + nbytes / bandwidth."""
    return min(options, key=lambda name: options[name][0] + nbytes / options[name][1])


def _switch_size(small, large):
    return (large[0] - small[0]) / (1 / small[1] - 1 / large[1])


SWITCH_CASES = [("hgx-h100-8", "allreduce", "ring"), ("ib-2x8-h100", "allreduce", "ring"),
                ("ib-2x8-h100", "allgather", "ring"), ("hgx-a100-8", "allreduce", "ring")]


@exercise(_switch_size, "answer")
def check_switch_size(switch_size):
    """``switch_size(small, large)``, each a protocol's (latency, bandwidth): the size from which ``large`` is the
    faster, for each pair of NCCL's protocols on a few machines; a wrong size is explained by both times there."""
    said = []
    for i, (machine, collective, algorithm) in enumerate(SWITCH_CASES):
        options = protocol_options(machine, collective, algorithm)
        for a, b in (("LL", "LL128"), ("LL128", "Simple"), ("LL", "Simple")):
            want = _switch_size(options[a], options[b])
            got = switch_size(options[a], options[b])
            if got is None and i == 0 and a == "LL" and b == "LL128":
                raise NotDoneYet("switch_size returned None")
            if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-6):
                where = ""
                if isinstance(got, (int, float)) and not isinstance(got, bool) and got > 0:
                    t = {k: (options[k][0] + got / options[k][1]) * 1e6 for k in (a, b)}
                    where = (f" At {got:,.0f} B NCCL's model has {a} take {t[a]:.2f} us and {b} {t[b]:.2f} us: "
                             + (f"{a} is still the faster, so the switch is further up." if t[a] < t[b] else
                                f"{b} is already the faster, so the switch is further down."))
                raise AssertionError(
                    f"switch_size({a}, {b}) on {machine}'s {algorithm} {collective} returned {got!r}; the two take "
                    f"as long at {want:,.0f} B.{where}\nHint: each takes latency + size / bandwidth; set the two "
                    "equal and solve for the size.")
            if i == 0 and (a, b) != ("LL", "Simple"):
                said.append(f"{b} overtakes {a} from {want / 2 ** 20:.1f} MiB")
    print(f"Correct: on 8 H100s' ring allreduce {', '.join(said)} (NCCL's model): where the printout's fastest "
          "protocol changes, between its sizes.")


def _counts(nranks: int) -> dict:
    """{algorithm: (waits, buffers read)} a rank, counted from the schedules (the lab's table)."""
    return {r["algorithm"]: (r["steps"], r["read"]) for r in counted_rows((nranks,))}


def _pick_symmetric(nbytes, nranks, sync_s, read_Bps):
    counts = _counts(nranks)
    cost = {name: counts[name][0] * sync_s + counts[name][1] * nbytes / read_Bps for name in ("one-shot", "two-shot")}
    return min(cost, key=cost.get)


SYMMETRIC_CASES = [dict(nbytes=nbytes, nranks=n, sync_s=2e-6, read_Bps=100e9)
                   for n in (8, 4, 2) for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20)]


@exercise(_pick_symmetric, "answer")
def check_pick_symmetric(pick_symmetric):
    """``pick_symmetric(nbytes, nranks, sync_s, read_Bps)``: "one-shot" or "two-shot", whichever takes less by the
    waits and bytes read that ringlab's schedules count; a wrong pick is explained by both costs."""
    for i, case in enumerate(SYMMETRIC_CASES):
        want = _pick_symmetric(**case)
        got = pick_symmetric(*case.values())
        if got is None and i == 0:
            raise NotDoneYet("pick_symmetric returned None")
        if str(got).lower().replace("-", "").replace(" ", "") != want.replace("-", ""):
            n, nbytes = case["nranks"], case["nbytes"]
            counts = _counts(n)
            costs = "; ".join(f"{name} waits {waits} time{'s' * (waits > 1)} and reads {read:.2f} buffers: "
                              f"{(waits * case['sync_s'] + read * nbytes / case['read_Bps']) * 1e6:.2f} us"
                              for name, (waits, read) in ((k, counts[k]) for k in ("one-shot", "two-shot")))
            raise AssertionError(f"pick_symmetric({nbytes:,} B, {n} ranks, ...) returned {got!r}; {want} is the "
                                 f"faster there: {costs}.\nHint: read each one's waits and bytes read a rank off the "
                                 "counted table for this many ranks; a wait costs sync_s, reading runs at read_Bps.")
    crossing = {}
    for n in (8, 4):
        (w1, r1), (w2, r2) = _counts(n)["one-shot"], _counts(n)["two-shot"]
        crossing[n] = (w2 - w1) * 2e-6 / ((r1 - r2) / 100e9)
    print("Correct: with a 2 us wait and 100 GB/s of reads, two-shot takes over from "
          + " and ".join(f"{b / 1024:.0f} KiB on {n} ranks" for n, b in crossing.items())
          + "; on 2 ranks it reads as much as one-shot and waits twice, so one-shot wins at every size.")
