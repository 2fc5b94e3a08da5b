"""Lab 10, inside NCCL: what its notebook measures and says, and its quiz.

- ``nccl``: how NCCL picks algorithm and protocol, its channels (``ringlab.predict.channels``), held against published
  sweeps; PAT;
- ``symmetric``: one-shot and two-shot allreduce (symmetric memory) measured against the ring and MPI's own on this
  machine, counted from their schedules, and predicted by NCCL's model of its symmetric kernels;
- ``checks``: the exercises: where NCCL's model switches protocol (:func:`~.checks.check_switch_size`), one-shot or
  two-shot from their counted waits and reads (:func:`~.checks.check_pick_symmetric`);
- ``quiz``: the lab's questions.
"""
