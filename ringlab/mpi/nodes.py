"""Which ranks share a node: read from the ranks themselves, or simulated for a laptop and for tests.

On a cluster MPI says which ranks share a node (its shared-memory split, ``COMM_TYPE_SHARED``). Setting ``RINGLAB_RANKS_PER_NODE=L`` in the job's environment instead treats
consecutive groups of L ranks as nodes (simulated nodes: every rank still runs on this machine,
and the "network" between them is the same shared memory), so that "2 nodes x 2 ranks" can be
tried on one machine, clearly labelled as such.

``RINGLAB_NODE_LINK_GBPS=B`` (with simulated nodes only) makes the link between simulated nodes
slow, as a network card is next to NVLink: it is the emulated machine ``nodes:L:B:0``
(:mod:`ringlab.mpi.emulate`, :func:`ringlab.topology.joined_nodes`), in which every rank has its own
port of B GB/s between nodes, timed in virtual time as every emulated machine is: a message inside a
node costs only this machine's CPU work to land it, and a message to a rank of another node takes as
long as its bytes take on those ports, shared with the step's other messages. It is labelled so.

``rl.allreduce(x, "hierarchical")`` takes its ranks per node from :func:`ranks_per_node` unless
``local=`` is given.
"""
from __future__ import annotations

import contextlib
import hashlib
import os

import numpy as np

SIMULATED = "RINGLAB_RANKS_PER_NODE"  # consecutive groups of this many ranks are treated as nodes
LINK = "RINGLAB_NODE_LINK_GBPS"  # the bandwidth of the link between simulated nodes, GB/s

