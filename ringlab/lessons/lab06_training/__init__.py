"""Lab 06, training: what its notebook measures and says, and its quiz.

- ``trainers``: the three trainers compared in weights and time, speed-up and accuracy in words;
- ``payoff``: when data parallelism pays, measured per model width against the cost model;
- ``batches``: accumulation against ranks, large batches and warm-up (exercise:
  :func:`~.batches.check_scaled_lr`);
- ``pipeline``: a pipeline boundary's bytes against an allreduce, and the bubble (exercise:
  :func:`~.pipeline.check_bubble_fraction`);
- ``overlap``: the bucket and overlap sweep and its step-time model (exercise: :func:`~.overlap.check_step_time`);
- ``quiz``: the lab's questions.
"""
