"""ringlab: build collectives from scratch, watch every chunk move, measure them.

A collective is data: every algorithm is a builder returning a :class:`Schedule` (steps of
concurrent chunk transfers), and one schedule drives the reference simulator, the MPI executor,
the cost model and the widgets::

    import ringlab as rl
    ring = rl.build("allreduce.ring", 4)
    outputs = rl.simulate(ring, [rank * np.ones(10) for rank in range(4)])
    rl.traffic(ring, nbytes=1 << 20)        # bytes each rank sends and receives

and on MPI ranks (``mpiexec -n 4 python -m mpi4py script.py``)::

    total = rl.allreduce(x, algorithm="ring")

The parts, one folder each: ``schedule``, ``simulate`` and ``algorithms`` (the data model),
``mpi`` (running it on MPI ranks), ``topology`` and ``predict`` (the cost model), ``measure``,
``train``, ``viz``, ``lab`` (what every lab uses) and ``lessons`` (one room per lab). ``rl.train``,
``rl.viz``, ``rl.measure``, ``rl.lab`` and ``rl.lessons`` load when first used, since they bring torch,
plotly or ipyparallel with them.
"""
import importlib

from . import topology
from .algorithms import ALGORITHMS, build
from .mpi import (StepTimeout, Trace, allreduce, alltoall, alltoallv, broadcast, execute, gather, reduce, release_buffers,
                  scatter, which_transport)
from .predict import NcclPrediction, Prediction, predict, predict_nccl
from .schedule import (COPY, REDUCE, Collective, Schedule, Step, Transfer, chunk_bounds,
                       make_schedule)
from .simulate import ScheduleError, Simulation, check, provenance_str, simulate, traffic
from .mpi.devices import bind_device
from .mpi.emulate import SPEC_PARSER as _SPEC_PARSER, emulate

_SPEC_PARSER.append(topology.from_spec)  # emulated machines are named like topologies (mpi does not import them)

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS", "build", "Schedule", "Step", "Transfer", "Collective", "REDUCE", "COPY",
    "chunk_bounds", "make_schedule", "simulate", "check", "traffic", "Simulation", "ScheduleError",
    "provenance_str", "allreduce", "reduce", "broadcast", "gather", "scatter", "alltoall", "alltoallv", "execute",
    "which_transport", "release_buffers", "StepTimeout", "Trace", "topology", "predict", "Prediction", "predict_nccl",
    "NcclPrediction", "emulate", "bind_device", "__version__",
]

_ON_FIRST_USE = ("train", "viz", "measure", "lab", "lessons")


def __getattr__(name):
    if name == "plan":  # rl.plan: a training run planned (ringlab.train.planner; loads on first use, no torch)
        return importlib.import_module(".train.planner", __name__).plan
    if name in _ON_FIRST_USE:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'ringlab' has no attribute {name!r}")
