"""Lab 05's measured sweep over sizes, on this machine and on an emulated one beside it: whether small
messages are latency-bound (busbw climbs with size) and large ones bandwidth-bound (busbw flattens), and
what an alpha-beta fit recovers, in sentences computed from the rows (``ringlab bench`` rows)."""
from __future__ import annotations

from ...lab.findings import Finding
from ...lab.words import share
from ...measure.sweep import busbw_by_size
from ...measure.units import format_bytes
from ...predict.fitting import USABLE, fit_rows
from ...topology import from_spec

# The lab's emulated machine: 200 MB/s each way per rank and 1 ms a message, so that its sweep shows both ends:
# at 4 KiB a ring step's chunk takes 5 us on the link beside 1 ms of latency, at 64 MiB 84 ms beside it. It runs in
# virtual time with this CPU's work counted as the CPU time it took (compute="cpu", the default): a step's addition
# of its chunk is a few percent of the step's link time, in the numbers and small.
MACHINE = "uniform:0.2:1000"
EMULATED_SIZES = [1 << k for k in range(12, 27, 2)]  # 4 KiB .. 64 MiB: at 1 ms a message the top flattens from 16 MiB
CLIMBS = 10.0  # busbw at the largest size at least 10x that at the smallest: the small ones were latency-bound
FLAT = 0.15  # busbw at the two largest sizes within 15%: the large ones were bandwidth-bound


def microseconds(seconds: float) -> str:
    """``seconds`` in microseconds, the unit the fit's own printout uses ('12.8 us', '1000 us'): three significant
    figures below 1000 us, whole microseconds above, so a 13 us alpha never reads '0.01 ms'."""
    us = seconds * 1e6
    return f"{us:.3g} us" if us < 1000 else f"{us:.0f} us"


def shape(rows: list[dict], algorithm: str = "ring") -> tuple[float, float, int, int]:
    """(busbw climb from the smallest to the largest size, change over the last step of size, smallest, largest)."""
    busbw = busbw_by_size(rows, algorithm)
    sizes = sorted(busbw)
    if len(sizes) < 3:
        raise ValueError(f"need {algorithm} measured at three sizes or more, got {len(sizes)}")
    return busbw[sizes[-1]] / busbw[sizes[0]], busbw[sizes[-1]] / busbw[sizes[-2]] - 1, sizes[0], sizes[-1]


def sizes_lesson(raw: list[dict], emulated: list[dict], nranks: int, machine: str = MACHINE) -> Finding:
    """The ring's busbw over sizes on ``nranks`` ranks of this machine (``raw`` rows) and of the emulated
    ``machine`` (``emulated`` rows, its virtual times in its units: ``ringlab.measure.bench.in_machine_units``, with
    this machine's wall time beside when the rows have it), read back: does busbw climb, does it flatten, what the
    fits recover."""
    topology, _ = from_spec(machine, nranks)
    alpha = topology.channel_latency[list(topology.route(0, 1))].sum()
    bandwidth = topology.channel_rate[0]
    said, conclusions, observed = [], [], []
    for where, rows in (("this machine", raw), ("the emulated machine", emulated)):
        climb, last, lo, hi = shape(rows)
        climbs, flat = climb >= CLIMBS, abs(last) <= FLAT
        fitted = fit_rows(rows, "ring", nranks)
        said.append(
            f"On {where} ({nranks} ranks" + (f", links of {machine.split('@')[0]}, in virtual time" if rows is emulated
                                            else "") + f"): busbw at "
            f"{format_bytes(hi)} was {climb:.0f}x that at {format_bytes(lo)}, " +
            ("so the small messages were latency-bound" if climbs else
             f"less than the {CLIMBS:.0f}x that would show small messages latency-bound") +
            f"; from the second-largest size to the largest it moved {last:+.0%}, " +
            ("so it flattens: the large ones were bandwidth-bound." if flat else
             f"more than the {FLAT:.0%} a flat top allows: it does not flatten within these sizes.") +
            f" The alpha-beta fit: alpha {microseconds(fitted.alpha)}, "
            + (f"{fitted.bandwidth / 1e6:.0f} MB/s" if fitted.bandwidth < float("inf") else "no cost per byte") +
            ", missing its "
            f"worst measurement by {share(fitted.worst_residual)}" + ("" if fitted.usable else " (too loose to use)"
                                                                   if fitted.worst_residual > USABLE else
                                                                   " (no cost per byte: no link to predict with)") +
            (f"; the links: {microseconds(alpha)} and {bandwidth / 1e6:.0f} MB/s." if rows is emulated else "."))
        top = next((r for r in rows if r["algorithm"] == "ring" and r["bytes"] == hi), {})
        if rows is emulated and top.get("wall_time_s"):
            said.append(f"(The {format_bytes(hi)} call took {top['time_s'] * 1e3:.1f} ms on the emulated machine; this "
                        f"machine took {top['wall_time_s'] * 1e3:.1f} ms of wall time to run it, nobody waiting for a "
                        "link.)")
        facts = [f"busbw {'climbs' if climbs else 'does not climb'} with size on {where}",
                 f"busbw {'flattens' if flat else 'does not flatten'} at large sizes on {where}"]
        if rows is emulated:
            recovered = fitted.usable and abs(fitted.bandwidth / bandwidth - 1) <= 0.25
            facts.append(f"the fit {'recovers' if recovered else 'does not recover'} the emulated links' bandwidth")
            conclusions += facts
        else:
            observed += facts + [f"the fit of {where} is {'usable' if fitted.usable else 'too loose to use'}"]
    return Finding(" ".join(said), tuple(conclusions), tuple(observed))
