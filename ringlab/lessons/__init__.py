"""The lessons: one room per lab, named after its notebook, holding what that lab alone uses.

Each room holds the lab's exercise checks (beside the lesson they check), its quiz (``QUIZ``, a
:class:`ringlab.lab.quiz.Quiz`) and the code that reads its measurements back in sentences. What every
lab uses (checking, the quiz engine, the ``%%px`` cluster, the notebook build) is ``ringlab.lab``; what
is not about one lab lives in the layer that owns it (``measure``, ``predict``, ``viz``).

- ``lab00_your_machine``: PCIe's arithmetic (exercise) and the quiz;
- ``lab01_moving_bytes``: one message and a staged message (exercises) and the quiz;
- ``lab02_reduce_broadcast``: the pipelined chain (exercise) and the quiz;
- ``lab03_allreduce``: the ring's rule and bus bandwidth derived (exercises), algbw against busbw, the quiz;
- ``lab04_parameter_servers``: ``staleness``, ``wallclock`` (a race against the clock), ``serverload``, ``quiz``;
- ``lab05_scaling``: ``predictions`` (machines nobody here runs, beside published sweeps), ``simnodes``
  (two simulated nodes), ``quiz``;
- ``lab06_training``: ``trainers``, ``payoff`` (when data parallelism pays), ``batches``, ``pipeline``,
  ``overlap`` (buckets), ``quiz``;
- ``lab07_hangs_and_crawls``: ``diagnose`` (a missing rank, a straggler), ``checklist`` (NCCL's
  settings, P2P, links), ``quiz``;
- ``lab08_sharding_and_memory``: ``sharding`` (ZeRO), ``quiz``;
- ``lab09_model_parallelism``: ``mesh`` (tensor parallelism on a mesh), ``experts``, ``attention`` (ring attention),
  ``quiz``;
- ``lab10_inside_nccl``: ``nccl`` (how NCCL picks; its channels; PAT), ``symmetric`` (one-shot and two-shot allreduce),
  ``quiz``;
- ``lab11_plan_a_run``: ``run`` (Llama 3 70B on 256 H100s planned; the memory and bubble exercises), ``published``
  (the closest published run against its prediction), ``layouts`` (the lab's four questions), ``quiz``.

:func:`quiz` finds a lab's quiz by its number (``quiz(3)``, ``quiz("03_allreduce")``).
"""
from __future__ import annotations

import importlib

ROOMS = {"00": "lab00_your_machine", "01": "lab01_moving_bytes", "02": "lab02_reduce_broadcast",
         "03": "lab03_allreduce", "04": "lab04_parameter_servers", "05": "lab05_scaling",
         "06": "lab06_training", "07": "lab07_hangs_and_crawls", "08": "lab08_sharding_and_memory",
         "09": "lab09_model_parallelism", "10": "lab10_inside_nccl", "11": "lab11_plan_a_run"}


def lab_key(lab) -> str:
    """"03" for 3, "3", "03" or "03_allreduce"."""
    if isinstance(lab, bool) or not isinstance(lab, (int, str)):
        raise ValueError(f"name a lab by its number, e.g. 3 or '03', not {lab!r}")
    text = str(lab).split("_")[0]
    if not text.isdigit():
        raise ValueError(f"name a lab by its number, e.g. 3 or '03', not {lab!r}")
    return f"{int(text):02d}"


def room(lab):
    """Lab ``lab``'s room (a module of this package)."""
    key = lab_key(lab)
    if key not in ROOMS:
        raise ValueError(f"no lab {lab!r}; the labs are {', '.join(ROOMS)}")
    return importlib.import_module(f"{__name__}.{ROOMS[key]}")


def quiz(lab):
    """Lab ``lab``'s :class:`~ringlab.lab.quiz.Quiz`."""
    key = lab_key(lab)
    if key not in ROOMS:
        raise ValueError(f"no quiz for lab {lab!r}; the labs with quizzes are {', '.join(ROOMS)}")
    here = room(key)
    return here.QUIZ if hasattr(here, "QUIZ") else importlib.import_module(f"{here.__name__}.quiz").QUIZ
