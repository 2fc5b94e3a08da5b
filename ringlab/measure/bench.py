"""``ringlab bench``: a sweep over message sizes in the manner of nccl-tests.

For every size and every implementation (ringlab's algorithms by name, MPI's own collective as
``mpi``, NCCL as ``nccl`` with two GPUs or more, ``torch`` for torch.distributed) it checks the
result against MPI's own collective, counts wrong elements, and reports the median time, algbw
and busbw (nccl-tests' factors). Run it inside an MPI job, or give ``-n`` to start one.

Every implementation is timed on the same work: out of place, from the input into an output
allocated once before the sweep's calls (ringlab's ``out=``, MPI's receive buffer, NCCL's
recvbuff); torch.distributed's collectives work in place only, so torch reduces a working copy
in place. Each row says where its bytes were (``memory``): under ``--gpu`` the ``mpi`` row is
MPI on a host copy of the data, and says so.
"""
from __future__ import annotations

import os
import sys
from contextlib import nullcontext

import numpy as np

from ..algorithms import ALGORITHMS, build
from ..mpi.collectives import allreduce, broadcast, execute, reduce
from ..cluster.launch import torch_process_group
from ..schedule import BUS_FACTORS, COLLECTIVES, check_root
from .timing import bandwidths, time_collective

# the collectives a sweep can check against MPI's own call (gather, scatter and alltoall are not wired up yet)
BENCHED = tuple(c for c in COLLECTIVES if c not in ("gather", "scatter", "alltoall"))

DTYPES = {"float16": np.float16, "bfloat16": "bfloat16", "float32": np.float32, "float64": np.float64,
          "int32": np.int32, "int64": np.int64}


def _dtype(name: str) -> np.dtype:
    """The numpy dtype of a bench type name (bfloat16: ml_dtypes')."""
    if name == "bfloat16":
        from ..mpi.reduction import bfloat16

        found = bfloat16()
        if found is None:
            raise ValueError("bfloat16 needs the ml_dtypes package (pip install ml_dtypes)")
        return found
    return np.dtype(DTYPES[name])


def unavailable(name: str, dtype_name: str, op: str, gpu: bool) -> str | None:
    """Why implementation ``name`` cannot run this type or op here (None: it can)."""
    if name.startswith("mpi") and dtype_name == "bfloat16":
        return "MPI has no bfloat16 type (the results are still checked against MPI's float32 reduction)"
    if name == "torch" and op == "avg" and not gpu:
        return "torch's gloo backend has no AVG"
    return None


MOST_SIZES = 4096  # sizes in one sweep, at most: each is timed (iterations and warm-up) and checked
MOST_ITERS = 1_000_000  # timed iterations a size, at most: a million 4 us calls is 4 s a size and 8 MB of timings


def sweep(begin: int, end: int, factor: int | None = None, increment: int | None = None) -> list[int]:
    """Sizes from ``begin`` to ``end`` bytes, multiplying by ``factor`` or adding ``increment``."""
    if begin < 1 or end < begin:
        raise ValueError(f"need 1 <= begin <= end, got begin={begin}, end={end}")
    if (factor is None) == (increment is None):
        raise ValueError("give exactly one of factor (-f) and increment (-i)")
    if factor is not None and factor < 2:
        raise ValueError(f"factor must be >= 2, got {factor}")
    if increment is not None and increment < 1:
        raise ValueError(f"increment must be >= 1, got {increment}")
    if increment is not None and (end - begin) // increment + 1 > MOST_SIZES:  # counted before any list is made
        raise ValueError(f"{(end - begin) // increment + 1:,} sizes from {begin} to {end} bytes by {increment}: a sweep "
                         f"takes at most {MOST_SIZES:,}; give a larger -i, or -f to multiply")
    out, size = [], begin
    while size <= end:
        out.append(size)
        size = size * factor if factor else size + increment
    return out


