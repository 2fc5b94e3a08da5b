"""Functions of the step that are constant over runs of steps: the arithmetic of the compact cost model.

A *segment* is ``(key, start, end, value)``: ``key`` (a rank, a pair of ranks, a channel) carries
``value`` (bytes, seconds) at every step ``start <= t < end``. :func:`total` adds up the segments of each
key; :func:`largest` and :func:`largest_with_key` give, for every step, the largest value any segment
covering it has (and whose it is). Both run in time near-linear in the number of segments plus steps,
never segments x steps: that is what lets the cost model price a ring of 100,000 ranks, 200,000 steps
of 100,000 messages each, without looking at a message twice. Where segments x steps is small (a few
dozen steps: trees), :func:`dense_peak` adds them up step by step in one table instead, which needs no sort.
"""
from __future__ import annotations

import numpy as np

DENSE_CELLS = 1 << 20  # the most steps x keys (and segment-steps) dense_peak takes on: 8 MB a table


def by_key_then_time(key: np.ndarray, time: np.ndarray) -> np.ndarray:
    """The order that sorts by key, then time (one sort of one integer where the two fit in 63 bits)."""
    if len(key) == 0:
        return np.zeros(0, dtype=np.int64)
    span = int(time.max()) + 1
    if int(key.max()) < (1 << 62) // span:
        return np.argsort(key * span + time, kind="stable")  # timsort: fast on the runs these often come in
    return np.lexsort((time, key))


def total(key, start, end, value) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segments of each key added up: non-overlapping segments, sorted by key and start, and only where
    the sum is not 0. Integer values add exactly; float sums lose at most a rounding error per segment."""
    order = by_key_then_time(key, start)
    key, start, end, value = key[order], start[order], end[order], value[order]
    if not ((key[1:] == key[:-1]) & (start[1:] < end[:-1])).any():  # no key has two segments at once
        keep = value != 0
        return key[keep], start[keep], end[keep], value[keep]
    ekey, time = np.concatenate([key, key]), np.concatenate([start, end])
    delta = np.concatenate([value, -value])
    order = by_key_then_time(ekey, time)
    ekey, time, delta = ekey[order], time[order], delta[order]
    running = np.cumsum(delta)
    first = np.flatnonzero(np.r_[True, ekey[1:] != ekey[:-1]])  # each key's first event
    before = np.repeat(running[first] - delta[first], np.diff(np.r_[first, len(ekey)]))
    running = running - before  # every key from 0, so that rounding does not carry from key to key
    if running.dtype.kind == "f":
        running[np.abs(running) <= 1e-12 * np.abs(delta).max(initial=0.0)] = 0.0
    keep = (ekey[1:] == ekey[:-1]) & (time[1:] > time[:-1]) & (running[:-1] != 0)
    return ekey[:-1][keep], time[:-1][keep], time[1:][keep], running[:-1][keep]


def _spans(nsteps: int, start, end):
    """Each segment as the two power-of-two blocks that cover it: (level, first block start, second)."""
    level = np.frexp((end - start).astype(np.float64))[1].astype(np.int64) - 1  # floor(log2(length))
    return level, start, end - (np.int64(1) << level)


def _spread(table: np.ndarray, combine) -> np.ndarray:
    """Push every block's value down to the steps it covers: row 0 of the sparse table."""
    nsteps = table.shape[1]
    for level in range(table.shape[0] - 1, 0, -1):
        half = 1 << (level - 1)
        combine(table[level - 1], table[level], out=table[level - 1])
        combine(table[level - 1][half:], table[level][:nsteps - half], out=table[level - 1][half:])
    return table[0]


