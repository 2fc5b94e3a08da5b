"""Shared helpers: every registered algorithm with every option worth trying."""
from __future__ import annotations

import os

from hypothesis import settings

import ringlab as rl
from ringlab.algorithms import options_of

# On several pytest-xdist workers the cores are shared: another worker's job runs beside each test's ranks, so every
# job's waiting ranks give their core away (RINGLAB_YIELD=1, inherited by every mpiexec, kernel and engine the tests
# start) instead of spinning on it while the process they wait for cannot run. Alone (`-m quiet`), nothing changes.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("RINGLAB_YIELD", "1")

settings.register_profile("ci", max_examples=150, deadline=None)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def variants(name: str, nranks: int, roots=None):
    """Option dicts for ``name`` on ``nranks`` ranks: every root, several segment counts, every server count,
    1 to 3 rings and rings in orders of their own, every node size that divides n and one that does not."""
    accepted = options_of(name)
    roots = range(nranks) if roots is None else roots
    out = [{}]
    if "root" in accepted:
        out = [{"root": r} for r in roots]
    if "segments" in accepted:
        out = [dict(o, segments=s) for o in out for s in sorted({1, 2, 3, 7, nranks})]
    if "servers" in accepted:
        out = [dict(o, servers=m) for o in out for m in range(1, nranks + 1)]
    if "rings" in accepted:  # 1 to 3 rings in the default orders, then 2 in orders of our own
        order = tuple(range(0, nranks, 2)) + tuple(range(1, nranks, 2))  # evens, then odds
        out = [dict(o, rings=k) for o in out for k in (1, 2, 3)] + [dict(o, orders=(order, order[::-1])) for o in out]
    if "local" in accepted:  # every divisor of n, then the smallest L that leaves a smaller last node
        divisors = [size for size in range(1, nranks + 1) if nranks % size == 0]
        uneven = [size for size in range(2, nranks) if nranks % size][:1]
        out = [dict(o, local=size) for o in out for size in divisors + uneven]
    return out


def all_schedules(max_ranks: int = 16, roots=None):
    """(name, nranks, options) for every algorithm, 1..max_ranks ranks and every variant."""
    for name in sorted(rl.ALGORITHMS):
        for nranks in range(1, max_ranks + 1):
            for opts in variants(name, nranks, roots):
                yield name, nranks, opts
