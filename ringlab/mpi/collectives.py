"""The public calls on real MPI ranks, the top of the way down: ``rl.allreduce``, ``rl.reduce``,
``rl.broadcast``, ``rl.execute``, ``rl.gather``, ``rl.scatter`` and ``rl.alltoall``; and ``rl.alltoallv``, whose
sizes differ per pair, in pairwise rounds of its own (the last section).

Call them on every rank of a communicator (a script under ``mpiexec -n 4 python -m mpi4py``, or
ipyparallel MPI engines), each with its own numpy or cupy array. ``algorithm`` is a short name
within the collective (``"ring"``, ``"naive"``, ``"ps"``, ``"tree"``, ``"rhd"``, ``"chain"``...),
a full registered name (``"allreduce.ring"``) or a Schedule of your own.

A call checks its arguments, agrees with the other ranks, chooses the schedule and the transport, and
hands the array down once (:mod:`ringlab.mpi.plan`); the result comes back once. Every call runs on
ringlab's private duplicate of ``comm`` (:mod:`ringlab.mpi.private`), so a message of the user's own still
pending on ``comm`` is never matched by ringlab's. Before anything lands in a buffer the ranks compare what
they were given (size, dtype, algorithm, root, what is wrong) and the number of the call on this communicator,
and all raise the same ValueError if they disagree or any rank's arguments are wrong (``agree=False`` skips
this). A call made like this before on numpy buffers sends its digest beside its first step's messages, with
no round trip of its own; one-shot and two-shot on one node carry it in the shared window's headers
(:mod:`ringlab.mpi.symmetric`); a first call, or any other, compares before its first message.
Every wait has a deadline (``timeout``, by default :data:`ringlab.mpi.deadlines.DEFAULT_SECONDS` or
``RINGLAB_TIMEOUT``; None: no limit): a step that never finishes is a StepTimeout naming the step and the
peer. Run scripts as ``python -m mpi4py script.py``: then an exception on one rank aborts the whole job
instead of leaving the others waiting.

Gather, scatter and alltoall: MPI's calls take blocks, ringlab's schedules one buffer of chunks that never
change position. Each lays its blocks out in a *work buffer* whose chunk c is block c, runs the schedule on
it in place, and hands back the blocks this rank ends with:

- gather: ``x`` is this rank's block. The work buffer holds n blocks, ``x`` at block ``rank``; the
  root returns it, shape ``(n, *x.shape)``, as ``comm.Gather`` fills its receive buffer.
- scatter: every rank passes an array of the same shape and dtype whose first axis has length n,
  as ``rl.broadcast`` asks (only the root's contents are read). The work buffer is the root's ``x``;
  rank r returns block r, shape ``x.shape[1:]``, as ``comm.Scatter`` does.
- alltoall: ``x``'s first axis has length n, block d going to rank d. The work buffer holds n x n
  blocks, ``x`` at row ``rank`` (chunk s*n+d: rank s's block for rank d), so it is n times ``x``;
  rank d returns column d, shape ``x.shape``, block s from rank s, as ``comm.Alltoall`` does.
"""
from __future__ import annotations

from time import monotonic, thread_time

import numpy as np

from ..algorithms import ALGORITHMS, build
from ..schedule import Schedule, check_root
from ..simulate import ScheduleError, check
from . import emulate, nodes, private, symmetric
from . import reduction as reductions
from .deadlines import DEFAULT, StepTimeout, seconds, usable, wait_all
from .devices import array_module, bind_device, is_device_array, wait_for_gpu
from .plan import Call, bounded, remember, remembered, run_schedule
from .reduction import is_bfloat16, is_number_type
from .transports import choose

SYMMETRIC = symmetric.NAMES  # allreduce through a shared window on one node
BLOCKS = ("gather", "scatter", "alltoall")  # their blocks are laid out in a work buffer, which the schedule runs on

_WORLD: list = []


def _world(comm):
    if comm is not None:
        return comm
    if not _WORLD:  # looked up once: an import statement per call costs as much as a small message
        from mpi4py import MPI
        _WORLD.append(MPI.COMM_WORLD)
    return _WORLD[0]


def _schedule_bytes(schedule: Schedule) -> int:
    """About what a schedule holds: its steps' columns, and a step's own objects (about 200 B)."""
    return sum(s.src.nbytes + s.dst.nbytes + s.chunk.nbytes + s.op.nbytes + 200 for s in schedule.steps)


@bounded(512, _schedule_bytes)  # at most 512 schedules, within the cache's bytes
def _built(name: str, nranks: int, options: tuple) -> Schedule:
    return build(name, nranks, **dict(options))


