"""``ringlab doctor``: what this machine has, and what each lab will do with it."""
from __future__ import annotations

import ctypes.util
import os
import textwrap

from ..cluster.launch import find_mpiexec
from .machine import describe_machine
from .recorded import RESULTS, load

LAB_RANKS = 5  # the most ranks a lab's timed cells run at once: lab 04's server and four workers (lab 03's sweep to 16
# ranks runs in virtual time on emulated links, where sharing cores does not change what it measures)
LAB_PLANS = [  # (lab, what it needs, what it does)
    ("00 Your machine", "gpu", "topology, the PCIe arithmetic, copies against the link's peak"),
    ("01 Moving bytes", "gpu", "latency and bandwidth, staged against direct, pinned against pageable"),
    ("02 Reduce and broadcast", "mpi", "direct, tree and chain on MPI ranks"),
    ("03 Allreduce, naive against ring", "mpi", "every chunk, traffic, busbw"),
    ("04 Parameter servers", "torch", "single against sharded, sync against async"),
    ("05 Scaling", "mpi", "sizes and ranks, fitted alpha and beta, predictions"),
    ("06 Data-parallel training", "torch", "ringlab's allreduce, a parameter server and DDP"),
    ("07 When it hangs or crawls", "mpi", "a missing rank, a straggler's trace, NCCL's settings, ranks to GPUs"),
    ("08 Sharding and memory", "torch", "ZeRO 1-3 on MPI ranks, activation memory and recomputation"),
    ("09 Model parallelism", "torch", "tensor, sequence and expert parallelism, ring attention, pipelines"),
    ("10 Inside NCCL", "mpi", "NCCL's choice and channels, PAT, one-shot and two-shot allreduce"),
    ("11 Plan a real training run", "nothing", "memory, step time and collectives of a run, predicted"),
]


