"""The alpha-beta cost model: how long a schedule takes on a topology, step by step.

Each step's time is the sum of three parts:
- latency: every message (all transfers of a step between one pair of ranks, merged as the
  executor merges them) costs the latency of its route; a rank pays for its messages one after
  another, so the step pays the largest sum any rank has to send or receive;
- transfer: every directed channel carries the bytes of all messages routed over it, at the
  link's rate (its peak times its efficiency) shared among them, so the step lasts until the
  busiest channel is done; a half-duplex link's two directions share one rate;
- reduction: a rank adds the bytes it receives for reduce at the topology's reduce_rate.

With ``protocol=`` (one of NCCL's LL, LL128, Simple, or ``"auto"`` for the fastest, as NCCL's
tuner picks), a message's latency is the protocol's per-step latency for the hardware its route
crosses, the rate is the protocol's share of the link's, and the call pays the protocol's base
latency once (``predict.protocols`` says where the figures come from and why they are there).

On ``uniform`` topologies and without a protocol this reproduces the closed forms of MPICH's and
NCCL's cost models (tests/test_costmodel.py holds it to them); on presets it shows where links
are shared. One exception: ``allreduce.oneshot`` and ``allreduce.twoshot`` on one host of GPUs all
joined by NVLink are NCCL's symmetric-memory kernels, which load from all peers at once, and are
priced by NCCL's model of those kernels (``ringlab.predict.symmetric`` says where and why).

Two ways to the same numbers (``method=``): ``"explicit"`` walks the schedule step by step, transfer
by transfer, vectorised per step: the reference, and the way for a schedule written step by step. A
registered algorithm's schedule also says its steps compactly (``ringlab.algorithms.pattern``), and
``"auto"`` (the default) then prices that (``ringlab.predict.compact``): 100,000 ranks of ring in a
second or two, where the walk's time grows with the square of the ranks. The two agree to 1e-9
(tests/test_compact.py). A walk that would not fit in this machine's free memory is refused before it
starts, and a prediction that runs past a few seconds shows a progress bar.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..algorithms import build
from ..algorithms.pattern import PatternSteps, check_fits
from ..schedule import MAX_BYTES, REDUCE, Schedule, bus_factor, chunk_bounds, check_count, nccl_tests_size
from ..topology import SwitchTopology, Topology
from ..topology.clusters import ClusterTopology
from .compact import channel_hardware, predict_steps
from .protocols import AUTO, NVLINK, PROTOCOLS, Protocol, protocol as find_protocol
from .symmetric import symmetric_kernel, symmetric_steps

METHODS = ("auto", "compact", "explicit")
PROGRESS_AFTER = 3.0  # seconds: a prediction that runs longer shows a progress bar
WALK_BYTES_PER_TRANSFER = 200  # a transfer in the walk's arrays: its step's columns and the walk's own
ROUTE_BYTES = 200  # a route the generic search keeps: its key, its channels, the dict's entry

STEP_DTYPE = np.dtype([("latency", "f8"), ("transfer", "f8"), ("reduce", "f8"), ("time", "f8"),
                       ("bottleneck", "i8"), ("messages", "i8"), ("nbytes", "i8")])


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds for one schedule on one topology, with the per-step breakdown.

    ``steps`` has columns latency, transfer, reduce, time (seconds), bottleneck (the directed
    channel that bounded the transfer part, -1 if none), messages and nbytes. Use
    :meth:`bottleneck_link` to name a channel. ``protocol`` is the NCCL protocol modelled (None
    for the bare model) and ``overhead`` its latency per call, paid once on top of the steps. ``kernel``: the
    NCCL symmetric-memory kernel whose model of itself priced the call (``ringlab.predict.symmetric``), None
    where the links did.
    """

    schedule: Schedule
    topology: Topology
    nbytes: int
    steps: np.ndarray
    protocol: str | None = None
    overhead: float = 0.0
    kernel: str | None = None

    @property
    def seconds(self) -> float:
        return self.overhead + float(self.steps["time"].sum())

    def __float__(self) -> float:
        return self.seconds

    def bottleneck_link(self, step: int) -> str:
        """The link (and direction) that bounded ``step``'s transfer time."""
        channel = int(self.steps["bottleneck"][step])
        if channel < 0:
            return "-"
        link = self.topology.links[channel // 2]
        a, b = (link.a, link.b) if channel % 2 == 0 else (link.b, link.a)
        rated = f" of {link.bandwidth / 1e9:.4g} peak" if link.efficiency < 1 else ""
        duplex = ", both ways shared" if not link.duplex else ""
        return f"{a}->{b} ({link.kind}, {link.rate / 1e9:.4g} GB/s{rated}{duplex})"

    def __repr__(self) -> str:
        how = f", {self.protocol}" if self.protocol else f", NCCL's {self.kernel}" if self.kernel else ""
        return (f"Prediction({self.schedule.name} on {self.topology.name}{how}, {self.nbytes} B: "
                f"{self.seconds * 1e6:.1f} us over {len(self.steps)} steps)")


def predict(schedule: Schedule, nbytes: int, topology: Topology, itemsize: int = 1, rank_map=None,
            protocol: str | None = None, method: str = "auto") -> Prediction:
    """Predicted time of ``schedule`` on ``topology`` for a buffer of ``nbytes`` per rank.

    ``rank_map[r]`` is the topology rank that plays schedule rank ``r`` (default: the same);
    use it to try ring orders. Chunks are cut on ``itemsize``-byte elements, as in the executor.
    ``protocol``: None for the bare alpha-beta model, ``"LL"``, ``"LL128"`` or ``"Simple"`` for
    NCCL's costs of that protocol, ``"auto"`` for the fastest of those NCCL would use here.
    ``method``: ``"auto"`` prices a registered algorithm's compact steps and walks any other schedule,
    ``"compact"`` insists on the first, ``"explicit"`` walks transfer by transfer (the reference).

    ``allreduce.oneshot`` and ``allreduce.twoshot`` on one host whose GPUs are all joined by NVLink (the
    NVSwitch boxes, ``cluster("h100", nodes=1)``), with ``protocol`` None or ``"auto"``, are NCCL's
    symmetric-memory kernels there, and are priced as NCCL prices them (``ringlab.predict.symmetric``: a
    kernel's base latency plus its bytes over a bandwidth, all peers at once); everywhere else, and for
    every other schedule, the links are walked as above.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    auto = protocol is not None and str(protocol).lower() == AUTO
    nbytes = check_count("nbytes", nbytes, minimum=0, maximum=MAX_BYTES)
    n = schedule.nranks
    if n > topology.nranks:
        raise ValueError(f"{schedule.name} needs {n} ranks; topology {topology.name} has {topology.nranks}")
    place = _placement(n, topology, rank_map)
    kernel = symmetric_kernel(schedule, topology, place) if protocol is None or auto else None
    if auto and kernel is None:
        return min((predict(schedule, nbytes, topology, itemsize, rank_map, name, method)
                    for name in usable_protocols(schedule, topology, rank_map)), key=lambda p: p.seconds)
    chosen = None if protocol is None or auto else find_protocol(protocol)
    compact = isinstance(schedule.steps, PatternSteps)
    if method == "compact" and not compact:
        raise ValueError(f"{schedule.name}: its steps were written one by one, so there is no compact form to "
                         "price; use method='explicit' (or 'auto', which walks it)")
    if compact and method != "explicit":
        with _progress(len(STEP_STAGES), "predicting (compact)", "stage") as bar:
            columns = predict_steps(schedule.steps, nbytes, itemsize, topology, place, chosen, bar.update)
        out = np.zeros(len(columns["time"]), dtype=STEP_DTYPE)
        for name in STEP_DTYPE.names:
            out[name] = columns[name]
    else:
        check_fits(walk_memory(schedule, topology), f"an explicit walk of {schedule.name} on {n} ranks",
                   "Use method='auto', which prices a registered algorithm without its transfers"
                   if compact else "Use fewer ranks, or build it with rl.build, whose schedules predict compactly")
        out = _walk(schedule, nbytes, topology, itemsize, place, chosen)
    if kernel is not None:  # NCCL's own model of the kernel that runs it here (ringlab.predict.symmetric)
        out = symmetric_steps(kernel, nbytes, itemsize, n, topology.machine.arch, out)
    return Prediction(schedule, topology, nbytes, out, chosen.name if chosen else None,
                      chosen.base_latency if chosen else 0.0, kernel)


STEP_STAGES = ("pieces", "messages", "latency", "reduce", "transfer")  # what predict_steps reports done


def _placement(n: int, topology: Topology, rank_map) -> np.ndarray:
    """The topology rank of every schedule rank (identity by default), or a ValueError."""
    if rank_map is None:
        return np.arange(n)
    place = np.asarray(rank_map, dtype=np.int64)
    if len(place) != n or len(np.unique(place)) != n or place.min(initial=0) < 0 or \
            place.max(initial=0) >= topology.nranks:
        raise ValueError(f"rank_map must give {n} different ranks of the topology")
    return place


class _progress:
    """A progress bar made only once a prediction has run for :data:`PROGRESS_AFTER` seconds. (tqdm's own
    ``delay`` still builds its notebook widget at once: a cell that makes thousands of quick predictions
    would flood the notebook with widgets nobody sees.)"""

    def __init__(self, total: int, what: str, unit: str):
        self.total, self.what, self.unit = total, what, unit
        self.start, self.done, self.bar = time.monotonic(), 0, None

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is None:
            if time.monotonic() - self.start < PROGRESS_AFTER:
                return
            # left in place when done: in a notebook a bar that closes leaves a view of a widget that is gone,
            # which the saved notebook, reopened, shows as an error
            from tqdm.auto import tqdm  # here: most processes never draw a bar, and tqdm.auto takes 50 ms to import
            self.bar = tqdm(total=self.total, desc=self.what, unit=self.unit, initial=self.done - n, leave=True)
        self.bar.update(n)

    def __enter__(self) -> "_progress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.close()


def walk_memory(schedule: Schedule, topology: Topology) -> float:
    """Bytes the explicit walk would need at its peak: its largest step's transfers, the chunk sizes, and the
    routes a topology without arithmetic routes (the generic search) keeps, one per pair it meets."""
    steps = schedule.steps
    if isinstance(steps, PatternSteps):
        t = steps.terms
        per_step = np.zeros(steps.nsteps + 1, dtype=np.int64)
        np.add.at(per_step, t["t0"], t["width"])
        np.add.at(per_step, t["t1"], -t["width"])
        largest_step = int(np.cumsum(per_step).max(initial=0))
    else:
        largest_step = max((len(step) for step in steps), default=0)
    need = largest_step * WALK_BYTES_PER_TRANSFER + 16.0 * schedule.nchunks
    if not isinstance(topology, (SwitchTopology, ClusterTopology)):  # routes from every rank to every rank
        need += float(schedule.nranks) * topology.nranks * ROUTE_BYTES
    return need


def _walk(schedule: Schedule, nbytes: int, topology: Topology, itemsize: int, place: np.ndarray,
          chosen: Protocol | None) -> np.ndarray:
    """The explicit walk: every step's transfers, merged into messages, routed and timed (the reference)."""
    chunk_bytes = np.diff(chunk_bounds(nbytes // itemsize, schedule.nchunks)) * itemsize
    out = np.zeros(len(schedule.steps), dtype=STEP_DTYPE)
    with _progress(len(schedule.steps), "predicting step by step", "step") as bar:
        for index, step in enumerate(schedule.steps):
            bar.update()
            sizes = chunk_bytes[step.chunk]
            moving = sizes > 0
            if not moving.any():
                out[index]["bottleneck"] = -1
                continue
            out[index] = _price_step(place[step.src[moving]], place[step.dst[moving]], sizes[moving],
                                     step.op[moving] == REDUCE, topology, chosen)
    return out


def _price_step(src: np.ndarray, dst: np.ndarray, sizes: np.ndarray, reducing: np.ndarray, topology: Topology,
                chosen: Protocol | None) -> tuple:
    """One step's transfers (topology ranks, bytes, whether each is reduced), merged into messages, routed and
    timed: a row of STEP_DTYPE. Latency: the most any rank pays, a route's latency for each message it sends or
    receives; transfer: the busiest channel's load over its rate; reduction: the most bytes a rank reduces."""
    pair, which = np.unique(src * topology.nranks + dst, return_inverse=True)
    message_bytes = np.bincount(which, weights=sizes)
    message_src, message_dst = pair // topology.nranks, pair % topology.nranks
    hop_pairs, channels = topology.routes(message_src, message_dst)
    if chosen is None:
        message_latency = np.bincount(hop_pairs, weights=topology.channel_latency[channels], minlength=len(pair))
    else:
        message_latency = np.array([chosen.latency(h) for h in _route_hardware(topology, hop_pairs, channels,
                                                                                len(pair))])
    latency = max(np.bincount(message_src, weights=message_latency).max(),
                  np.bincount(message_dst, weights=message_latency).max())
    rate = topology.channel_rate * (chosen.rate_share if chosen else 1.0)
    load = topology.channel_load(np.bincount(channels, weights=message_bytes[hop_pairs],
                                             minlength=len(topology.channel_bandwidth)))
    busy = load / rate
    bottleneck = int(busy.argmax())
    reduce_time = 0.0
    if reducing.any() and np.isfinite(topology.reduce_rate):
        reduce_time = np.bincount(dst[reducing], weights=sizes[reducing]).max() / topology.reduce_rate
    return (latency, busy[bottleneck], reduce_time, latency + busy[bottleneck] + reduce_time, bottleneck, len(pair),
            int(sizes.sum()))


def predict_alltoallv(table_bytes, topology: Topology) -> float:
    """Predicted seconds of ``rl.alltoallv`` (:func:`ringlab.mpi.collectives.alltoallv`) on ``topology``: ``table_bytes[s][d]``
    bytes from rank s to rank d, sent in its n-1 pairwise rounds (round k: every rank r to r+k at once), each
    round priced as the explicit walk prices a step (its messages share the links they cross), one after the
    other; the bare alpha-beta model, no protocol. A rank's bytes for itself stay home and cost nothing."""
    table = np.asarray(table_bytes, dtype=np.int64)
    n = len(table)
    if table.shape != (n, n) or n > topology.nranks or (table < 0).any():
        raise ValueError(f"table_bytes must be a square table of bytes >= 0 for at most {topology.nranks} ranks, "
                         f"got shape {table.shape}")
    ranks = np.arange(n)
    total = 0.0
    for k in range(1, n):
        sizes = table[ranks, (ranks + k) % n]
        moving = sizes > 0
        if moving.any():
            total += _price_step(ranks[moving], ((ranks + k) % n)[moving], sizes[moving].astype(float),
                                 np.zeros(int(moving.sum()), bool), topology, None)[3]
    return float(total)


def _route_hardware(topology: Topology, hop_pairs: np.ndarray, channels: np.ndarray, count: int) -> np.ndarray:
    """Per message, the slowest hardware class its route crosses (NVLink < PCIe < network)."""
    out = np.zeros(count, dtype=np.int64)
    np.maximum.at(out, hop_pairs, channel_hardware(topology)[channels])
    return out


def usable_protocols(schedule: Schedule, topology: Topology, rank_map=None) -> list[str]:
    """The protocols NCCL would consider for this schedule here: LL128 only where every message
    of the schedule crosses NVLink alone, as NCCL enables it by default."""
    place = np.arange(schedule.nranks) if rank_map is None else np.asarray(rank_map, dtype=np.int64)
    if isinstance(schedule.steps, PatternSteps):  # the pairs its terms name
        src, dst = schedule.steps.terms["src"], schedule.steps.terms["dst"]
    else:
        src, dst = (np.concatenate([getattr(step, side) for step in schedule.steps] or [np.zeros(0, np.int64)])
                    for side in ("src", "dst"))
    pairs = np.unique(place[src] * topology.nranks + place[dst])
    hop_pairs, channels = topology.routes(pairs // topology.nranks, pairs % topology.nranks)
    all_nvlink = bool((_route_hardware(topology, hop_pairs, channels, len(pairs)) == NVLINK).all())
    return [name for name, p in PROTOCOLS.items() if all_nvlink or not p.nvlink_only]


def best_segments(nranks: int, nbytes: int, topology: Topology, algorithm: str = "broadcast.chain",
                  max_segments: int = 4096) -> tuple[int, float]:
    """The segment count S (1..max_segments) that minimises a chain's predicted time, and that time.

    On a uniform topology (n+S-2)(alpha + K/(S B)) is smallest near S = sqrt((n-2) K / (alpha B)).
    """
    best = (1, float("inf"))
    for segments in range(1, max_segments + 1):
        seconds = predict(build(algorithm, nranks, segments=segments), nbytes, topology).seconds
        if seconds < best[1]:
            best = (segments, seconds)
        elif segments > 2 * best[0] + 8:  # the curve is convex: well past the minimum, stop
            break
    return best


def crossover(first: str, second: str, topology: Topology, lo: int = 1, hi: int = 1 << 34,
              protocol: str | None = None, **options) -> int | None:
    """The smallest size (bytes, to within 1%) at which ``second`` is predicted faster than ``first``.

    None when ``second`` is never faster in [lo, hi], ``lo`` when it is faster already there.
    This is why NCCL switches from tree to ring by message size. ``protocol`` as in :func:`predict`.
    """
    a = build(first, topology.nranks, **options.get(first, {}))
    b = build(second, topology.nranks, **options.get(second, {}))

    def second_wins(size: int) -> bool:
        return predict(b, size, topology, protocol=protocol).seconds < predict(a, size, topology,
                                                                             protocol=protocol).seconds

    if second_wins(lo):
        return lo
    if not second_wins(hi):
        return None
    return first_size_where(second_wins, lo, hi)


def first_size_where(holds, lo: int, hi: int) -> int:
    """The smallest size in (lo, hi], to within 1%, from which ``holds(size)`` is true, for a condition
    false at ``lo`` and true at ``hi`` that changes once in between (bisection in log space)."""
    while hi > lo * 1.01 + 1:
        mid = int(np.sqrt(lo * hi))
        lo, hi = (lo, mid) if holds(mid) else (mid, hi)
    return hi


def busbw(kind: str, nranks: int, nbytes: int, seconds: float) -> float:
    """nccl-tests' busbw for a schedule of ``kind`` over ``nbytes`` that takes ``seconds`` (alltoall's size
    is one rank's buffer, 1/n of its schedule's: see :func:`ringlab.schedule.nccl_tests_size`)."""
    return nccl_tests_size(kind, nranks, nbytes) / seconds * bus_factor(kind, nranks)


def whatif(algorithms: list[str], nbytes: int, topologies: list[Topology], protocol: str | None = None) -> list[dict]:
    """One row per (topology, algorithm): predicted time, busbw, and the step bottleneck seen most
    (and the protocol, when one is modelled: see :func:`predict`)."""
    rows = []
    for topo in topologies:
        for name in algorithms:
            schedule = build(name, topo.nranks)
            p = predict(schedule, nbytes, topo, protocol=protocol)
            links = [p.bottleneck_link(s) for s in range(len(p.steps))]
            rows.append({"topology": topo.name, "algorithm": name, "nranks": topo.nranks, "nbytes": nbytes,
                         "seconds": p.seconds,
                         "busbw": busbw(schedule.collective.kind, topo.nranks, nbytes, p.seconds),
                         "bottleneck": max(set(links), key=links.count) if links else "-",
                         "protocol": p.protocol or "-", "source": topo.source})
    return rows