def in_mpi_job() -> bool:
    """True when this process was started by mpiexec (so -n must not start another job)."""
    return any(k in os.environ for k in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALRANKID"))


class _Implementations:
    """The callables being timed for one collective, one buffer: each returns this rank's result."""

    def __init__(self, collective: str, comm, x, root: int, transport: str, op: str = "sum"):
        self.collective, self.comm, self.x, self.root, self.transport = collective, comm, x, root, transport
        self.n, self.op = comm.Get_size(), op
        self.reduces = collective in ("allreduce", "reduce", "reduce_scatter")

    def ringlab(self, name: str, in_place: bool = False):
        c, x = self.collective, self.x
        reducing = {"op": self.op} if self.reduces else {}
        if in_place:  # on a working copy, which every call overwrites (reset to the input before a check)
            work = x.copy()
            options = {"comm": self.comm, "transport": self.transport, "agree": False, "in_place": True, **reducing}
            calls = {"allreduce": lambda: allreduce(work, name, **options),
                     "reduce": lambda: reduce(work, self.root, name, **options),
                     "broadcast": lambda: broadcast(work, self.root, name, **options)}
            if c in calls:
                call = calls[c]
            else:
                schedule = build(name if "." in name else f"{c}.{name}", self.n)
                call = lambda: execute(schedule, work, **options)  # noqa: E731
            return _returning(call, work, reset=lambda: work.__setitem__(Ellipsis, x))
        out = x.copy()  # allocated once: every call writes the result here
        options = {"comm": self.comm, "transport": self.transport, "agree": False, "out": out, **reducing}
        if c == "allreduce":
            return _returning(lambda: allreduce(x, name, **options), out)
        if c == "reduce":
            return _returning(lambda: reduce(x, self.root, name, **options), out)
        if c == "broadcast":
            return _returning(lambda: broadcast(x, self.root, name, **options), out)
        schedule = build(name if "." in name else f"{c}.{name}", self.n)
        return _returning(lambda: execute(schedule, x, **options), out)

    def mpi(self, in_place: bool = False):
        from mpi4py import MPI

        from ..mpi.reduction import MPI_OPS

        comm, x, n, rank, root = self.comm, self.x, self.n, self.comm.Get_rank(), self.root
        host = x if isinstance(x, np.ndarray) else x.get()
        op = getattr(MPI, MPI_OPS[self.op])  # avg: MPI has none; its SUM, then divided by n in the timed call
        if in_place:  # MPI_IN_PLACE, on a working copy (allreduce: the one MPI call every rank makes alike)
            if self.collective != "allreduce":
                return None
            work = host.copy()
            return _returning(self._averaged(lambda: comm.Allreduce(MPI.IN_PLACE, work, op=op), work), work,
                              reset=lambda: work.__setitem__(Ellipsis, host))
        out = np.empty_like(host)
        block = len(host) // n
        mine = slice(rank * block, (rank + 1) * block)  # this rank's block of reduce_scatter and allgather
        if self.collective == "broadcast":
            out[...] = host  # the root's buffer; the others' are overwritten
        calls = {"allreduce": lambda: comm.Allreduce(host, out, op=op),
                 "reduce": lambda: comm.Reduce(host, out, op=op, root=root),
                 "broadcast": lambda: comm.Bcast(out, root=root),
                 "reduce_scatter": lambda: comm.Reduce_scatter_block(host, out[mine], op=op),
                 "allgather": lambda: comm.Allgather(host[mine], out)}
        target = out[mine] if self.collective == "reduce_scatter" else out
        if self.collective == "reduce" and rank != root:
            return _returning(calls["reduce"], out)
        return _returning(self._averaged(calls[self.collective], target) if self.reduces else calls[self.collective],
                          out)

    def _averaged(self, call, target):
        """``call`` followed, for op avg, by the division of its sum by the number of ranks (MPI has no average)."""
        if self.op != "avg":
            return call
        from ..mpi.reduction import reduction

        finish = reduction("avg", target.dtype).finish

        def averaged():
            call()
            finish(np, target.reshape(-1), self.n)
        return averaged

    def nccl(self):
        nccl, why = _nccl_here(self.comm)
        missing = self.comm.allgather(why)  # every rank learns what any rank lacks, before anyone waits
        if any(missing):
            where = "; ".join(f"rank {r}: {text}" for r, text in enumerate(missing) if text)
            raise ValueError(f"nccl cannot run here ({where})")
        from ..mpi.devices import cupy_module

        from ..mpi import private

        cp = cupy_module()
        kept = private.state(self.comm).cache  # one NCCL communicator per MPI communicator, freed with it
        if "nccl" not in kept:
            uid = self.comm.bcast(nccl.get_unique_id() if self.comm.Get_rank() == 0 else None, root=0)
            kept["nccl"] = nccl.NcclCommunicator(self.n, uid, self.comm.Get_rank())
        x, nc, stream, root = self.x, kept["nccl"], cp.cuda.get_current_stream().ptr, self.root
        types = {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64, "float16": nccl.NCCL_FLOAT16,
                 "bfloat16": nccl.NCCL_BFLOAT16, "int32": nccl.NCCL_INT32, "int64": nccl.NCCL_INT64}
        ops = {"sum": nccl.NCCL_SUM, "prod": nccl.NCCL_PROD, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN,
               "avg": nccl.NCCL_AVG}
        kind, op, out = types[x.dtype.name], ops[self.op], cp.empty_like(x)
        if self.collective == "broadcast":
            out[...] = x
        calls = {"allreduce": lambda: nc.allReduce(x.data.ptr, out.data.ptr, x.size, kind, op, stream),
                 "broadcast": lambda: nc.broadcast(x.data.ptr, out.data.ptr, x.size, kind, root, stream),
                 "reduce": lambda: nc.reduce(x.data.ptr, out.data.ptr, x.size, kind, op, root, stream)}
        if self.collective not in calls:
            raise ValueError(f"nccl: {self.collective} is not wired up here; use allreduce, reduce or broadcast")
        return _returning(calls[self.collective], out)

    def torch(self):
        """torch.distributed's collective, in the process group that :func:`run` starts. Its
        collectives work in place only: each call reduces (or overwrites) one working copy of the
        input in place, allocated once; the first call, from the pristine input, is the one checked."""
        import torch
        import torch.distributed as dist

        root = self.root
        op = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "max": dist.ReduceOp.MAX,
              "min": dist.ReduceOp.MIN, "avg": dist.ReduceOp.AVG}[self.op]
        calls = {"allreduce": lambda t: dist.all_reduce(t, op=op),
                 "broadcast": lambda t: dist.broadcast(t, src=root),
                 "reduce": lambda t: dist.reduce(t, dst=root, op=op)}
        if self.collective not in calls:
            raise ValueError(f"torch: {self.collective} is not wired up here; use allreduce, reduce or broadcast")
        source = _as_torch(self.x)
        work = source.clone()  # in place on a working copy (the first call is checked)
        return _returning(lambda: calls[self.collective](work), work, reset=lambda: work.copy_(source))

    def make(self, name: str, in_place: bool = False):
        """The timed callable for ``name``, out of place, or in place (None where that has no in-place form
        here: torch's collectives, which always work in place, NCCL, and MPI's other than allreduce)."""
        if name == "mpi-ring":  # MPI's own call, run while MPICH is forced to its ring (see _forced)
            return self.mpi(in_place)
        if name in ("mpi", "nccl", "torch"):
            return self.mpi(True) if in_place and name == "mpi" else None if in_place else getattr(self, name)()
        return self.ringlab(name, in_place=True) if in_place else self.ringlab(name)


