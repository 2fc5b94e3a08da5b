"""Every collective algorithm as a builder, one short page each, registered by name.

A builder is a pure function of ``nranks`` and its options that says how many chunks the buffer
is cut into and returns the steps; :func:`register` files it in :data:`ALGORITHMS` under
``"<collective>.<algorithm>"`` and turns what it returns into a :class:`~ringlab.schedule.Schedule`
of that collective. :func:`build` looks one up and checks its options first, so a bad option is a
clear ValueError whichever builder it was meant for.
"""
from __future__ import annotations

import difflib
import functools
import inspect
from typing import Callable

from ..schedule import ROOTED, Collective, Schedule, check_count, check_root

ALGORITHMS: dict[str, Callable[..., Schedule]] = {}


def register(name: str):
    """Decorator: file a builder under ``name`` (``"allreduce.ring"``); the collective is the part before the dot.

    The builder returns ``(nchunks, steps)``. What gets registered returns a Schedule of that
    collective and name, its empty steps dropped, with the options it was built with (those not
    None) recorded; a ``root`` is also the collective's root for reduce, broadcast, gather and scatter.
    """
    collective = name.split(".", 1)[0]

    def add(builder):
        signature = inspect.signature(builder)

        @functools.wraps(builder)
        def build_schedule(nranks: int, *args, **options) -> Schedule:
            nchunks, steps = builder(nranks, *args, **options)
            bound = signature.bind(nranks, *args, **options)
            bound.apply_defaults()
            recorded = {k: v for k, v in list(bound.arguments.items())[1:] if v is not None}
            root = recorded.get("root") if collective in ROOTED else None
            return Schedule(Collective(collective, nranks, nchunks, root=root), tuple(s for s in steps if len(s)),
                            name=name, options=recorded)

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


def checked_options(name: str, nranks: int, options: dict) -> dict:
    """``options`` for algorithm ``name`` on ``nranks`` ranks, or a ValueError saying what is wrong."""
    accepted = options_of(name)
    for key in options:
        if key not in accepted:
            takes = ", ".join(accepted) or "no options"
            raise ValueError(f"{name} does not take option {key!r} (it takes: {takes})")
    options = dict(options)
    if "root" in options:
        options["root"] = check_root(options["root"], nranks)
    if options.get("segments") is not None:
        options["segments"] = check_count("segments", options["segments"])
    if options.get("servers") is not None:
        servers = check_count("servers", options["servers"])
        if servers > nranks:
            raise ValueError(f"servers must be in 1..{nranks} for {nranks} ranks, got {servers}")
    if options.get("rings") is not None:
        options["rings"] = check_count("rings", options["rings"])
    if options.get("orders") is not None:  # one permutation per ring; rings= follows when not given
        options["orders"] = channels.check_orders(options["orders"], options.get("rings"), nranks)
        options["rings"] = len(options["orders"])
    if options.get("local") is not None:
        local = check_count("local", options["local"])
        if local > nranks:
            raise ValueError(f"local (ranks per node) must be in 1..{nranks} for {nranks} ranks, got {local}")
        options["local"] = local
    return options


def build(name: str, nranks: int, **options) -> Schedule:
    """The schedule of algorithm ``name`` (e.g. ``"allreduce.ring"``) on ``nranks`` ranks.

    Options: ``root=`` (reduce, broadcast, gather, scatter, naive and tree allreduce), ``segments=`` (chain, double
    binary tree), ``servers=`` (parameter server), ``rings=`` and ``orders=`` (rings: how many, and
    one permutation of the ranks each; rings follows from orders when only orders is given),
    ``local=`` (hierarchical: ranks per node, 1..n). Any mistake raises a ValueError saying what is wrong.
    """
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(str(name), ALGORITHMS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown algorithm {name!r}{hint}; known: {', '.join(sorted(ALGORITHMS))}")
    nranks = check_count("nranks", nranks)
    return ALGORITHMS[name](nranks, **checked_options(name, nranks, options))


# Importing the pages registers their builders.
from . import broadcast, reduce, ring, allreduce, dbtree, channels, hierarchical, gather, scatter, alltoall  # noqa: E402,F401
