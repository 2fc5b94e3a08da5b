"""The schedule model: a collective is data.

A :class:`Schedule` is an ordered tuple of :class:`Step`; a step is a set of chunk
:class:`Transfer` s that happen at the same time; a transfer moves one chunk of a rank's buffer
to another rank, which either adds it to its own copy of that chunk (``"reduce"``) or replaces
its copy (``"copy"``). A schedule also carries its :class:`Collective`: who holds input at the
start and who must hold what at the end, stated as *provenance* (the set of ranks whose inputs
a chunk contains). The simulator, the MPI executor, the cost model and the widgets all read the
same schedule.

Steps keep their transfers as small read-only integer arrays rather than Python objects, so a
ring over thousands of ranks stays cheap; iterating a step still yields plain ``Transfer`` tuples.
The registered algorithms go further: their steps are :class:`LazySteps`, made from a compact
description when asked for (``ringlab.algorithms.pattern``), so a schedule over 100,000 ranks is built
in a moment and a step's transfers exist only while something reads them.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

REDUCE = "reduce"  # the receiver adds the chunk into its own copy
COPY = "copy"      # the receiver replaces its copy with the chunk
OPS = (REDUCE, COPY)

COLLECTIVES = ("reduce", "broadcast", "allreduce", "reduce_scatter", "allgather", "gather", "scatter", "alltoall")

ROOTED = ("reduce", "broadcast", "gather", "scatter")                  # collectives with a root
OWNED = ("reduce_scatter", "allgather", "gather", "scatter")           # collectives whose chunks have owners

# nccl-tests' bus bandwidth: busbw = algbw x factor, what each rank's link carries relative to the size,
# algbw = size / time. The size (src/*.cu, *GetBw) is count*typesize for allreduce, reduce and broadcast:
# the buffer; count*typesize*nranks for the rest: the n-block buffer (reduce_scatter's input, allgather's
# output, gather's root output, scatter's root input, one rank's alltoall send buffer). A ringlab schedule's
# buffer is that size for every collective except alltoall, whose buffer holds n x n blocks: n times it.
# sendrecv (each rank sends its count*typesize to the next and receives as much from the one before) is 1.
BUS_FACTORS = {"allreduce": "2(n-1)/n", "reduce_scatter": "(n-1)/n", "allgather": "(n-1)/n", "reduce": "1",
               "broadcast": "1", "gather": "(n-1)/n", "scatter": "(n-1)/n", "alltoall": "(n-1)/n",
               "sendrecv": "1"}


def bus_factor(kind: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw for collective ``kind`` on ``nranks`` ranks (:data:`BUS_FACTORS`)."""
    if kind not in BUS_FACTORS:
        raise ValueError(f"no bus factor for {kind!r}; known: {', '.join(BUS_FACTORS)}")
    n = check_count("nranks", nranks)
    return {"2(n-1)/n": 2 * (n - 1) / n, "(n-1)/n": (n - 1) / n, "1": 1.0}[BUS_FACTORS[kind]]


def nccl_tests_size(kind: str, nranks: int, nbytes: int) -> float:
    """The size nccl-tests reports (its algbw = size / time) for a ringlab schedule of ``kind`` over a
    buffer of ``nbytes``: ``nbytes`` itself, except alltoall, whose schedule buffer is n x one rank's."""
    return nbytes / check_count("nranks", nranks) if kind == "alltoall" else float(nbytes)


def chunk_bounds(count: int, nchunks: int) -> np.ndarray:
    """Offsets of ``nchunks`` near-equal contiguous slices of ``count`` elements (numpy.array_split's rule).

    The first ``count % nchunks`` chunks get one element more; when ``count < nchunks`` the last
    chunks are empty. Chunk ``c`` is ``buffer[bounds[c]:bounds[c + 1]]``.
    """
    if count < 0 or nchunks < 1:
        raise ValueError(f"need count >= 0 and nchunks >= 1, got count={count}, nchunks={nchunks}")
    quotient, extra = divmod(count, nchunks)
    sizes = np.full(nchunks, quotient, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate(([0], np.cumsum(sizes)))


def chunk_runs(chunks) -> list[tuple[int, int]]:
    """Consecutive chunk indices grouped into runs: ``[0, 1, 2, 5]`` -> ``[(0, 2), (5, 5)]`` (sorted first)."""
    runs: list[tuple[int, int]] = []
    for chunk in sorted(int(c) for c in chunks):
        if runs and chunk == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], chunk)
        else:
            runs.append((chunk, chunk))
    return runs