def _as_torch(x):
    """A torch tensor sharing ``x``'s memory (bfloat16, which DLPack cannot carry from numpy, as its 16-bit words)."""
    import torch

    if x.dtype.name == "bfloat16":
        return torch.from_dlpack(x.view(np.uint16)).view(torch.bfloat16)
    return torch.from_dlpack(x)


def _nccl_here(comm):
    """(cupy's nccl module, '') where NCCL can run on this rank, else (None, why not)."""
    from ..mpi.devices import cupy_module, ranks_per_gpu

    if cupy_module() is None:
        return None, "cupy sees no GPU"
    shared = ranks_per_gpu(comm)  # from the bus ids of the ranks' GPUs: one visible GPU per rank is a GPU each
    if shared > 1:
        return None, (f"NCCL needs one GPU per rank, and here up to {shared} ranks share one (it refuses two ranks of "
                      "one communicator on the same GPU)")
    from cupy.cuda import nccl

    if not getattr(nccl, "available", False) or not hasattr(nccl, "get_unique_id"):
        from ..mpi.devices import install_advice

        return None, f"cupy cannot load libnccl (the GPU packages for this driver bring it: {install_advice()})"
    return nccl, ""


def _returning(call, out, reset=None):
    """A timed function that runs ``call()`` and returns ``out``, the buffer it writes into; ``reset()``
    (an in-place collective's) puts its pristine input back before the check after the timed loop."""
    def run():
        call()
        return out
    run.reset = reset
    return run


