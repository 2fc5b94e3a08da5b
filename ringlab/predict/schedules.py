"""Pipeline schedules as data: GPipe, 1F1B, interleaved 1F1B and zero-bubble ZB-H1, each built from its dependencies.

A model cut into ``p`` stages (one a device) runs a step as ``m`` micro-batches. Three rules bind every schedule:

- stage s runs micro-batch i's forward (F) after stage s-1 has run it and sent its activations over;
- stage s runs i's backward after stage s+1 has run its backward and sent the gradient back (the last stage:
  after its own forward), and never before its own forward, whose activations it needs;
- a device runs one pass at a time.

A schedule is then only the *order* each stage takes its passes in. :func:`timeline` runs every stage's order as
early as those rules allow, so the makespan, the idle time (the *bubble*) and the micro-batches whose activations a
stage holds at once are counted from the dependencies, not assumed; :func:`check` verifies any timeline against them.
The closed forms below (:func:`bubble_over_ideal`, :func:`peak_in_flight`) are what the papers derive, and the tests
hold the counted timelines to them.

The four orders, with their sources:

- **GPipe** (Huang et al. 2019, "GPipe", arXiv 1811.06965): every forward, then every backward. Idle share of a step
  (p-1)/(m+p-1), i.e. (p-1)/m of the ideal time; each stage holds all m micro-batches' activations.
- **1F1B** (PipeDream-Flush: Narayanan et al. 2021, "Memory-Efficient Pipeline-Parallel DNN Training", ICML;
  Megatron-LM's non-interleaved schedule, Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM", section 2.2.1): stage s runs p-1-s forwards to warm up, then one forward one
  backward, then the remaining backwards. The same time as GPipe, but stage s holds at most p-s micro-batches.
- **interleaved 1F1B** (the Megatron-LM paper, section 2.2.2): each device holds v model chunks, so the model is
  v·p virtual stages and chunk c of device s is virtual stage c·p + s. Each pass is 1/v as long, the fill and drain
  cross the devices v times faster: the bubble is (p-1)/(v·m) of the ideal time (their equation for t_pb^int / t_id),
  for (v+1)p-1 chunk-passes held on the first device, p + (p-1)/v micro-batches' worth. Micro-batches go round in
  groups of p (Megatron-LM's default ``microbatch_group_size_per_vp_stage``), so m must be a multiple of p.
- **ZB-H1** (Qi, Wan, Huang and Lin 2023, "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, section 2.1):
  the backward split into B, the gradient of the stage's input (what the stage before waits for), and W, the
  gradient of its weights (which nobody waits for). Stage s runs 1F1B's F and B order and puts off each W by s
  micro-batches, so W fills the drain. Every stage then holds at most p micro-batches, 1F1B's peak (on its first
  stage), and the bubble shrinks from (p-1)(T_F+T_B+T_W) to (p-1)(T_F+T_B-T_W) a stage (section 2.1; the
  schedules side by side in its Table 2; T_B is B alone): a third of 1F1B's when F, B and W take equal time, as
  with F=1 and a backward of 2 split evenly. (A stage still holds a micro-batch until its W: W needs the
  activations too, if fewer of them, so this counts ZB-H1's memory as the paper bounds it, by 1F1B's.)

Times are in any unit: ``forward`` and ``backward`` are one micro-batch's passes over a whole stage (default 1 and
2: a backward does twice a forward's matrix products), ``weight`` the share of the backward that is W (default half
of it, as the zero-bubble paper takes), ``send`` the time to carry activations or gradients one hop to a
neighbouring device. Nothing here is measured.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from .pipeline import BACKWARD, FORWARD

WEIGHT = "W"
SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero-bubble")
TOLERANCE = 1e-9  # relative: times are sums of floats


class ScheduleError(ValueError):
    """A schedule that breaks a dependency, or whose order can never finish."""


@dataclass(frozen=True)
class Pass:
    """One pass of a timeline: ``kind`` F, B or W, of ``microbatch`` on ``chunk`` of ``stage``, ``start`` to ``end``."""

    kind: str
    microbatch: int
    chunk: int
    stage: int
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """A step's passes, ``passes[stage]`` in the order the stage runs them, with what follows from them."""

    schedule: str
    stages: int
    microbatches: int
    chunks: int
    durations: dict  # kind -> seconds (or units) of one pass over one chunk
    send: float
    passes: tuple

    @property
    def makespan(self) -> float:
        return max((p.end for row in self.passes for p in row), default=0.0)

    @property
    def busy(self) -> float:
        """Stage-time spent computing, summed over the stages."""
        return sum(p.end - p.start for row in self.passes for p in row)

    @property
    def idle(self) -> float:
        """Stage-time spent waiting (the bubble), summed over the stages."""
        return self.stages * self.makespan - self.busy

    @property
    def bubble_fraction(self) -> float:
        """The idle share of the step: idle / (stages x makespan)."""
        return self.idle / (self.stages * self.makespan)

    @property
    def bubble_over_ideal(self) -> float:
        """Idle time over the ideal (busy) time, as Narayanan et al. and the planner count the bubble."""
        return self.idle / self.busy

    @property
    def in_flight(self) -> tuple:
        """Each stage's peak of micro-batches whose activations it holds: from a forward's start to the end of the
        last backward pass that needs them (B, or W where the backward is split), in whole-stage micro-batches
        (a chunk's activations count 1/chunks)."""
        return tuple(_peak(row, WEIGHT if any(p.kind == WEIGHT for p in row) else BACKWARD) / self.chunks
                     for row in self.passes)


