"""Data-parallel training on ringlab's collectives (needs torch: ``pip install torch==2.13.0``).

- :class:`DistributedOptimizer`: Horovod's one-line wrapper, averaging gradients with
  :func:`ringlab.allreduce` (any algorithm, any transport), fused into buckets and overlapped with
  the backward pass.
- :class:`ParameterServer`: synchronous and asynchronous parameter servers on MPI ranks, counting
  their bytes and timing how long a server is busy.
- :mod:`ringlab.train.straggler`: one worker slowed on purpose, by a factor and a fixed sleep a step.
- :mod:`ringlab.train.task`: a small generated classification task for both.
- :mod:`ringlab.train.reference`: torch DDP on the same batches, the weights both must match.
- :mod:`ringlab.train.scaling`: samples per second, speed-up and communication share against ranks.
- :mod:`ringlab.train.payoff`: one rank's compute per step against steps on n ranks and a ring-allreduce
  sweep on them, for a few model widths (when data parallelism pays).
- :mod:`ringlab.train.accumulation`: micro-batches accumulated before a step, against ranks taking one each.
- :mod:`ringlab.train.large_batch`: batch k x b at the same learning rate, at k times it and with warm-up.
- :class:`ZeroOptimizer` (:mod:`ringlab.train.zero`): ZeRO stages 1-3 (FSDP's full sharding at 3) on ringlab's
  reduce-scatter and allgather, with what each rank holds measured from its tensors.
- :mod:`ringlab.train.tensor`: Megatron's column- and row-parallel layers on ringlab's allreduce, and a data x
  tensor mesh of sub-communicators; :mod:`ringlab.train.mesh` trains a stack of split blocks on one.
- :mod:`ringlab.train.experts`: a mixture-of-experts layer whose tokens travel by ringlab's all-to-all.
- :mod:`ringlab.train.attention`: ring attention, key/value blocks passed as in the ring allgather.
- :mod:`ringlab.train.overlap`: step time and time waiting on communication against bucket size, overlap
  off and on, each step traced.
"""
from .optimizer import DistributedOptimizer, broadcast_parameters
from .ps import ParameterServer
from .zero import ZeroOptimizer

__all__ = ["DistributedOptimizer", "ParameterServer", "ZeroOptimizer", "broadcast_parameters"]