def _transport_used(name: str, x, comm, requested: str) -> str:
    """How ``name``'s bytes actually travelled: the transport ringlab's executor chose for ``requested``, MPI on
    host memory (a host copy of GPU data under --gpu), or the library's own (nccl, torch's backend)."""
    from ..mpi.devices import is_device_array

    if name.startswith("mpi"):
        return "mpi on a host copy" if is_device_array(x) else "mpi"
    if name == "nccl":
        return "nccl"
    if name == "torch":
        import torch.distributed as dist

        return f"torch ({dist.get_backend()})"
    from ..mpi.collectives import which_transport

    return which_transport(x, comm, requested)


def _defined(collective: str, rank: int, root: int, n: int, count: int) -> slice | None:
    """Which elements of this rank's result the collective defines (None: none at all)."""
    if collective == "reduce":
        return slice(0, count) if rank == root else None
    if collective == "reduce_scatter":
        block = count // n
        return slice(rank * block, (rank + 1) * block)
    return slice(0, count)


def _wrong(got, want, dtype, n: int) -> int:
    """How many elements of ``got`` differ from ``want`` by more than ``n`` ranks' roundings allow; a NaN (or an
    infinity), on either side, is wrong: "not within the tolerance", never "beyond it", which a NaN never is."""
    got = np.asarray(_as_host(got))
    if np.issubdtype(dtype, np.integer):
        return int(np.count_nonzero(got != want))
    tolerance = 4 * n * n * _eps(dtype)
    wrong = 0
    for lo in range(0, got.size, CHECK_ELEMENTS):  # in blocks: float64 copies of a whole buffer would triple it
        a, b = got[lo:lo + CHECK_ELEMENTS], want[lo:lo + CHECK_ELEMENTS]
        with np.errstate(invalid="ignore"):  # inf - inf: NaN, counted below
            wrong += int(np.count_nonzero(~(np.abs(a.astype(np.float64) - b.astype(np.float64)) <= tolerance)))
    return wrong


def _eps(dtype) -> float:
    """The spacing of ``dtype``'s numbers at 1 (bfloat16's from ml_dtypes, which numpy's finfo does not know)."""
    if dtype.name == "bfloat16":
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)
    return float(np.finfo(dtype).eps)


OTHERS = ("mpi", "mpi-ring", "nccl", "torch")  # what ringlab is timed against (mpi-ring: MPICH's ring, forced)
COPIES = 6  # buffers of the largest size a rank holds at once: input, reference and its receive buffer, two
#             implementations' outputs (the one timed, the one before it being let go), scratch
CHECK_ELEMENTS = 1 << 20  # results are compared in blocks of this many elements: no full-size temporaries


def memory_problem(sizes: list[int], ranks_here: int, available: int | None) -> str | None:
    """Why a sweep up to ``max(sizes)`` bytes would not fit in this machine's memory (None: it fits, or unknown)."""
    if not sizes or available is None:
        return None
    from .units import format_bytes

    need = max(sizes) * COPIES * ranks_here
    if need <= available:
        return None
    return (f"the largest size, {format_bytes(max(sizes))}, needs about {format_bytes(max(sizes) * COPIES)} a rank "
            f"({COPIES} buffers of it: input, reference, outputs, scratch), {format_bytes(need)} for the {ranks_here} "
            f"rank{'s' * (ranks_here != 1)} on this machine; {format_bytes(available)} is available: lower -e "
            "(or run fewer ranks)")


