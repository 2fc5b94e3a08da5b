"""What the notebooks need and nothing else does.

- ``exercises``: checks that run a learner's answer through ringlab and say what is wrong;
- ``quiz``, ``quizzes``: the questions that end every lab, each expected answer computed by ringlab,
  and :func:`~ringlab.lab.quiz.check_quiz`, which says right or wrong with a hint;
- ``cluster``: :class:`MPICluster`, MPI ranks as ipyparallel engines for ``%%px`` cells;
- ``notebooks``: the labs' jupytext sources, the exercise and solution notebooks built from them,
  and their ``%%px`` cells as one script for mpiexec (``python -m ringlab.lab build|check|settings|script``);
- ``settings``: JupyterLab's saveState turned on, so that saved notebooks keep their widgets;
- ``demo``: a terminal walk-through of one collective (``ringlab demo``);
- ``tables``: :func:`~ringlab.lab.tables.table`, the labs' aligned text tables with units in the headers;
- ``busbw``: each collective's bus factor counted from its bandwidth-optimal schedule, and algbw
  against busbw over the ranks (lab 03);
- ``sweep``: a measured allreduce sweep read back in sentences computed from it, and where the ring
  overtakes naive, measured and fitted (lab 03);
- ``copies``: one core's copy against MPI at the same sizes, and the staged formula taken apart (lab 01);
- ``latency``: a fitted per-step alpha set beside a raw MPI message (labs 02 and 05);
- ``staleness``: whose pushes were how stale, and what the straggler did to the others (lab 04);
- ``wallclock``: two parameter servers and a ring allreduce raced against the clock with one straggler,
  and who reached a target loss first, and why (lab 04);
- ``serverload``: a server's bytes per step counted and its busy time measured against its workers (lab 04);
- ``predictions``: the cost model's predictions beside published sweeps, ready to plot (lab 05);
- ``training``: the three trainers compared in weights and time, speed-up and accuracy described from the
  numbers (lab 06);
- ``payoff``: when data parallelism pays: speed-up measured per model width against the cost model's, and
  a published pair of speed-ups read with it (lab 06);
- ``batches``: accumulated micro-batches against ranks, and large batches at the same, scaled and
  warmed-up learning rates, in words (lab 06);
- ``pipeline``: a pipeline boundary's bytes against a data-parallel allreduce, and a drawn bubble, in words
  (lab 06);
- ``overlap``: the bucket and overlap sweep described, the step-time model of its exercise set against it (lab 06);
- ``diagnose``: a hang or a straggler read back from real ranks' messages and traces (lab 07);
- ``checklist``: what to check when a GPU job crawls: NCCL's settings, P2P off against on (published),
  ranks mapped to GPUs and links (lab 07).
"""
