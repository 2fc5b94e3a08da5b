"""Devices: where a rank runs and where its bytes live: numpy or cupy, which GPU, its cores, and whether MPI
reads GPU memory.

On a machine without a GPU (or without cupy) everything is numpy, silently: that is the default
every lab must work on. With GPUs, each rank binds to one by its node-local rank, so ranks on
one node spread over the GPUs it can see (``CUDA_VISIBLE_DEVICES`` masks and renumbers them) and
several ranks may share one GPU. A utility of every layer of :mod:`ringlab.mpi`: it imports none of them.

What MPI_Init leaves on a host: MPICH's shared-memory segments in /dev/shm and the topology file mpiexec's proxy
writes in /tmp, both removed by MPICH only when the job ends well. :func:`forget_job_files` removes their names
once every rank has finished MPI_Init (the memory stays mapped for the ranks that share it), so that a job that
aborts, or a process that is killed, leaves neither behind; ringlab's private communicator over COMM_WORLD calls
it once made (a collective: every rank is there), so does :mod:`ringlab.cluster.runner` through it, and a process
that is MPI's only rank (a singleton: a notebook's kernel) may call it at once.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re

import numpy as np


DRIVER_SIGNS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")  # NVIDIA's driver (/dev/dxg: WSL)


def _no_driver_for_the_cupy_wheel() -> bool:
    """The real cupy wheel is installed but no NVIDIA driver is: it could only say "no GPU", after a second
    of importing. (A cupy without the wheel's ``cupy_backends`` beside it, such as a stand-in, is asked.)"""
    import importlib.util
    from pathlib import Path

    try:
        found, backends = importlib.util.find_spec("cupy"), importlib.util.find_spec("cupy_backends")
    except (ImportError, ValueError):
        return False
    if found is None or backends is None or not found.origin or not backends.origin:
        return False
    if Path(found.origin).parents[1] != Path(backends.origin).parents[1]:
        return False
    return not any(os.path.exists(sign) for sign in DRIVER_SIGNS)


@functools.lru_cache(maxsize=None)
def cupy_module():
    """The cupy module when it imports and sees at least one GPU, else None."""
    if _no_driver_for_the_cupy_wheel():
        return None
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy
    except Exception:  # not installed, no driver, no device: all mean "no GPU here"
        return None


def driver_cuda_major() -> int | None:
    """The newest CUDA major version the NVIDIA driver here takes (13 for a driver that says "CUDA Version:
    13.0"), from NVML, else ``nvidia-smi``; None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlSystemGetCudaDriverVersion()) // 1000
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    import re
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        text = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"CUDA Version:\s*(\d+)\.", text)
    return int(found.group(1)) if found else None


def gpu_extra(major: int | None) -> str | None:
    """ringlab's extra for a driver of CUDA ``major`` (gpu-cuda12 or gpu-cuda13), None where none fits."""
    if major is None or major < 12:
        return None
    return "gpu-cuda13" if major >= 13 else "gpu-cuda12"


def install_advice(major: int | None = None) -> str:
    """The one command that installs the GPU packages for this machine's driver (``major`` if given)."""
    major = driver_cuda_major() if major is None else major
    extra = gpu_extra(major)
    if extra is None:
        return ("no NVIDIA driver found (nvidia-smi): install one first" if major is None else
                f"this driver takes CUDA {major}, older than ringlab's GPU packages need (CUDA 12 or 13): update it")
    return (f"python3 dev.py gpu (in a checkout; it runs pip install -e '.[{extra}]' for the CUDA {major} driver "
            f"here, after removing another CUDA major's cupy)")


def cupy_problem() -> str | None:
    """Why cupy cannot be used although it is installed, in its own words (a missing CUDA library, a driver
    too old for it, ...); None when it works, is not installed, or there is simply no GPU or driver."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None or _no_driver_for_the_cupy_wheel():
        return None
    try:
        import cupy

        cupy.cuda.runtime.getDeviceCount()  # raises what stops cupy: no driver, a missing library, ...
    except Exception as err:
        text = f"{type(err).__name__}: {err}"
        if "no CUDA-capable device" in text or "cudaErrorNoDevice" in text:
            return None
        return text
    return None


def gpu_count() -> int:
    """GPUs this process can see (after CUDA_VISIBLE_DEVICES)."""
    cp = cupy_module()
    return cp.cuda.runtime.getDeviceCount() if cp is not None else 0


# Where a rank runs: the cores it shares with the other ranks of its node. More ranks than cores
# (oversubscribed) and waiting ranks give their core away (ringlab.mpi.deadlines).

def cores() -> int:
    """The cores this process may run on (its CPU affinity where the system says, else all)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ranks_on_node(comm=None) -> int:
    """How many ranks of this job share this node, as the MPI launcher tells each rank (MPICH's hydra:
    MPI_LOCALNRANKS; Open MPI: OMPI_COMM_WORLD_LOCAL_SIZE), else the size of ``comm``, else 1."""
    for name in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return comm.Get_size() if comm is not None else 1


def oversubscribed(comm=None) -> bool:
    """Whether this node runs more ranks of the job than this process has cores."""
    return ranks_on_node(comm) > cores()


SHARED_CORES = "RINGLAB_YIELD"  # =1: this machine's cores also run other work; waiting ranks give theirs away


def cores_shared(env=None) -> bool:
    """Whether ``RINGLAB_YIELD=1`` (in ``env``, else this process's environment) says that this machine's cores
    also run other work (several jobs at once, tests on several workers, the nodes of a ``ringlab cluster``): then
    every job's waiting ranks give their core away, however few ranks it has."""
    value = (os.environ if env is None else env).get(SHARED_CORES, "")
    return value.strip().lower() in ("1", "yes", "true", "on")


def gives_way(comm=None) -> bool:
    """Whether a waiting rank should give its core away (``sched_yield``) between looks instead of spinning: where
    the node runs more ranks than cores (:func:`oversubscribed`), or where ``RINGLAB_YIELD=1`` says the cores are
    shared with other work (:func:`cores_shared`). A spinning rank keeps from its core the process it waits for."""
    return oversubscribed(comm) or cores_shared()


# Whether the MPI library reads GPU memory itself (a CUDA-aware MPI), or GPU buffers are staged through
# host memory.

def mpi_is_cuda_aware() -> bool:
    """Whether GPU buffers go to the MPI library under mpi4py as they are: what the library itself
    says (:func:`query_cuda_support`; no answer counts as no), unless ``RINGLAB_CUDA_AWARE`` says
    otherwise: ``0`` no; ``1`` yes, where the library says so or cannot say; ``force`` yes, whatever
    the library says. ``1`` where the library says no is a ValueError (:func:`cuda_aware_conflict`):
    such an MPI crashes on the first GPU buffer it is handed; so is any other value of the variable."""
    setting = cuda_aware_setting()
    if setting in ("0", "force"):
        return setting == "force"
    support = query_cuda_support()
    if setting == "1":
        problem = cuda_aware_conflict(support)
        if problem:
            raise ValueError(problem)
        return True
    return bool(support)


CUDA_AWARE_SETTINGS = ("0", "1", "force")


def cuda_aware_setting() -> str | None:
    """``RINGLAB_CUDA_AWARE`` as set (None: unset or empty), or a ValueError for a value it does not take."""
    setting = os.environ.get("RINGLAB_CUDA_AWARE", "").strip()
    if not setting:
        return None
    if setting not in CUDA_AWARE_SETTINGS:
        raise ValueError(f"RINGLAB_CUDA_AWARE must be 0 (stage GPU buffers through host memory), 1 (hand them to a "
                         f"CUDA-aware MPI) or force (hand them over whatever the MPI library says), or unset; got "
                         f"{setting!r}")
    return setting


def cuda_aware_conflict(support: bool | None = None) -> str | None:
    """The error for ``RINGLAB_CUDA_AWARE=1`` where the MPI library says it cannot read GPU memory
    (``support``: its answer, asked when not given); None where there is no such conflict."""
    if os.environ.get("RINGLAB_CUDA_AWARE") != "1":
        return None
    if (query_cuda_support() if support is None else support) is not False:
        return None
    return ("RINGLAB_CUDA_AWARE=1 says the MPI library reads GPU memory, but the library itself says it cannot "
            "(its MPIX_Query_cuda_support or MPIX_GPU_query_support answers no): handed a GPU buffer, it would crash "
            "(a segmentation fault). Unset RINGLAB_CUDA_AWARE to stage GPU buffers through host memory, or "
            "set RINGLAB_CUDA_AWARE=force if you know this MPI is CUDA-aware although its query says otherwise")


def query_cuda_support() -> bool | None:
    """The MPI library's own answer (MPIX_Query_cuda_support or MPIX_GPU_query_support), or None when
    it has neither. mpi4py loads libmpi with RTLD_LOCAL, so the symbols are looked up through
    mpi4py's extension module, which links it, not in the global namespace."""
    from mpi4py import MPI

    this = ctypes.CDLL(MPI.__file__)
    try:  # Open MPI's extension, also in MPICH
        return bool(this.MPIX_Query_cuda_support())
    except AttributeError:
        pass
    try:  # MPICH >= 4: MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA=0, &supported)
        supported = ctypes.c_int(0)
        this.MPIX_GPU_query_support(0, ctypes.byref(supported))
        return bool(supported.value)
    except AttributeError:
        return None


def is_device_array(x) -> bool:
    """True for a cupy array (or anything else exposing __cuda_array_interface__)."""
    return hasattr(x, "__cuda_array_interface__")


def array_module(x):
    """numpy or cupy, whichever ``x`` belongs to."""
    if is_device_array(x):
        cp = cupy_module()
        if cp is None:
            raise ValueError("got a GPU array, but cupy cannot see a GPU in this process")
        return cp
    return np


COMPUTE_MODES = {0: "DEFAULT", 2: "PROHIBITED", 3: "EXCLUSIVE_PROCESS"}  # cudaComputeMode
_BOUND: dict = {}  # this process's binding, made once: {"device", "ranks_per_gpu"}


def bind_device(comm=None) -> int | None:
    """Bind this rank to its GPU and return the GPU's index (None without GPUs): local rank modulo
    the GPUs this process sees, where the local rank is its place among the ranks of ``comm`` (default
    COMM_WORLD) on its node. Call on every rank (the first call is collective); later calls make the
    same GPU current again and return it, so it is safe to call anywhere (it is idempotent).

    - One visible GPU per rank (``CUDA_VISIBLE_DEVICES`` set per rank, as Slurm and many launchers
      do): every rank takes its device 0, which is its own GPU.
    - More ranks than GPUs on a node: the ranks share them, and rank 0 of the node says so once (on
      stderr): timings then include taking turns on the GPU; :func:`ranks_per_gpu` says how many share.
    - A GPU in EXCLUSIVE_PROCESS compute mode shared by several ranks, or in PROHIBITED mode: a
      ValueError naming the GPU and the mode, on every rank, instead of a CUDA error in the first call.

    ``ringlab``'s own launchers, ``ringlab bench --gpu`` and the ``%%px`` cluster (MPICluster) bind
    every rank at start-up, before any user code, so that a learner's own ``cp.asarray`` lands on the
    rank's GPU and not on GPU 0.
    """
    cp = cupy_module()
    if cp is None:
        return None
    if "device" in _BOUND:
        cp.cuda.Device(_BOUND["device"]).use()
        return _BOUND["device"]
    from mpi4py import MPI

    if comm is None:
        comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)  # the ranks of this node (collective over comm)
    try:
        return _bind(cp, comm, local)
    finally:
        local.Free()