def check_arguments(collective: str, algorithms: list[str], dtype_name: str, iters: int, warmup: int, root: int,
                    nranks: int, json_path: str | None = None, sizes: list[int] | None = None,
                    gpu: bool = False, emulate: str | None = None, op: str = "sum",
                    emulate_compute: str | None = None) -> None:
    """A ValueError naming the first argument of a sweep that cannot work, before anything runs (the sizes
    too, against this machine's memory, when given and not on GPUs)."""
    if collective not in BENCHED:
        raise ValueError(f"collective must be one of {', '.join(BENCHED)}, got {collective!r}")
    if not algorithms:
        raise ValueError("name at least one implementation to time (-a), e.g. ring,mpi")
    for name in algorithms:
        full = name if "." in name else f"{collective}.{name}"
        if name not in OTHERS and (full not in ALGORITHMS or not full.startswith(collective + ".")):
            known = sorted(a.split(".", 1)[1] for a in ALGORITHMS if a.startswith(collective + "."))
            raise ValueError(f"no {collective} implementation {name!r}; choose from {', '.join(known + list(OTHERS))}")
    if dtype_name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype_name!r}")
    from ..mpi.reduction import problems

    wrong = problems(op, _dtype(dtype_name), collective)
    if wrong:
        raise ValueError(wrong[0])
    left = [name for name in algorithms if not unavailable(name, dtype_name, op, gpu)]
    if not left:
        raise ValueError("nothing left to time: " + "; ".join(f"{name}: {unavailable(name, dtype_name, op, gpu)}"
                                                               for name in algorithms))
    if isinstance(iters, bool) or not isinstance(iters, int) or iters < 1:
        raise ValueError(f"iters must be at least 1 (the median of no timings is no number), got {iters!r}")
    if iters > MOST_ITERS:
        raise ValueError(f"iters must be at most {MOST_ITERS:,} (its timings are kept, one per iteration), got {iters}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be 0 or more, got {warmup!r}")
    if warmup > MOST_ITERS:
        raise ValueError(f"warmup must be at most {MOST_ITERS:,}, got {warmup}")
    if "mpi-ring" in algorithms and collective != "allreduce":
        raise ValueError("mpi-ring is MPICH's ring allreduce: use it with the allreduce collective")
    check_root(root, nranks)
    if sizes is not None and not gpu:
        from .machine import available_memory

        problem = memory_problem(sizes, nranks, available_memory())
        if problem:
            raise ValueError(problem)
    if emulate is not None:
        from ..mpi.emulate import emulation

        emulation(emulate, compute=emulate_compute).resolve(nranks)  # a bad SPEC or compute, or too few ranks
    elif emulate_compute is not None:
        raise ValueError("--emulate-compute says how an emulated machine counts a call's own work: give --emulate too")
    if json_path:  # now, not after a sweep of many minutes
        folder = os.path.dirname(os.path.abspath(json_path))
        if not os.path.isdir(folder):
            raise ValueError(f"cannot write the results to {json_path}: there is no folder {folder}")
        if not os.access(folder, os.W_OK) or (os.path.exists(json_path) and not os.access(json_path, os.W_OK)):
            raise ValueError(f"cannot write the results to {json_path}: not allowed to")


def run(collective: str, algorithms: list[str], sizes: list[int], dtype_name: str = "float32", iters: int = 20,
        warmup: int = 5, root: int = 0, gpu: bool = False, transport: str = "auto", json_path: str | None = None,
        command: list[str] | None = None, out=sys.stdout, emulate: str | None = None,
        inplace: bool = False, op: str = "sum", emulate_compute: str | None = None) -> dict | None:
    """The sweep, on every rank of COMM_WORLD; rank 0 prints the table and returns the results. With
    ``emulate`` (a SPEC, see ``ringlab.mpi.emulate``) ringlab's algorithms run on that machine's links, timed
    in virtual time (``emulate_compute``: "cpu" or "model", how a call's own work counts; None: the
    environment's ``RINGLAB_EMULATE_COMPUTE``, else cpu), with this machine's wall time beside;
    with ``inplace`` each implementation is also timed in place (the result overwriting the input), in
    the row's ``inplace_*`` columns, as nccl-tests prints both (None where it has no in-place form here).
    ``op`` is the reduction (sum, prod, max, min, avg: nccl-tests' ``-o``) of the collectives that reduce;
    an implementation that has no such op or type here (MPI and bfloat16; gloo and avg) is left out, and
    the header says why."""
    from mpi4py import MPI

    from ..mpi import emulate as emulated
    from ..mpi.devices import ranks_on_node
    from .machine import available_memory

    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    check_arguments(collective, algorithms, dtype_name, iters, warmup, root, n, json_path if rank == 0 else None,
                    emulate=emulate, gpu=gpu, op=op, emulate_compute=emulate_compute)
    problem = None if gpu else memory_problem(sizes, ranks_on_node(comm), available_memory())
    if any(comm.allgather(problem)):  # every rank refuses, the same way, before anything is allocated
        raise ValueError(next(p for p in comm.allgather(problem) if p))
    with emulated.emulate(emulate, compute=emulate_compute) if emulate else nullcontext():
        return _run(collective, algorithms, sizes, dtype_name, iters, warmup, root, gpu, transport, json_path,
                    command, out, comm, emulated.current(), inplace, op)


