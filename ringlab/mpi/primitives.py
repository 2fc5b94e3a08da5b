"""Gather, scatter and alltoall on real MPI ranks: ``rl.gather``, ``rl.scatter``, ``rl.alltoall``.

MPI's calls take blocks, ringlab's schedules one buffer of chunks that never change position. Each
call lays its blocks out in a *work buffer* whose chunk c is block c, runs the schedule on it with
the executor (``ringlab.mpi.collectives._execute``), and hands back the blocks this rank ends with:

- gather: ``x`` is this rank's block. The work buffer holds n blocks, ``x`` at block ``rank``; the
  root returns it, shape ``(n, *x.shape)``, as ``comm.Gather`` fills its receive buffer.
- scatter: every rank passes an array of the same shape and dtype whose first axis has length n,
  as ``rl.broadcast`` asks (only the root's contents are read). The work buffer is the root's ``x``;
  rank r returns block r, shape ``x.shape[1:]``, as ``comm.Scatter`` does.
- alltoall: ``x``'s first axis has length n, block d going to rank d. The work buffer holds n x n
  blocks, ``x`` at row ``rank`` (chunk s*n+d: rank s's block for rank d), so it is n times ``x``;
  rank d returns column d, shape ``x.shape``, block s from rank s, as ``comm.Alltoall`` does.

As for ``rl.allreduce``, each rank first finds what is wrong with its own arguments (not an
array, a first axis that is not n, a bad root, an unknown algorithm) and the ranks compare them
(shape, dtype, algorithm, root, what is wrong) before any data moves, so a mistake on any rank
raises the same ValueError on every rank (``agree=False`` skips this); every wait has a deadline
(``timeout``, as for ``rl.allreduce``). numpy arrays, or cupy ones through the same transports.
"""
from __future__ import annotations

from ..schedule import check_root
from . import private
from .collectives import _agree, _execute, _fields, _problems, _world, resolve
from .deadlines import DEFAULT, seconds
from .devices import array_module, bind_device, is_device_array, keeps_current_device, wait_for_gpu


@keeps_current_device
def gather(x, root: int = 0, algorithm="direct", comm=None, transport: str = "auto", *, agree: bool = True,
           trace: bool = False, timeout=DEFAULT):
    """Every rank's block ``x`` (same shape and dtype everywhere) onto ``root``: the root gets an array
    of shape ``(n, *x.shape)`` whose block r is rank r's ``x``; every other rank gets None.

    ``algorithm``: ``"direct"`` (default), ``"ring"``, ``"tree"``, a full name, or a Schedule.
    """
    def lay_out(comm):
        work = _blocks(x, comm, (comm.Get_size(), *x.shape))
        work[comm.Get_rank()] = x
        return work

    def hand_back(result, comm):
        return result if comm.Get_rank() == root else None

    return _primitive("gather", x, algorithm, comm, transport, {"root": root}, agree, trace, timeout, lay_out,
                      hand_back)


@keeps_current_device
def scatter(x, root: int = 0, algorithm="direct", comm=None, transport: str = "auto", *, agree: bool = True,
            trace: bool = False, timeout=DEFAULT):
    """Block r of root's ``x`` (first axis of length n) to rank r, which gets an array of shape
    ``x.shape[1:]``. Every rank passes an array of the same shape and dtype; only the root's is read.

    ``algorithm``: ``"direct"`` (default), ``"ring"``, ``"tree"``, a full name, or a Schedule.
    """
    def lay_out(comm):
        work = _blocks(x, comm, tuple(x.shape))
        if comm.Get_rank() == root:
            work[...] = x
        return work

    def hand_back(result, comm):
        return _finished(result[comm.Get_rank()].copy())  # a copy: a view would keep all n blocks alive

    return _primitive("scatter", x, algorithm, comm, transport, {"root": root}, agree, trace, timeout, lay_out,
                      hand_back)


@keeps_current_device
def alltoall(x, algorithm="pairwise", comm=None, transport: str = "auto", *, agree: bool = True,
             trace: bool = False, timeout=DEFAULT):
    """Block d of ``x`` (first axis of length n) to rank d; every rank gets an array shaped like ``x``
    whose block s came from rank s. The work buffer is n times ``x`` (n x n blocks).

    ``algorithm``: ``"pairwise"`` (default), ``"direct"``, ``"ring"``, a full name, or a Schedule.
    """
    def lay_out(comm):
        work = _blocks(x, comm, (comm.Get_size(), *x.shape))  # work[s, d]: the block rank s sends to rank d
        work[comm.Get_rank()] = x
        return work

    def hand_back(result, comm):
        return _finished(result[:, comm.Get_rank()].copy())  # column rank: block s from rank s

    return _primitive("alltoall", x, algorithm, comm, transport, {}, agree, trace, timeout, lay_out, hand_back)


def _primitive(kind: str, x, algorithm, comm, transport: str, options: dict, agree: bool, trace: bool, timeout,
               lay_out, hand_back):
    """On ringlab's private duplicate of ``comm``: agree on the arguments, lay the blocks out in a work
    buffer, run the schedule on it in place, and hand back this rank's blocks."""
    what = f"rl.{kind}"
    with private.entered(_world(comm), what, timeout) as state:
        comm = state.comm(what, None)
        schedule = _agreed(state, kind, x, algorithm, comm, transport, options, agree, timeout, what)
        done = _execute(schedule, lay_out(comm), comm, transport, in_place=True, trace=trace,
                        timeout=seconds(timeout))
        result, table = done if trace else (done, None)
        mine = hand_back(result, comm)
        return (mine, table) if trace else mine


def _agreed(state, kind: str, x, algorithm, comm, transport: str, options: dict, agree: bool, timeout, what: str):
    """This rank's problems with its arguments, agreed on with the others (see ``collectives._run``);
    returns the checked schedule, or raises the same ValueError on every rank."""
    n = comm.Get_size()
    problems = _problems(x, kind, False, timeout)
    if not problems and kind != "gather" and (len(x.shape) == 0 or x.shape[0] != n):
        problems.append(f"x must hold one block per rank along its first axis ({n} for {n} ranks), "
                        f"got shape {tuple(x.shape)}")
    schedule = None
    try:
        if "root" in options:  # before resolve, which caches on it: a root must be a hashable int
            options = dict(options, root=check_root(options["root"], n))
        schedule = resolve(kind, algorithm, n, **options)
    except ValueError as err:
        problems.append(str(err))
        if "root" in options:
            options = dict(options, root=repr(options["root"]))
    owners = getattr(schedule, "collective", None) and schedule.collective.owners
    if owners and owners != tuple(range(n)):  # a schedule of one's own: its chunk r must be rank r's block
        problems.append(f"this schedule's chunk owners are {list(owners)}; {what} needs chunk r owned by rank r")
    if agree:
        _agree(state, what, _fields(kind, x, algorithm, schedule, transport, False, options, problems), timeout)
    if problems:
        raise ValueError(f"{what}: {'; '.join(problems)}")
    return schedule


def _blocks(x, comm, shape: tuple):
    """A zeroed C-contiguous work buffer of ``shape`` like ``x`` (numpy, or cupy on x's GPU)."""
    if is_device_array(x):
        device = getattr(x, "device", None)
        device.use() if hasattr(device, "use") else bind_device(comm)
    return array_module(x).zeros(shape, dtype=x.dtype)


def _finished(array):
    """``array`` once its GPU copy has landed, as every collective returns its result (numpy: as is)."""
    wait_for_gpu(array)
    return array