def _bind(cp, comm, local) -> int:
    """:func:`bind_device`'s first call: this rank's GPU among the node's ranks (``local``)."""
    device = local.Get_rank() % gpu_count()
    runtime = cp.cuda.runtime
    mode = int(runtime.getDeviceProperties(device).get("computeMode", 0))
    mine = (runtime.deviceGetPCIBusId(device), mode)
    gpus = local.allgather(mine)  # the physical GPU (bus id) and mode of every rank of this node
    sharing = sum(bus == mine[0] for bus, _ in gpus)
    problem = None
    if mode == 2:
        problem = f"rank {comm.Get_rank()}: GPU {device} ({mine[0]}) is in PROHIBITED compute mode: no process may use it"
    elif mode == 3 and sharing > 1:
        problem = (f"rank {comm.Get_rank()}: GPU {device} ({mine[0]}) is in EXCLUSIVE_PROCESS compute mode, which "
                   f"lets one process use it, and {sharing} ranks of this node would share it: start at most one "
                   "rank per GPU, or set the mode to DEFAULT (nvidia-smi -c DEFAULT, as root)")
    problems = [text for text in comm.allgather(problem) if text]  # every rank raises the same error, or none does
    if problems:
        raise ValueError("; ".join(problems))
    cp.cuda.Device(device).use()
    per_gpu = max(sum(bus == other for other, _ in gpus) for bus, _ in gpus)
    _BOUND.update(device=device, ranks_per_gpu=per_gpu)
    if per_gpu > 1 and local.Get_rank() == 0:
        import sys

        print(f"ringlab: {local.Get_size()} ranks share {len({bus for bus, _ in gpus})} GPU(s) on this node, up to "
              f"{per_gpu} on one: they take turns on it (or share it through MPS), and their timings say so",
              file=sys.stderr)
    return device


