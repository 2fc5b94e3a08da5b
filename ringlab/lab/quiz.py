"""The labs' quizzes: short questions whose answers ringlab computes, checked without stopping the lab.

Every lab ends with a :class:`Quiz` of three to five :class:`Question` s, kept beside its lesson (``QUIZ``
in each room of ``ringlab.lessons``): a number to compute, a plot to read, or a choice to justify. A
question's expected answer is a function of its stated inputs (``given``), evaluated when the check runs by
ringlab itself (its schedules, cost model, bus factors and published data set), and, for a question about
the lab's own plot, of what the lab measured (the values named in ``measured``, which the lab passes in).
:meth:`Quiz.ask` shows a question with its worked answer folded under "Answer"; :meth:`Quiz.check` says
whether an answer is right, with a hint when it is not. Like the exercises' checks it never raises unless
strict (``RINGLAB_STRICT_EXERCISES=1`` or ``strict=True``): then an unanswered question raises NotDoneYet
and a wrong answer AssertionError.
"""
from __future__ import annotations

import html
import math
import numbers
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping

from .exercises import NotDoneYet, _strict


@dataclass(frozen=True, eq=False)
class Question:
    """One quiz question; ``text``, ``exhibit`` and ``worked`` are templates filled from :meth:`fields`."""

    text: str                                  # the question
    expected: Callable[..., Any]               # expected(**given, **measured): the right answer
    worked: str                                # the worked answer; may use {answer}
    hint: str                                  # said when an answer is wrong (a template too)
    given: Mapping[str, Any] = field(default_factory=dict)  # the stated inputs
    unit: str = ""                             # the unit a number is asked in
    rel_tol: float = 0.01                      # how close a number must be (0: exactly)
    choices: tuple[str, ...] = ()              # a choice question's options (expected returns one)
    derived: Callable[..., dict] | None = None  # more template fields, from the same inputs
    measured: tuple[str, ...] = ()             # values the lab passes in from its own run
    exhibit: str = ""                          # preformatted text shown under the question

    def __post_init__(self):
        if not 0 <= self.rel_tol < 0.5:
            raise ValueError(f"rel_tol must be in [0, 0.5) so that an answer off by 2x is wrong, got {self.rel_tol}")

    def _inputs(self, measured: Mapping[str, Any]) -> dict:
        missing = [name for name in self.measured if name not in measured]
        unknown = [name for name in measured if name not in self.measured]
        if missing or unknown:
            raise ValueError(f"this question takes {', '.join(self.measured) or 'no measured values'} from the lab; "
                             f"got {', '.join(measured) or 'none'}")
        return {**self.given, **measured}

    @cached_property
    def _fixed_answer(self):
        return self.expected(**self.given)

    def answer(self, **measured):
        """The right answer, computed now from the stated inputs (and the lab's measurements)."""
        inputs = self._inputs(measured)
        return self.expected(**inputs) if self.measured else self._fixed_answer

    @cached_property
    def _fixed_fields(self):
        extra = self.derived(**self.given) if self.derived else {}
        return {**self.given, **extra, "answer": self._fixed_answer}

    def fields(self, **measured) -> dict:
        """What the templates may use: the inputs, the derived values and ``answer``."""
        if not self.measured:
            self._inputs(measured)  # refuses measured values this question does not take
            return self._fixed_fields
        inputs = self._inputs(measured)
        extra = self.derived(**inputs) if self.derived else {}
        return {**inputs, **extra, "answer": self.answer(**measured)}

    def is_right(self, yours, **measured) -> bool:
        """Whether ``yours`` is the answer (within ``rel_tol`` for a number; any case for a choice)."""
        return self._judge(yours, self.answer(**measured))[0]

    def _judge(self, yours, expected) -> tuple[bool, str]:
        """(right, what to say when it is not)."""
        if self.choices:
            if not isinstance(yours, str):
                return False, f"answer with one of the choices, as a string: {_options(self.choices)}"
            if yours.strip().casefold() not in [c.casefold() for c in self.choices]:
                return False, f"{yours!r} is not one of the choices: {_options(self.choices)}"
            return yours.strip().casefold() == expected.casefold(), "that is not it"
        if isinstance(yours, bool) or not isinstance(yours, numbers.Real):
            return False, f"answer with a number{self._in_unit()}, not {yours!r}"
        if math.isclose(float(yours), float(expected), rel_tol=self.rel_tol, abs_tol=0 if self.rel_tol else 1e-9):
            return True, ""
        return False, "too high" if yours > expected else "too low"

    def _in_unit(self) -> str:
        return f" (in {self.unit})" if self.unit else ""

    def render_text(self, **measured) -> str:
        """The question as plain text, worked answer last (for terminals and tests)."""
        f = self.fields(**measured)
        parts = [self.text.format(**f)]
        if self.exhibit:
            parts.append(self.exhibit.format(**f))
        if self.choices:
            parts.append(f"Choices: {_options(self.choices)}")
        return "\n".join(parts + [f"Answer: {self.worked.format(**f)}"])

    def render_html(self, number: int, **measured) -> str:
        """The question as HTML, its worked answer folded in a <details> element."""
        f = self.fields(**measured)
        asked = ("one of " + ", ".join(f"<code>{html.escape(repr(c))}</code>" for c in self.choices) if self.choices
                 else f"a number{self._in_unit()}")
        exhibit = f"<pre>{html.escape(self.exhibit.format(**f))}</pre>" if self.exhibit else ""
        return (f'<div class="ringlab-quiz"><p><b>Question {number}</b> (answer with {asked}). '
                f"{_html(self.text.format(**f))}</p>{exhibit}<details><summary>Answer</summary>"
                f"<p>{_html(self.worked.format(**f))}</p></details></div>")


