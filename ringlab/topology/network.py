"""Between hosts: the nodes a job's ranks are on, and this host's network cards with their speeds.

The cards are read from sysfs, in the manner of ``ethtool`` and ``ibstat``: Ethernet (and IPoIB)
interfaces from ``/sys/class/net/<if>/speed`` (Mb/s), InfiniBand and RoCE ports from
``/sys/class/infiniband/<hca>/ports/<p>/rate``, ``state`` and ``link_layer``. Loopback, virtual
interfaces (no ``device`` behind them: bridges, veth, tunnels) and interfaces or ports that are down
are left out, and :attr:`Network.skipped` says why. Speeds are the link rate the kernel reports, one
direction, in GB/s (1e9 bytes/s); None where it reports none (a virtual machine's NIC says -1).
"""
from __future__ import annotations

import re
import socket
from dataclasses import asdict, dataclass, field
from pathlib import Path

NET = "sys/class/net"
INFINIBAND = "sys/class/infiniband"
LINK_TYPES = {1: "ethernet", 32: "ipoib", 772: "loopback"}  # /sys/class/net/<if>/type: ARPHRD_* codes
UP = ("up", "unknown")  # operstate: some working drivers never say "up"


@dataclass
class Interface:
    """One network interface or HCA port that is up."""

    name: str  # eth0, or mlx5_0/1 for port 1 of an HCA
    kind: str  # ethernet, ipoib, wifi, infiniband, roce
    speed_GBps: float | None  # the link rate, one direction; None: not reported
    state: str  # as the kernel says it: "up", "4: ACTIVE"
    source: str  # the file the speed was read from
    reported: str  # what that file said ("25000", "200 Gb/sec (4X HDR)", "-1"), "" when unreadable

    def describe(self) -> str:
        if self.speed_GBps is None:
            said = f"{self.reported} in {self.source}" if self.reported else f"{self.source} unreadable"
            return f"{self.name} ({self.kind}, speed unknown: {said})"
        said = f"{self.reported} Mb/s" if self.kind in ("ethernet", "ipoib", "wifi") else self.reported
        return f"{self.name} ({self.kind}, {self.speed_GBps:.3g} GB/s = {said})"


@dataclass
class Network:
    """This host's network cards that are up, what was left out and why, and the folders read."""

    interfaces: list[Interface] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # name -> why it is not listed
    read_from: list[str] = field(default_factory=list)  # the sysfs folders that existed

    def fastest(self) -> Interface | None:
        """The card with the highest known speed (the likely link between nodes), or None."""
        known = [i for i in self.interfaces if i.speed_GBps is not None]
        return max(known, key=lambda i: i.speed_GBps) if known else None

    def describe(self) -> str:
        """One line; "unknown" when no card, or no speed, could be read."""
        if not self.read_from:
            return f"network: unknown (neither /{NET} nor /{INFINIBAND} could be read)"
        reasons: dict[str, list[str]] = {}
        for name, why in self.skipped.items():
            reasons.setdefault(why, []).append(name)
        left_out = "; ".join(f"{', '.join(names)} ({why})" for why, names in reasons.items())
        left_out = f"; left out: {left_out}" if left_out else ""
        if not self.interfaces:
            return f"network: unknown (no card is up){left_out}"
        fastest = self.fastest()
        best = (f"fastest {fastest.name}, {fastest.speed_GBps:.3g} GB/s" if fastest
                else "speed unknown for every card")
        return f"network: {best}: {'; '.join(i.describe() for i in self.interfaces)}{left_out}"

    def as_dict(self) -> dict:
        """Plain data (JSON-ready), as :func:`~ringlab.topology.discover` returns it."""
        return {**asdict(self), "describe": self.describe()}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # absent, or EINVAL: a down or virtual interface has no speed to give
        return None