def report() -> list[str]:
    """The doctor's lines (also what ``ringlab doctor`` prints)."""
    from ..mpi.devices import cupy_module, gpu_count
    from ..topology import discover

    info = describe_machine()
    lines = [f"ringlab {info['versions']['ringlab']} on {info['host']}: {info['cpu']}, {info['cpu_count']} cores, "
             f"Python {info['python']}"]
    mpi_ok = not str(info["mpi"]).startswith("unavailable")
    try:
        mpiexec = find_mpiexec()
    except FileNotFoundError:
        mpiexec = None
    lines.append(f"MPI: {info['mpi']}" + (f"; mpiexec at {mpiexec}" if mpiexec else "; no mpiexec on PATH") +
                 (f"; CUDA-aware: {'yes' if info.get('mpi_cuda_aware') else 'no'}" if mpi_ok else ""))
    from ..mpi.devices import cores

    lines.append(f"ranks and cores: {cores()} cores for this process; the labs' measurements run 2 to {LAB_RANKS} "
                 "ranks, so "
                 + ("they share cores (oversubscribed): ringlab's waiting ranks and MPICH's yield the core "
                    "(MPIR_CVAR_POLLS_BEFORE_YIELD=1, MPIR_CVAR_CH4_PROGRESS_THROTTLE=1 in the jobs ringlab starts), "
                    "but timings include the scheduler" if cores() < LAB_RANKS else "each rank has a core of its own"))
    cp = cupy_module()
    gpus = gpu_count()
    if cp is None:
        import os

        from ..mpi.devices import DRIVER_SIGNS, cupy_problem, install_advice

        problem = cupy_problem()
        if problem:
            lines.append(f"GPUs: cupy is installed but cannot use the GPU ({problem}); every lab runs on numpy "
                         f"buffers until that is fixed: {install_advice()}")
        elif any(os.path.exists(sign) for sign in DRIVER_SIGNS):
            lines.append(f"GPUs: an NVIDIA driver is here but no usable cupy, so every lab runs on numpy buffers; "
                         f"to use the GPUs: {install_advice()}")
        else:
            lines.append("GPUs: none usable here (no NVIDIA driver): every lab runs on numpy buffers")
    else:
        names = ", ".join(g.get("name", "?") for g in info["gpus"]) or f"{gpus} device(s)"
        lines.append(f"GPUs: {gpus} ({names}); driver {info['driver'] or 'unknown'}; cupy {cp.__version__}")
        from ..mpi.devices import mps_pipe, sharing

        shared = sharing(-(-LAB_RANKS // gpus))
        lines.append("GPU sharing: " + (f"a lab's {LAB_RANKS} ranks: {shared}" if shared else "each of a lab's ranks can have a "
                                         "GPU of its own") + f"; MPS {'running' if info.get('mps') else 'not running'}"
                     f" (control pipe looked for in {mps_pipe()})")
    from ..mpi.transports import describe

    lines += [f"transport: {line}" for line in describe()]
    topology, facts = discover()
    if topology is None:
        lines.append(f"topology: not discovered ({facts.get('reason', 'no GPU')})")
    else:
        lines.append(f"topology: {topology} via {facts['method']}")
        if facts.get("codes"):
            lines.append("  links: " + "; ".join(f"gpu{i}-gpu{j} {c}" for i, row in enumerate(facts["codes"])
                                                    for j, c in enumerate(row) if j > i))
    lines += nodes_and_network(facts)
    torch_version = info["versions"]["torch"]
    nccl = None
    if torch_version:
        import torch
        cuda = torch.cuda.is_available()
        if cuda:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        lines.append(f"torch {torch_version}: CUDA {'available' if cuda else 'not available'}"
                     + (f", NCCL {nccl}" if nccl else "") + f"; gloo {'yes' if torch.distributed.is_gloo_available() else 'no'}")
    else:
        lines.append("torch: not installed (labs 04 and 06 need it: pip install torch==2.13.0)")
    recorded = load()  # GPU results committed under results/, newest first
    lines.append(f"recorded GPU results: {len(recorded)} file(s) in {RESULTS}, newest {recorded[0].label}" if recorded
                 else "recorded GPU results: none yet (they are committed under results/ from a GPU machine)")
    from . import published

    sweeps = [published.load(n) for n in published.names("nccl-tests")]
    lines.append(f"published measurements shipped with ringlab: {len(published.names())} (ringlab.measure.published), "
                 f"nccl-tests sweeps of {len({s.machine for s in sweeps})} machines, e.g. {sweeps[0].label}")
    lines.append("What each lab will do here:")
    for title, needs, what in LAB_PLANS:
        if needs == "gpu":
            here = "read published topologies" if title.startswith("00") else "measure MPI ping-pong, direct and staged"
            plan = ("measure on this GPU" if gpus else here
                    + ("; show the recorded GPU results" if recorded else "; no recorded GPU results to show yet"))
        elif needs == "torch":
            plan = "train for real on MPI ranks" if torch_version and mpi_ok else "cannot run: needs torch and MPI"
        elif needs == "nothing":
            plan = "runs anywhere: predictions from published figures"
        else:
            plan = "measure on MPI ranks" + (" (and on the GPU)" if gpus else "") if mpi_ok else "cannot run: no MPI"
        if title.startswith("05") or title.startswith("06"):
            plan += "; NCCL comparisons need 2 GPUs or more" if gpus < 2 else "; with NCCL"
        lines.append(textwrap.fill(f"{plan} ({what})", WIDTH, initial_indent=f"  {title:<34} ",
                                   subsequent_indent=" " * 37, break_long_words=False, break_on_hyphens=False))
    return lines


WIDTH = 100  # characters a lab's line takes before it goes on under its plan (a notebook shows about 120)


def nodes_and_network(facts: dict) -> list[str]:
    """The "Nodes and network" lines, from :func:`~ringlab.topology.discover`'s ``facts``."""
    from ..mpi.nodes import SIMULATED

    nodes, network = facts["nodes"], facts["network"]
    if nodes["nodes"] is None:  # the setting could not be read: its error says why
        simulated = nodes["describe"]
    elif nodes["simulated"] is not None:
        simulated = (f"{SIMULATED}={nodes['simulated']}: simulated nodes of {nodes['simulated']} ranks, every rank on "
                     "this machine, the 'network' between them its shared memory")
    else:
        simulated = f"none ({SIMULATED} is not set; set it to try nodes on this machine)"
    try:
        from mpi4py import MPI  # (initializes MPI: in a notebook's kernel, as a singleton)

        library = MPI.Get_library_version()
        from ..mpi.devices import forget_singleton_files
        forget_singleton_files()
    except Exception as err:  # no mpi4py, or no MPI library under it
        library = f"unavailable ({type(err).__name__})"
    verbs = ctypes.util.find_library("ibverbs") is not None
    return ["Nodes and network:", f"  nodes: {nodes['describe'] if nodes['nodes'] else nodes['host']}",
            f"  simulated nodes: {simulated}", f"  {network['describe']}",
            f"  between nodes: {between_nodes(library, network, os.environ, verbs)}"]


def between_nodes(library: str, network: dict, environ, verbs: bool) -> str:
    """What a multi-node job's MPI would send over, from the MPI library's version text, the network cards
    (``read_network().as_dict()``), the environment and whether the verbs library (libibverbs) is there."""
    first = " ".join(library.strip().splitlines()[0].split()) if library.strip() else "unknown MPI"
    if not first.startswith("MPICH"):
        return f"{first}: that MPI chooses its own transport (its documentation or info tool says which)"
    device = next((line.split(":", 1)[1].strip() for line in library.splitlines()
                   if line.startswith("MPICH Device:")), "")
    netmods = device.split(":", 1)[1].replace(",", " ").split() if device.startswith("ch4:") else []
    chosen = environ.get("MPIR_CVAR_CH4_NETMOD", "").strip()
    why = f"MPIR_CVAR_CH4_NETMOD={chosen}" if chosen else f"the first of this build's '{device}'"
    chosen = chosen or (netmods[0] if netmods else "")
    rdma = [i for i in network["interfaces"] if i["kind"] in ("infiniband", "roce")]
    have = ", ".join(i["name"] for i in rdma) or "no active InfiniBand/RoCE port"
    have += "; libibverbs " + ("found" if verbs else "not found")
    if chosen == "ucx":
        pick = ("UCX would use InfiniBand/RoCE verbs" if rdma and verbs else "UCX would fall back to TCP over the "
                "cards above") + f" ({have})"
        told = [f"{name}={environ[name]}" for name in ("UCX_TLS", "UCX_NET_DEVICES") if environ.get(name)]
        pick += f"; the environment says {', '.join(told)}" if told else ""
    elif chosen == "ofi":
        provider = environ.get("FI_PROVIDER", "")
        pick = (f"libfabric provider FI_PROVIDER={provider}" if provider else "libfabric picks its provider "
                f"(verbs where an HCA and libibverbs are there, else tcp; {have})")
    else:
        pick = f"netmod {chosen or 'unknown'} ({device or 'no device line in the version text'})"
    return f"{first}, netmod {chosen or 'unknown'} ({why}): {pick}"
