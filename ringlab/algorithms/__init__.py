"""Every collective algorithm as a builder: a pure function ``(nranks, **options) -> Schedule``.

Builders are registered under ``"<collective>.<algorithm>"`` names in :data:`ALGORITHMS`;
:func:`build` looks one up and checks its options first, so a bad option is a clear ValueError
whichever builder it was meant for.
"""
from __future__ import annotations

import difflib
import inspect
from typing import Callable

from ..schedule import Collective, Schedule, check_count, check_root

ALGORITHMS: dict[str, Callable[..., Schedule]] = {}


def register(name: str):
    """Decorator: add a builder to :data:`ALGORITHMS` under ``name``."""
    def add(builder):
        ALGORITHMS[name] = builder
        return builder
    return add


def schedule(kind: str, name: str, nranks: int, nchunks: int, steps, **options) -> Schedule:
    """A builder's result: its non-empty steps as a Schedule of collective ``kind``.

    ``options`` record how it was built; a ``root`` among them is also the collective's root
    when the collective has one (reduce, broadcast).
    """
    steps = tuple(step for step in steps if len(step))
    root = options.get("root") if kind in ("reduce", "broadcast") else None
    return Schedule(Collective(kind, nranks, nchunks, root=root), steps, name=name, options=options)


def options_of(name: str) -> dict[str, object]:
    """The options a registered algorithm takes, with their defaults."""
    params = list(inspect.signature(ALGORITHMS[name]).parameters.values())[1:]
    return {p.name: p.default for p in params}


def build(name: str, nranks: int, **options) -> Schedule:
    """The schedule of algorithm ``name`` (e.g. ``"allreduce.ring"``) on ``nranks`` ranks.

    Options: ``root=`` (reduce, broadcast, naive and tree allreduce), ``segments=`` (chain),
    ``servers=`` (parameter server). Any mistake raises a ValueError saying what is wrong.
    """
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(str(name), ALGORITHMS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown algorithm {name!r}{hint}; known: {', '.join(sorted(ALGORITHMS))}")
    nranks = check_count("nranks", nranks)
    accepted = options_of(name)
    for key in options:
        if key not in accepted:
            takes = ", ".join(accepted) or "no options"
            raise ValueError(f"{name} does not take option {key!r} (it takes: {takes})")
    if "root" in options:
        options["root"] = check_root(options["root"], nranks)
    if options.get("segments") is not None:
        options["segments"] = check_count("segments", options["segments"])
    if options.get("servers") is not None:
        servers = check_count("servers", options["servers"])
        if servers > nranks:
            raise ValueError(f"servers must be in 1..{nranks} for {nranks} ranks, got {servers}")
    return ALGORITHMS[name](nranks, **options)


# Importing the modules registers their builders.
from . import broadcast, reduce, ring, allreduce  # noqa: E402,F401