def ranks_per_gpu(comm=None) -> int | None:
    """How many ranks of this node use the busiest GPU (1: a GPU each), found by :func:`bind_device`
    (which this calls); None without GPUs."""
    if bind_device(comm) is None:
        return None
    return _BOUND["ranks_per_gpu"]


def keeps_current_device(function):
    """Decorate a collective whose first argument is the rank's array: it may make that array's GPU current
    while it works, and the caller's current GPU is current again when it returns (or raises)."""
    @functools.wraps(function)
    def wrapper(x, *args, **kwargs):
        device = getattr(x, "device", None) if is_device_array(x) else None
        if device is None or not hasattr(device, "__enter__"):
            return function(x, *args, **kwargs)
        with device:  # cupy's Device restores the previous one on exit
            return function(x, *args, **kwargs)
    return wrapper


def wait_for_gpu(x) -> None:
    """Wait for the GPU work on ``x``'s device, so MPI sees finished data (no-op for numpy)."""
    if is_device_array(x):
        cupy_module().cuda.get_current_stream().synchronize()


def pinned_empty(nelems: int, dtype) -> np.ndarray:
    """A numpy array in page-locked host memory (``cupyx.empty_pinned``; plain memory without a GPU)."""
    if cupy_module() is None:
        return np.empty(nelems, dtype)
    import cupyx

    return cupyx.empty_pinned(nelems, dtype)


