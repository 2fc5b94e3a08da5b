"""Lab 09's pipeline schedules: GPipe, 1F1B, interleaved 1F1B and zero-bubble ZB-H1 run from their dependencies
(``ringlab.predict.schedules``), their bubbles and the micro-batches a stage holds beside the papers' closed forms;
the exercise on reading the bubble off a timeline."""
from __future__ import annotations

from ...lab.exercises import NotDoneYet, exercise
from ...lab.findings import Finding
from ...lab.words import and_join

STAGES, MICROBATCHES, CHUNKS = 4, 8, 2
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero-bubble")
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B", "zero-bubble": "ZB-H1"}
TIE = 1e-9  # relative: counted times are sums of floats


def schedule_rows(stages: int = STAGES, microbatches: int = MICROBATCHES, chunks: int = CHUNKS,
                  schedules=SCHEDULES) -> list[dict]:
    """Each schedule's timeline (F = 1, B = 2, ZB-H1's W half of B) with what it counts: the step, the bubble over the
    ideal time and as a share of the step, the micro-batches the first stage holds; and the papers' closed forms."""
    from ...predict.schedules import bubble_over_ideal, peak_in_flight, schedule_timeline

    rows = []
    for name in schedules:
        v = chunks if name == "interleaved" else 1
        timeline = schedule_timeline(name, stages, microbatches, chunks=v)
        rows.append({"schedule": name, "name": NAMES[name], "stages": stages, "microbatches": microbatches,
                     "chunks": v, "timeline": timeline, "makespan": timeline.makespan,
                     "bubble": timeline.bubble_over_ideal, "fraction": timeline.bubble_fraction,
                     "held": max(timeline.in_flight),
                     "closed_bubble": bubble_over_ideal(name, stages, microbatches, chunks=v),
                     "closed_held": peak_in_flight(name, stages, microbatches, chunks=v)})
    return rows


SCHEDULE_COLUMNS = {"schedule": "name", "step (F = 1)": ("makespan", ".2f"),
                    "bubble / ideal, counted": ("bubble", ".1%"), "closed form": ("closed_bubble", ".1%"),
                    "bubble, share of the step": ("fraction", ".1%"),
                    "micro-batches held, counted": ("held", ".2f"), "closed form ": ("closed_held", ".2f")}


def _least(rows: list[dict], key: str) -> list[dict]:
    best = min(r[key] for r in rows)
    return [r for r in rows if r[key] <= best * (1 + TIE) + TIE]


def pipeline_lesson(rows: list[dict]) -> Finding:
    """Which schedule idles least and which holds least (ties named together), and whether the counted timelines
    agree with the closed forms."""
    p, m = rows[0]["stages"], rows[0]["microbatches"]
    said = [f"{p} stages, {m} micro-batches, a backward twice a forward: "
            + "; ".join(f"{r['name']} idles {r['bubble']:.1%} of the ideal time ({r['fraction']:.1%} of its step) and "
                        f"holds {r['held']:g} micro-batches on its fullest stage" for r in rows) + "."]
    bubble, held = _least(rows, "bubble"), _least(rows, "held")
    names = lambda rs: and_join(r["name"] for r in rs)
    said.append(f"Least bubble: {names(bubble)}" + (" (a tie)" if len(bubble) > 1 else "")
                + f"; least memory: {names(held)}" + (" (a tie)" if len(held) > 1 else "") + ".")
    most = max(rows, key=lambda r: r["held"])
    same_time = [r for r in rows if abs(r["makespan"] - most["makespan"]) <= TIE * most["makespan"] and r is not most]
    if same_time:
        said.append(f"{names(same_time)} take{'s' if len(same_time) == 1 else ''} as long as {most['name']} but "
                    f"hold{'s' if len(same_time) == 1 else ''} {min(r['held'] for r in same_time):g} micro-batches "
                    f"against its {most['held']:g}: the order of the same passes saves the memory.")
    match = all(abs(r["bubble"] - r["closed_bubble"]) <= TIE and abs(r["held"] - r["closed_held"]) <= TIE for r in rows)
    said.append("Every counted bubble and peak equals the papers' closed forms." if match else
                "Some counted values differ from the closed forms: " + and_join(
                    r["name"] for r in rows if abs(r["bubble"] - r["closed_bubble"]) > TIE
                    or abs(r["held"] - r["closed_held"]) > TIE) + ".")
    conclusions = (f"{names(bubble)} {'idle' if len(bubble) > 1 else 'idles'} least",
                   f"{names(held)} {'hold' if len(held) > 1 else 'holds'} the fewest micro-batches",
                   "the counted timelines match the closed forms" if match else
                   "the counted timelines differ from the closed forms")
    return Finding(" ".join(said), conclusions)


def _bubble(timeline):
    return timeline.bubble_over_ideal


@exercise(_bubble, "timeline_bubble")
def check_timeline_bubble(timeline_bubble):
    """Compare the learner's ``timeline_bubble(timeline)`` with the timeline's own count, on every schedule and several sizes."""
    from ...predict.schedules import schedule_timeline

    for name, p, m, v in (("1f1b", 4, 8, 1), ("gpipe", 3, 5, 1), ("interleaved", 4, 8, 2), ("zero-bubble", 4, 8, 1),
                          ("1f1b", 2, 2, 1)):
        timeline = schedule_timeline(name, p, m, chunks=v)
        got = timeline_bubble(timeline)
        if got is None:
            raise NotDoneYet("timeline_bubble returned None")
        want = timeline.bubble_over_ideal
        if isinstance(got, bool) or not isinstance(got, (int, float)) or abs(got - want) > 1e-9 * max(1, want):
            raise AssertionError(
                f"timeline_bubble of {NAMES[name]} at p = {p}, m = {m}{f', v = {v}' if v > 1 else ''} returned {got!r}; "
                f"expected {want:.6g}.\nHint: each stage is busy for the sum of its passes' (end - start) and idle for "
                "the rest of timeline.makespan; add the idle time of every stage and divide by the busy time of every "
                "stage.")
    print("Correct: your timeline_bubble is the timeline's, on every schedule.")
