"""Lab 10, inside NCCL: what its notebook measures and says, and its quiz.

- ``nccl``: how NCCL picks algorithm and protocol, its channels (``ringlab.predict.channels``), held against published
  sweeps; PAT (exercise: :func:`~.nccl.check_fastest_protocol`);
- ``symmetric``: one-shot and two-shot allreduce (symmetric memory) measured against the ring and MPI's own on this
  machine, counted from their schedules, and predicted by NCCL's model of its symmetric kernels;
- ``quiz``: the lab's questions.
"""
