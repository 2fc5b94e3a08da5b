"""CUDA IPC, the GPUDirect peer-to-peer path between ranks of one node: whether the ranks' GPUs can read each
other (:func:`ipc_possible`), and the device work buffers they share (:class:`IpcBuffer`).

Ranks exchange CUDA IPC handles of a persistent work buffer once (opened only between ranks of one node);
then each step of the ``ipc`` transport (:mod:`ringlab.mpi.transports`) reads a peer's chunk straight from
its device memory, and empty MPI messages say when data is ready and when it has been read. No call's data
passes through this module: it hands the transport the buffers, which the transport binds.
"""
from __future__ import annotations

import numpy as np

from . import private
from .deadlines import DEFAULT, allgather, barrier, seconds
from .devices import cupy_module
from .nodes import local_comm, node_ids


def on_mig() -> bool:
    """Whether this process's GPU is a MIG instance (``CUDA_VISIBLE_DEVICES`` names ``MIG-...``): CUDA IPC
    does not join MIG instances (they share one bus id and cannot map each other's memory)."""
    import os

    return os.environ.get("CUDA_VISIBLE_DEVICES", "").strip().startswith("MIG-")


def ipc_possible(comm, limit: float | None = None) -> bool:
    """Every rank's GPU can read the GPU of every other rank of its node (the same GPU, or peer
    access between them), and the ranks of a node share memory, so CUDA IPC can join them.
    Collective over ``comm``. Nodes are :func:`ringlab.mpi.nodes.node_ids`' (simulated nodes
    split one machine's ranks further; ipc is then used only inside each).

    CUDA opens IPC handles of GPUs the process cannot see, so ranks that each see only their own
    GPU (``CUDA_VISIBLE_DEVICES`` per rank) may use ipc too: for a GPU hidden from CUDA, NVML,
    which sees every GPU, says whether the two can read each other. Never on MIG instances (:func:`on_mig`).
    Each exchange within ``limit`` seconds (None: the default deadline)."""
    limit = seconds(DEFAULT) if limit is None else limit
    what = "whether CUDA IPC can join the ranks"
    cp = cupy_module()
    ids, me = node_ids(comm), comm.Get_rank()
    sharing = set(allgather(local_comm(comm), me, what, limit))  # the ranks MPI says share memory with this one
    mine = [r for r, node in enumerate(ids) if node == ids[me]]
    usable = cp is not None and set(mine) <= sharing and not on_mig()
    if not all(allgather(comm, usable, what, limit)):
        return False
    runtime = cp.cuda.runtime
    here = cp.cuda.Device().id
    my_bus = runtime.deviceGetPCIBusId(here)
    reachable = True
    for rank, bus in enumerate(allgather(comm, my_bus, what, limit)):
        if ids[rank] != ids[me]:
            continue  # another node: ipc is not asked to reach it
        try:
            theirs = runtime.deviceGetByPCIBusId(bus)
        except runtime.CUDARuntimeError:  # that GPU is hidden from this process
            reachable = _nvml_p2p_read(my_bus, bus)
        else:
            reachable = theirs == here or bool(runtime.deviceCanAccessPeer(here, theirs))
        if not reachable:
            break
    return all(allgather(comm, reachable, what, limit))


def _nvml_p2p_read(bus_a: str, bus_b: str) -> bool:
    """Whether NVML says the GPU at ``bus_a`` can read the one at ``bus_b`` peer to peer (False when
    NVML cannot be asked)."""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    try:
        a, b = (pynvml.nvmlDeviceGetHandleByPciBusId(bus) for bus in (bus_a, bus_b))
        index = pynvml.NVML_P2P_CAPS_INDEX_READ
        index = index[0] if isinstance(index, tuple) else index
        return pynvml.nvmlDeviceGetP2PStatus(a, b, index) == pynvml.NVML_P2P_STATUS_OK
    except pynvml.NVMLError:
        return False
    finally:
        pynvml.nvmlShutdown()


