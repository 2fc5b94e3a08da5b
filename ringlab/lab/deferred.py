"""A learner's check written beside the lab code it checks, outside ``exercises.py``.

:func:`deferred_exercise` is :func:`ringlab.lab.exercises.exercise`, looked up when a check runs:
``exercises.py`` imports the modules whose checks it offers (``diagnose``, ``overlap``), so they
cannot import it back at import time.
"""
from __future__ import annotations

import functools


def deferred_exercise(reference, what: str):
    """Like ``exercise(reference, what)``, resolved on the first call instead of at import."""
    def wrap(strict_check):
        @functools.wraps(strict_check)
        def check_yours(yours, strict: bool | None = None):
            from .exercises import exercise

            return exercise(reference, what)(strict_check)(yours, strict)
        return check_yours
    return wrap
