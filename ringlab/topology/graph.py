"""Topologies: who is wired to whom, how fast, and which way a message goes.

A :class:`Topology` is a graph of ranks (GPUs, or processes) and the switches, CPUs and NICs
between them. Every physical link is full duplex: it becomes two directed channels, each with
the link's bandwidth per direction and its latency. A message from rank a to rank b follows the
route the topology gives it (fewest seconds per byte, then fewest hops), and the cost model
shares each channel's bandwidth among the messages crossing it.

Presets carry published figures; they are labelled as such and never as measurements. ``uniform`` and ``ring`` are the generic cases the closed forms are written for.
"""
from __future__ import annotations

import hashlib
import heapq
from dataclasses import dataclass, field

import numpy as np

from ..schedule import MAX_RANKS, check_count, positive_number

GB = 1e9


@dataclass(frozen=True)
class Link:
    """A link between two nodes: ``bandwidth`` bytes/s in each direction (the signalling peak), ``latency`` s.

    ``efficiency`` is the share of that peak data reaches once packet headers and flow control are
    paid for (1 in the generic models; presets give the rating they cite). ``duplex=False`` makes
    both directions share the bandwidth: what copies staged through host memory show.
    """

    a: str
    b: str
    bandwidth: float
    latency: float
    kind: str = ""  # nvlink, pcie, qpi, ib, nvswitch; port, ring, direct in the generic models
    efficiency: float = 1.0
    duplex: bool = True

    @property
    def rate(self) -> float:
        """Bytes/s of data each way: the peak times the efficiency."""
        return self.bandwidth * self.efficiency


