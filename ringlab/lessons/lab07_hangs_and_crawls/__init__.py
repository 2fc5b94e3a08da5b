"""Lab 07, when it hangs or crawls: what its notebook runs and reads back, and its quiz.

- ``diagnose``: a hang or a straggler read back from real ranks' messages and traces, and the
  exercises :func:`~.diagnose.check_culprit` and :func:`~.diagnose.check_straggler`;
- ``checklist``: NCCL's settings, P2P off against on (published), ranks mapped to GPUs and links;
- ``quiz``: the lab's questions.
"""
