"""Compact steps: a schedule's transfers as *terms*, each a run of steps on which one rank sends another
a chunk, or a run of consecutive chunks, that moves on by a fixed stride from one step to the next.

A term ``(src, dst, t0, t1, c0, stride, width, op)`` stands for the transfers ``(src, dst, c0 + stride *
(t - t0) + k, op)``, k = 0 .. width-1, at every step t0 <= t < t1. A ring allreduce over n ranks is 4n
terms where its transfers are 2n(n-1): the cost model prices terms without making a transfer
(``ringlab.predict.compact``), and :class:`PatternSteps` makes a step's transfers when the simulator,
the executor or a widget asks for that step. A builder collects its terms in a :class:`Pattern`.
"""
from __future__ import annotations

import bisect
import os
from collections import OrderedDict

import numpy as np

from ..schedule import COPY, OP_DTYPE, REDUCE, LazySteps, Step

COLUMNS = ("src", "dst", "t0", "t1", "c0", "stride", "width", "order")
CACHED_TRANSFERS = 1 << 18  # a schedule this small keeps every step it has made; a bigger one its last few
TERM_BYTES = 8 * (len(COLUMNS) + 1) * 3  # one term's columns, and the copies made while building them


class Pattern:
    """The terms a builder collects (:meth:`add`, :meth:`rotating`) and its step labels; :meth:`steps`
    makes them the schedule's steps."""

    def __init__(self, nranks: int, nchunks: int):
        self.nranks, self.nchunks = nranks, nchunks
        self._parts: list[dict] = []
        self._labels: list[tuple[int, str, int]] = []

    def add(self, src, dst, t0, t1, c0, op: str, stride=0, width=1, order=0) -> None:
        """Terms (arrays broadcast): ``src`` sends ``dst`` chunks ``c0 + stride*(t - t0)`` .. ``+ width-1``
        at every step ``t0 <= t < t1``; empty runs are left out. Within a step, transfers come in ``order``."""
        if op not in (REDUCE, COPY):
            raise ValueError(f"op must be 'reduce' or 'copy', not {op!r}")
        columns = np.broadcast_arrays(*(np.asarray(v, dtype=np.int64) for v in (src, dst, t0, t1, c0, stride,
                                                                                  width, order)))
        part = {name: np.ascontiguousarray(column).reshape(-1) for name, column in zip(COLUMNS, columns)}
        keep = part["t1"] > part["t0"]
        if not keep.all():
            part = {name: column[keep] for name, column in part.items()}
        part["reduce"] = np.full(len(part["src"]), op == REDUCE)
        self._parts.append(part)

    def rotating(self, src, dst, t0, t1, index, period, op: str, base=0, scale=1, direction: int = -1, width=1,
                 order=0) -> None:
        """Terms whose first chunk at step t is ``base + scale * ((index + direction * (t - t0)) mod period)``
        (a ring's rule), over at most ``period`` steps: split in two where the index wraps round."""
        src, dst, t0, t1, index, period, base, scale, width, order = np.broadcast_arrays(
            *(np.asarray(v, dtype=np.int64) for v in (src, dst, t0, t1, index, period, base, scale, width, order)))
        if ((t1 - t0) > period).any():
            raise ValueError("a rotating term covers at most one period of steps")
        index = index % period
        split = np.minimum(t0 + (index + 1 if direction < 0 else period - index), t1)
        self.add(src, dst, t0, split, base + scale * index, op, scale * direction, width, order)
        wrapped = period - 1 if direction < 0 else np.zeros_like(period)
        self.add(src, dst, split, t1, base + scale * wrapped, op, scale * direction, width, order)

    def label(self, step: int, text: str, number_from: int | None = None) -> None:
        """Steps from ``step`` on are labelled ``text`` (until the next label); with ``number_from``, ``{i}`` in
        the text counts the steps from that number."""
        self._labels.append((int(step), text, number_from))

    def steps(self, nsteps: int | None = None) -> "PatternSteps":
        """The steps these terms make (``nsteps``: as many as the last term reaches)."""
        terms = {name: np.concatenate([p[name] for p in self._parts]) if self._parts else
                 np.zeros(0, dtype=bool if name == "reduce" else np.int64) for name in COLUMNS + ("reduce",)}
        last = int(terms["t1"].max()) if len(terms["t1"]) else 0
        return PatternSteps(terms, last if nsteps is None else nsteps, sorted(self._labels, key=lambda r: r[0]),
                            self.nranks, self.nchunks)


