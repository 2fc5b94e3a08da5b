"""Running a schedule for real, one MPI process per rank, each on its own numpy or cupy buffer.

A call goes down these layers once, each importing only the layers below it, and its result comes back once::

    collectives   the public calls: check the arguments, agree, choose the schedule and the transport
        |         (rl.allreduce, rl.reduce, rl.broadcast, rl.execute, rl.gather, rl.scatter, rl.alltoall; beside
        |         them rl.alltoallv, whose sizes differ per pair: pairwise rounds of its own)
    plan          a schedule and a size become this rank's compiled plan (cached), and the buffer the
        |         result lands in (a numpy call's whole setup is kept per signature: plan.Call)
    transports    how a step's bytes move: host memory, staged through it, a CUDA-aware MPI, CUDA IPC,
        |         an emulated machine's links; each binds the plan to the call's memory
        |         (ipc: the buffers a node's GPUs share; emulate: the emulated machines and their links' times)
    run           the step loop: every message, its deadline, and the reduction where two ranks' data meet

and the utilities every layer may use: ``private`` (ringlab's own duplicate of each communicator, the calls
counted and agreed on, and everything kept for it, freed with it), ``deadlines`` (``RINGLAB_TIMEOUT`` and
waiting with one), ``devices`` (numpy or cupy, a rank's GPU and cores, whether MPI reads GPU memory),
``nodes`` (which ranks share a node, or simulated nodes), ``reduction`` (NCCL's operators, bfloat16).

Starting jobs and the cluster on this machine are :mod:`ringlab.cluster`'s.
"""
from .collectives import allreduce, alltoall, alltoallv, broadcast, execute, gather, reduce, scatter, which_transport
from .private import OutOfStep
from .deadlines import StepTimeout
from .run import Trace
from .transports import release_buffers

__all__ = ["allreduce", "reduce", "broadcast", "gather", "scatter", "alltoall", "alltoallv", "execute", "which_transport",
           "release_buffers", "StepTimeout", "OutOfStep", "Trace"]