class Transfer(NamedTuple):
    """One chunk moving from ``src`` to ``dst``: ``op`` is ``"reduce"`` (add in) or ``"copy"`` (replace)."""

    src: int
    dst: int
    chunk: int
    op: str = REDUCE


def _readonly(values, dtype) -> np.ndarray:
    array = np.array(values, dtype=dtype, copy=True).reshape(-1)
    array.flags.writeable = False
    return array


OP_DTYPE = np.dtype("<U6")  # "reduce" or "copy"


@dataclass(frozen=True, eq=False)
class Step:
    """Transfers that happen at the same time; they all read the state left by the previous step.

    Build one from transfers with :meth:`of`, or from columns with :meth:`columns`. The columns
    are read-only arrays, one entry per transfer: ``step.op == REDUCE`` picks the ones that add.
    """

    src: np.ndarray     # sending rank of each transfer
    dst: np.ndarray     # receiving rank
    chunk: np.ndarray   # chunk index
    op: np.ndarray      # "reduce": add into the receiver's copy; "copy": replace it
    label: str = ""     # what the step is part of, e.g. "reduce-scatter"

    def __post_init__(self):
        columns = {name: _readonly(getattr(self, name), OP_DTYPE if name == "op" else np.int64)
                   for name in ("src", "dst", "chunk", "op")}
        lengths = {len(column) for column in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"step columns differ in length: { {k: len(v) for k, v in columns.items()} }")
        unknown = set(columns["op"].tolist()) - set(OPS)
        if unknown:
            raise ValueError(f"op must be 'reduce' or 'copy', not {sorted(unknown)[0]!r}")
        for name, column in columns.items():
            object.__setattr__(self, name, column)

    @classmethod
    def of(cls, transfers: Iterable, label: str = "") -> "Step":
        """A step from transfers: ``Transfer`` s or plain ``(src, dst, chunk[, op])`` tuples."""
        rows = [Transfer(*t) for t in transfers]
        for t in rows:
            if t.op not in OPS:
                raise ValueError(f"transfer {tuple(t)}: op must be 'reduce' or 'copy', not {t.op!r}")
        return cls(src=[t.src for t in rows], dst=[t.dst for t in rows], chunk=[t.chunk for t in rows],
                   op=[t.op for t in rows], label=label)

    @classmethod
    def columns(cls, src, dst, chunk, op: str, label: str = "") -> "Step":
        """A step from array-likes (scalars broadcast) that all share one ``op``."""
        if op not in OPS:
            raise ValueError(f"op must be 'reduce' or 'copy', not {op!r}")
        src, dst, chunk = np.broadcast_arrays(*(np.asarray(a, dtype=np.int64) for a in (src, dst, chunk)))
        return cls(src=src, dst=dst, chunk=chunk, op=np.full(src.shape, op, dtype=OP_DTYPE), label=label)

    def __len__(self) -> int:
        return len(self.src)

    def __iter__(self) -> Iterator[Transfer]:
        for s, d, c, o in zip(self.src.tolist(), self.dst.tolist(), self.chunk.tolist(), self.op.tolist()):
            yield Transfer(s, d, c, o)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Step):
            return NotImplemented
        return self.label == other.label and all(
            np.array_equal(getattr(self, n), getattr(other, n)) for n in ("src", "dst", "chunk", "op"))

    __hash__ = None  # mutable-looking arrays inside: compare, don't hash

    def __repr__(self) -> str:
        shown = ", ".join(f"{t.src}->{t.dst}:c{t.chunk}{'+' if t.op == REDUCE else '='}"
                          for t in list(self)[:6])
        more = f", ... ({len(self)} transfers)" if len(self) > 6 else ""
        return f"Step({self.label!r}: {shown}{more})"


class LazySteps(SequenceABC):
    """Steps made on demand (``steps[i]``, iteration), which check themselves when made; ``num_transfers``
    and ``nranks``/``nchunks`` say what they hold without making them."""

    nranks: int
    nchunks: int
    num_transfers: int