def ethernet(root: str | Path = "/") -> tuple[list[Interface], dict[str, str], bool]:
    """(interfaces that are up, {name: why left out}, whether /sys/class/net exists) under ``root``."""
    folder = Path(root) / NET
    if not folder.is_dir():
        return [], {}, False
    found, skipped = [], {}
    for entry in sorted(folder.iterdir()):
        name = entry.name
        code = _read(entry / "type")
        kind = "wifi" if (entry / "wireless").exists() else LINK_TYPES.get(int(code) if code and code.isdigit() else -1,
                                                                          f"link type {code}")
        state = _read(entry / "operstate") or "unreadable"
        if kind == "loopback" or name == "lo":
            skipped[name] = "loopback"
        elif not (entry / "device").exists():
            skipped[name] = "virtual: no device behind it"
        elif state not in UP:
            skipped[name] = f"not up: {state}"
        else:
            said = _read(entry / "speed")
            mbps = int(said) if said and said.lstrip("-").isdigit() else -1
            found.append(Interface(name, kind, mbps / 8000 if mbps > 0 else None, state, str(entry / "speed"),
                                   said or ""))
    return found, skipped, True


def infiniband(root: str | Path = "/") -> tuple[list[Interface], dict[str, str], bool]:
    """(HCA ports that are active, {hca/port: why left out}, whether /sys/class/infiniband exists) under ``root``."""
    folder = Path(root) / INFINIBAND
    if not folder.is_dir():
        return [], {}, False
    found, skipped = [], {}
    for hca in sorted(folder.iterdir()):
        for port in sorted((hca / "ports").iterdir()) if (hca / "ports").is_dir() else []:
            name = f"{hca.name}/{port.name}"
            state = _read(port / "state") or "unreadable"  # "4: ACTIVE", "1: DOWN"
            if "ACTIVE" not in state.upper():
                skipped[name] = f"not active: {state}"
                continue
            layer = _read(port / "link_layer") or "InfiniBand"  # older kernels have no link_layer: InfiniBand
            said = _read(port / "rate")  # "200 Gb/sec (4X HDR)"
            gbits = re.match(r"\s*([\d.]+)\s*Gb/sec", said or "")
            found.append(Interface(name, "roce" if layer.lower() == "ethernet" else "infiniband",
                                   float(gbits.group(1)) / 8 if gbits else None, state, str(port / "rate"),
                                   said or ""))
    return found, skipped, True


def read_network(root: str | Path = "/") -> Network:
    """This host's network cards (``root`` is where sysfs is mounted from: "/" here, a fake tree in tests)."""
    cards, skipped, has_net = ethernet(root)
    ports, ports_skipped, has_ib = infiniband(root)
    read_from = [f"/{folder}" for folder, there in ((NET, has_net), (INFINIBAND, has_ib)) if there]
    return Network(cards + ports, {**skipped, **ports_skipped}, read_from)


def node_facts(comm=None, timeout: float | None = None) -> dict:
    """The nodes of a job: asked of every rank of ``comm`` (collective: every rank must call it), or,
    with no communicator, this host as one node and what ``RINGLAB_RANKS_PER_NODE`` asks for."""
    from ..mpi import nodes

    facts = {"host": socket.gethostname(), "nodes": 1, "ranks": None, "ranks_per_node": None, "simulated": None}
    try:
        facts["simulated"] = nodes.simulated()
    except ValueError as err:  # a bad setting: said, before any rank is asked anything
        return {**facts, "nodes": None, "describe": f"{err}"}
    if comm is not None:
        ids = nodes.node_ids(comm, timeout)
        count = max(ids) + 1
        facts.update(nodes=count, ranks=len(ids), ranks_per_node=sorted({ids.count(n) for n in range(count)}),
                     describe=nodes.describe(comm, timeout))
    elif facts["simulated"] is not None:
        facts["describe"] = (f"this host, {facts['host']}, is one node; {nodes.SIMULATED}={facts['simulated']} makes "
                             f"a job's ranks simulated nodes of {facts['simulated']} consecutive ranks, all on this "
                             "machine")
    else:
        facts["describe"] = f"this host, {facts['host']}, is one node (no communicator given: no ranks asked)"
    return facts
