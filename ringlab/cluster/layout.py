"""What a cluster on this machine is made of: its nodes' names and addresses, its paths, its state file and lock.

Everything a cluster called NAME makes carries the prefix ``ringlab-NAME-``: its namespaces
(``ringlab-NAME-head``, ``ringlab-NAME-node1``, ..., ``ringlab-NAME-switch``), the files ``ip netns exec``
lays over /etc inside them (``/etc/netns/ringlab-NAME-*``), its folder ``/run/ringlab-NAME`` and its
lock. So a leftover of a killed run is found, and removed, by that prefix alone.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import re
import stat
import tempfile
from pathlib import Path

DEFAULT_NAME = "lab"
RUN = Path("/run")  # the cluster's folder and lock: root's, and gone at a reboot, as its namespaces are
ETC_NETNS = Path("/etc/netns")  # ip netns exec lays /etc/netns/NS/hosts over /etc/hosts inside NS
SUBNET = "10.77.0"  # used only inside the cluster's own namespaces: node k is .k, the head .254
HEAD = "head"
SLOTS = 8  # ranks each node offers (hostfile, Slurm's CPUs): more than the cores, on purpose
MAX_NODES = 64

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(k|m|g|t)?(bit|bps)?\s*$", re.IGNORECASE)
_SCALE = {None: 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


def parse_rate(text: str) -> float:
    """Bits per second from tc's words: ``1gbit``, ``500mbit``, ``100Mbit``; ``bps`` means bytes per second."""
    found = _RATE.match(str(text))
    if not found or float(found.group(1)) <= 0:
        raise ValueError(f"--link wants a rate such as 1gbit, 500mbit or 100mbit (tc's words), got {text!r}")
    number, scale, unit = float(found.group(1)), (found.group(2) or "").lower() or None, (found.group(3) or "bit")
    return number * _SCALE[scale] * (8 if unit.lower() == "bps" else 1)


def format_rate(bits_per_s: float) -> str:
    """``1gbit``, ``500mbit``: how tc and ``--link`` write a rate."""
    for scale, word in ((1e9, "gbit"), (1e6, "mbit"), (1e3, "kbit")):
        if bits_per_s >= scale:
            return f"{bits_per_s / scale:g}{word}"
    return f"{bits_per_s:g}bit"


@dataclasses.dataclass
class Layout:
    """A cluster's description: enough to build it, find it, and tear it down."""

    name: str = DEFAULT_NAME
    nodes: int = 2
    link_bps: float = 1e9
    latency_ms: float = 0.0
    gpus_per_node: int = 0
    slurm: bool = False

    def __post_init__(self):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", self.name or ""):
            raise ValueError(f"a cluster's name is 1 to 8 lower-case letters and digits, starting with a letter; "
                             f"got {self.name!r}")
        if isinstance(self.nodes, bool) or not isinstance(self.nodes, int) or not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"--nodes wants 1 to {MAX_NODES} nodes, got {self.nodes!r}")
        if not self.link_bps > 0:
            raise ValueError(f"the link rate must be > 0 bits/s, got {self.link_bps!r}")
        if not 0 <= self.latency_ms <= 10_000:
            raise ValueError(f"--latency wants 0 to 10000 ms, got {self.latency_ms!r}")
        if isinstance(self.gpus_per_node, bool) or not isinstance(self.gpus_per_node, int) or self.gpus_per_node < 0:
            raise ValueError(f"--gpus-per-node wants a whole number >= 0, got {self.gpus_per_node!r}")

    @property
    def prefix(self) -> str:
        return f"ringlab-{self.name}-"

    @property
    def hosts(self) -> list[str]:
        """The nodes' host names, in rank order: node1, node2, ..."""
        return [f"node{k}" for k in range(1, self.nodes + 1)]

    def namespace(self, host: str) -> str:
        return self.prefix + host

    @property
    def switch(self) -> str:
        """The namespace that holds the bridge (so nothing is added to the machine's own network)."""
        return self.namespace("switch")

    def address(self, host: str) -> str:
        return f"{SUBNET}.254" if host == HEAD else f"{SUBNET}.{self.hosts.index(host) + 1}"

    @property
    def folder(self) -> Path:
        return RUN / f"ringlab-{self.name}"

    @property
    def hostfile(self) -> Path:
        return self.folder / "hosts"

    @property
    def state_file(self) -> Path:
        return self.folder / "cluster.json"

    def uts_file(self, host: str) -> Path:
        """Where the node's host-name namespace is kept (a bind mount), so that it outlives any process."""
        return self.folder / "uts" / host

    def etc(self, host: str) -> Path:
        return ETC_NETNS / self.namespace(host)

    def hosts_text(self) -> str:
        """/etc/hosts inside every namespace of the cluster: each node's name and the head's."""
        lines = ["127.0.0.1 localhost", f"{self.address(HEAD)} {HEAD}"]
        return "\n".join(lines + [f"{self.address(h)} {h}" for h in self.hosts]) + "\n"

    def gpus_of(self, host: str) -> str | None:
        """CUDA_VISIBLE_DEVICES on ``host``: this machine's GPUs dealt out in blocks (None: no GPUs declared)."""
        if not self.gpus_per_node:
            return None
        first = self.hosts.index(host) * self.gpus_per_node
        return ",".join(str(first + i) for i in range(self.gpus_per_node))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def same_as(self, other: "Layout") -> bool:
        return self.to_dict() == other.to_dict()


