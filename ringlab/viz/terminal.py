"""A terminal walk-through of one schedule (``ringlab demo``): who sends which chunk to whom, and what
everyone holds."""
from __future__ import annotations

from itertools import groupby

from ..algorithms import about as algorithm_about
from ..schedule import REDUCE, Schedule, Step, chunk_runs
from ..simulate import check, provenance_str, traffic
from ..measure.units import format_bytes

LEGEND = ("Each cell is whose inputs that rank's copy of the chunk holds: r0+r1 means rank 0's plus "
          "rank 1's;\n'-' means no data yet; '*' marks what changed in the step.")


def _chunk_list(chunks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"chunks 0..2, 5"``."""
    runs = [str(first) if first == last else f"{first}..{last}" for first, last in chunk_runs(chunks)]
    return ("chunk " if len(chunks) == 1 else "chunks ") + ", ".join(runs)


def transfer_lines(step: Step) -> list[str]:
    """One line per (sender, receiver, operation), listing the chunks it moves."""
    lines = []
    for (src, dst, op), group in groupby(step, key=lambda t: (t.src, t.dst, t.op)):
        what = "adds into" if op == REDUCE else "replaces"
        chunks = sorted(t.chunk for t in group)
        lines.append(f"  rank {src:>2} -> rank {dst:>2}   {_chunk_list(chunks):<14} ({what} rank {dst}'s copy)")
    return lines


def provenance_table(provenance, before=None, width: int = 0) -> list[str]:
    """A rank-by-chunk table of provenance; cells that differ from ``before`` get a '*'."""
    nranks, nchunks = len(provenance), len(provenance[0])
    cells = [[("*" if before is not None and before[r][c] != provenance[r][c] else " ") + provenance_str(provenance[r][c])
              for c in range(nchunks)] for r in range(nranks)]
    width = max(width, max(len(cell) for row in cells for cell in row), len(f"chunk {nchunks - 1}") + 1)
    header = "           " + " ".join(f" chunk {c}".ljust(width) for c in range(nchunks))
    rows = [f"  rank {r:>2}  " + " ".join(cell.ljust(width) for cell in cells[r]) for r in range(nranks)]
    return [header.rstrip()] + [row.rstrip() for row in rows]


def traffic_lines(schedule: Schedule, nbytes: int) -> list[str]:
    """Bytes each rank sends and receives, and as a multiple of the buffer size K."""
    counts = traffic(schedule, nbytes)
    lines = [f"Traffic for a buffer of K = {format_bytes(nbytes)} ({nbytes:,} bytes) on every rank:",
             f"  {'rank':>7}  {'sent':>12}  {'received':>12}   {'sent/K':>7}  {'received/K':>10}"]
    for rank, (sent, received) in enumerate(zip(counts["sent"], counts["received"])):
        ratio = (lambda b: f"{b / nbytes:.3f}") if nbytes else (lambda b: "-")
        lines.append(f"  {rank:>7}  {format_bytes(sent):>12}  {format_bytes(received):>12}   "
                     f"{ratio(sent):>7}  {ratio(received):>10}")
    total = sum(counts["sent"])
    lines.append(f"  {'total':>7}  {format_bytes(total):>12}  {format_bytes(total):>12}")
    return lines


def walkthrough(schedule: Schedule, nbytes: int = 1 << 20) -> str:
    """The whole story of ``schedule`` as text: every step's transfers and everyone's provenance after it."""
    history = check(schedule)  # raises ScheduleError, naming step, rank and chunk, on a wrong schedule
    coll = schedule.collective
    opts = "".join(f", {k}={v}" for k, v in schedule.options.items())
    out = [f"{schedule.name} ({coll.kind}{opts}) on {coll.nranks} ranks: the buffer is cut into "
           f"{coll.nchunks} chunk{'s' * (coll.nchunks != 1)}; {len(schedule.steps)} steps, "
           f"{schedule.num_transfers} transfers."]
    about = algorithm_about(schedule.name)
    if about:
        out += ["", *("  " + line for line in about.splitlines())]
    width = 1 + max(len(provenance_str(h)) for state in history for row in state for h in row)
    out += ["", LEGEND, "", "Start:", *provenance_table(history[0], width=width)]
    phase_step, labels = 0, [step.label for step in schedule.steps]
    for index, step in enumerate(schedule.steps):
        phase_step = phase_step + 1 if index and step.label == labels[index - 1] else 0
        numbered = f", i={phase_step}" if labels.count(step.label) > 1 else ""  # i as in the textbook formulas
        label = f" ({step.label}{numbered})" if step.label else ""
        out += ["", f"Step {index}{label}: {len(step)} transfer{'s' * (len(step) != 1)} at once",
                *transfer_lines(step), "  Afterwards:",
                *provenance_table(history[index + 1], history[index], width=width)]
    out += ["", f"Checked: the end state is what {coll.kind} promises.", "", *traffic_lines(schedule, nbytes)]
    return "\n".join(out)
