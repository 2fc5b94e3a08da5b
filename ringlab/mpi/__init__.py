"""Running a schedule for real, one MPI process per rank, each on its own numpy or cupy buffer.

- ``collectives``: the public calls, ``rl.allreduce``, ``rl.reduce``, ``rl.broadcast``, ``rl.execute``;
- ``primitives``: ``rl.gather``, ``rl.scatter``, ``rl.alltoall``: MPI's blocks laid out as a schedule's chunks;
- ``executor``: a schedule compiled into each rank's plan of messages, and the step loop that runs it;
- ``private``: ringlab's own duplicate of each communicator, and everything kept for it, freed with it;
- ``deadlines``: the default deadline of every multi-rank operation (``RINGLAB_TIMEOUT``) and waiting with one;
- ``fastpath``: the per-call path for numpy buffers (plans, agreement digests and persistent requests made once);
- ``mpich``: MPICH's own settings, written while running (its ring allreduce forced for ``bench -a mpi-ring``);
- ``transports``: how a step's bytes travel (host memory, a CUDA-aware MPI, CUDA IPC);
- ``devices``: numpy or cupy, which GPU a rank uses, pinned host buffers;
- ``launch``: starting MPI jobs (``mpiexec``) and torch process groups from Python.
"""
from .collectives import allreduce, broadcast, execute, reduce, which_transport
from .primitives import alltoall, gather, scatter
from .transports import release_buffers
from .executor import StepTimeout, Trace
from .private import OutOfStep

__all__ = ["allreduce", "reduce", "broadcast", "gather", "scatter", "alltoall", "execute", "which_transport",
           "release_buffers", "StepTimeout", "OutOfStep", "Trace"]
