"""The reference simulator: one process plays every rank of a schedule, step by step.

It tracks *provenance*, the set of ranks whose inputs each rank's copy of each chunk contains,
and so can say exactly what is wrong with a schedule: a rank sending a chunk it does not hold, a
contribution counted twice, two transfers writing one chunk at once, or an end state that is not
what the collective promises. :func:`check` does that without data; :func:`simulate` also moves
real numbers; :func:`traffic` counts the bytes.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .schedule import MAX_BYTES, Schedule, check_count, chunk_bounds

Provenance = frozenset  # the ranks whose inputs a chunk contains


class ScheduleError(ValueError):
    """A schedule that does not do what its collective promises; ``step``, ``rank`` and ``chunk`` say where.

    ``step`` is ``None`` when the end condition fails (after the last step). ``provenance`` holds
    the provenance before each step that did complete (as :func:`check` returns it), so a viewer can
    show everything up to the mistake.
    """

    def __init__(self, message: str, step: int | None, rank: int, chunk: int, provenance=()):
        super().__init__(message)
        self.step, self.rank, self.chunk, self.provenance = step, rank, chunk, tuple(provenance)


def provenance_str(ranks: frozenset[int], nranks: int | None = None) -> str:
    """Provenance as learners read it: ``r0+r1+r2``; long runs shortened to ``r0..r7``; ``-`` for nothing."""
    if not ranks:
        return "-"
    ordered, parts, i = sorted(ranks), [], 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 4:  # five or more in a row
            parts.append(f"r{ordered[i]}..r{ordered[j]}")
        else:
            parts.extend(f"r{r}" for r in ordered[i:j + 1])
        i = j + 1
    return "+".join(parts)


def check(schedule: Schedule) -> tuple[tuple[tuple[Provenance, ...], ...], ...]:
    """Validate ``schedule`` by provenance alone; return the provenance before and after every step.

    ``result[s][rank][chunk]`` is the set of ranks whose inputs ``rank`` holds in ``chunk``
    after ``s`` steps (``result[0]`` is the start). Raises :class:`ScheduleError` naming the
    step, rank and chunk of the first mistake.
    """
    cached = schedule.__dict__.get("_provenance")
    if cached is not None:
        return cached
    coll = schedule.collective
    state = [list(row) for row in coll.start_table()]
    history = [tuple(tuple(row) for row in state)]
    try:
        _walk(schedule, state, history)
    except ScheduleError as err:
        err.provenance = tuple(history)
        raise
    result = tuple(history)
    schedule.__dict__["_provenance"] = result  # a schedule is immutable: check it once
    return result


def _walk(schedule: Schedule, state: list, history: list) -> None:
    """Apply every step to ``state``, appending to ``history``; raise at the first mistake."""
    coll = schedule.collective
    for index, step in enumerate(schedule.steps):
        payloads = []
        for t in step:  # every transfer reads the state the previous step left
            held = state[t.src][t.chunk]
            if not held:
                raise ScheduleError(f"step {index}: rank {t.src} sends chunk {t.chunk} to rank {t.dst}, "
                                    f"but rank {t.src} holds no data for chunk {t.chunk} yet",
                                    index, t.src, t.chunk)
            payloads.append((t, held))
        writes: dict[tuple[int, int], str] = {}
        for t, held in payloads:
            where = (t.dst, t.chunk)
            before = writes.get(where)
            if before is not None and (before == "copy" or t.op == "copy"):
                raise ScheduleError(f"step {index}: rank {t.dst} receives chunk {t.chunk} twice in one step "
                                    f"and at least one transfer replaces it; which one wins is undefined",
                                    index, t.dst, t.chunk)
            writes[where] = t.op
            mine = state[t.dst][t.chunk]
            if t.op == "reduce":
                if not mine:
                    raise ScheduleError(f"step {index}: rank {t.src} sends chunk {t.chunk} to rank {t.dst} to add "
                                        f"in, but rank {t.dst} holds no data for chunk {t.chunk} to add it to "
                                        f"(use 'copy')", index, t.dst, t.chunk)
                twice = mine & held
                if twice:
                    raise ScheduleError(f"step {index}: rank {t.src} adds {provenance_str(twice)}'s data to chunk "
                                        f"{t.chunk} on rank {t.dst} a second time (rank {t.dst} holds "
                                        f"{provenance_str(mine)}, rank {t.src} sends {provenance_str(held)})",
                                        index, t.dst, t.chunk)
                state[t.dst][t.chunk] = mine | held
            else:
                state[t.dst][t.chunk] = held
        history.append(tuple(tuple(row) for row in state))
    for rank in range(coll.nranks):
        for chunk in range(coll.nchunks):
            need, have = coll.end(rank, chunk), state[rank][chunk]
            if need is not None and have != need:
                raise ScheduleError(f"after the last step (step {len(schedule.steps) - 1}) rank {rank} holds "
                                    f"{provenance_str(have)} in chunk {chunk}, but {coll.kind} needs "
                                    f"{provenance_str(need)} there", None, rank, chunk)


class Simulation(Sequence):
    """What :func:`simulate` returns: a sequence of one output array per rank, plus ``provenance``.

    ``provenance[s][rank][chunk]`` is the set of ranks whose inputs that chunk holds after ``s``
    steps (``provenance[0]`` is the start, ``provenance[-1]`` the end).
    """

    def __init__(self, schedule: Schedule, outputs: list[np.ndarray], provenance):
        self.schedule, self.outputs, self.provenance = schedule, outputs, provenance

    def __getitem__(self, rank):
        return self.outputs[rank]

    def __len__(self) -> int:
        return len(self.outputs)

    def __repr__(self) -> str:
        return f"Simulation({self.schedule.name!r}, {len(self.outputs)} ranks, {len(self.schedule.steps)} steps)"


def _check_inputs(schedule: Schedule, inputs) -> list[np.ndarray]:
    arrays = [np.asarray(x) for x in inputs]
    if len(arrays) != schedule.nranks:
        raise ValueError(f"{schedule.name} runs on {schedule.nranks} ranks, but got {len(arrays)} input arrays")
    first = arrays[0] if arrays else None
    for rank, array in enumerate(arrays):
        if array.shape != first.shape:
            raise ValueError(f"inputs differ in shape: rank 0 has {first.shape}, rank {rank} has {array.shape}")
        if array.dtype != first.dtype:
            raise ValueError(f"inputs differ in dtype: rank 0 has {first.dtype}, rank {rank} has {array.dtype}")
    if first is not None and first.dtype.kind not in "biufc":
        raise ValueError(f"inputs must be numeric arrays, got dtype {first.dtype}")
    if first is not None and first.dtype.kind == "b" and any(op == "reduce" for step in schedule.steps for op in step.op):
        raise ValueError("inputs hold booleans, which have no sum (True + True is not 2 in a bool array): cast "
                         "them to an integer type")
    return arrays


def simulate(schedule: Schedule, inputs) -> Simulation:
    """Run ``schedule`` on ``inputs`` (one numpy array per rank) in this process.

    Returns one output array per rank (same shape and dtype; sums are computed in that dtype,
    in the order the schedule adds them) with the provenance of every step. The schedule is
    validated first (see :func:`check`); inputs of different shape or dtype raise ValueError.
    Ranks that the collective leaves undefined (non-roots of a reduce) keep whatever partial
    values the schedule left there.
    """
    arrays = _check_inputs(schedule, inputs)
    provenance = check(schedule)
    shape = arrays[0].shape
    buffers = [np.array(a, copy=True).reshape(-1) for a in arrays]
    bounds = chunk_bounds(buffers[0].size, schedule.nchunks)
    for step in schedule.steps:
        payloads = [(t, buffers[t.src][bounds[t.chunk]:bounds[t.chunk + 1]].copy()) for t in step]
        for t, data in payloads:
            target = buffers[t.dst][bounds[t.chunk]:bounds[t.chunk + 1]]
            if t.op == "reduce":
                target += data
            else:
                target[...] = data
    return Simulation(schedule, [b.reshape(shape) for b in buffers], provenance)


def traffic(schedule: Schedule, nbytes: int, itemsize: int = 1) -> dict[str, list[int]]:
    """Bytes each rank sends and receives when ``schedule`` runs on a buffer of ``nbytes`` per rank.

    Chunks are cut on element boundaries of ``itemsize`` bytes (numpy.array_split's rule), so
    pass the dtype's itemsize to count exactly what an array of that dtype would move.
    """
    steps = traffic_by_step(schedule, nbytes, itemsize)
    return {"sent": steps["sent"].sum(axis=0).tolist(), "received": steps["received"].sum(axis=0).tolist()}


def traffic_by_step(schedule: Schedule, nbytes: int, itemsize: int = 1) -> dict[str, np.ndarray]:
    """Like :func:`traffic`, step by step: arrays ``[step, rank]`` of bytes sent and received."""
    nbytes = check_count("nbytes", nbytes, minimum=0, maximum=MAX_BYTES)
    itemsize = check_count("itemsize", itemsize)
    if nbytes % itemsize:
        raise ValueError(f"nbytes={nbytes} is not a whole number of {itemsize}-byte elements")
    chunk_bytes = np.diff(chunk_bounds(nbytes // itemsize, schedule.nchunks)) * itemsize
    sent = np.zeros((len(schedule.steps), schedule.nranks), dtype=np.int64)
    received = np.zeros_like(sent)
    for index, step in enumerate(schedule.steps):
        sizes = chunk_bytes[step.chunk]
        np.add.at(sent[index], step.src, sizes)
        np.add.at(received[index], step.dst, sizes)
    return {"sent": sent, "received": received}