def resolve(kind: str | None, algorithm, nranks: int, **options) -> Schedule:
    """The schedule for collective ``kind``: ``algorithm`` as a short name, a full name or a Schedule
    (``kind=None``: any collective, named in full)."""
    if isinstance(algorithm, Schedule):
        if kind is not None and algorithm.collective.kind != kind:
            raise ValueError(f"this schedule is for {algorithm.collective.kind}, not {kind}")
        if algorithm.nranks != nranks:
            raise ValueError(f"this schedule is for {algorithm.nranks} ranks; the communicator has {nranks}")
        root = options.get("root")
        if root is not None and algorithm.collective.root is not None and algorithm.collective.root != root:
            raise ValueError(f"this schedule has root {algorithm.collective.root}, but root={root} was asked for")
        try:
            check(algorithm)  # a schedule of one's own runs only if it does what its collective promises
        except ScheduleError as err:
            raise ValueError(f"this schedule is wrong, so it is not run: {err}") from None
        return algorithm
    if not isinstance(algorithm, str):
        raise ValueError(f"algorithm must be a name or a Schedule, got {algorithm!r}")
    if kind is None:
        if algorithm not in ALGORITHMS:
            build(algorithm, nranks)  # raises, saying which names there are
        kind = algorithm.split(".", 1)[0]
    name = algorithm if "." in algorithm else f"{kind}.{algorithm}"
    mine = sorted(n for n in ALGORITHMS if n.startswith(kind + "."))
    if name not in mine:
        short = ", ".join(n.split(".", 1)[1] for n in mine)
        raise ValueError(f"unknown {kind} algorithm {algorithm!r}; choose one of: {short}")
    chosen = tuple(sorted((k, v) for k, v in options.items() if v is not None))
    return _built(name, nranks, chosen)  # build() checks the options


def _array_fields(x) -> dict:
    """What the ranks must agree on about their arrays, without trusting that x is one."""
    return {"memory": "device" if is_device_array(x) else "host", "shape": list(getattr(x, "shape", ())),
            "dtype": str(getattr(x, "dtype", "-"))}


def _not_an_array(x) -> str | None:
    """Why ``x`` is no numeric numpy or cupy array that a collective can take (None: it is one)."""
    module = type(x).__module__.split(".", 1)[0]
    if module == "torch":
        return ("x is a torch tensor: pass t.numpy() (on the CPU) or cupy.from_dlpack(t) (on a GPU), which share "
                "its memory; ringlab's collectives take numpy and cupy arrays")
    if isinstance(x, np.ma.MaskedArray):
        return ("x is a masked array: a collective would add its hidden values too; pass x.filled(0) (masked "
                "values as 0) or np.asarray(x) if the mask does not matter")
    dtype = getattr(x, "dtype", None)
    if not hasattr(x, "shape") or not is_number_type(dtype):
        return f"x must be a numeric numpy or cupy array, got {type(x).__name__}"
    return None


def _problems(x, kind: str | None, in_place: bool, timeout, out=None, op: str = "sum") -> list[str]:
    """What is wrong with this rank's arguments, found before any rank waits for another."""
    problems = reductions.problems(op, getattr(x, "dtype", None), kind)
    if out is not None:
        problems += _out_problems(x, out, in_place)
    wrong = _not_an_array(x)
    if wrong:
        problems.append(wrong)
    else:
        if x.dtype.kind == "b" and kind in (None, "reduce", "allreduce", "reduce_scatter"):
            problems.append("x holds booleans, which have no sum (MPI refuses them too): cast it to an integer type")
        if in_place and not x.flags.c_contiguous:
            problems.append("in_place=True needs a C-contiguous array")
        if in_place and not getattr(x.flags, "writeable", True):
            problems.append("in_place=True needs a writable array")
    if not usable(timeout):
        problems.append(f"timeout must be a number of seconds > 0 (or None: no limit), got {timeout!r}")
    return problems


def _out_problems(x, out, in_place: bool) -> list[str]:
    """What keeps ``out`` from receiving the result for ``x``."""
    if in_place:
        return ["give either out= or in_place=True, not both"]
    if is_device_array(out) != is_device_array(x) or not hasattr(out, "flags"):
        return [f"out must be an array of the same kind as x ({type(x).__name__}), got {type(out).__name__}"]
    if tuple(out.shape) != tuple(getattr(x, "shape", ())) or out.dtype != getattr(x, "dtype", None):
        return [f"out has shape {tuple(out.shape)} and dtype {out.dtype}; x has {tuple(x.shape)} and {x.dtype}"]
    if not out.flags.c_contiguous or not getattr(out.flags, "writeable", True):
        return ["out must be a C-contiguous, writable array"]
    if is_device_array(x) and getattr(out, "device", None) != getattr(x, "device", None):
        return ["out is on another GPU than x: they must share a GPU"]
    return []


def _fields(kind, x, algorithm, schedule, transport: str, in_place: bool, options: dict, problems: list,
            op: str = "sum") -> dict:
    """What the ranks compare before anything lands."""
    label = algorithm if isinstance(algorithm, str) else getattr(algorithm, "name", repr(algorithm))
    fields = {"collective": kind or getattr(schedule, "name", "?"), **_array_fields(x), "algorithm": label,
              "transport": transport, "in_place": in_place, **options, "emulation": emulate.describe(),
              "problems": problems}
    if op != "sum":  # only then: a sum's fields stay as they were
        fields["op"] = op
    if isinstance(algorithm, Schedule):
        fields["schedule"] = algorithm.fingerprint()
    return fields