def _options(choices) -> str:
    return ", ".join(repr(c) for c in choices)


def _html(text: str) -> str:
    """Escaped text with `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))


def _show(value, unit: str = "") -> str:
    if isinstance(value, str):
        return repr(value)
    number = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{number} {unit}".strip()


class Shown:
    """A question as a notebook shows it (HTML) and a terminal prints it (text)."""

    def __init__(self, html_text: str, plain: str):
        self.html, self.plain = html_text, plain

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self.plain


class Quiz:
    """One lab's quiz: its questions in order, shown with :meth:`ask` and checked with :meth:`check`."""

    def __init__(self, lab: str, questions: list[Question]):
        self.lab, self.questions = lab, tuple(questions)

    def __len__(self) -> int:
        return len(self.questions)

    def __iter__(self):
        return iter(self.questions)

    def question(self, number: int) -> Question:
        """Question ``number`` (from 1)."""
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= len(self):
            raise ValueError(f"lab {self.lab}'s quiz has questions 1 to {len(self)}, not {number!r}")
        return self.questions[number - 1]

    def ask(self, number: int, **measured) -> Shown:
        """Question ``number``, for a notebook cell to show (the worked answer folded away)."""
        q = self.question(number)
        return Shown(q.render_html(number, **measured), f"Question {number}. {q.render_text(**measured)}")

    def check(self, number: int, yours, strict: bool | None = None, **measured) -> None:
        """Print whether ``yours`` answers question ``number``, with a hint when it does not.

        Strict (``strict=True``, or ``RINGLAB_STRICT_EXERCISES=1``): an unanswered question (None) raises
        NotDoneYet and a wrong answer AssertionError, each with the same message.
        """
        strict = _strict() if strict is None else strict
        q = self.question(number)
        name = f"Question {number}"
        if yours is None:
            message = (f"{name}: not answered yet. Set `answer` in the cell above to your answer"
                       f"{' (one of ' + _options(q.choices) + ')' if q.choices else q._in_unit()}, run it, then run "
                       "this cell again. The worked answer is folded under \"Answer\" in the question.")
            if strict:
                raise NotDoneYet(message)
            print(message)
            return
        expected = q.answer(**measured)
        right, why = q._judge(yours, expected)
        if right:
            print(f"{name}: right, {_show(yours, q.unit)}." +
                  (f" (ringlab computes {_show(expected, q.unit)}.)" if not q.choices and yours != expected else ""))
            return
        hint = q.hint.format(**q.fields(**measured))
        message = f"{name}: not yet: you answered {_show(yours, q.unit)}, {why}.\nHint: {hint}"
        if strict:
            raise AssertionError(message)
        print(message)