def _range_min(values: np.ndarray, start, end) -> np.ndarray:
    """For every segment, the smallest of ``values`` over its steps (a sparse table of minima)."""
    levels = [values]
    while (1 << len(levels)) <= len(values):
        half = 1 << (len(levels) - 1)
        levels.append(np.minimum(levels[-1][:-half], levels[-1][half:]))
    level, first, second = _spans(len(values), start, end)
    out = np.empty(len(start))
    for k in np.unique(level).tolist():
        at = level == k
        out[at] = np.minimum(levels[k][first[at]], levels[k][second[at]])
    return out


def largest(nsteps: int, start, end, value) -> np.ndarray:
    """For every step, the largest value of the segments covering it (0 where none does)."""
    if len(start) == 0 or nsteps == 0:
        return np.zeros(nsteps)
    level, first, second = _spans(nsteps, start, end)
    table = np.zeros((int(level.max()) + 1, nsteps))
    flat = table.reshape(-1)
    np.maximum.at(flat, level * nsteps + first, value)
    np.maximum.at(flat, level * nsteps + second, value)
    return _spread(table, np.maximum)


def largest_with_key(nsteps: int, start, end, value, key) -> tuple[np.ndarray, np.ndarray]:
    """For every step, the largest value of the segments covering it and its key, the smallest key among
    equals (as ``argmax`` picks the first); 0 and -1 where no segment covers the step."""
    if len(start) == 0 or nsteps == 0:
        return np.zeros(nsteps), np.full(nsteps, -1, dtype=np.int64)
    top = largest(nsteps, start, end, value)  # a segment can win only where it reaches the top: keep those
    reaching = value >= _range_min(top, start, end)
    start, end, value, key = start[reaching], end[reaching], value[reaching], key[reaching]
    rank = np.lexsort((key, -value))  # the best first: largest value, then smallest key
    priority = np.empty(len(rank), dtype=np.int64)
    priority[rank] = np.arange(len(rank))
    level, first, second = _spans(nsteps, start, end)
    table = np.full((int(level.max()) + 1, nsteps), len(rank), dtype=np.int64)
    flat = table.reshape(-1)
    np.minimum.at(flat, level * nsteps + first, priority)
    np.minimum.at(flat, level * nsteps + second, priority)
    best = _spread(table, np.minimum)
    covered = best < len(rank)
    winner = rank[np.where(covered, best, 0)]
    return np.where(covered, value[winner], 0.0), np.where(covered, key[winner], -1)


def dense_fits(nsteps: int, key: np.ndarray, start: np.ndarray, end: np.ndarray) -> bool:
    """Whether :func:`dense_peak` takes these segments on (its tables within :data:`DENSE_CELLS`)."""
    if len(key) == 0:
        return True
    return nsteps * (int(key.max()) + 1) <= DENSE_CELLS and int((end - start).sum()) <= DENSE_CELLS


def dense_peak(nsteps: int, key, start, end, value, per_key=None) -> tuple[np.ndarray, np.ndarray]:
    """For every step, the largest sum of the segments of one key covering it (divided by ``per_key[key]``,
    where given) and that key, the smallest among equals; 0 and -1 where none covers the step."""
    if len(key) == 0 or nsteps == 0:
        return np.zeros(nsteps), np.full(nsteps, -1, dtype=np.int64)
    present = np.zeros(int(key.max()) + 1, dtype=bool)
    present[key] = True
    keys = np.flatnonzero(present)  # the keys in use, in order, so that argmax picks the smallest
    index = np.cumsum(present) - 1
    length = end - start
    segment = np.repeat(np.arange(len(key)), length)
    step = start[segment] + np.arange(len(segment)) - np.repeat(np.cumsum(length) - length, length)
    table = np.bincount(step * len(keys) + index[key[segment]], weights=value[segment],
                        minlength=nsteps * len(keys)).reshape(nsteps, len(keys))
    if per_key is not None:
        table /= per_key[keys]
    best = table.argmax(axis=1)
    top = table[np.arange(nsteps), best]
    covered = np.bincount(step, minlength=nsteps) > 0
    return np.where(covered, top, 0.0), np.where(covered, keys[best], -1)
