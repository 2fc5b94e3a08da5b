"""Every collective algorithm as a builder, one short page each, registered by name.

A builder is a pure function of ``nranks`` and its options that says how many chunks the buffer
is cut into and returns the steps; :func:`register` files it in :data:`ALGORITHMS` under
``"<collective>.<algorithm>"`` and turns what it returns into a :class:`~ringlab.schedule.Schedule`
of that collective. :func:`build` looks one up and checks its options first, so a bad option is a
clear ValueError whichever builder it was meant for.
"""
from __future__ import annotations

import difflib

from ..schedule import MAX_RANKS, Schedule, check_count, check_root
from .registry import ALGORITHMS, about, options_of, register


def checked_options(name: str, nranks: int, options: dict) -> dict:
    """``options`` for algorithm ``name`` on ``nranks`` ranks, or a ValueError saying what is wrong."""
    accepted = options_of(name)
    for key in options:
        if key not in accepted:
            takes = ", ".join(accepted) or "no options"
            raise ValueError(f"{name} does not take option {key!r} (it takes: {takes})")
    options = {k: v for k, v in options.items() if v is not None or k == "root"}  # None: the builder's default
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
    nranks = check_count("nranks", nranks, maximum=MAX_RANKS)
    return ALGORITHMS[name](nranks, **checked_options(name, nranks, options))


# Importing the pages registers their builders.
from . import broadcast, reduce, ring, allreduce, dbtree, channels, hierarchical, gather, scatter, alltoall, pat, symmetric  # noqa: E402,F401,E501

__all__ = ["ALGORITHMS", "register", "options_of", "about", "checked_options", "build"]