def _fingerprint(algorithm) -> str | None:
    """A Schedule's fingerprint, by which the calls that run it are remembered (its content, never the identity of
    an object that may die and leave its id to another); None for anything else, which is refused later."""
    fingerprint = getattr(algorithm, "fingerprint", None)
    return fingerprint() if isinstance(algorithm, Schedule) and fingerprint is not None else None


def _remembered(state, kind, x, algorithm, comm, transport: str, options: dict, in_place: bool, out, timeout,
                what: str, op: str = "sum") -> Call | None:
    """The remembered :class:`~ringlab.mpi.plan.Call` for these arguments (made on first use), or None when
    they take the general way: not numpy, bfloat16 (which MPI cannot read: the general way sends its raw
    words), a transport other than host, an emulated machine or a straggler, or a problem."""
    if type(x) is not np.ndarray or transport not in ("auto", "host") or not usable(timeout) or is_bfloat16(x.dtype):
        return None
    if (emulate.possible() and emulate.current()) or emulate.stall():  # emulated links (and slowed links between
        return None  # simulated nodes), and a straggler's pauses, are the general way's
    if out is not None and not (type(out) is np.ndarray and out.shape == x.shape and out.dtype == x.dtype
                                and out.flags.c_contiguous and out.flags.writeable and not in_place):
        return None
    flags = x.flags
    key = (what, kind, algorithm if isinstance(algorithm, str) else _fingerprint(algorithm), x.shape, x.dtype,
           flags.c_contiguous, flags.writeable, in_place, out is None, transport,
           tuple(options.items()) if options else (), op)
    try:
        call = remembered(state, key)
    except TypeError:  # an option that cannot be a key (a list where a number belongs): the general way says why
        return None
    if call is not None:
        return call
    if _problems(x, kind, in_place, timeout, out, op):
        return None
    try:
        schedule = resolve(kind, algorithm, comm.Get_size(), **options)
    except ValueError:
        return None
    if reductions.problems(op, x.dtype, schedule.collective.kind):
        return None
    text = private.as_text(_fields(kind, x, algorithm, schedule, transport, in_place, options, [], op))
    return remember(state, key, Call(state, schedule, text, comm, max(x.size, 0), x.dtype, op))


def _run(kind: str | None, x, *args, **kwargs):
    """:func:`_call`, leaving the caller's current GPU current when it returns (or raises)."""
    ticking = None
    if emulate.possible():  # on an emulated machine the learner's compute ends here: the rest is the call's own,
        cpu = thread_time()  # and its bookkeeping is not counted on the clock
        if emulate.current() is not None:
            ticking = emulate.clock()
            ticking.enter(cpu)
    device = getattr(x, "device", None) if type(x) is not np.ndarray and is_device_array(x) else None
    try:
        if device is None or not hasattr(device, "__enter__"):
            return _call(kind, x, *args, **kwargs)
        with device:  # cupy's Device makes x's GPU current and restores the caller's on exit
            return _call(kind, x, *args, **kwargs)
    finally:
        if ticking is not None:
            ticking.leave()


def _call(kind: str | None, x, algorithm, comm, transport: str, options: dict, *, in_place: bool, agree: bool,
          trace: bool, timeout, what: str, out=None, op: str = "sum"):
    """On ringlab's private duplicate of ``comm``: find what is wrong on this rank, agree with the others
    (so that a mistake anywhere raises the same ValueError everywhere), choose, then hand ``x`` down once."""
    with private.entered(_world(comm), what, timeout) as state:
        comm, limit = state.comm(what, None), seconds(timeout)
        problems, bad_root = [], False
        if options.get("local") == "nodes":  # allreduce.hierarchical: ranks per node, from the ranks themselves
            try:
                options = dict(options, local=nodes.ranks_per_node(comm, limit))
            except ValueError as err:
                options, problems = dict(options, local=None), [str(err)]
        if "root" in options:  # before resolve, which caches on it: a root must be a hashable int
            try:
                options = dict(options, root=check_root(options["root"], comm.Get_size()))
            except ValueError as err:
                options, problems, bad_root = dict(options, root=repr(options["root"])), problems + [str(err)], True
        if kind == "allreduce" and not trace and not problems and type(algorithm) is str and algorithm in SYMMETRIC:
            result = _symmetric(state, x, algorithm, comm, transport, options, in_place, out, agree, timeout, limit,
                                what, op)
            if result is not _MESSAGES:
                return result
            if state.cache.get("agreed") == state.calls:
                agree = False  # this call's message agreement is done
        if not trace and not problems and kind not in BLOCKS:
            call = _remembered(state, kind, x, algorithm, comm, transport, options, in_place, out, timeout, what, op)
            if call is not None:  # the agreement rides beside the first step's messages: no round trip of its own
                first = (private.agree_alongside(state, what, call.text, call.digest, limit, call.first_sources)
                         if agree else None)
                result = call.run(x, out, in_place, limit, first)
                return result if kind == "allreduce" or kind == "broadcast" else _hand_back(kind, result, comm,
                                                                                            options, False)
        schedule, problems = _checked(kind, x, algorithm, comm, options, in_place, timeout, out, op, bad_root, problems)
        if agree:
            text = private.as_text(_fields(kind, x, algorithm, schedule, transport, in_place, options, problems, op))
            private.agree(state, what, text, private.digest(text), limit)
        if problems:
            raise ValueError(f"{what}: {'; '.join(problems)}")
        device = None
        if is_device_array(x):  # work on the GPU that holds x; a rank's own GPU for anything else
            device = getattr(x, "device", None)
            device.use() if hasattr(device, "use") else bind_device(comm)
        name = choose(None if device is None else device.id, comm, transport)
        blocks = kind in BLOCKS
        work = _lay_out(kind, x, comm, options.get("root")) if blocks else x
        result = run_schedule(schedule, work, comm, name, in_place=in_place or blocks, trace=trace, timeout=limit,
                              out=out, op=op)
        return _hand_back(kind, result, comm, options, trace)