def mps_pipe() -> str:
    """The folder where CUDA's Multi-Process Service keeps its control pipe (``CUDA_MPS_PIPE_DIRECTORY``,
    else ``/tmp/nvidia-mps``)."""
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"


def mps_running() -> bool:
    """Whether an MPS control daemon listens in :func:`mps_pipe`, so CUDA processes started now share each
    GPU through MPS instead of taking turns in time slices: its ``control`` pipe has a reader (or its
    ``control`` socket accepts a connection). A pipe or socket left behind by a daemon that has gone says no."""
    import errno
    import socket
    import stat

    control = os.path.join(mps_pipe(), "control")
    try:
        mode = os.stat(control).st_mode
    except OSError:
        return False
    if stat.S_ISFIFO(mode):
        try:  # opening a pipe's writing end without waiting fails with ENXIO when nobody reads it
            os.close(os.open(control, os.O_WRONLY | os.O_NONBLOCK))
            return True
        except OSError as err:
            return err.errno != errno.ENXIO and err.errno != errno.ENOENT
    if stat.S_ISSOCK(mode):
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(1.0)
            try:
                probe.connect(control)
                return True
            except (ConnectionRefusedError, FileNotFoundError):
                return False
            except OSError:  # no permission to ask, say: the daemon is there
                return True
    return False


def sharing(ranks_per_gpu: int) -> str | None:
    """What it means for timings when ``ranks_per_gpu`` MPI ranks share one GPU (None for one rank a GPU)."""
    if ranks_per_gpu <= 1:
        return None
    if mps_running():
        return (f"{ranks_per_gpu} ranks share each GPU through MPS (control pipe in {mps_pipe()}): their kernels "
                "run side by side, as on one GPU they would; a collective still moves its bytes inside one GPU's "
                "memory, not over a link")
    return (f"{ranks_per_gpu} ranks share each GPU without MPS: CUDA gives the processes the GPU in turns "
            "(time slices), so each hand-off between ranks waits for the other's slice and small calls take "
            "about a millisecond; start MPS (nvidia-cuda-mps-control -d) to let them share it, and remember the "
            "bytes never cross a link")


MPICH_SEGMENT = re.compile(r"(/dev/shm/mpich_shm_[^\s]+)")  # how MPICH names a host's shared memory in /dev/shm
HYDRA_TOPOLOGY = re.compile(r"^/.*/hydra_hwloc_xmlfile_[A-Za-z0-9]+$")  # the hwloc file MPICH's hydra proxy writes