def read_state(name: str) -> dict | None:
    """What ``up`` recorded for the cluster ``name`` when it finished (None: no cluster, or one left half-built)."""
    path = Layout(name).state_file
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_state(layout: Layout, **facts) -> None:
    """Record the finished cluster (written last, so a half-built one has no state file; whole or not at all)."""
    write_whole(layout.state_file, json.dumps({"layout": layout.to_dict(), **facts}, indent=1).encode(), 0o644)


def lock_path(name: str) -> Path:
    return RUN / f"ringlab-{name}.lock"


@contextlib.contextmanager
def locked(name: str, remove: bool = False):
    """Hold the cluster's lock (up and down of one cluster never overlap); ``remove`` deletes it on the way out.

    A locker that waited on a lock file since deleted (or replaced) takes the one now at the path instead, so
    deleting it never lets two hold the lock. The file is opened close-on-exec, so daemons started meanwhile do not
    inherit it and hold the lock forever.
    """
    path = lock_path(name)
    while True:
        fd = open_private(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # it was deleted while this waited: the lock is the file now at the path
    try:
        yield
        if remove:
            path.unlink(missing_ok=True)  # still held: who waits on it sees it gone and takes the next
    finally:
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        here, there = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


class UnsafePath(RuntimeError):
    """A folder or file ringlab would keep its own is a symbolic link, or belongs to another user."""


def _refuse(path: Path, info: os.stat_result, kind: str) -> None:
    """An UnsafePath if ``path`` (lstat ``info``) is not this user's own ``kind`` (a folder or a file)."""
    wanted = stat.S_ISDIR if kind == "folder" else stat.S_ISREG
    if stat.S_ISLNK(info.st_mode) or not wanted(info.st_mode):
        raise UnsafePath(f"{path} is {'a symbolic link' if stat.S_ISLNK(info.st_mode) else 'not a ' + kind}, where "
                         f"ringlab keeps a {kind} of its own: someone else put it there; remove it and run again")
    if info.st_uid != os.geteuid():
        raise UnsafePath(f"{path} belongs to user {info.st_uid}, not to this user ({os.geteuid()}): someone else "
                         f"made it first, in a place others may write; remove it (as its owner or root) and run again, "
                         "or set XDG_RUNTIME_DIR (or TMPDIR) to a folder of your own")


def private_folder(path: Path, mode: int = 0o700) -> Path:
    """The folder ``path``, made with ``mode`` if absent; one that is a symbolic link or another user's is refused
    (UnsafePath, saying what to do), and one of this user's is given ``mode``."""
    path = Path(path)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    _refuse(path, os.lstat(path), "folder")
    if stat.S_IMODE(os.lstat(path).st_mode) != mode:
        os.chmod(path, mode)
    return path


def check_private(path: Path, kind: str = "folder") -> None:
    """Refuse ``path`` as :func:`private_folder` does, if it is there; absent is fine."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    _refuse(Path(path), info, kind)


def open_private(path: Path, mode: int = 0o600) -> int:
    """A descriptor (read and write, close-on-exec) of the file ``path``, made with ``mode`` if absent; never through
    a symbolic link, and a file of another user's is refused (UnsafePath)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as err:
        if os.path.islink(path):
            raise UnsafePath(f"{path} is a symbolic link, where ringlab keeps a file of its own: someone else put it "
                             "there; remove it and run again") from err
        raise
    try:
        _refuse(Path(path), os.fstat(fd), "file")
    except UnsafePath:
        os.close(fd)
        raise
    return fd


def write_whole(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``path`` whole or not at all: a new file of ``mode`` beside it (never readable by others meanwhile),
    then renamed over it, so a reader sees the old contents or the new, and a failure leaves the old."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