@dataclass(frozen=True)
class Collective:
    """What a schedule must achieve, as provenance: which ranks' inputs each chunk holds.

    - ``reduce``: every rank starts with its own data; ``root`` must end with the sum of all.
    - ``broadcast``: only ``root`` starts with data; every rank must end with root's.
    - ``allreduce``: every rank starts with its own data and must end with the sum of all.
    - ``reduce_scatter``: every rank starts with its own data; the owner of each chunk must end
      with that chunk's sum of all.
    - ``allgather``: each chunk starts only at its owner; every rank must end with every chunk.
    - ``gather``: each chunk starts only at its owner; ``root`` must end with every chunk.
    - ``scatter``: only ``root`` starts with data; the owner of each chunk must end with root's.
    - ``alltoall``: chunks cannot change position, so the buffer holds n x n chunks (blocks), and
      chunk ``s*n + d`` is the block rank ``s`` sends to rank ``d``. Rank ``s`` starts with its
      row, chunks ``s*n .. s*n+n-1``; rank ``d`` must end with its column, chunk ``s*n + d`` from
      every ``s``. One rank's send (or receive) buffer is 1/n of this buffer: an MPI alltoall of
      n blocks of b elements is a schedule over n*n*b elements. Every other chunk: anything.

    ``owners[c]`` is the rank that owns chunk ``c`` (reduce_scatter, allgather, gather and scatter
    only; by default chunk ``c`` belongs to rank ``c``).
    """

    kind: str
    nranks: int
    nchunks: int
    root: int | None = None
    owners: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.kind not in COLLECTIVES:
            raise ValueError(f"unknown collective {self.kind!r}; expected one of {', '.join(COLLECTIVES)}")
        check_count("nranks", self.nranks)
        check_count("nchunks", self.nchunks)
        if self.kind in ROOTED:
            check_root(self.root, self.nranks)
        elif self.root is not None:
            raise ValueError(f"{self.kind} has no root (got root={self.root})")
        if self.kind == "alltoall" and self.nchunks != self.nranks ** 2:
            raise ValueError(f"alltoall needs n x n chunks (chunk s*n+d: the block rank s sends to rank d): "
                             f"{self.nchunks} chunks for {self.nranks} ranks")
        if self.kind in OWNED:
            owners = tuple(range(self.nranks)) if self.owners is None else tuple(int(o) for o in self.owners)
            if len(owners) != self.nchunks:
                raise ValueError(f"{self.kind} needs one owner per chunk: {len(owners)} owners for {self.nchunks} chunks")
            bad = [o for o in owners if not 0 <= o < self.nranks]
            if bad:
                raise ValueError(f"chunk owners must be ranks 0..{self.nranks - 1}, got {bad[0]}")
            object.__setattr__(self, "owners", owners)
        elif self.owners is not None:
            raise ValueError(f"{self.kind} has no chunk owners")

    @property
    def everyone(self) -> frozenset[int]:
        return frozenset(range(self.nranks))

    def start(self, rank: int, chunk: int) -> frozenset[int]:
        """Whose inputs ``rank`` holds in ``chunk`` before the first step (empty: no data)."""
        if self.kind in ("broadcast", "scatter"):
            return frozenset({rank}) if rank == self.root else frozenset()
        if self.kind in ("allgather", "gather"):
            return frozenset({rank}) if rank == self.owners[chunk] else frozenset()
        if self.kind == "alltoall":  # rank s holds row s: the blocks it sends
            return frozenset({rank}) if chunk // self.nranks == rank else frozenset()
        return frozenset({rank})

    def end(self, rank: int, chunk: int) -> frozenset[int] | None:
        """Whose inputs ``rank`` must hold in ``chunk`` after the last step (None: anything)."""
        if self.kind == "reduce":
            return self.everyone if rank == self.root else None
        if self.kind == "broadcast":
            return frozenset({self.root})
        if self.kind == "allreduce":
            return self.everyone
        if self.kind == "reduce_scatter":
            return self.everyone if rank == self.owners[chunk] else None
        if self.kind == "gather":
            return frozenset({self.owners[chunk]}) if rank == self.root else None
        if self.kind == "scatter":
            return frozenset({self.root}) if rank == self.owners[chunk] else None
        if self.kind == "alltoall":  # rank d gets column d: block s*n+d from rank s
            sender, receiver = divmod(chunk, self.nranks)
            return frozenset({sender}) if receiver == rank else None
        return frozenset({self.owners[chunk]})  # allgather

    def start_table(self) -> tuple[tuple[frozenset[int], ...], ...]:
        """``start`` for every rank (rows) and chunk (columns)."""
        return tuple(tuple(self.start(r, c) for c in range(self.nchunks)) for r in range(self.nranks))

    def end_table(self) -> tuple[tuple[frozenset[int] | None, ...], ...]:
        """``end`` for every rank (rows) and chunk (columns)."""
        return tuple(tuple(self.end(r, c) for c in range(self.nchunks)) for r in range(self.nranks))