@dataclass(frozen=True, eq=False)
class Topology:
    """Named ranks (``rank0``.. or ``gpu0``..) and the links between them and other nodes (switches, CPUs, NICs).

    ``reduce_rate`` is how many bytes per second a rank adds (the per-byte reduction cost);
    ``source`` says where the figures come from (published, measured, or made up for a model);
    ``switch_reduce`` says that the switch can add what passes through it (NVLink SHARP on
    third-generation NVSwitch), which no schedule of point-to-point transfers can use. ``via`` names
    a node every message between ranks is staged through (host memory, for GPUs without peer access):
    a message goes there by the best route and from there by the best route again. ``machine`` (a
    ``ringlab.topology.machines.Machine``) says what NCCL's tuner reads beyond the links: GPU generation,
    nodes, NICs; None where the topology does not say.
    """

    name: str
    ranks: tuple[str, ...]
    links: tuple[Link, ...]
    reduce_rate: float = float("inf")
    source: str = ""
    notes: str = ""
    switch_reduce: bool = False
    via: str | None = None
    machine: object = None
    _routes: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        nodes = set(self.ranks)
        for link in self.links:
            nodes.update((link.a, link.b))
            if link.bandwidth <= 0 or link.latency < 0 or not 0 < link.efficiency <= 1:
                raise ValueError(f"link {link.a}-{link.b}: bandwidth must be > 0, latency >= 0 and "
                                 f"efficiency in (0, 1]")
        object.__setattr__(self, "nodes", tuple(sorted(nodes)))
        if self.via is not None and self.via not in nodes:
            raise ValueError(f"{self.name}: via node {self.via!r} is not in the topology")
        # channel 2i: a -> b, channel 2i+1: b -> a
        object.__setattr__(self, "channel_bandwidth", np.repeat([link.bandwidth for link in self.links], 2))
        object.__setattr__(self, "channel_rate", np.repeat([link.rate for link in self.links], 2))
        object.__setattr__(self, "channel_latency", np.repeat([link.latency for link in self.links], 2))
        object.__setattr__(self, "half_duplex", np.array([i for i, link in enumerate(self.links) if not link.duplex],
                                                         dtype=np.int64))

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def fingerprint(self) -> str:
        """A digest of everything that decides where a message goes here and how long it takes (the kind of
        topology, which routes by its own rule; the ranks; every link's figures; the node messages are
        staged through; the reduction rate), computed once: alike topologies have the same one, whichever
        objects hold them, and a cache keyed on it never hands one machine's times to another."""
        cached = self.__dict__.get("_fingerprint")
        if cached is None:
            cached = hashlib.sha256(repr(self._content()).encode()).hexdigest()
            object.__setattr__(self, "_fingerprint", cached)
        return cached

    def _content(self) -> tuple:
        links = tuple((link.a, link.b, link.bandwidth, link.latency, link.efficiency, link.duplex) for link in self.links)
        return type(self).__qualname__, self.ranks, links, self.via, self.reduce_rate, self.switch_reduce

    def _neighbours(self):
        out: dict[str, list[tuple[str, int]]] = {n: [] for n in self.nodes}
        for i, link in enumerate(self.links):
            out[link.a].append((link.b, 2 * i))
            out[link.b].append((link.a, 2 * i + 1))
        return out

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        """The directed channels a message from rank ``src`` to rank ``dst`` crosses."""
        key = (src, dst)
        if key not in self._routes:
            self._routes.update(self._routes_from(src))
        if key not in self._routes:
            raise ValueError(f"{self.name}: no path from {self.ranks[src]} to {self.ranks[dst]}")
        return self._routes[key]

    def _routes_from(self, src: int) -> dict:
        """Every rank's route from rank ``src``: the best one, or through ``via`` when there is one."""
        index = {name: i for i, name in enumerate(self.ranks)}
        if self.via is None:
            return {(src, index[node]): path for node, path in self._paths(self.ranks[src]).items() if node in index}
        there = self._paths(self.ranks[src]).get(self.via)
        if there is None:
            return {}
        return {(src, index[node]): () if index[node] == src else there + path
                for node, path in self._paths(self.via).items() if node in index}

    def _paths(self, start: str) -> dict:
        """Dijkstra from one node: cost = seconds per byte summed over hops, ties to fewer hops."""
        neighbours = self._neighbours()
        best = {start: (0.0, 0, ())}
        queue = [(0.0, 0, start, ())]
        while queue:
            cost, hops, node, path = heapq.heappop(queue)
            if best.get(node, (float("inf"),))[:2] < (cost, hops):
                continue
            for other, channel in neighbours[node]:
                step = (cost + 1.0 / self.channel_bandwidth[channel], hops + 1, path + (channel,))
                if step[:2] < best.get(other, (float("inf"), 0))[:2]:
                    best[other] = step
                    heapq.heappush(queue, (step[0], step[1], other, step[2]))
        return {node: path for node, (_, _, path) in best.items()}

    def routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For arrays of (src, dst) pairs: (which pair, channel) for every channel every route crosses."""
        pairs, channels = [], []
        for i, (s, d) in enumerate(zip(src.tolist(), dst.tolist())):
            path = self.route(s, d)
            pairs.extend([i] * len(path))
            channels.extend(path)
        return np.array(pairs, dtype=np.int64), np.array(channels, dtype=np.int64)

    def bandwidth_matrix(self) -> np.ndarray:
        """Bytes/s between every pair of ranks: the slowest channel of the route (0 on the diagonal)."""
        n = self.nranks
        out = np.zeros((n, n))
        for s in range(n):
            for d in range(n):
                if s != d:
                    out[s, d] = min(self.channel_bandwidth[c] for c in self.route(s, d))
        return out

    def peer_bandwidth_matrix(self) -> np.ndarray:
        """Bytes/s each way (peak) a peer copy between two ranks can use: their direct link where they
        have one, else the slowest link of the route that does not relay through a third rank (CUDA
        copies between two GPUs over NVLink, or else over PCIe; it never hops through another GPU)."""
        ranks = set(self.ranks)
        direct = {frozenset((link.a, link.b)): link.bandwidth for link in self.links if {link.a, link.b} <= ranks}
        if not direct:
            return self.bandwidth_matrix()
        around = Topology(self.name, self.ranks, tuple(link for link in self.links if not {link.a, link.b} <= ranks))
        out = around.bandwidth_matrix()
        for i, a in enumerate(self.ranks):
            for j, b in enumerate(self.ranks):
                if i != j and frozenset((a, b)) in direct:
                    out[i, j] = direct[frozenset((a, b))]
        return out

    def link_classes(self) -> list[tuple[Link, bool]]:
        """Each kind of link once, with whether it joins a rank: here every link (large clusters keep runs)."""
        ranks = set(self.ranks)
        return [(link, link.a in ranks or link.b in ranks) for link in self.links]

    def channel_load(self, load: np.ndarray) -> np.ndarray:
        """Bytes per directed channel as the links see them: on a half-duplex link both directions
        carry the sum of what crosses it either way."""
        if len(self.half_duplex):
            both = load[2 * self.half_duplex] + load[2 * self.half_duplex + 1]
            load = load.copy()
            load[2 * self.half_duplex] = load[2 * self.half_duplex + 1] = both
        return load

    def __repr__(self) -> str:
        return f"Topology({self.name!r}: {self.nranks} ranks, {len(self.links)} links; {self.source})"


class SwitchTopology(Topology):
    """Every rank has one port of ``bandwidth`` each way into a non-blocking switch.

    Routes are computed arithmetically (port up, port down), so this scales to any number of
    ranks: rank i's uplink is channel 2i, its downlink channel 2i+1.
    """

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        return (2 * src, 2 * dst + 1)

    def routes(self, src, dst):
        pairs = np.repeat(np.arange(len(src)), 2)
        channels = np.stack([2 * np.asarray(src), 2 * np.asarray(dst) + 1], axis=1).reshape(-1)
        return pairs, channels


def uniform(nranks: int, bandwidth: float, latency: float, reduce_rate: float = float("inf"),
            name: str | None = None) -> Topology:
    """Every pair of ranks linked alike: each rank sends at ``bandwidth`` and receives at
    ``bandwidth`` at once, through a non-blocking switch (the single-port, full-duplex model of
    MPICH's collective cost formulas). A message costs ``latency`` + bytes / ``bandwidth``."""
    _positive(nranks=nranks, bandwidth=bandwidth)
    _latency(latency)
    ranks = tuple(f"rank{i}" for i in range(nranks))
    links = tuple(Link(r, "switch", bandwidth, latency / 2, "port") for r in ranks)
    return SwitchTopology(name or f"uniform-{nranks}", ranks, links, reduce_rate,
                          source="a model: figures as given")


def joined_nodes(nranks: int, per_node: int, bandwidth: float, latency: float = 0.0,
                 name: str | None = None) -> Topology:
    """Nodes of ``per_node`` consecutive ranks. Inside a node the ranks are joined by links that cost
    nothing (emulated, they run at the speed of the machine underneath); between nodes every rank has
    its own port of ``bandwidth`` each way into a non-blocking switch, ``latency`` a message: one network
    card per GPU, as on an HGX node. What ``RINGLAB_NODE_LINK_GBPS`` emulates between simulated nodes."""
    _positive(nranks=nranks, per_node=per_node, bandwidth=bandwidth)
    _latency(latency)
    ranks = tuple(f"rank{i}" for i in range(nranks))
    inside = tuple(Link(r, f"node{i // per_node}", float("inf"), 0.0, "shared memory") for i, r in enumerate(ranks))
    ports = tuple(Link(r, "switch", bandwidth, latency / 2, "port") for r in ranks)
    return Topology(name or f"nodes of {per_node} ranks, {bandwidth / GB:g} GB/s between them", ranks,
                    inside + ports, source="a model: figures as given")


def ring(nranks: int, bandwidth: float, latency: float, reduce_rate: float = float("inf"),
         name: str | None = None) -> Topology:
    """Rank i linked to rank i+1 (mod n) only, each link ``bandwidth`` per direction."""
    _positive(nranks=nranks, bandwidth=bandwidth)
    _latency(latency)
    ranks = tuple(f"rank{i}" for i in range(nranks))
    links = tuple(Link(ranks[i], ranks[(i + 1) % nranks], bandwidth, latency, "ring")
                  for i in range(nranks if nranks > 2 else nranks - 1))
    return Topology(name or f"ring-{nranks}", ranks, links, reduce_rate, source="a model: figures as given")


def from_matrix(bandwidth, latency: float = 0.0, names=None, name: str = "matrix",
                source: str = "measured") -> Topology:
    """Direct links wherever ``bandwidth[i][j] > 0`` (bytes/s; the smaller of the two directions)."""
    matrix = np.asarray(bandwidth, dtype=float)
    n = len(matrix)
    ranks = tuple(names or (f"rank{i}" for i in range(n)))
    links = tuple(Link(ranks[i], ranks[j], min(matrix[i, j], matrix[j, i]), latency, "direct")
                  for i in range(n) for j in range(i + 1, n) if min(matrix[i, j], matrix[j, i]) > 0)
    return Topology(name, ranks, links, source=source)


def _positive(**values):
    """A ValueError naming the first of ``values`` that is not a finite number > 0 (ranks: a whole number)."""
    for key, value in values.items():
        if key in ("nranks", "per_node"):
            check_count(key, value, maximum=MAX_RANKS)
        elif not positive_number(value):
            raise ValueError(f"{key} must be a finite number > 0, got {value!r}")


def _latency(latency):
    """``latency`` (seconds), or a ValueError unless it is a finite number >= 0."""
    if isinstance(latency, bool) or (latency != 0 and not positive_number(latency)):  # 0 is a latency too
        raise ValueError(f"latency must be a finite number of seconds >= 0, got {latency!r}")
    return latency