_MESSAGES = object()  # a symmetric algorithm's call that runs as messages


def _symmetric(state, x, algorithm: str, comm, transport: str, options: dict, in_place: bool, out, agree: bool,
               timeout, limit, what: str, op: str):
    """``allreduce.oneshot`` or ``twoshot`` through the shared window of ranks on one node
    (:mod:`ringlab.mpi.symmetric`), its agreement in the window's headers; :data:`_MESSAGES` when this call
    runs as messages (not numpy in host memory, bfloat16, bigger than the window, an emulated machine or a
    straggler, ranks on several nodes, or something to report: the general way says what)."""
    if (type(x) is not np.ndarray or transport not in ("auto", "host") or options or is_bfloat16(x.dtype)
            or (emulate.possible() and emulate.current()) or emulate.stall()):
        return _MESSAGES
    found = state.cache.get("symmetric")
    if found is False:
        return _MESSAGES
    if out is not None and not (type(out) is np.ndarray and out.shape == x.shape and out.dtype == x.dtype
                                and out.flags.c_contiguous and out.flags.writeable and not in_place):
        return _MESSAGES
    if in_place and not (x.flags.c_contiguous and x.flags.writeable):
        return _MESSAGES
    signatures = state.cache.setdefault("signatures", {})
    key = (algorithm, x.shape, x.dtype, in_place, out is None, op)
    sig = signatures.get(key)
    if sig is None:
        if _problems(x, "allreduce", in_place, timeout, out, op):
            return _MESSAGES
        schedule = resolve("allreduce", algorithm, comm.Get_size())
        text = private.as_text(_fields("allreduce", x, algorithm, schedule, transport, in_place, options, [], op))
        sig = signatures[key] = symmetric.Signature(text, x, op, symmetric.NAMES[algorithm] == "twoshot",
                                                    comm.Get_size())
    for attempt in range(2):
        if found is None:  # the first such call on this duplicate: agreed by messages, then the window is made
            private.agree(state, what, sig.text, sig.digest, limit)
            state.cache["agreed"] = state.calls
            found = symmetric.open_window(state, what, limit)
            if not found:
                return _MESSAGES
        result = symmetric.run(state, found, sig, x, out, in_place, what, limit)
        if result is not None:
            return result
        # a peer is in the message agreement: it names what differs, or who is out of step; if it agrees, the
        # peers have no window on this duplicate (one failed part-way): every rank makes a new one
        private.agree(state, what, sig.text, sig.digest, limit)
        state.cache.pop("symmetric", None)
        found = None
    raise RuntimeError(f"{what}: the ranks could not meet on the shared window twice in a row")


_NO_SIGNATURES: dict = {}  # (never written: what a state without signatures yet reads)
_LAST: list = [(None, None)]  # (the communicator of the last thin call, ringlab's state for it)


def _lane(x, algorithm: str, comm, in_place: bool, out, op: str, timeout):
    """The thin way of a one-shot or two-shot allreduce that was called like this before on this communicator:
    its window and signature are there, so the call is the window's rounds and little else (:data:`_MESSAGES`
    for any other: the general way, which makes them)."""
    if not emulate.plain():
        return _MESSAGES
    last = _LAST[0]  # one read of one tuple: another thread may replace it meanwhile, never half of it
    if comm is None:
        comm = _WORLD[0] if _WORLD else _world(None)
    state = last[1] if last[0] is comm else None
    if state is None or state.freed:
        state = private.state(comm)
        _LAST[0] = (comm, state)
    cache = state.cache
    found = cache.get("symmetric")
    sig = cache.get("signatures", _NO_SIGNATURES).get((algorithm, x.shape, x.dtype, in_place, out is None, op)) \
        if found else None
    if sig is None or (in_place and out is not None):
        return _MESSAGES
    if out is not None:
        flags = out.flags if type(out) is np.ndarray else None
        if flags is None or not (flags.c_contiguous and flags.writeable and out.shape == x.shape
                                 and out.dtype == x.dtype):
            return _MESSAGES
    elif in_place:
        flags = x.flags
        if not (flags.c_contiguous and flags.writeable):
            return _MESSAGES
    lock = state.lock
    if state._dup is None or not lock.acquire(False):  # (the general way says why: another thread is in a call)
        return _MESSAGES
    try:  # what private.entered does, written out: a small call is counted in tenths of a microsecond
        state.calls += 1
        result = symmetric.run(state, found, sig, x, out, in_place, "rl.allreduce", timeout)
        if result is None:  # a peer is on the message path: meet it there (see _symmetric)
            limit = seconds(timeout)
            private.agree(state, "rl.allreduce", sig.text, sig.digest, limit)
            state.cache.pop("symmetric", None)
            result = _symmetric(state, x, algorithm, state.comm("rl.allreduce", limit), "auto", {}, in_place, out,
                                True, timeout, limit, "rl.allreduce", op)
            if result is _MESSAGES:
                raise RuntimeError("rl.allreduce: the ranks left the shared window for messages part-way")
        return result
    except BaseException as err:
        private.failed(state, type(err), err)
        raise
    finally:
        lock.release()