@dataclass(frozen=True, eq=False)
class Schedule:
    """A collective as data: ``steps`` of concurrent chunk transfers that achieve ``collective``.

    ``name`` is the registered algorithm (``"allreduce.ring"``) or anything a learner likes;
    ``options`` records how it was built (root, segments, servers).
    """

    collective: Collective
    steps: tuple[Step, ...]
    name: str = "custom"
    options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
        n, k = self.nranks, self.nchunks
        if isinstance(self.steps, LazySteps):
            if (self.steps.nranks, self.steps.nchunks) != (n, k):
                raise ValueError(f"steps made for {self.steps.nranks} ranks and {self.steps.nchunks} chunks, "
                                 f"not {n} and {k}")
            return
        steps = tuple(s if isinstance(s, Step) else Step.of(s) for s in self.steps)
        object.__setattr__(self, "steps", steps)
        for index, step in enumerate(steps):
            for column, limit, what in ((step.src, n, "rank"), (step.dst, n, "rank"), (step.chunk, k, "chunk")):
                bad = np.flatnonzero((column < 0) | (column >= limit))
                if len(bad):
                    t = list(step)[bad[0]]
                    raise ValueError(f"step {index}: transfer {tuple(t)} names {what} {int(column[bad[0]])}, "
                                     f"but the schedule has {what}s 0..{limit - 1}")
            same = np.flatnonzero(step.src == step.dst)
            if len(same):
                raise ValueError(f"step {index}: rank {int(step.src[same[0]])} sends chunk "
                                 f"{int(step.chunk[same[0]])} to itself")

    @property
    def nranks(self) -> int:
        return self.collective.nranks

    @property
    def nchunks(self) -> int:
        return self.collective.nchunks

    @property
    def num_transfers(self) -> int:
        if isinstance(self.steps, LazySteps):
            return self.steps.num_transfers
        return sum(len(step) for step in self.steps)

    def fingerprint(self) -> str:
        """A digest of everything the schedule does (collective, chunks, every transfer), for comparing
        schedules across processes; computed once."""
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            digest = hashlib.sha256(repr((self.collective, self.name)).encode())
            for step in self.steps:
                digest.update(step.label.encode())
                for column in (step.src, step.dst, step.chunk, step.op):
                    digest.update(column.tobytes())
            cached = self.__dict__["_fingerprint"] = digest.hexdigest()
        return cached

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v}" for k, v in self.options.items())
        return (f"Schedule({self.name!r}, nranks={self.nranks}{opts}: {self.nchunks} chunks, "
                f"{len(self.steps)} steps, {self.num_transfers} transfers)")


def make_schedule(collective: str, nranks: int, nchunks: int, steps: Sequence, *, root: int | None = None,
                  owners: Sequence[int] | None = None, name: str = "custom", **options) -> Schedule:
    """A schedule from plain data, the way a learner writes one.

    ``steps`` is a list of steps, each a list of ``(src, dst, chunk, op)`` tuples (``op`` is
    ``"reduce"`` or ``"copy"``) or a ready :class:`Step`::

        make_schedule("allreduce", 2, 1, [[(0, 1, 0, "reduce")], [(1, 0, 0, "copy")]])
    """
    steps = [s if isinstance(s, Step) else Step.of(s) for s in steps]
    return Schedule(Collective(collective, nranks, nchunks, root=root,
                               owners=None if owners is None else tuple(owners)),
                    tuple(steps), name=name, options=options)


MAX_BYTES = 1 << 50  # 1 PiB: no rank's buffer is larger, and past 2**63 numpy's integers overflow
MAX_RANKS = 1 << 24  # 16.8 million ranks: 100 times the largest machine modelled here (100,000 ranks, FACTS.md)


def check_count(name: str, value, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int, or a ValueError saying why it is not a valid ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value}")
    return int(value)


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int) -> int:
    """Bytes from ``"8"``, ``"1K"``, ``"64M"``, ``"1GiB"`` or ``"2 MB"`` (K, M, G are powers of 1024)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size must be >= 0, got {text}")
        return _at_most_max(text, text)
    match = re.fullmatch(r"\s*(\d{1,30}(?:\.\d{1,30})?)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise ValueError(f"cannot read {text!r} as a size: write bytes like 8, 1K, 64M or 1G")
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if value > MAX_BYTES:
        return _at_most_max(value, text)
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def _at_most_max(value, text) -> int:
    if value > MAX_BYTES:
        raise ValueError(f"{text!r} is more than 1 PiB: no rank holds a buffer that large")
    return int(value)


def positive_number(value) -> bool:
    """Whether ``value`` is a finite real number > 0 (a rate, a scale; not a bool, not text, not NaN)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
            and 0 < value < float("inf"))


def check_root(root, nranks: int) -> int:
    """``root`` as an int, or a ValueError when it is not one of ``nranks`` ranks."""
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise ValueError(f"root must be an integer rank, got {root!r}")
    if not 0 <= root < nranks:
        raise ValueError(f"root must be a rank in 0..{nranks - 1}, got {root}")
    return int(root)