def _run(collective, algorithms, sizes, dtype_name, iters, warmup, root, gpu, transport, json_path, command, out,
         comm, emulation, inplace=False, op="sum"):
    from .machine import SCHEMA, describe_machine, save_json

    rank, n = comm.Get_rank(), comm.Get_size()
    dtype = _dtype(dtype_name)
    left_out = {name: unavailable(name, dtype_name, op, gpu) for name in algorithms}
    algorithms = [name for name in algorithms if not left_out[name]]
    left_out = {name: why for name, why in left_out.items() if why}
    reduces = collective in ("allreduce", "reduce", "reduce_scatter")
    xp = np
    if gpu:
        from ..mpi.devices import bind_device, cupy_module
        xp = cupy_module()
        if xp is None:
            raise ValueError("--gpu: cupy cannot see a GPU here")
        bind_device(comm)
    show = rank == 0
    ranks_per_gpu = None
    if gpu:
        from ..mpi.devices import ranks_per_gpu as sharing_of

        ranks_per_gpu = sharing_of(comm)  # from the GPUs the ranks were bound to (one visible GPU each counts)
    back_to_back = gpu  # on GPUs every implementation is timed as nccl-tests times NCCL; on CPUs, call by call
    bar = _progress(len(sizes) * len(algorithms)) if show else None
    if show:
        where = f"GPU, transport {transport}" if gpu else "CPU, numpy over MPI"
        timing = (f"mean of {iters} calls back to back" if back_to_back else f"median of {iters} calls")
        reducing = f", op {op}" if reduces else ""
        print(f"# ringlab bench: {collective} on {n} ranks ({where}), {dtype_name}{reducing}, {timing} after "
              f"{warmup} warm-up, checked before and after; busbw = algbw x {BUS_FACTORS[collective]}", file=out)
        for name, why in left_out.items():
            print(f"# left out: {name}: {why}", file=out)
        if reduces and op == "avg" and any(name.startswith("mpi") for name in algorithms):
            print("# mpi with op avg: MPI has no average; its row times MPI's sum and the division by the number of "
                  "ranks", file=out)
        from ..mpi.devices import cores, ranks_on_node

        local = ranks_on_node(comm)
        if local > cores() and emulation is None:  # virtual time does not see the scheduler
            print(f"# oversubscribed: {local} ranks share {cores()} cores on this node; waiting ranks yield the core "
                  "(MPICH: MPIR_CVAR_POLLS_BEFORE_YIELD, MPIR_CVAR_CH4_PROGRESS_THROTTLE), but the timings "
                  "include the scheduler", file=out)
        if emulation is not None:
            counted = ("this CPU's time never counts: a reduction costs its bytes at the machine's reduce rate"
                       if emulation.compute == "model" else "this CPU's work counts as the CPU time it took")
            print(f"# {emulation.label}: ringlab's algorithms run in virtual time, each message taking the time of "
                  f"the links it crosses (latency + bytes / bandwidth, shared as the cost model shares them; {counted}); "
                  + (f"time / {emulation.scale:g} = time on that machine; " if emulation.scale != 1 else "")
                  + "wall: what this machine took. MPI's own "
                  "collectives (mpi, mpi-ring) do not cross these links: their time is this machine's", file=out)
        if "mpi-ring" in algorithms:
            print("# mpi-ring: MPICH's own ring allreduce, forced while it is timed (MPIR_CVAR_ALLREDUCE_INTRA_"
                  "ALGORITHM=ring, MPIR_CVAR_DEVICE_COLLECTIVES=none), checked to take effect", file=out)
        if gpu:
            from ..mpi.devices import sharing

            shared = sharing(ranks_per_gpu)
            if shared:
                print(f"# {shared}; so busbw here is no link's bandwidth (ranks_per_gpu in the JSON)", file=out)
            print("# memory: where the timed buffers were (mpi is MPI on a host copy of the data); time: every "
                  "implementation as nccl-tests times NCCL, CUDA events around calls launched back to back (the mpi "
                  "row: the host clock); the JSON's transport says how each row's bytes went", file=out)
        there = f" {'emulated busbw':>15} {'wall (us)':>11}" if emulation is not None else ""
        if inplace:
            there += f" {'in place (us)':>13} {'busbw (GB/s)':>13} {'#wrong':>7}"
        print(f"# {'size (B)':>12} {'count':>11} {'type':>8} {'algorithm':>10} {'memory':>7} {'time (us)':>11} "
              f"{'algbw (GB/s)':>13} {'busbw (GB/s)':>13} {'#wrong':>7}{there}", file=out, flush=True)
    rows = []
    # torch's process group, when torch is timed, spans the whole sweep
    with torch_process_group(comm, "gloo" if xp is np else "nccl") if "torch" in algorithms else nullcontext():
        for nbytes in sizes:
            count = nbytes // dtype.itemsize
            if collective in ("reduce_scatter", "allgather"):
                count -= count % n  # equal blocks, as MPI's Reduce_scatter_block and Allgather need
            if count == 0:
                continue
            rng = np.random.default_rng(rank * 7919 + count)
            low, high = (-3, 4) if op == "prod" else (-100, 100)  # products of n such integers fit the type
            host = (rng.integers(low, high, count) if dtype.kind == "i" else rng.uniform(-1, 1, count)).astype(dtype)
            x = xp.asarray(host)
            wide = dtype.kind == "f" and dtype.itemsize == 2 or dtype.name == "bfloat16"  # MPI reduces them in float32
            reference = _Implementations(collective, comm, host.astype(np.float32) if wide else host,
                                         root, "auto", op).mpi()().copy()
            implementations = _Implementations(collective, comm, x, root, transport, op)
            defined = _defined(collective, rank, root, n, count)
            for name in algorithms:
                on_device = xp is not np and not name.startswith("mpi")

                crossed = emulation is not None and name not in OTHERS  # timed in virtual time
                walls: list[float] = []

                def checked_time(fn):
                    """(seconds, elements wrong on any rank): checked on its first call and again after the timed
                    loop, as nccl-tests checks (reuse must not break it)."""
                    with _forced(name, comm):
                        got = fn()
                        before = 0 if defined is None else _wrong(_as_host(got)[defined], reference[defined], dtype, n)
                        seconds = time_collective(fn, comm, warmup=warmup, iters=iters,
                                                  buffer=x if on_device else None, back_to_back=back_to_back,
                                                  virtual=crossed, walls=walls)
                        if getattr(fn, "reset", None) is not None:
                            fn.reset()
                        got = fn()
                        after = 0 if defined is None else _wrong(_as_host(got)[defined], reference[defined], dtype, n)
                    return seconds, comm.allreduce(max(before, after))

                seconds, wrong = checked_time(implementations.make(name))
                size = count * dtype.itemsize
                algbw, busbw = bandwidths(collective, size, seconds, n)
                row = {"bytes": size, "count": count, "dtype": dtype_name, "op": op if reduces else None,
                       "algorithm": name, "time_s": seconds,
                       "algbw_Bps": algbw, "busbw_Bps": busbw, "wrong": wrong,
                       "memory": "device" if on_device else "host", "transport": _transport_used(name, x, comm, transport)}
                in_place = implementations.make(name, in_place=True) if inplace else None
                if in_place is not None:  # beside the out-of-place figures, as nccl-tests prints them
                    seconds, wrong = checked_time(in_place)
                    algbw, busbw = bandwidths(collective, size, seconds, n)
                    row.update(inplace_time_s=seconds, inplace_algbw_Bps=algbw, inplace_busbw_Bps=busbw,
                               inplace_wrong=wrong)
                elif inplace:
                    row.update(inplace_time_s=None, inplace_algbw_Bps=None, inplace_busbw_Bps=None, inplace_wrong=None)
                if emulation is not None:  # the same run in the emulated machine's units, where it crossed its links
                    row.update(emulated=crossed, machine_time_s=emulation.machine_seconds(row["time_s"]) if crossed
                               else None, machine_busbw_Bps=row["busbw_Bps"] * emulation.scale if crossed else None,
                               wall_time_s=walls[0] if crossed else None)
                rows.append(row)
                if show:
                    _print_row(row, out, bar)
    if not show:
        return None
    if bar is not None:
        bar.close()
    means = {name: float(np.mean([r["busbw_Bps"] for r in rows if r["algorithm"] == name]))
             for name in algorithms if any(r["algorithm"] == name for r in rows)}
    print("# mean busbw (GB/s): " + "  ".join(f"{k} {v / 1e9:.3f}" for k, v in means.items()), file=out)
    if any(r["wrong"] for r in rows):
        print("# WRONG RESULTS: some elements differ from MPI's own collective (see #wrong)", file=out)
    if command and not {"-n", "--nranks"} & set(command):  # the job ringlab started runs without -n: say it
        command = [*command[:2], "-n", str(n), *command[2:]]
    result = {"kind": "ringlab-bench", "schema": SCHEMA, "collective": collective, "ranks": n, "dtype": dtype_name,
              "op": op if reduces else None, "left_out": left_out,
              "root": root, "gpu": gpu, "transport": transport, "iters": iters, "warmup": warmup,
              "timing": "back to back" if back_to_back else "median per call", "ranks_per_gpu": ranks_per_gpu,
              "transports_used": sorted({r["transport"] for r in rows}),
              "machine": describe_machine(command), "rows": rows, "mean_busbw_Bps": means,
              "emulation": None if emulation is None else {"spec": emulation.spec, "label": emulation.label,
                                                           "scale": emulation.scale, "compute": emulation.compute,
                                                           "clock": "virtual"}}
    if json_path:
        save_json(json_path, result)
        print(f"# wrote {json_path}", file=out)
    return result