class PatternSteps(LazySteps):
    """A schedule's steps, made from its terms on demand: ``steps[i]`` is a :class:`~ringlab.schedule.Step`,
    ``steps.terms`` the columns the cost model reads. Steps that no term reaches are left out, as a
    builder's empty steps always were."""

    def __init__(self, terms: dict, nsteps: int, labels, nranks: int, nchunks: int):
        order = np.argsort(terms["order"], kind="stable")  # a step's transfers come in term order
        self.terms = {name: column[order] for name, column in terms.items()}
        for column in self.terms.values():
            column.flags.writeable = False
        self.nranks, self.nchunks, self._labels = nranks, nchunks, list(labels)
        self._starts = [r[0] for r in self._labels]
        self._check()
        active = np.cumsum(np.bincount(self.terms["t0"], minlength=nsteps + 1)[:nsteps + 1]
                           - np.bincount(self.terms["t1"], minlength=nsteps + 1)[:nsteps + 1])[:nsteps]
        self.kept = None if (active > 0).all() else np.flatnonzero(active > 0)  # made steps -> term steps
        self.nsteps = nsteps  # steps in the terms' numbering, empty ones included
        self._cache: OrderedDict = OrderedDict()

    def _check(self) -> None:
        t = self.terms
        n, k = self.nranks, self.nchunks
        if len(t["src"]) == 0:
            return
        for name in ("src", "dst"):
            if t[name].min() < 0 or t[name].max() >= n:
                raise ValueError(f"a term names a rank outside 0..{n - 1}")
        if (t["src"] == t["dst"]).any():
            raise ValueError(f"rank {int(t['src'][t['src'] == t['dst']][0])} sends to itself")
        last = t["c0"] + t["stride"] * (t["t1"] - 1 - t["t0"])
        if np.minimum(t["c0"], last).min() < 0 or (np.maximum(t["c0"], last) + t["width"]).max() > k:
            raise ValueError(f"a term names a chunk outside 0..{k - 1}")
        if t["t0"].min() < 0 or (t["width"] < 1).any():
            raise ValueError("terms start at step 0 or later and move at least one chunk")
        if ((t["stride"] != 0) & (np.abs(t["stride"]) < t["width"])).any():
            raise ValueError("a moving run of chunks must move by at least its width each step")

    def __len__(self) -> int:
        return self.nsteps if self.kept is None else len(self.kept)

    @property
    def num_transfers(self) -> int:
        t = self.terms
        return int(((t["t1"] - t["t0"]) * t["width"]).sum())

    def label(self, step: int) -> str:
        """The label of step ``step`` in the terms' numbering."""
        at = bisect.bisect_right(self._starts, step) - 1
        if at < 0:
            return ""
        start, text, number_from = self._labels[at]
        return text if number_from is None else text.format(i=step - start + number_from)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        size = len(self)
        if not -size <= index < size:
            raise IndexError(f"step {index} of a schedule of {size} steps")
        index = int(index) % size
        step = self._cache.get(index)
        if step is None:
            step = self._make(index if self.kept is None else int(self.kept[index]))
            self._cache[index] = step
            if self.num_transfers > CACHED_TRANSFERS and len(self._cache) > 4:
                self._cache.popitem(last=False)
        return step

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def _make(self, t: int) -> Step:
        terms = self.terms
        at = np.flatnonzero((terms["t0"] <= t) & (t < terms["t1"]))
        first = terms["c0"][at] + terms["stride"][at] * (t - terms["t0"][at])
        width = terms["width"][at]
        src, dst, reduce = terms["src"][at], terms["dst"][at], terms["reduce"][at]
        if (width != 1).any():
            src, dst, reduce = (np.repeat(column, width) for column in (src, dst, reduce))
            offsets = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width)
            first = np.repeat(first, width) + offsets
        op = np.where(reduce, REDUCE, COPY).astype(OP_DTYPE)
        return Step(src=src, dst=dst, chunk=first, op=op, label=self.label(t))

    def __eq__(self, other) -> bool:
        if not isinstance(other, (tuple, list, LazySteps)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __getstate__(self):
        return {**self.__dict__, "_cache": OrderedDict()}

    def __repr__(self) -> str:
        return f"PatternSteps({len(self)} steps from {len(self.terms['src'])} terms, {self.num_transfers} transfers)"


def free_memory() -> int:
    """Bytes this machine can still give a process (MemAvailable), or a large number where it cannot say."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


class NotEnoughMemory(MemoryError):
    """What was asked for would need more memory than this machine has free."""


def check_fits(nbytes: float, what: str, way_out: str) -> None:
    """Raise :class:`NotEnoughMemory` before ``what`` needs ``nbytes`` when this machine has less free,
    naming both sizes and ``way_out``."""
    free = free_memory()
    if nbytes > free:
        raise NotEnoughMemory(f"{what} would need about {_size(nbytes)} of memory; this machine has {_size(free)} "
                              f"free. {way_out}")


def _size(nbytes: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes / 1e3:.3g} kB"


__all__ = ["Pattern", "PatternSteps", "check_fits", "free_memory", "NotEnoughMemory", "TERM_BYTES"]
