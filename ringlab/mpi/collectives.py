"""Collectives on real MPI ranks: ``rl.allreduce``, ``rl.reduce``, ``rl.broadcast`` and ``rl.execute``.

Call them on every rank of a communicator (a script under ``mpiexec -n 4 python -m mpi4py``, or
ipyparallel MPI engines), each with its own numpy or cupy array. ``algorithm`` is a short name
within the collective (``"ring"``, ``"naive"``, ``"ps"``, ``"tree"``, ``"rhd"``, ``"chain"``...),
a full registered name (``"allreduce.ring"``) or a Schedule of your own.

Every call runs on ringlab's private duplicate of ``comm`` (:mod:`ringlab.mpi.private`), so a
message of the user's own still pending on ``comm`` is never matched by ringlab's. Before any data
moves the ranks compare what they were given (size, dtype, algorithm, root) and the number of the
call on this communicator, and all raise the same ValueError if they disagree (``agree=False``
skips this). Every wait has a deadline (``timeout``, by default :data:`ringlab.mpi.deadlines.DEFAULT_SECONDS`
or ``RINGLAB_TIMEOUT``; None: no limit): a step that never finishes is a StepTimeout naming the
step and the peer. Run scripts as ``python -m mpi4py script.py``: then an exception on one rank
aborts the whole job instead of leaving the others waiting.
"""
from __future__ import annotations

import json

import numpy as np

from ..algorithms import ALGORITHMS, build
from ..schedule import Schedule, check_root, chunk_bounds
from ..simulate import ScheduleError, check
from .caches import bounded
from .deadlines import DEFAULT, seconds, usable
from .devices import array_module, bind_device, is_device_array, wait_for_gpu
from . import emulate, fastpath, nodes, private
from .executor import Recorder, Trace, compile_plan, run_plan
from .reduction import is_bfloat16, is_number_type, reduction, wire_dtype
from . import reduction as reductions
from .transports import choose, make_ops


_WORLD: list = []


def _world(comm):
    if comm is not None:
        return comm
    if not _WORLD:  # looked up once: an import statement per call costs as much as a small message
        from mpi4py import MPI
        _WORLD.append(MPI.COMM_WORLD)
    return _WORLD[0]


def _transfers(schedule: Schedule) -> int:
    return sum(len(step.src) for step in schedule.steps)


@bounded(512, _transfers, 500_000)  # at most 512 schedules, 500,000 transfers in all (about 100 MB)
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


def check_agreement(comm, what: str, fields: dict, timeout=DEFAULT, text: str | None = None, mine=None) -> None:
    """All ranks of ``comm`` compare ``fields``; every rank raises the same ValueError on a mismatch.

    Every rank sends a 16-byte digest of its fields (and the number of this call on ``comm``) to every
    other through persistent requests on ringlab's private duplicate of ``comm``
    (:class:`ringlab.mpi.fastpath.Agreement`), so that a rank that never comes is a StepTimeout
    naming it rather than a hang; the full fields follow only when the digests differ, to say what
    differs. ``text`` and ``mine`` (the fields as JSON and its digest) may be given, worked out once.
    """
    with private.entered(comm, what, timeout) as state:
        _agree(state, what, fields, timeout, text, mine)


def _agree(state, what: str, fields: dict | None, timeout, text: str | None = None, mine=None) -> None:
    """The agreement of :func:`check_agreement`, inside a call that has entered ``state`` already."""
    text = json.dumps(fields, sort_keys=True, default=str) if text is None else text
    mine = fastpath.digest(text) if mine is None else mine
    if not fastpath.agreed(state, mine, what, seconds(timeout)):
        _disagreement(state.comm(what, None), what, text)


def _disagreement(comm, what: str, text: str) -> None:
    """The ValueError saying what differs, raised on every rank once the digests differ."""
    seen = [json.loads(t) for t in comm.allgather(text)]  # everyone is here and takes this branch
    for other, theirs in enumerate(seen):
        if theirs != seen[0]:
            detail = "; ".join(f"{k}: rank 0 has {seen[0].get(k)}, rank {other} has {theirs.get(k)}"
                               for k in sorted(set(seen[0]) | set(theirs)) if seen[0].get(k) != theirs.get(k))
            raise ValueError(f"{what}: the ranks disagree ({detail})")


