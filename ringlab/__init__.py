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
"""
from .algorithms import ALGORITHMS, build
from .schedule import (COPY, REDUCE, Collective, Schedule, Step, Transfer, chunk_bounds,
                       make_schedule)
from .simulate import ScheduleError, Simulation, check, holding_str, simulate, traffic
from .executor import StepTimeout, Trace
from .collectives import allreduce, broadcast, execute, reduce, which_transport
from . import topology
from .costmodel import Prediction, predict

__version__ = "0.1.0"

__all__ = [
    "ALGORITHMS", "build", "Schedule", "Step", "Transfer", "Collective", "REDUCE", "COPY",
    "chunk_bounds", "make_schedule", "simulate", "check", "traffic", "Simulation",
    "ScheduleError", "holding_str", "allreduce", "reduce", "broadcast", "execute", "which_transport", "StepTimeout", "topology", "predict", "Prediction",
    "Trace", "__version__",
]
