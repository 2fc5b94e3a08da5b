"""Lab 11, plan a real training run: what its notebook plans and says, its exercises and its quiz.

- ``run``: the run the lab plans (Llama 3 70B on 256 H100s), what a plan says in words, and the exercises checked
  against the planner (:func:`~.run.check_state_bytes`, :func:`~.run.check_interleaved_bubble`);
- ``published``: the closest published run (:mod:`ringlab.train.runs`) against the planner's prediction of it;
- ``layouts``: the lab's four questions, each answered from the plans it computes: tensor parallelism inside a node
  or across two, when ZeRO-3 pays, context parallelism at 128k tokens, and the same run on B200 and GB200 NVL72;
- ``unprinted``: a published run whose source leaves its micro-batch out, planned at every value it can take
  (:func:`ringlab.train.runs.unprinted`), and why the ratio moves with it;
- ``quiz``: the lab's questions.

Every number here is the planner's prediction (``rl.plan``) or a published figure, and says which.
"""
