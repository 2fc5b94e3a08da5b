"""Data-parallel training on ringlab's collectives (needs torch: ``pip install torch==2.13.0``).

- :class:`DistributedOptimizer`: Horovod's one-line wrapper, averaging gradients with
  :func:`ringlab.allreduce` (any algorithm, any transport), fused into buckets and overlapped with
  the backward pass.
- :class:`ParameterServer`: synchronous and asynchronous parameter servers on MPI ranks.
- :mod:`ringlab.train.task`: a small generated classification task for both.
- :mod:`ringlab.train.reference`: torch DDP on the same batches, the weights both must match.
- :mod:`ringlab.train.scaling`: samples per second, speed-up and communication share against ranks.
"""
from .optimizer import DistributedOptimizer, broadcast_parameters
from .ps import ParameterServer

__all__ = ["DistributedOptimizer", "ParameterServer", "broadcast_parameters"]