class IpcBuffer:
    """A device work buffer whose CUDA IPC handle every rank of its node holds: ``work`` here, and
    ``peer(rank)`` the same buffer of another rank, mapped into this process the first time it is read."""

    def __init__(self, cp, comm, count: int, dtype, node_of=None):
        self.cp, self.dtype, self.count = cp, np.dtype(dtype), max(count, 1)
        node_of = node_of or [0] * comm.Get_size()  # only the ranks of this one's node are mapped
        # Our own cudaMalloc, outside cupy's pool: an IPC handle covers a whole allocation, and the
        # pool packs several arrays into one. We still send base handle + offset, as one must.
        self.memory = cp.cuda.Memory(self.count * self.dtype.itemsize)
        self.work = cp.ndarray((self.count,), self.dtype, cp.cuda.MemoryPointer(self.memory, 0))
        handle = cp.cuda.runtime.ipcGetMemHandle(self.memory.ptr)
        offset = self.work.data.ptr - self.memory.ptr
        everyone = allgather(comm, (handle, offset), "the CUDA IPC buffers' handles", seconds(DEFAULT))
        me = comm.Get_rank()
        # every handle of this node is kept, but a peer's buffer is mapped only when a step first reads it: a
        # ring reads one neighbour, and a GPU can have peer access to 8 others at most
        self.handles = {rank: theirs for rank, theirs in enumerate(everyone) if rank != me and node_of[rank] == node_of[me]}
        self.peers, self.opened = {}, []
        self.device = cp.cuda.Device().id
        self.scratch = None

    def peer(self, rank: int):
        """Rank ``rank``'s buffer, mapped into this process on first use (a ValueError for a rank of another node)."""
        found = self.peers.get(rank)
        if found is None:
            if rank not in self.handles:
                raise ValueError(f"CUDA IPC reaches the ranks of this node only; rank {rank} is on another")
            peer_handle, peer_offset = self.handles[rank]
            runtime = self.cp.cuda.runtime
            ptr = runtime.ipcOpenMemHandle(peer_handle, runtime.cudaIpcMemLazyEnablePeerAccess)
            self.opened.append(ptr)
            owned = self.cp.cuda.UnownedMemory(ptr, peer_offset + self.work.nbytes, owner=self, device_id=self.device)
            found = self.peers[rank] = self.cp.ndarray((self.count,), self.dtype,
                                                       self.cp.cuda.MemoryPointer(owned, peer_offset))
        return found

    def scratch_for(self, nelems: int):
        if self.scratch is None or self.scratch.size < nelems:
            self.scratch = self.cp.empty(max(nelems, 1), dtype=self.dtype)
        return self.scratch

    def unmap(self, comm) -> None:
        """Stop sharing this buffer, keeping this rank's own memory (collective over ``comm``): nobody
        reads a peer any more (barrier), everyone unmaps the peers' buffers, and all have (barrier), so
        that each rank's memory, which the others had mapped, may be freed from then on. Every call that
        used the buffer has synchronised its stream before returning, so no kernel still reads a peer."""
        limit = seconds(DEFAULT)
        barrier(comm, "the CUDA IPC buffer's unmapping: nobody reads a peer any more", limit)
        self.peers, self.handles = {}, {}
        for ptr in self.opened:
            self.cp.cuda.runtime.ipcCloseMemHandle(ptr)
        self.opened = []
        barrier(comm, "the CUDA IPC buffer's unmapping: every peer unmapped it", limit)
        self.work = self.scratch = None

    def release(self, comm) -> None:
        """Give everything back, in the only safe order (collective over ``comm``): :meth:`unmap`, then free
        this rank's own memory."""
        self.unmap(comm)
        self.memory = None


def ipc_buffers(comm) -> dict:
    """The IpcBuffers of ``comm`` (ringlab's private duplicate), by (GPU, dtype): they live and die with it."""
    return private.state(comm).cache.setdefault("ipc", {})


def retired_ipc_memory(comm) -> list:
    """The device memory of the IpcBuffers ``comm`` outgrew: unmapped by every peer, kept until
    ``rl.release_buffers()`` or the communicator's end frees it (see :func:`ipc_buffer`)."""
    return private.state(comm).cache.setdefault("ipc-retired", [])


def ipc_buffer(cp, comm, count: int, dtype, node_of=None) -> IpcBuffer:
    """The IpcBuffer of (communicator, GPU, dtype), grown when a call needs more than it holds (collectively:
    every rank asks for the same count, so all grow together). Handles are exchanged once per buffer, and
    opened only between ranks of one node (``node_of``: the node of every rank; None: all on one).

    Growing frees nothing: cudaFree waits for all the device's work, which would stall the user's other
    streams (compute overlapped with this communication). The outgrown buffer is unmapped by its peers
    and its memory retired (:func:`retired_ipc_memory`) until ``rl.release_buffers()`` or the
    communicator's end. The trade-off is memory: the first buffer has the size asked for, and a buffer
    grows to the next power of two of the count asked, so it grows O(log) times and what it retired
    adds up to less than the current buffer (each power of two at least doubles the one before: a
    geometric series), at most twice one buffer's memory in all."""
    kept = ipc_buffers(comm)
    key = (cp.cuda.Device().id, np.dtype(dtype).str)
    have = kept.get(key)
    if have is not None and have.count >= count:
        return have
    if have is not None:
        have.unmap(comm)
        retired_ipc_memory(comm).append(have.memory)
        count = 1 << (count - 1).bit_length()
    kept[key] = IpcBuffer(cp, comm, count, dtype, node_of)
    return kept[key]


def release_ipc(state) -> None:
    """Release the IPC buffers of one communicator's state (collective over its private duplicate), and
    free the memory of those it outgrew (which every peer unmapped when it was retired)."""
    kept = state.cache.get("ipc", {})
    if kept:
        comm = state.comm("rl.release_buffers", None)
        for key in sorted(kept):
            kept.pop(key).release(comm)
    state.cache.pop("ipc-retired", None)
