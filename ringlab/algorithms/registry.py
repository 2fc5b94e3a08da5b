"""The registry of algorithms: :func:`register` files a builder under ``"<collective>.<algorithm>"`` in
:data:`ALGORITHMS`; :func:`options_of` and :func:`about` read what was filed. The pages
(``ring.py``, ``broadcast.py``, ...) import this module; ``ringlab.algorithms`` imports the pages.
"""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np

from ..schedule import ROOTED, Collective, LazySteps, Schedule

ALGORITHMS: dict[str, Callable[..., Schedule]] = {}
MOST = 1 << 40  # the largest whole-number option (segments, servers, rings, ranks per node) a builder is given


def register(name: str):
    """Decorator: file a builder under ``name`` (``"allreduce.ring"``); the collective is the part before the dot.

    The builder returns ``(nchunks, steps)``: a list of steps, or the steps of a
    :class:`~ringlab.algorithms.pattern.Pattern` (made on demand). What gets registered returns a Schedule
    of that collective and name, its empty steps dropped, with the options it was built with (those not
    None) recorded; a ``root`` is also the collective's root for reduce, broadcast, gather and scatter.
    """
    collective = name.split(".", 1)[0]

    def add(builder):
        signature = inspect.signature(builder)

        @functools.wraps(builder)
        def build_schedule(nranks: int, *args, **options) -> Schedule:
            for key, value in options.items():  # past this, numpy's integers overflow before any check can say why
                if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and abs(value) > MOST:
                    raise ValueError(f"{name}: {key} must be at most {MOST:,}, got {value}")
            nchunks, steps = builder(nranks, *args, **options)
            bound = signature.bind(nranks, *args, **options)
            bound.apply_defaults()
            recorded = {k: v for k, v in list(bound.arguments.items())[1:] if v is not None}
            root = recorded.get("root") if collective in ROOTED else None
            if not isinstance(steps, LazySteps):
                steps = tuple(s for s in steps if len(s))
            return Schedule(Collective(collective, nranks, nchunks, root=root), steps, name=name, options=recorded)

        ALGORITHMS[name] = build_schedule
        return build_schedule
    return add


def options_of(name: str) -> dict[str, object]:
    """The options a registered algorithm takes, with their defaults."""
    params = list(inspect.signature(ALGORITHMS[name]).parameters.values())[1:]
    return {p.name: p.default for p in params}


def about(name: str) -> str:
    """What a registered algorithm does: its builder's docstring ("" for a name not registered)."""
    builder = ALGORITHMS.get(name)
    return inspect.cleandoc(builder.__doc__ or "") if builder else ""