def _checked(kind, x, algorithm, comm, options: dict, in_place: bool, timeout, out, op: str, bad_root: bool,
             found: list) -> tuple[Schedule | None, list[str]]:
    """The schedule for this call, and everything wrong with this rank's arguments (``found`` so far)."""
    n = comm.Get_size()
    problems = _problems(x, kind, in_place, timeout, out, op) + found
    if kind in BLOCKS and not problems and kind != "gather" and (len(x.shape) == 0 or x.shape[0] != n):
        problems.append(f"x must hold one block per rank along its first axis ({n} for {n} ranks), "
                        f"got shape {tuple(x.shape)}")
    schedule = None
    if not bad_root:
        try:
            schedule = resolve(kind, algorithm, n, **options)
        except ValueError as err:
            problems.append(str(err))
        else:
            if kind is None and is_number_type(getattr(x, "dtype", None)):  # a schedule's own collective
                problems += reductions.problems(op, x.dtype, schedule.collective.kind)
    owners = kind in BLOCKS and schedule is not None and schedule.collective.owners
    if owners and owners != tuple(range(n)):  # a schedule of one's own: its chunk r must be rank r's block
        problems.append(f"this schedule's chunk owners are {list(owners)}; rl.{kind} needs chunk r owned by rank r")
    try:
        if emulate.current() is not None:
            emulate.current().resolve(n)
    except ValueError as err:
        problems.append(str(err))
    return schedule, problems


def _lay_out(kind: str, x, comm, root):
    """The work buffer of gather, scatter or alltoall (see the module's docstring), zeroed and C-contiguous,
    with this rank's blocks in place (numpy, or cupy on x's GPU)."""
    n, rank, xp = comm.Get_size(), comm.Get_rank(), array_module(x)
    if kind == "scatter":
        work = xp.zeros(tuple(x.shape), dtype=x.dtype)
        if rank == root:
            work[...] = x
        return work
    work = xp.zeros((n, *x.shape), dtype=x.dtype)  # alltoall: work[s, d], the block rank s sends to rank d
    work[rank] = x
    return work


def _hand_back(kind: str | None, result, comm, options: dict, trace: bool):
    """What this rank's call returns, from the array it ended with: a reduce's or gather's result on the root
    only, this rank's blocks of a scatter or alltoall (a copy: a view would keep all n blocks alive)."""
    if not trace and (kind == "allreduce" or kind == "broadcast" or kind is None):
        return result
    out, table = result if trace else (result, None)
    rank = comm.Get_rank()
    if kind in ("reduce", "gather"):
        out = out if rank == options["root"] else None
    elif kind in ("scatter", "alltoall"):
        out = (out[rank] if kind == "scatter" else out[:, rank]).copy()
        wait_for_gpu(out)  # as every collective: the result is in memory when the call returns
    return (out, table) if trace else out


def execute(schedule, x, comm=None, transport: str = "auto", *, in_place: bool = False, agree: bool = True,
            trace: bool = False, timeout=DEFAULT, out=None, op: str = "sum"):
    """Run ``schedule`` (a Schedule, checked first, or a registered name such as ``"allreduce.ring"``)
    on this rank's array ``x``; return the array this rank ends with.

    The input is left untouched unless ``in_place=True``; ``out=`` (an array like ``x``) receives
    the result instead of a new array, so that nothing is allocated per call. With ``trace=True`` return
    ``(array, trace)``: rank 0's trace holds every rank's transfers, the others their own. ``op``:
    how a schedule that reduces combines data, one of ``sum`` (default), ``prod``, ``max``, ``min``,
    ``avg`` (NCCL's operators; ``avg`` is the sum divided by the number of ranks).
    """
    return _run(None, x, schedule, comm, transport, {}, in_place=in_place, agree=agree, trace=trace,
                timeout=timeout, what="rl.execute", out=out, op=op)


