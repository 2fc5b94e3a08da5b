"""The lab engine: what every lab uses. Each lab's own code is in its room of ``ringlab.lessons``.

- ``exercises``: :func:`~ringlab.lab.exercises.exercise` and :func:`~ringlab.lab.exercises.compare`, from
  which every lab's checks are built: they run a learner's answer through ringlab and say what is wrong;
- ``quiz``: :class:`~ringlab.lab.quiz.Quiz` and :class:`~ringlab.lab.quiz.Question`, the questions that end
  every lab, each expected answer computed by ringlab, checked with a hint;
- ``cluster``: :class:`MPICluster`, MPI ranks as ipyparallel engines for ``%%px`` cells;
- ``notebooks``: the labs' jupytext sources, the exercise and solution notebooks built from them,
  their ``%%px`` cells as one script for mpiexec, and the learner's own copies in ``my_labs/``
  (``python -m ringlab.lab build|check|copy|settings|script``);
- ``settings``: JupyterLab's saveState turned on, so that saved notebooks keep their widgets;
- ``words``: lists and counts in the labs' sentences, said one way.
"""
