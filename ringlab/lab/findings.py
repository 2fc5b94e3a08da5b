"""What a measured cell concludes, as data: the sentences a learner reads and what they state.

A lab's measured cell prints a :class:`Finding` that a function of its lesson room computed from the
numbers beside it. ``conclusions`` are what the lesson teaches from them (``"pipelining pays on the
emulated machine"``): the same measurement run again and again must give the same ones, which a test
checks. ``observations`` are what the learner's own machine showed (``"pipelining does not pay on this
machine"``): stated from its numbers, and free to change when a busy machine's numbers do.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Finding:
    """Sentences computed from measurements, the lesson's conclusions and the raw machine's observations."""

    text: str
    conclusions: tuple[str, ...]
    observations: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the sentences, not the dataclass
        printer.text(self.text)