def allreduce(x, algorithm="ring", comm=None, transport: str = "auto", *, in_place: bool = False,
              agree: bool = True, trace: bool = False, timeout=DEFAULT, root: int | None = None,
              servers: int | None = None, segments: int | None = None, rings: int | None = None, orders=None,
              local: int | None = None, out=None, op: str = "sum"):
    """Sum ``x`` over all ranks (or reduce it by ``op``); every rank gets the result (a new array of the
    same type and shape).

    ``algorithm``: ``"ring"`` (default), ``"naive"`` (through ``root``), ``"ps"`` (``servers``
    shards), ``"tree"``, ``"rhd"``, ``"dbtree"`` (NCCL's double binary tree, pipelined in
    ``segments``), ``"rings"`` (``rings`` rings at once, optionally in ``orders``: one permutation
    of the ranks per ring), ``"hierarchical"`` (``local`` ranks per node; by default the nodes of
    ``comm``, found by :func:`ringlab.mpi.nodes.ranks_per_node`: hosts, or ``RINGLAB_RANKS_PER_NODE``
    for simulated nodes), a full name, or a Schedule. Options left None take the builder's default.
    ``out=`` (an array like ``x``) receives the sum instead of a new array. ``op``: NCCL's reductions,
    ``"sum"`` (default), ``"prod"``, ``"max"``, ``"min"`` or ``"avg"`` (the sum divided by the number of
    ranks: floats divided, integers rounded toward zero as NCCL does). ``x`` may be bfloat16 (an
    ``ml_dtypes.bfloat16`` array), reduced in bfloat16 as NCCL reduces it.
    """
    if (type(algorithm) is str and algorithm in SYMMETRIC and type(x) is np.ndarray and not trace
            and transport == "auto" and root is None and servers is None and segments is None and rings is None
            and orders is None and local is None):
        result = _lane(x, algorithm, comm, in_place, out, op, timeout)
        if result is not _MESSAGES:
            return result
    if local is None and algorithm in ("hierarchical", "allreduce.hierarchical"):
        local = "nodes"  # the nodes, found from the ranks on ringlab's own communicator
    options = {}
    if root is not None or servers is not None or segments is not None or rings is not None or local is not None:
        options = {k: v for k, v in (("root", root), ("servers", servers), ("segments", segments), ("rings", rings),
                                     ("local", local)) if v is not None}
    if orders is not None:  # as tuples: the options are part of a cache key
        from ..algorithms.channels import frozen_orders
        options["orders"] = frozen_orders(orders)
    return _run("allreduce", x, algorithm, comm, transport, options, in_place=in_place, agree=agree, trace=trace,
                timeout=timeout, what="rl.allreduce", out=out, op=op)


def reduce(x, root: int = 0, algorithm="tree", comm=None, transport: str = "auto", *, in_place: bool = False,
           agree: bool = True, trace: bool = False, timeout=DEFAULT, segments: int | None = None,
           out=None, op: str = "sum"):
    """Sum ``x`` over all ranks onto ``root`` (or reduce it by ``op``: ``"prod"``, ``"max"``, ``"min"``,
    ``"avg"``, as :func:`allreduce`); the root gets the result, every other rank None.

    ``algorithm``: ``"tree"`` (default), ``"direct"``, ``"chain"`` (``segments``), a full name,
    or a Schedule. With ``in_place=True`` (or ``out=``) the other ranks' arrays hold partial sums afterwards.
    """
    options = {"root": root, **({"segments": segments} if segments is not None else {})}
    return _run("reduce", x, algorithm, comm, transport, options, in_place=in_place, agree=agree, trace=trace,
                timeout=timeout, what="rl.reduce", out=out, op=op)


def broadcast(x, root: int = 0, algorithm="chain", comm=None, segments: int | None = None,
              transport: str = "auto", *, in_place: bool = False, agree: bool = True, trace: bool = False,
              timeout=DEFAULT, out=None):
    """Copy root's ``x`` to every rank; every rank passes an array of the same shape and dtype.

    ``algorithm``: ``"chain"`` (default, pipelined in ``segments`` pieces), ``"tree"``,
    ``"direct"``, a full name, or a Schedule.
    """
    options = {"root": root, **({"segments": segments} if segments is not None else {})}
    return _run("broadcast", x, algorithm, comm, transport, options, in_place=in_place, agree=agree, trace=trace,
                timeout=timeout, what="rl.broadcast", out=out)




def gather(x, root: int = 0, algorithm="direct", comm=None, transport: str = "auto", *, agree: bool = True,
           trace: bool = False, timeout=DEFAULT):
    """Every rank's block ``x`` (same shape and dtype everywhere) onto ``root``: the root gets an array
    of shape ``(n, *x.shape)`` whose block r is rank r's ``x``; every other rank gets None.

    ``algorithm``: ``"direct"`` (default), ``"ring"``, ``"tree"``, a full name, or a Schedule.
    """
    return _run("gather", x, algorithm, comm, transport, {"root": root}, in_place=False, agree=agree, trace=trace,
                timeout=timeout, what="rl.gather")


def scatter(x, root: int = 0, algorithm="direct", comm=None, transport: str = "auto", *, agree: bool = True,
            trace: bool = False, timeout=DEFAULT):
    """Block r of root's ``x`` (first axis of length n) to rank r, which gets an array of shape
    ``x.shape[1:]``. Every rank passes an array of the same shape and dtype; only the root's is read.

    ``algorithm``: ``"direct"`` (default), ``"ring"``, ``"tree"``, a full name, or a Schedule.
    """
    return _run("scatter", x, algorithm, comm, transport, {"root": root}, in_place=False, agree=agree, trace=trace,
                timeout=timeout, what="rl.scatter")


