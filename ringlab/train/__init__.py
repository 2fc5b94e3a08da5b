"""Training on ringlab's collectives (needs torch: ``pip install torch==2.13.0``), and planning a real run (does not).

- :class:`Transformer` and :func:`plan` (:mod:`ringlab.train.transformer`, :mod:`ringlab.train.planner`): a
  transformer by its shape, and a training run's memory, compute and collectives on a device mesh, predicted
  (``rl.plan``; ``ringlab plan`` on the command line). They load without torch.

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
import importlib

from .planner import Plan, plan
from .transformer import PRESETS, Transformer

_WITH_TORCH = {"DistributedOptimizer": "optimizer", "broadcast_parameters": "optimizer", "ParameterServer": "ps",
               "ZeroOptimizer": "zero"}

__all__ = ["DistributedOptimizer", "ParameterServer", "ZeroOptimizer", "broadcast_parameters", "Transformer",
           "PRESETS", "plan", "Plan"]


def __getattr__(name):
    """The classes that need torch load it when first asked for."""
    if name in _WITH_TORCH:
        return getattr(importlib.import_module(f".{_WITH_TORCH[name]}", __name__), name)
    raise AttributeError(f"module 'ringlab.train' has no attribute {name!r}")