def _peak(row, last: str) -> int:
    events = sorted([(round(p.start, 9), 1) for p in row if p.kind == FORWARD]
                    + [(round(p.end, 9), -1) for p in row if p.kind == last])  # rounded: sums of floats meet
    held = peak = 0
    for _, change in events:  # at equal times, -1 sorts first: a pass frees before the next one allocates
        held += change
        peak = max(peak, held)
    return peak


def _whole(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    return value


def _time(name: str, value, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            value <= 0 if positive else value < 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _times(forward, backward, weight, send) -> tuple[float, float, float, float]:
    forward, backward, send = _time("forward", forward), _time("backward", backward), _time("send", send, False)
    weight = backward / 2 if weight is None else _time("weight", weight)
    if weight >= backward:
        raise ValueError(f"weight (the W share of the backward) must be less than backward {backward}, got {weight}")
    return forward, backward, weight, send


# -- the orders ---------------------------------------------------------------------------------------------------

def gpipe_order(stages: int, microbatches: int) -> list[list[tuple[str, int, int]]]:
    """``order[stage]``: ``(kind, microbatch, chunk)`` in GPipe's order: forwards 0..m-1, then backwards m-1..0."""
    _whole("stages", stages), _whole("microbatches", microbatches)
    row = [(FORWARD, i, 0) for i in range(microbatches)] + [(BACKWARD, i, 0) for i in reversed(range(microbatches))]
    return [list(row) for _ in range(stages)]


def one_f_one_b_order(stages: int, microbatches: int) -> list[list[tuple[str, int, int]]]:
    """1F1B: stage s warms up with p-1-s forwards, alternates one forward and one backward, then drains."""
    _whole("stages", stages), _whole("microbatches", microbatches)
    order = []
    for stage in range(stages):
        warmup = min(stages - 1 - stage, microbatches)
        row = [(FORWARD, i, 0) for i in range(warmup)]
        for i in range(microbatches - warmup):
            row += [(FORWARD, warmup + i, 0), (BACKWARD, i, 0)]
        order.append(row + [(BACKWARD, i, 0) for i in range(microbatches - warmup, microbatches)])
    return order


def interleaved_order(stages: int, microbatches: int, chunks: int) -> list[list[tuple[str, int, int]]]:
    """Megatron-LM's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``): micro-batches go round in
    groups of p, forwards through chunks 0..v-1, backwards through v-1..0; stage s warms up with 2(p-1-s) + (v-1)p
    chunk-forwards (all of them when that is more), then alternates one chunk-forward and one chunk-backward."""
    _whole("stages", stages), _whole("microbatches", microbatches), _whole("chunks", chunks)
    if chunks < 2:
        raise ValueError(f"interleaved 1F1B needs chunks (virtual stages a device) >= 2, got {chunks}; "
                         "with one chunk it is 1F1B")
    if microbatches % stages:
        raise ValueError(f"interleaved 1F1B sends micro-batches round in groups of the {stages} stages: "
                         f"microbatches must be a multiple of {stages}, got {microbatches}")
    total = microbatches * chunks

    def nth(k: int, backward: bool) -> tuple[int, int]:  # the k-th chunk-pass a stage runs: (micro-batch, chunk)
        group, chunk = k // (stages * chunks), (k // stages) % chunks
        return group * stages + k % stages, chunks - 1 - chunk if backward else chunk

    order = []
    for stage in range(stages):
        warmup = min(2 * (stages - 1 - stage) + (chunks - 1) * stages, total)
        row = [(FORWARD, *nth(k, False)) for k in range(warmup)]
        for k in range(total - warmup):
            row += [(FORWARD, *nth(warmup + k, False)), (BACKWARD, *nth(k, True))]
        order.append(row + [(BACKWARD, *nth(k, True)) for k in range(total - warmup, total)])
    return order


def zero_bubble_order(stages: int, microbatches: int) -> list[list[tuple[str, int, int]]]:
    """ZB-H1: 1F1B's forwards and input-gradient backwards (B), each weight-gradient pass (W) put off by s
    micro-batches on stage s (W of i right after B of i+s), the rest at the end, filling the drain."""
    order = []
    for stage, row in enumerate(one_f_one_b_order(stages, microbatches)):
        split, done = [], 0
        for kind, i, chunk in row:
            split.append((kind, i, chunk))
            if kind == BACKWARD and i >= stage:
                split.append((WEIGHT, i - stage, chunk))
                done += 1
        order.append(split + [(WEIGHT, i, 0) for i in range(done, microbatches)])
    return order


def order(schedule: str, stages: int, microbatches: int, chunks: int = 1) -> list[list[tuple[str, int, int]]]:
    """The named schedule's order, ``order[stage] = [(kind, microbatch, chunk), ...]``."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if schedule == "interleaved":
        return interleaved_order(stages, microbatches, chunks)
    if _whole("chunks", chunks) != 1:
        raise ValueError(f"{schedule} runs one chunk a stage, got chunks={chunks}; interleaved 1F1B takes more")
    return {"gpipe": gpipe_order, "1f1b": one_f_one_b_order, "zero-bubble": zero_bubble_order}[schedule](
        stages, microbatches)


# -- dependencies and the timeline --------------------------------------------------------------------------------

def dependencies(kind: str, microbatch: int, chunk: int, stage: int, stages: int, chunks: int = 1) -> list[tuple]:
    """The passes ``(kind, microbatch, chunk, stage)`` that must end before this one may start. Chunk c of stage s
    is virtual stage c·p + s of the v·p the model is cut into: a forward follows the virtual stage before, a backward
    the one after (the last: its own forward) and its own forward, W its own B."""
    virtual, last = chunk * stages + stage, chunks * stages - 1

    def at(k: str, v: int) -> tuple:
        return k, microbatch, v // stages, v % stages

    if kind == FORWARD:
        return [at(FORWARD, virtual - 1)] if virtual > 0 else []
    if kind == BACKWARD:
        return [at(FORWARD, virtual)] + ([at(BACKWARD, virtual + 1)] if virtual < last else [])
    if kind == WEIGHT:
        return [at(BACKWARD, virtual)]
    raise ScheduleError(f"unknown pass kind {kind!r}: F, B or W")


def _expected(stages: int, microbatches: int, chunks: int, split: bool) -> set:
    kinds = (FORWARD, BACKWARD, WEIGHT) if split else (FORWARD, BACKWARD)
    return {(k, i, c, s) for k in kinds for i in range(microbatches) for c in range(chunks) for s in range(stages)}


def _name(p: tuple) -> str:
    return f"{p[0]}{p[1]} (stage {p[3]}, chunk {p[2]})"


def _complete(listed: list, expected: set) -> None:
    counts = Counter(listed)
    missing = sorted(expected - set(counts))
    wrong = sorted(p for p, n in counts.items() if n > 1 or p not in expected)
    problems = ([f"missing {', '.join(map(_name, missing[:4]))}"] if missing else []) + (
        [f"repeated or not in this pipeline {', '.join(map(_name, wrong[:4]))}"] if wrong else [])
    if problems:
        raise ScheduleError("each stage must run each of its passes once: " + "; ".join(problems))


def timeline(orders, *, microbatches: int, chunks: int = 1, forward: float = 1.0, backward: float = 2.0,
             weight: float | None = None, send: float = 0.0, schedule: str = "custom") -> Timeline:
    """Run ``orders[stage]`` (lists of ``(kind, microbatch, chunk)``) with each pass starting as soon as its stage is
    free and its :func:`dependencies` have ended (plus ``send`` where one crosses to another device). Where W passes
    appear the backward is split: B takes ``backward - weight``, W ``weight``; passes over a chunk take 1/chunks of a
    stage's. Raises :class:`ScheduleError` if a pass is missing or repeated, or if the stages wait on each other
    for ever (a pass ordered before one it depends on)."""
    stages = len(orders)
    _whole("stages", stages), _whole("microbatches", microbatches), _whole("chunks", chunks)
    forward, backward, weight, send = _times(forward, backward, weight, send)
    split = any(p[0] == WEIGHT for row in orders for p in row)
    durations = {FORWARD: forward / chunks, BACKWARD: (backward - weight if split else backward) / chunks}
    if split:
        durations[WEIGHT] = weight / chunks
    _complete([(k, i, c, s) for s, row in enumerate(orders) for k, i, c in row],
              _expected(stages, microbatches, chunks, split))
    ended: dict[tuple, float] = {}
    free = [0.0] * stages
    nxt = [0] * stages
    rows: list[list[Pass]] = [[] for _ in range(stages)]
    while any(nxt[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while nxt[s] < len(orders[s]):
                kind, i, c = orders[s][nxt[s]]
                needs = dependencies(kind, i, c, s, stages, chunks)
                if any(d not in ended for d in needs):
                    break
                start = max([free[s]] + [ended[d] + (send if d[3] != s else 0.0) for d in needs])
                end = start + durations[kind]
                ended[(kind, i, c, s)] = free[s] = end
                rows[s].append(Pass(kind, i, c, s, start, end))
                nxt[s] += 1
                progressed = True
        if not progressed:
            stuck = ", ".join(f"stage {s} at {orders[s][nxt[s]][0]}{orders[s][nxt[s]][1]}"
                              + (f" (chunk {orders[s][nxt[s]][2]})" if chunks > 1 else "")
                              for s in range(stages) if nxt[s] < len(orders[s]))
            raise ScheduleError(f"the order can never finish: every stage waits on a pass ordered after its own "
                                f"next one ({stuck})")
    result = Timeline(schedule, stages, microbatches, chunks, durations, send, tuple(tuple(r) for r in rows))
    check(result)
    return result


def check(timeline: Timeline) -> None:
    """Raise :class:`ScheduleError` naming the first broken rule: a pass starting before a dependency has ended (and
    been sent), two passes of one stage overlapping, or a pass missing, repeated or of the wrong length."""
    t = timeline
    split = WEIGHT in t.durations
    seen = {(p.kind, p.microbatch, p.chunk, p.stage): p for row in t.passes for p in row}
    _complete([(p.kind, p.microbatch, p.chunk, p.stage) for row in t.passes for p in row],
              _expected(t.stages, t.microbatches, t.chunks, split))
    for row in t.passes:
        for p in row:
            slack = TOLERANCE * max(1.0, abs(p.end))
            if abs((p.end - p.start) - t.durations[p.kind]) > slack:
                raise ScheduleError(f"stage {p.stage}: {p.kind}{p.microbatch} lasts {p.end - p.start:g}, "
                                    f"not {t.durations[p.kind]:g}")
            for d in dependencies(p.kind, p.microbatch, p.chunk, p.stage, t.stages, t.chunks):
                ready = seen[d].end + (t.send if d[3] != p.stage else 0.0)
                if p.start < ready - slack:
                    raise ScheduleError(f"stage {p.stage}: {p.kind}{p.microbatch} (chunk {p.chunk}) starts at "
                                        f"{p.start:g}, before {d[0]}{d[1]} of stage {d[3]} (chunk {d[2]}) "
                                        f"has{' ended and been sent' if d[3] != p.stage else ' ended'} ({ready:g})")
        ordered = sorted(row, key=lambda p: p.start)
        for a, b in zip(ordered, ordered[1:]):
            if b.start < a.end - TOLERANCE * max(1.0, abs(a.end)):
                raise ScheduleError(f"stage {a.stage} runs {a.kind}{a.microbatch} and {b.kind}{b.microbatch} at once")


def schedule_timeline(schedule: str, stages: int, microbatches: int, *, chunks: int = 1, forward: float = 1.0,
                      backward: float = 2.0, weight: float | None = None, send: float = 0.0) -> Timeline:
    """The named schedule (``"gpipe"``, ``"1f1b"``, ``"interleaved"``, ``"zero-bubble"``) run from its dependencies."""
    return timeline(order(schedule, stages, microbatches, chunks), microbatches=microbatches, chunks=chunks,
                    forward=forward, backward=backward, weight=weight, send=send, schedule=schedule)


# -- the closed forms ---------------------------------------------------------------------------------------------

def bubble_over_ideal(schedule: str, stages: int, microbatches: int, *, chunks: int = 1, forward: float = 1.0,
                      backward: float = 2.0, weight: float | None = None) -> float:
    """The papers' bubble, as a share of the ideal time m(F+B) a stage computes (no send time):

    - GPipe and 1F1B: (p-1)/m (GPipe; the Megatron-LM paper, section 2.2.1);
    - interleaved: (p-1)/(v·m) (the Megatron-LM paper, section 2.2.2); ``chunks`` is v, and 1F1B's form with v=1;
    - zero-bubble ZB-H1: (p-1)(T_F+T_B-T_W) over m(T_F+T_B+T_W), with T_B the input-gradient pass, backward - weight
      (Qi et al., section 2.1 and Table 2). That assumes W no longer than F or B; past that, the wait for the first
      B (p-1 B's on the first stage) or the fill (p-1 F's on the last) has no W to fill it, and the bubble is
      (p-1)·max(T_F, T_B) a stage, as the timeline counts. Needs m >= p (the drain holds p-1 W's a stage).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    _whole("stages", stages), _whole("microbatches", microbatches), _whole("chunks", chunks)
    forward, backward, weight, _ = _times(forward, backward, weight, 0.0)
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(f"{schedule} runs one chunk a stage, got chunks={chunks}")
    if schedule == "zero-bubble":
        if microbatches < stages:
            raise ValueError(f"ZB-H1's closed form needs at least as many micro-batches as stages: "
                             f"{microbatches} < {stages}")
        b = backward - weight
        return (stages - 1) * max(forward + b - weight, forward, b) / (microbatches * backward + microbatches * forward)
    return (stages - 1) / (chunks * microbatches)


def bubble_fraction(schedule: str, stages: int, microbatches: int, **times) -> float:
    """The idle share of the step, b / (1 + b) for b = :func:`bubble_over_ideal`: (p-1)/(m+p-1) for GPipe and 1F1B."""
    b = bubble_over_ideal(schedule, stages, microbatches, **times)
    return b / (1 + b)


def peak_in_flight(schedule: str, stages: int, microbatches: int | None = None, chunks: int = 1) -> float:
    """Micro-batches' activations the first stage (the fullest) holds at once, in whole-stage micro-batches: GPipe m;
    1F1B and ZB-H1 p; interleaved ((v+1)p - 1)/v = p + (p-1)/v (Megatron's warm-up of 2(p-1) + (v-1)p chunk-forwards,
    plus the one that starts its first 1F1B pair). With ``microbatches`` given, never more than there are (the
    warm-up stops at m); without it, the steady state of a long step (GPipe then needs m)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    _whole("stages", stages), _whole("chunks", chunks)
    if microbatches is not None:
        _whole("microbatches", microbatches)
    if schedule == "gpipe":
        if microbatches is None:
            raise ValueError("GPipe holds every micro-batch: give microbatches")
        return float(microbatches)
    if schedule == "interleaved":
        if chunks < 2:
            raise ValueError(f"interleaved 1F1B needs chunks >= 2, got {chunks}")
        held = (chunks + 1) * stages - 1
        return (held if microbatches is None else min(held, microbatches * chunks)) / chunks
    if chunks != 1:
        raise ValueError(f"{schedule} runs one chunk a stage, got chunks={chunks}")
    return float(stages if microbatches is None else min(stages, microbatches))