def alltoall(x, algorithm="pairwise", comm=None, transport: str = "auto", *, agree: bool = True,
             trace: bool = False, timeout=DEFAULT):
    """Block d of ``x`` (first axis of length n) to rank d; every rank gets an array shaped like ``x``
    whose block s came from rank s. The work buffer is n times ``x`` (n x n blocks).

    ``algorithm``: ``"pairwise"`` (default), ``"direct"``, ``"ring"``, a full name, or a Schedule.
    """
    return _run("alltoall", x, algorithm, comm, transport, {}, in_place=False, agree=agree, trace=trace,
                timeout=timeout, what="rl.alltoall")


def which_transport(x, comm=None, transport: str = "auto") -> str:
    """The transport a call on ``x`` would use here: ``host`` for numpy; for cupy, what ``auto`` picks."""
    return choose(x.device.id if is_device_array(x) else None, _world(comm), transport)

# rl.alltoallv: an all-to-all with sizes of its own for every pair (MPI's ``Alltoallv``; NCCL has none, and frameworks
# group one send and one receive per peer, as ``torch.distributed.all_to_all_single`` with split sizes does): what a
# dropless mixture-of-experts layer sends, each rank's tokens to each expert's rank, as many as the router chose.
#
# ``rl.alltoallv(x, counts)``: rank r sends ``counts[r][d]`` rows of ``x`` to rank d (``x``'s rows grouped by
# destination, in rank order) and gets back the rows every rank sent it, grouped by source in rank order. Every
# rank passes the same ``counts``, the whole n x n table: a layer that routes tokens has it anyway (an allreduce of
# each rank's row), and with it every rank knows what it will receive without asking.
#
# It runs the pairwise exchange that ``alltoall.pairwise`` runs with equal blocks: n-1 rounds, round k sending to
# rank r+k and receiving from rank r-k (mod n), one message each way a round, so a round takes as long as its
# largest message. The ranks agree on the call first (the table, the dtype, the row shape, and what is wrong on any
# rank) as every ringlab call does, so a mistake on one rank is the same ValueError on every rank; a round that
# does not finish within the deadline is a StepTimeout naming the round and the peer.
#
# On an emulated machine (``rl.emulate``) each round's n messages share the links they cross
# (:func:`ringlab.mpi.emulate.message_times`, from the table every rank holds), and each message's arrival on its
# sender's clock travels beside it as a stamp; as in a schedule's step, a send is done when it has arrived, and a
# receive no sooner than that arrival nor than the message's own time from the round's start on the receiver's
# clock (its link takes one round's message after the other's). The call's own copies and bookkeeping count nothing.

V_DATA_TAG, V_STAMP_TAG = 0, 1  # on ringlab's private duplicate of the communicator: a call's rows, and their arrival


def alltoallv(x, counts, comm=None, *, agree: bool = True, timeout=DEFAULT) -> np.ndarray:
    """Rank r sends ``counts[r][d]`` rows of ``x`` to rank d; returns what rank r received, grouped by source.

    ``x``: a numpy or cupy array whose first axis holds ``sum(counts[r])`` rows, those for rank 0 first, then rank 1's,
    and so on (a rank's rows for itself stay home). ``counts``: the n x n table of whole numbers >= 0, the same
    on every rank. Returns an array of ``sum(counts[:, r])`` rows shaped like ``x``'s, rank 0's first. Call on
    every rank of ``comm`` (default: MPI.COMM_WORLD). A cupy array is staged through host memory (to the host,
    exchanged, back to its GPU), and the result is a cupy array on the same GPU.
    """
    ticking = None
    if emulate.possible():  # on an emulated machine the learner's compute ends here: the rest is the call's own
        cpu = thread_time()
        if emulate.current() is not None:
            ticking = emulate.clock()
            ticking.enter(cpu)
    try:
        return _alltoallv(x, counts, comm, agree, timeout)
    finally:
        if ticking is not None:
            ticking.leave()


def _alltoallv(x, counts, comm, agree: bool, timeout) -> np.ndarray:
    from mpi4py import MPI

    what = "rl.alltoallv"
    comm = MPI.COMM_WORLD if comm is None else comm
    with private.entered(comm, what, timeout) as state:
        dup, limit = state.comm(what, None), seconds(timeout)
        n, rank = dup.Get_size(), dup.Get_rank()
        table, problems = _checked_v(x, counts, n, rank)
        if agree:
            fields = {"collective": "alltoallv", "counts": table.tolist() if table is not None else repr(counts),
                      "dtype": str(getattr(x, "dtype", "-")), "row": list(getattr(x, "shape", (0,))[1:]),
                      "emulation": emulate.describe(), "problems": problems}
            text = private.as_text(fields)
            private.agree(state, what, text, private.digest(text), limit)
        if problems:
            raise ValueError(f"{what}: {'; '.join(problems)}")
        if not is_device_array(x):
            return _exchange_v(x, table, dup, rank, n, limit)
        cp = array_module(x)  # a GPU array: staged through host memory, on the GPU that holds it
        with x.device:
            host = cp.asnumpy(x)  # blocking: x's pending work is done, and its bytes are here
            out = cp.asarray(_exchange_v(host, table, dup, rank, n, limit))
            cp.cuda.get_current_stream().synchronize()  # the result is on the GPU when the call returns
        return out


