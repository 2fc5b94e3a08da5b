"""Large clusters in linear time and memory: links kept as runs of alike links, routes worked out by arithmetic.

:func:`ringlab.topology.machines.cluster` lays a multi-node machine out the same way whatever its size:
every GPU linked to its node's switch (NVSwitch, or a PCIe switch) and to a NIC, every NIC to one fabric.
A :class:`LinkRuns` holds those links as a few runs (``gpu{i}`` to ``node{i // G}-nvswitch``, ...) with
their figures as arrays, and makes a :class:`~ringlab.topology.graph.Link` only when one is read; a
:class:`ClusterTopology` routes a message by where its ends sit (same node: through the node's switch;
else up to the NIC, across the fabric, down), the route the generic search (fewest seconds per byte, then
fewest hops) finds on the same links, which tests/test_compact.py holds it to. So 100,000 GPUs take
a fraction of a second and tens of megabytes, where a Link object per link took seconds.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .graph import Link, Topology


@dataclass(frozen=True)
class Run:
    """``count`` alike links, link ``first + stride*i`` joining ``a.format(i=i, ...)`` and ``b.format(...)``,
    figures as ``link``'s: ``{node}`` is i // per_node, ``{nic}`` the NIC of GPU i with ``nics`` a node."""

    first: int
    stride: int
    count: int
    a: str
    b: str
    link: Link
    per_node: int = 1
    nics: int = 1

    def name(self, pattern: str, i: int) -> str:
        node, local = divmod(i, self.per_node)
        return pattern.format(i=i, node=node, nic=node * self.nics + local * self.nics // self.per_node)


class LinkRuns(Sequence):
    """A topology's links as :class:`Run` s: ``runs[i]`` is a Link, made when asked for; the figures of all
    of them are arrays (``bandwidth``, ``rate``, ``latency``, ``duplex``, ``kind``)."""

    def __init__(self, runs: list[Run]):
        self.runs = tuple(runs)
        self._size = sum(r.count for r in self.runs)
        self.bandwidth, self.rate, self.latency = (np.empty(self._size) for _ in range(3))
        self.duplex = np.empty(self._size, dtype=bool)
        self.kind = np.empty(self._size, dtype=object)
        for r in self.runs:
            where = slice(r.first, r.first + r.stride * r.count, r.stride)
            self.bandwidth[where], self.rate[where], self.latency[where] = r.link.bandwidth, r.link.rate, r.link.latency
            self.duplex[where], self.kind[where] = r.link.duplex, r.link.kind
        self._all = None

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(self._size)))
        index = int(index) % self._size if -self._size <= index < self._size else self._size
        for r in self.runs:
            i, off = divmod(index - r.first, r.stride)
            if off == 0 and 0 <= i < r.count:
                link = r.link
                return Link(r.name(r.a, i), r.name(r.b, i), link.bandwidth, link.latency, link.kind, link.efficiency,
                            link.duplex)
        raise IndexError(f"link {index} of {self._size}")

    def __iter__(self):
        if self._all is None:
            self._all = tuple(self[i] for i in range(self._size))
        return iter(self._all)

    def __eq__(self, other) -> bool:
        if isinstance(other, LinkRuns):
            return self.runs == other.runs
        return isinstance(other, (tuple, list)) and tuple(self) == tuple(other)

    __hash__ = None


@dataclass(frozen=True, eq=False)
class ClusterTopology(Topology):
    """Nodes of ``per_node`` GPUs, each GPU linked to its node's switch and a NIC, every one of the
    ``nic_count`` NICs to one fabric; links in :class:`LinkRuns`, routes by arithmetic. ``nic[g]`` is GPU
    g's NIC; with ``switched`` (GPUs without NVLink) GPUs and NICs hang off the node's PCIe switch, and
    ``node_nic[m]`` is the NIC a message leaves and enters node m by (the one the search meets first: the
    lowest by name)."""

    per_node: int = 1
    nic_count: int = 1
    nic: np.ndarray | None = None
    switched: bool = False
    node_nic: np.ndarray | None = None

    def __post_init__(self):
        runs = self.links
        if (runs.bandwidth <= 0).any() or (runs.latency < 0).any() or (runs.rate > runs.bandwidth).any():
            raise ValueError(f"{self.name}: link bandwidths must be > 0, latencies >= 0 and efficiencies in (0, 1]")
        object.__setattr__(self, "channel_bandwidth", np.repeat(runs.bandwidth, 2))
        object.__setattr__(self, "channel_rate", np.repeat(runs.rate, 2))
        object.__setattr__(self, "channel_latency", np.repeat(runs.latency, 2))
        object.__setattr__(self, "half_duplex", np.flatnonzero(~runs.duplex))

    def _content(self) -> tuple:
        arrays = tuple(None if a is None else np.asarray(a).tobytes() for a in (self.nic, self.node_nic))
        return (type(self).__qualname__, self.nranks, self.links.runs, self.per_node, self.nic_count, self.switched,
                arrays, self.via, self.reduce_rate, self.switch_reduce)

    def link_classes(self) -> list[tuple[Link, bool]]:
        """One link of each run, with whether it joins a rank (a GPU)."""
        return [(self.links[r.first], "gpu{i}" in (r.a, r.b)) for r in self.links.runs]

    @cached_property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.ranks) | {end for link in self.links for end in (link.a, link.b)}))

    def route(self, src: int, dst: int) -> tuple[int, ...]:
        return tuple(self.routes(np.array([src]), np.array([dst]))[1].tolist())

    def routes(self, src, dst) -> tuple[np.ndarray, np.ndarray]:
        """For arrays of (src, dst) pairs: (which pair, channel) for every channel every route crosses, in order."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        gpus, nics = self.nranks, self.nic_count
        same = src // self.per_node == dst // self.per_node
        if self.switched:  # link g: GPU - node switch; gpus + k: switch - NIC k; gpus + nics + k: NIC k - fabric
            out, into = self.node_nic[src // self.per_node], self.node_nic[dst // self.per_node]
            across = np.stack([2 * src, 2 * (gpus + out), 2 * (gpus + nics + out), 2 * (gpus + nics + into) + 1,
                               2 * (gpus + into) + 1, 2 * dst + 1], axis=1)
            inside = np.stack([2 * src, 2 * dst + 1], axis=1)
        else:  # link 2g: GPU - NVSwitch; 2g+1: GPU - its NIC; 2 gpus + k: NIC k - fabric
            out, into = self.nic[src], self.nic[dst]
            across = np.stack([4 * src + 2, 2 * (2 * gpus + out), 2 * (2 * gpus + into) + 1, 4 * dst + 3], axis=1)
            inside = np.stack([4 * src, 4 * dst + 1], axis=1)
        hops = np.where(same, 2, across.shape[1]) * (src != dst)
        table = np.where(same[:, None], np.pad(inside, ((0, 0), (0, across.shape[1] - 2))), across)
        keep = np.arange(across.shape[1])[None, :] < hops[:, None]
        return np.repeat(np.arange(len(src)), hops), table[keep]


def lowest_by_name(first: np.ndarray, count: int) -> np.ndarray:
    """For each node, the NIC among ``first[m] .. first[m] + count - 1`` whose name (nic<k>) sorts first."""
    return np.array([min(range(f, f + count), key=str) for f in first.tolist()], dtype=np.int64)


__all__ = ["Run", "LinkRuns", "ClusterTopology", "lowest_by_name"]
