"""Lab 08, sharding and memory: what its notebook measures and says, and its quiz.

- ``sharding``: what plain data parallelism and each ZeRO stage hold and send, measured on emulated links, the
  paper's formulas and 8 and 16 H100s (exercise: :func:`~.sharding.check_zero_bytes`);
- ``quiz``: the lab's questions.
"""