def _fields(kind, x, algorithm, schedule, transport: str, in_place: bool, options: dict, problems: list,
            op: str = "sum") -> dict:
    label = algorithm if isinstance(algorithm, str) else getattr(algorithm, "name", repr(algorithm))
    fields = {"collective": kind or getattr(schedule, "name", "?"), **_array_fields(x), "algorithm": label,
              "transport": transport, "in_place": in_place, **options, "emulation": emulate.describe(),
              "problems": problems}
    if op != "sum":  # only then: a sum's fields stay as they were
        fields["op"] = op
    if isinstance(algorithm, Schedule):
        fields["schedule"] = algorithm.fingerprint()
    return fields


def _fast_call(state, kind, x, algorithm, comm, transport: str, options: dict, in_place: bool, out, timeout,
               what: str, op: str = "sum"):
    """The remembered :class:`~ringlab.mpi.fastpath.Call` for these arguments (made on first use), or
    None when they take the general path: not numpy, bfloat16 (which MPI cannot read: the general
    path sends its raw words), a transport other than host, or a problem."""
    if type(x) is not np.ndarray or transport not in ("auto", "host") or not usable(timeout) or is_bfloat16(x.dtype):
        return None
    if emulate.current():  # emulated links (slowed links between simulated nodes among them) are the general path's
        return None
    if out is not None and not (type(out) is np.ndarray and out.shape == x.shape and out.dtype == x.dtype
                                and out.flags.c_contiguous and out.flags.writeable and not in_place):
        return None
    flags = x.flags
    key = (what, kind, algorithm if isinstance(algorithm, str) else id(algorithm), x.shape, x.dtype,
           flags.c_contiguous, flags.writeable, in_place, out is None, transport,
           tuple(options.items()) if options else (), op)
    calls = fastpath.calls(state)
    call = calls.get(key)
    if call is not None and (isinstance(algorithm, str) or call.schedule is algorithm):
        calls.move_to_end(key)
        return call
    if _problems(x, kind, in_place, timeout, out, op):
        return None
    try:
        schedule = resolve(kind, algorithm, comm.Get_size(), **options)
    except ValueError:
        return None
    if reductions.problems(op, x.dtype, schedule.collective.kind):
        return None
    text = json.dumps(_fields(kind, x, algorithm, schedule, transport, in_place, options, [], op), sort_keys=True,
                      default=str)
    count = max(x.size, 0)
    plan = compile_plan(schedule, comm.Get_rank(), count, x.dtype.itemsize, False, pieces=True)
    ufunc = getattr(np, reduction(op, x.dtype).ufunc)
    return fastpath.remember(state, key, fastpath.Call(state, schedule, plan, text, comm, x.dtype.itemsize, ufunc))


def _run(kind: str | None, x, *args, **kwargs):
    """:func:`_run_checked`, leaving the caller's current GPU current when it returns (or raises)."""
    device = getattr(x, "device", None) if is_device_array(x) else None
    if device is None or not hasattr(device, "__enter__"):
        return _run_checked(kind, x, *args, **kwargs)
    with device:  # cupy's Device makes x's GPU current and restores the caller's on exit
        return _run_checked(kind, x, *args, **kwargs)


def _run_checked(kind: str | None, x, algorithm, comm, transport: str, options: dict, *, in_place: bool, agree: bool,
         trace: bool, timeout, what: str, out=None, op: str = "sum"):
    """On ringlab's private duplicate of ``comm``: find what is wrong on this rank, agree with the others
    (so that a mistake anywhere raises the same ValueError everywhere), then execute."""
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
        if not trace and not problems:
            call = _fast_call(state, kind, x, algorithm, comm, transport, options, in_place, out, timeout, what, op)
            if call is not None:
                if agree and not call.agrees(what, limit):
                    _disagreement(comm, what, call.text)
                return _finished(call.run(x, out, in_place, limit), op, call.schedule, comm)
        problems = _problems(x, kind, in_place, timeout, out, op) + problems
        schedule = None
        if not bad_root:
            try:
                schedule = resolve(kind, algorithm, comm.Get_size(), **options)
            except ValueError as err:
                problems.append(str(err))
            else:
                if kind is None and is_number_type(getattr(x, "dtype", None)):  # a schedule's own collective
                    problems += reductions.problems(op, x.dtype, schedule.collective.kind)
        try:
            if emulate.current() is not None:
                emulate.current().resolve(comm.Get_size())
        except ValueError as err:
            problems.append(str(err))
        if agree:
            _agree(state, what, _fields(kind, x, algorithm, schedule, transport, in_place, options, problems, op),
                   timeout)
        if problems:
            raise ValueError(f"{what}: {'; '.join(problems)}")
        result = _execute(schedule, x, comm, transport, in_place=in_place, trace=trace, timeout=limit, out=out, op=op)
        _finished(result[0] if trace else result, op, schedule, comm)
        return result