def in_machine_units(result: dict) -> list[dict]:
    """The rows of a sweep run on an emulated machine (``run(..., emulate=SPEC)``) in that machine's units: time
    divided by its scale, algbw and busbw multiplied by it (``measured_s`` keeps the time here). Rows that did
    not cross the emulated links (MPI's own) are left out; a sweep on the raw machine comes back as it is."""
    emulation = result.get("emulation")
    if not emulation:
        return list(result["rows"])
    scale = emulation["scale"]
    return [dict(r, measured_s=r["time_s"], time_s=r["time_s"] / scale, algbw_Bps=r["algbw_Bps"] * scale,
                 busbw_Bps=r["busbw_Bps"] * scale) for r in result["rows"] if r.get("emulated")]


def _forced(name: str, comm):
    """MPICH forced to its ring allreduce for ``mpi-ring`` (checked to take effect), else nothing."""
    if name != "mpi-ring":
        return nullcontext()
    from .mpich import forced_allreduce

    return forced_allreduce(comm, "ring")


def _as_host(got):
    if hasattr(got, "numpy") and not isinstance(got, np.ndarray):  # a torch tensor
        import torch

        if got.dtype == torch.bfloat16:  # numpy cannot take it: its words, read as ml_dtypes' bfloat16
            from ..mpi.reduction import bfloat16

            return got.view(torch.int16).cpu().numpy().view(bfloat16())
        return got.cpu().numpy()
    if hasattr(got, "get") and not isinstance(got, np.ndarray):
        return got.get()
    return got


