"""How the labs check exercises: a check runs your code through ringlab and explains what is wrong.

Each lab's checks live beside its lesson (``ringlab.lessons``), built from :func:`exercise` and
:func:`compare`. Every ``check_...`` takes your function and returns the function the rest of the lab
should use: yours when it is right (and it says "Correct"), otherwise the reference answer, after a short
message: "not done yet" while your function still returns None, or what it returned against what
was expected, with a hint. Either way the notebook runs on, so Run All gets to the end of a lab
before every exercise is solved. Set ``RINGLAB_STRICT_EXERCISES=1`` (or pass ``strict=True``) to
make a wrong or unfinished answer raise AssertionError instead, as the tests do.
"""
from __future__ import annotations

import functools
import math
import os
import traceback
from pathlib import Path

STRICT_ENV = "RINGLAB_STRICT_EXERCISES"
_PACKAGE = str(Path(__file__).resolve().parent.parent)


class NotDoneYet(AssertionError):
    """The learner's function still returns None: the placeholder, untouched."""


def _strict() -> bool:
    return os.environ.get(STRICT_ENV, "") not in ("", "0")


def _where_in_your_code(err: BaseException) -> str:
    """' (line N of your code: <text>)' for the innermost frame outside ringlab, or ''."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not f.filename.startswith(_PACKAGE)]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (line {frame.lineno} of your code: {frame.line.strip()})" if frame.line else ""


def exercise(reference, what: str = "answer"):
    """Turn a strict check (raises AssertionError with the verdict) into a learner's check: returns the
    function to use from here on, printing the verdict without ringlab's traceback (see the module)."""
    def wrap(strict_check):
        @functools.wraps(strict_check)
        def check_yours(yours, strict: bool | None = None):
            strict = _strict() if strict is None else strict
            name = getattr(yours, "__name__", "your function")
            meanwhile = f"(The cells below use the reference {what} until yours passes.)"
            try:
                strict_check(yours)
                return yours
            except NotDoneYet:
                if strict:
                    raise
                print(f"{name}: not done yet. Write it where the cell above says '# Write your code here.', run that "
                      f"cell, then run this one again. {meanwhile}")
            except AssertionError as err:
                if strict:
                    raise
                print(f"{name} is not right yet: {err}\n{meanwhile}")
            except Exception as err:  # the learner's own code raised
                if strict:
                    raise
                print(f"{name} raised {type(err).__name__}: {err}{_where_in_your_code(err)}\n{meanwhile}")
            return reference
        return check_yours
    return wrap


def compare(yours, name: str, cases: list[dict], want, hint: str, rel_tol: float = 1e-6, unit: str = "s") -> None:
    """Call ``yours(**case)`` for every case and compare with ``want(**case)``; on the first
    difference raise an AssertionError naming the call, both answers and the hint (NotDoneYet when
    the first call returns None)."""
    for i, case in enumerate(cases):
        expected = want(**case)
        got = yours(*case.values())
        if got is None and i == 0:
            raise NotDoneYet(f"{name} returned None")
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=rel_tol):
            call = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in case.items())
            raise AssertionError(f"{name}({call}) returned {got!r}; expected {expected:.6g} {unit}.\nHint: {hint}")