def _finished(result, op: str, schedule: Schedule, comm):
    """``result`` with ``avg`` completed (the sum divided by the number of ranks) where the collective
    defines the result: every rank, except the non-roots of a reduce, which hold partial sums."""
    if op == "avg":
        collective = schedule.collective
        if collective.kind != "reduce" or comm.Get_rank() == collective.root:
            reduction("avg", result.dtype).finish(array_module(result), result.reshape(-1), comm.Get_size())
            if is_device_array(result):  # as every collective: the result is in memory when the call returns
                wait_for_gpu(result)
    return result


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


def _execute(schedule: Schedule, x, comm, transport: str, *, in_place: bool, trace: bool, timeout, out=None,
             op: str = "sum"):
    """Run a checked schedule on arguments every rank agreed on."""
    if is_device_array(x):  # work on the GPU that holds x; a rank's own GPU for anything else
        device = getattr(x, "device", None)
        device.use() if hasattr(device, "use") else bind_device(comm)
    xp = array_module(x)
    name = choose(x, comm, transport)
    if out is not None:
        out[...] = x
    else:
        out = x if in_place else xp.array(x, order="C", copy=True)
    flat = out.reshape(-1)
    combine = reduction(op, flat.dtype)
    if is_bfloat16(flat.dtype):  # MPI cannot read bfloat16: its words travel as they are, reduced as bfloat16
        flat = flat.view(wire_dtype(flat.dtype))
    count, itemsize = flat.size, flat.dtype.itemsize
    peer_memory = name.startswith("ipc")  # ipc, or ipc inside nodes and MPI between them
    staged = peer_memory or (name == "host" and xp is not np)
    plan = compile_plan(schedule, comm.Get_rank(), count, itemsize, staged, pieces=not peer_memory)
    recorder = _recorder(comm, flat, itemsize) if trace else None
    ops = emulate.paced(make_ops(name, xp, plan, flat.dtype, comm, count, combine), schedule, count, itemsize, comm,
                        name)
    bounds = chunk_bounds(count, schedule.nchunks)
    run_plan(plan, flat, ops, comm, timeout=timeout, recorder=recorder, bounds=bounds)
    if not trace:
        return out
    rows = comm.gather(recorder.rows, root=0)
    mine = [r for part in rows for r in part] if comm.Get_rank() == 0 else recorder.rows
    return out, Trace(mine, schedule, clock=recorder.clock_name, itemsize=itemsize)


def _recorder(comm, flat, itemsize: int) -> Recorder:
    """A Recorder whose clock starts at a barrier; on a GPU it reads the time after the stream drains."""
    from mpi4py import MPI

    comm.Barrier()
    start = MPI.Wtime()
    on_gpu = is_device_array(flat)

    def clock() -> float:
        if on_gpu:  # so kernel time is counted
            wait_for_gpu(flat)
        return MPI.Wtime() - start

    recorder = Recorder(comm.Get_rank(), itemsize, clock)
    recorder.clock_name = ("host (MPI.Wtime after synchronising the GPU stream, from a barrier)" if on_gpu
                           else "host (MPI.Wtime, from a barrier)")
    return recorder


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
    result = _run("reduce", x, algorithm, comm, transport, options, in_place=in_place, agree=agree, trace=trace,
                  timeout=timeout, what="rl.reduce", out=out, op=op)
    out, table = result if trace else (result, None)
    out = out if _world(comm).Get_rank() == root else None
    return (out, table) if trace else out


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


def which_transport(x, comm=None, transport: str = "auto") -> str:
    """The transport a call on ``x`` would use here: ``host`` for numpy; for cupy, what ``auto`` picks."""
    return choose(x, _world(comm), transport)