def _progress(total: int):
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="run", leave=False, file=sys.stderr)


def _print_row(row: dict, out, bar) -> None:
    line = (f"  {row['bytes']:>12} {row['count']:>11} {row['dtype']:>8} {row['algorithm']:>10} {row['memory']:>7} "
            f"{row['time_s'] * 1e6:>11.1f} {row['algbw_Bps'] / 1e9:>13.3f} {row['busbw_Bps'] / 1e9:>13.3f} "
            f"{row['wrong']:>7}")
    if "emulated" in row:  # the busbw on the emulated machine (time / scale) and this machine's time, or why not
        line += (f" {row['machine_busbw_Bps'] / 1e9:>15.3f} {row['wall_time_s'] * 1e6:>11.1f}" if row["emulated"]
                 else f" {'not emulated':>15} {'':>11}")
    if "inplace_time_s" in row:
        line += (f" {row['inplace_time_s'] * 1e6:>13.1f} {row['inplace_busbw_Bps'] / 1e9:>13.3f} {row['inplace_wrong']:>7}"
                 if row["inplace_time_s"] is not None else f" {'(none)':>13} {'':>13} {'':>7}")
    if bar is not None:
        bar.write(line, file=out)
        bar.update(1)
    else:
        print(line, file=out, flush=True)