def simulated(environ=None) -> int | None:
    """The ranks per simulated node ``RINGLAB_RANKS_PER_NODE`` asks for (None: not set), or a ValueError."""
    value = (os.environ if environ is None else environ).get(SIMULATED, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{SIMULATED} must be a whole number of ranks per node >= 1, got {value!r}")
    return int(value)


def simulated_link(environ=None) -> float | None:
    """The bytes per second ``RINGLAB_NODE_LINK_GBPS`` asks for between simulated nodes (None: not set),
    or a ValueError (not a positive number, or set without ``RINGLAB_RANKS_PER_NODE``)."""
    environ = os.environ if environ is None else environ
    value = environ.get(LINK, "").strip()
    if not value:
        return None
    try:
        rate = float(value)
    except ValueError:
        rate = -1.0
    if not rate > 0 or rate == float("inf"):
        raise ValueError(f"{LINK} must be a bandwidth in GB/s > 0, got {value!r}")
    if simulated(environ) is None:
        raise ValueError(f"{LINK} slows the link between simulated nodes: set {SIMULATED} too")
    return rate * 1e9


@contextlib.contextmanager
def simulated_nodes(per_node: int, link_gbps: float | None = None):
    """Within the block, this process sees nodes of ``per_node`` consecutive ranks (and, with
    ``link_gbps``, a link that slow between them); call it on every rank alike."""
    from ..schedule import check_count

    per_node = check_count("per_node (ranks per simulated node)", per_node)  # 2.5 is no count of ranks
    saved = {name: os.environ.get(name) for name in (SIMULATED, LINK)}
    os.environ[SIMULATED] = str(per_node)
    os.environ.pop(LINK, None)
    if link_gbps is not None:
        os.environ[LINK] = repr(float(link_gbps))
    try:
        simulated(), simulated_link()  # a bad value fails here, on every rank
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def node_ids(comm, timeout="default") -> list[int]:
    """The node of every rank of ``comm``, numbered from 0 in order of their lowest rank.

    Simulated nodes when ``RINGLAB_RANKS_PER_NODE`` is set; otherwise MPI's shared-memory split
    (``Split_type(COMM_TYPE_SHARED)``): ranks that can share memory are one node. A non-blocking
    allgather of the hosts comes first, so that a rank that never comes is a StepTimeout (a
    TimeoutError) within ``timeout`` (by default ringlab's default deadline; None: no limit), not a
    hang. Remembered per communicator (in ringlab's state for it, freed with it).
    """
    from . import private

    per = simulated()
    seen = private.state(comm).cache.setdefault("nodes", {})  # setting -> node of every rank
    if per in seen:
        return seen[per]
    size = comm.Get_size()
    if per is not None:
        ids = [rank // per for rank in range(size)]
    else:
        from mpi4py import MPI

        # first make sure every rank is here (a non-blocking allgather of the hosts, with the timeout),
        # then ask MPI which ranks share memory: its shared-memory split is the node
        digest = hashlib.blake2b(MPI.Get_processor_name().encode(), digest_size=8).digest()
        mine, hosts = np.frombuffer(digest, dtype=np.int64).copy(), np.empty(size, dtype=np.int64)
        from .deadlines import deadline, seconds, wait

        limit = seconds(timeout)  # "default": ringlab's default deadline (RINGLAB_TIMEOUT); None: no limit
        wait(comm.Iallgather(mine, hosts), deadline(limit), lambda: (
            f"rank {comm.Get_rank()}: not every rank told its host within {limit:g} s (a rank that never called?)"))
        first = local_comm(comm).allreduce(comm.Get_rank(), op=MPI.MIN)  # lowest rank of my node
        leaders = comm.allgather(first)
        order = {leader: i for i, leader in enumerate(dict.fromkeys(leaders))}
        ids = [order[leader] for leader in leaders]
    seen[per] = ids
    return ids


def local_comm(comm):
    """The ranks of ``comm`` that share this node (MPI's shared-memory split), made once per communicator
    and freed with it (kept in ringlab's state for ``comm``)."""
    from mpi4py import MPI

    from . import private

    state = private.state(comm)
    found = state.cache.get("local")
    if found is None:
        found = state.cache["local"] = comm.Split_type(MPI.COMM_TYPE_SHARED)
        state.on_free("local", found.Free)
    return found


def ranks_per_node(comm, timeout="default") -> int:
    """L for ``allreduce.hierarchical``: nodes are consecutive blocks of L ranks (the last may be smaller).

    A ValueError says so when the ranks of a node are not consecutive (a round-robin placement) or the
    nodes hold different numbers of ranks: start the ranks in node order (MPICH's ``-ppn``, Slurm's
    block distribution) or pass ``local=`` yourself.
    """
    return local_size(node_ids(comm, timeout))


def local_size(ids: list[int]) -> int:
    """L such that node g holds ranks g*L .. g*L+L-1, from the node of every rank; else a ValueError."""
    members: dict[int, list[int]] = {}
    for rank, node in enumerate(ids):
        members.setdefault(node, []).append(rank)
    groups = list(members.values())
    size = len(groups[0])
    for g, ranks in enumerate(groups):
        if ranks != list(range(ranks[0], ranks[0] + len(ranks))) or ranks[0] != g * size:
            raise ValueError(f"the ranks of a node are not consecutive (node {g} holds ranks {ranks}): start the "
                             "ranks in node order (MPICH: -ppn; Slurm: --distribution=block) or pass local=")
        if len(ranks) != size and g != len(groups) - 1:
            raise ValueError(f"the nodes hold different numbers of ranks ({', '.join(str(len(r)) for r in groups)}): "
                             "pass local= yourself")
    return size


def describe(comm, timeout="default") -> str:
    """One line: how many nodes, ranks per node, and whether they are simulated."""
    ids = node_ids(comm, timeout)
    count = max(ids) + 1
    per = simulated()
    where = (f"simulated nodes ({SIMULATED}={per}): every rank runs on this machine" if per is not None
             else "nodes as MPI's shared-memory split finds them")
    sizes = sorted({ids.count(node) for node in range(count)})
    return f"{count} node{'s' * (count != 1)}, {'/'.join(map(str, sizes))} ranks per node; {where}"
