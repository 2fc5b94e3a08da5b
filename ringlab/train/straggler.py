"""One slow worker, made on purpose: its compute takes ``factor`` times as long, plus ``extra_seconds`` a step.

The parameter server (``ParameterServer(..., straggler=)``) and lab 04's ring allreduce run
(:func:`ringlab.lessons.lab04_parameter_servers.wallclock.race`) slow their worker the same way, after it computes:
on this machine it sleeps; on an emulated machine (``rl.emulate``) the delay passes on its virtual clock
(:func:`ringlab.mpi.emulate.elapse`), and nobody sleeps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

MAX_FACTOR = 1000.0          # slower than this is a worker that never comes
MAX_EXTRA_SECONDS = 30.0     # below the default deadline (60 s) of the ranks that wait for it


@dataclass(frozen=True)
class Straggler:
    """Worker ``worker`` computes ``factor`` times as slowly, then waits ``extra_seconds`` more, every step."""
    worker: int
    factor: float = 1.0
    extra_seconds: float = 0.0

    def __post_init__(self):
        if isinstance(self.worker, bool) or not isinstance(self.worker, int) or self.worker < 0:
            raise ValueError(f"the straggler's worker must be a worker index (an int >= 0), got {self.worker!r}")
        if not 1 <= self.factor <= MAX_FACTOR:
            raise ValueError(f"the straggler's factor must be in 1..{MAX_FACTOR:g} (1: no slower), got {self.factor!r}")
        if not 0 <= self.extra_seconds <= MAX_EXTRA_SECONDS:
            raise ValueError(f"the straggler's extra_seconds must be in 0..{MAX_EXTRA_SECONDS:g} (longer would only "
                             f"outlast the others' deadline), got {self.extra_seconds!r}")

    @classmethod
    def of(cls, straggler) -> "Straggler | None":
        """None, a Straggler, or a ``(worker, factor)`` pair, as a Straggler (or None)."""
        if straggler is None or isinstance(straggler, cls):
            return straggler
        if isinstance(straggler, tuple) and len(straggler) == 2:
            return cls(straggler[0], float(straggler[1]))
        raise ValueError(f"straggler must be None, a Straggler or a (worker, factor) pair, got {straggler!r}")

    def slow_down(self, worker: int, spent: float) -> float:
        """On ``worker``, after computing for ``spent`` seconds: if it is the straggler, sleep (on an emulated
        machine, let the time pass on its virtual clock instead); the step's compute seconds in all (``spent``
        on every other worker)."""
        from ..mpi import emulate

        if worker != self.worker:
            return spent
        extra = spent * (self.factor - 1) + self.extra_seconds
        if emulate.current() is not None:
            emulate.elapse(extra)
        else:
            time.sleep(extra)
        return spent + extra

    def __str__(self) -> str:
        slower = ([f"computes {self.factor:g}x as slowly"] if self.factor != 1 else []) + (
            [f"takes {self.extra_seconds * 1e3:g} ms more every step"] if self.extra_seconds else [])
        return f"worker {self.worker} " + (" and ".join(slower) if slower else "runs at full speed")