def _checked_v(x, counts, n: int, rank: int) -> tuple[np.ndarray | None, list[str]]:
    """The table as int64, and what is wrong with this rank's arguments (empty: nothing)."""
    problems = []
    if type(x) is not np.ndarray and not is_device_array(x):
        kind = type(x).__module__.split(".", 1)[0]
        hint = (": pass t.numpy() (on the CPU) or cupy.from_dlpack(t) (on a GPU), which share its memory"
                if kind == "torch" else "")
        problems.append(f"x must be a numpy or cupy array, got {type(x).__name__}{hint}")
    elif x.ndim < 1:
        problems.append("x must have at least one axis (its rows)")
    elif x.dtype.hasobject:
        problems.append(f"x holds Python objects ({x.dtype}); give it a numeric dtype")
    try:
        table = np.asarray(counts)
    except Exception:  # a ragged list, say
        return None, problems + [f"counts must be an {n} x {n} table of whole numbers, got {counts!r}"[:300]]
    if table.shape != (n, n) or not np.issubdtype(table.dtype, np.integer):
        return None, problems + [f"counts must be an {n} x {n} table of whole numbers (one row a sending rank), got "
                                 f"shape {table.shape} of {table.dtype}"]
    table = table.astype(np.int64)
    if (table < 0).any():
        problems.append(f"counts must be >= 0, got {int(table.min())}")
    elif not problems and x.shape[0] != table[rank].sum():
        problems.append(f"rank {rank}'s x has {x.shape[0]} rows, but its row of counts sends {int(table[rank].sum())}")
    return table, problems


def _exchange_v(x: np.ndarray, table: np.ndarray, comm, rank: int, n: int, limit: float | None) -> np.ndarray:
    """The pairwise rounds (see the comment that opens this section): in round k rank r sends its block for rank
    r+k and receives rank r-k's, each message its own size; on an emulated machine a stamp travels with each."""
    row_bytes = x.dtype.itemsize * int(np.prod(x.shape[1:], dtype=np.int64))
    source = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.empty((int(table[:, rank].sum()), *x.shape[1:]), x.dtype)
    landing = out.reshape(-1).view(np.uint8)
    sent_at = np.concatenate(([0], np.cumsum(table[rank]))) * row_bytes  # byte offsets of x's block for each rank
    got_at = np.concatenate(([0], np.cumsum(table[:, rank]))) * row_bytes  # and of out's block from each rank
    landing[got_at[rank]:got_at[rank + 1]] = source[sent_at[rank]:sent_at[rank + 1]]
    machine = emulate.current()
    deadline = None if limit is None else monotonic() + limit
    stamp_out, stamp_in = np.zeros(1), np.zeros(1)
    for k in range(1, n):
        to, frm = (rank + k) % n, (rank - k) % n
        requests = [comm.Irecv(landing[got_at[frm]:got_at[frm + 1]], source=frm, tag=V_DATA_TAG),
                    comm.Isend(source[sent_at[to]:sent_at[to + 1]], dest=to, tag=V_DATA_TAG)]
        if machine is not None:  # every round's messages at once, sharing the links they cross
            times = emulate.message_times([(q, (q + k) % n, int(table[q, (q + k) % n]) * row_bytes)
                                           for q in range(n)], comm)
            start = emulate.clock().now()
            stamp_out[0] = start + times.get((rank, to), 0.0)
            requests += [comm.Irecv(stamp_in, source=frm, tag=V_STAMP_TAG),
                         comm.Isend(stamp_out, dest=to, tag=V_STAMP_TAG)]

        def late(k=k, to=to, frm=frm, requests=requests) -> str:
            waiting = []
            if not requests[0].Test():
                waiting.append(f"to receive {_rows(table[frm, rank])} from rank {frm}")
            if not requests[1].Test():
                waiting.append(f"for rank {to} to take {_rows(table[rank, to])}")
            return (f"rank {rank}: rl.alltoallv round {k} of {n - 1} did not finish within {limit:g} s: still waiting "
                    + (" and ".join(waiting) or "for the arrival times of an emulated machine's messages"))

        try:
            wait_all(requests, deadline, late)
        except StepTimeout as err:
            err.peers = tuple(sorted({peer for peer, request in ((frm, requests[0]), (to, requests[1]))
                                      if not request.Test()} or {to, frm}))
            raise
        if machine is not None:  # as a schedule's step: a send is done when it has arrived, and a receive no
            # sooner than its arrival on the sender's clock nor than this rank's own time for it from the round's start
            emulate.clock().at_least(max(float(stamp_out[0]), float(stamp_in[0]), start + times.get((frm, rank), 0.0)))
    return out


def _rows(count) -> str:
    return f"{int(count)} row{'' if count == 1 else 's'}"
