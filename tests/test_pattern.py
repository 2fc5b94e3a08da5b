"""Compact steps (ringlab.algorithms.pattern): every registered schedule is the same, step for step and
transfer for transfer, as its step-by-step builder made it, and its steps are made only when read."""
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import ringlab as rl
from ringlab.algorithms.pattern import Pattern, PatternSteps
from ringlab.schedule import LazySteps

ROOTED = ("reduce.direct", "reduce.tree", "broadcast.direct", "broadcast.tree", "allreduce.naive", "allreduce.tree",
          "gather.direct", "gather.ring", "gather.tree", "scatter.direct", "scatter.ring", "scatter.tree", "reduce.chain",
          "broadcast.chain")
DIGESTS = json.loads((Path(__file__).parent / "data" / "schedule_digests.json").read_text())


def variants(name: str, n: int) -> list[tuple[str, dict]]:
    """(label, options): the variants of ``name`` on ``n`` ranks whose digests were recorded."""
    out = [("default", {})]
    if name in ROOTED:
        out += [("root=last", {"root": n - 1}), ("root=mid", {"root": n // 2})]
    if name in ("reduce.chain", "broadcast.chain"):
        out += [("segments=1", {"segments": 1}), ("segments=3,root=mid", {"segments": 3, "root": n // 2}),
                ("segments=2n+1", {"segments": 2 * n + 1})]
    if name == "allreduce.dbtree":
        out += [(f"segments={s}", {"segments": s}) for s in (1, 2, 5)]
    if name == "allreduce.ps":
        out += [("servers=2", {"servers": min(2, n)}), ("servers=n", {"servers": n})]
    if name == "allreduce.rings":
        rng = np.random.default_rng(n)
        orders = [tuple(int(r) for r in rng.permutation(n)) for _ in range(3)]
        out += [("rings=1", {"rings": 1}), ("rings=3", {"rings": 3}), ("rings=4", {"rings": 4}),
                ("orders=random3", {"orders": orders})]
    if name == "allreduce.hierarchical":
        out += [(f"local={L}", {"local": min(L, n)}) for L in (1, 2, 3, 8)] + [("local=n", {"local": n})]
    return out


def canonical(schedule) -> str:
    digest = hashlib.sha256(repr((schedule.collective, schedule.name, len(schedule.steps))).encode())
    for step in schedule.steps:
        rows = sorted(zip(step.src.tolist(), step.dst.tolist(), step.chunk.tolist(), step.op.tolist()))
        digest.update(repr((step.label, rows)).encode())
    return digest.hexdigest()[:12]


@pytest.mark.parametrize("name", sorted(rl.ALGORITHMS))
def test_every_schedule_is_what_the_step_by_step_builders_made(name):
    for index, n in enumerate(DIGESTS["ranks"]):
        for label, options in variants(name, n):
            recorded = DIGESTS["schedules"][f"{name} {label}"]
            schedule = rl.build(name, n, **options)
            assert canonical(schedule) == recorded["canonical"][index], (name, label, n)
            assert schedule.fingerprint()[:12] == recorded["exact"][index], (name, label, n, "transfer order")