def unname_shared_memory(maps: str = "/proc/self/maps") -> list[str]:
    """Remove from /dev/shm the names of the shared-memory segments MPICH mapped into this rank at MPI_Init, and
    return those this rank removed (another rank of the host may have been first).

    MPICH removes them only in MPI_Finalize, so every job that ended without it (a rank's exception aborting the
    job, a timeout, a kill) left its segment behind, 2-4 MB a job of memory the machine got back only when someone
    deleted the file (thousands had gathered on a machine that ran this project's tests). The memory stays mapped,
    and the ranks share it as before, for as long as they run; the name is needed only while they attach, so call
    this once every rank of the host has finished MPI_Init (after a collective over COMM_WORLD). MPICH's own
    finalize does not mind the name gone. Nothing to do where there is no /proc (not Linux)."""
    try:
        with open(maps) as f:
            names = sorted(set(MPICH_SEGMENT.findall(f.read())))
    except OSError:
        return []
    removed = []
    for name in names:
        try:
            os.unlink(name)
            removed.append(name)
        except OSError:  # removed by another rank of this host first, or not this user's
            pass
    return removed


def unname_topology_file(proc: str = "/proc", pid: int | None = None) -> list[str]:
    """Remove the hwloc topology file (``/tmp/hydra_hwloc_xmlfile_XXXXXX``) that this rank's parent (or rank
    ``pid``'s), mpiexec's ``hydra_pmi_proxy``, wrote for its ranks to read in MPI_Init, and return what was removed.

    The proxy removes it when the job ends well; a job that aborts has its proxy killed, and the file stayed in
    /tmp (5 KB each: a run of this project's tests, which abort jobs on purpose, left 235). Call this once every
    rank of the host has finished MPI_Init; the proxy keeps the file open, and does not mind its name gone when it
    ends. Nothing to do where the parent is not hydra's proxy (Slurm's srun, a singleton) or there is no /proc."""
    try:
        parent = f"{proc}/{os.getppid() if pid is None else _parent_of(pid, proc)}"
        with open(f"{parent}/comm") as f:
            if f.read().strip() != "hydra_pmi_proxy":
                return []
        fds = os.listdir(f"{parent}/fd")
    except (OSError, ValueError, IndexError):  # no /proc, the process gone, or not hydra's
        return []
    removed = []
    for fd in fds:
        try:
            target = os.readlink(f"{parent}/fd/{fd}")  # a removed file reads "... (deleted)", which does not match
            if HYDRA_TOPOLOGY.match(target):
                os.unlink(target)
                removed.append(target)
        except OSError:  # closed meanwhile, or removed by another rank of this host first
            pass
    return removed


def _parent_of(pid: int, proc: str = "/proc") -> int:
    """Process ``pid``'s parent, from /proc (OSError where it has ended or there is no /proc)."""
    with open(f"{proc}/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def forget_files_of(pids: list[int]) -> list[str]:
    """:func:`unname_shared_memory` and :func:`unname_topology_file` done for other processes of this host (the
    ranks of a job about to be stopped that never ran :func:`forget_job_files` themselves: an ipyparallel engine
    killed before it answered its first call), and what was removed. Only for ranks that are being ended: one still
    in MPI_Init could no longer find its segment."""
    removed = []
    for pid in pids:
        removed += unname_shared_memory(f"/proc/{pid}/maps") + unname_topology_file(pid=pid)
    return removed


_FORGOTTEN: list[bool] = []  # forget_job_files ran in this process


def forget_job_files() -> list[str]:
    """Once in a process: :func:`unname_shared_memory` and :func:`unname_topology_file`, what they removed. Call
    it once every rank of the job has finished MPI_Init (after a collective over COMM_WORLD, or at once where
    COMM_WORLD has this rank alone)."""
    if _FORGOTTEN:
        return []
    _FORGOTTEN.append(True)
    return unname_shared_memory() + unname_topology_file()


def forget_singleton_files() -> list[str]:
    """:func:`forget_job_files` where this process is MPI's only rank (a notebook's kernel, with no mpiexec):
    nobody else will open its segment, so a kernel killed later (nbval's way of ending one) leaves nothing in
    /dev/shm. Initializes MPI; in a job of several ranks it does nothing (their files go once ringlab's private
    communicator over COMM_WORLD is made)."""
    from mpi4py import MPI

    return forget_job_files() if MPI.COMM_WORLD.Get_size() == 1 else []
