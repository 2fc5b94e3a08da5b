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


RECORDED = sorted({key.split(" ")[0] for key in DIGESTS["schedules"]})
# written as terms from the start, after the recording: the simulator checks them (tests/test_symmetric.py)
TERMS_FROM_THE_START = {"allreduce.oneshot", "allreduce.twoshot"}


def test_the_schedules_recorded_are_those_written_as_terms():
    """The digests were recorded from the step-by-step builders before the schedules were rewritten as terms;
    a schedule still written step by step (PAT) has nothing to be compared with, nor one written as terms
    from the start."""
    as_terms = {name for name in rl.ALGORITHMS if isinstance(rl.build(name, 5).steps, PatternSteps)}
    assert as_terms == set(RECORDED) | TERMS_FROM_THE_START


@pytest.mark.parametrize("name", RECORDED)
def test_every_schedule_is_what_the_step_by_step_builders_made(name):
    for index, n in enumerate(DIGESTS["ranks"]):
        for label, options in variants(name, n):
            recorded = DIGESTS["schedules"][f"{name} {label}"]
            schedule = rl.build(name, n, **options)
            assert canonical(schedule) == recorded["canonical"][index], (name, label, n)
            assert schedule.fingerprint()[:12] == recorded["exact"][index], (name, label, n, "transfer order")


def test_a_schedule_of_100000_ranks_is_built_without_its_transfers():
    ring = rl.build("allreduce.ring", 100000)
    assert isinstance(ring.steps, PatternSteps) and isinstance(ring.steps, LazySteps)
    assert len(ring.steps) == 199998 and ring.num_transfers == 199998 * 100000
    assert len(ring.steps.terms["src"]) <= 4 * 100000  # four runs a rank, where the transfers are 2(n-1) a rank
    step = ring.steps[100001]  # allgather, step 2: rank j sends chunk (j - 2 + 1) mod n
    assert len(step) == 100000 and step.label == "allgather"
    assert list(step)[:2] == [rl.Transfer(0, 1, 99999, "copy"), rl.Transfer(1, 2, 0, "copy")]
    assert ring.steps[-1] == ring.steps[199997] and ring.steps._cache and len(ring.steps._cache) <= 5


def test_made_steps_read_like_a_tuple_of_steps():
    ring = rl.build("allreduce.ring", 4)
    steps = tuple(ring.steps)
    assert ring.steps == steps and ring.steps == list(steps) and ring.steps[1:3] == steps[1:3]
    assert ring.steps[::-1] == steps[::-1] and rl.build("allreduce.ring", 1).steps == ()
    with pytest.raises(IndexError, match="step 6 of a schedule of 6 steps"):
        ring.steps[6]
    first, *_ = ring.steps
    assert first == steps[0]
    import pickle

    assert pickle.loads(pickle.dumps(ring.steps)) == steps  # made again from its terms, without the cache


def test_a_pattern_checks_its_terms():
    with pytest.raises(ValueError, match="a term names a rank outside 0..2"):
        _pattern(3, 2, [(0, 3, 0, 1, 0)])
    with pytest.raises(ValueError, match="rank 1 sends to itself"):
        _pattern(3, 2, [(1, 1, 0, 1, 0)])
    with pytest.raises(ValueError, match="a term names a chunk outside 0..1"):
        _pattern(3, 2, [(0, 1, 0, 3, 0, 1)])  # chunk 0, 1, 2 over three steps
    with pytest.raises(ValueError, match="must move by at least its width"):
        _pattern(3, 8, [(0, 1, 0, 2, 0, 1, 2)])
    with pytest.raises(ValueError, match="op must be 'reduce' or 'copy', not 'add'"):
        Pattern(2, 1).add(0, 1, 0, 1, 0, "add")
    steps = _pattern(3, 4, [(0, 1, 0, 1, 0), (2, 0, 3, 4, 1, 0, 3)])  # steps 1 and 2 have nothing: left out
    assert len(steps) == 2 and [len(s) for s in steps] == [1, 3] and list(steps[1].chunk) == [1, 2, 3]


def _pattern(nranks, nchunks, terms):
    pattern = Pattern(nranks, nchunks)
    for src, dst, t0, t1, c0, *rest in terms:
        stride, width = (rest + [0, 1][len(rest):])[:2]
        pattern.add(src, dst, t0, t1, c0, "copy", stride=stride, width=width)
    return pattern.steps()


def test_an_all_to_all_too_big_to_hold_is_refused_before_it_is_built(monkeypatch):
    from ringlab.algorithms import pattern

    monkeypatch.setattr(pattern, "free_memory", lambda: 100 << 20)
    with pytest.raises(MemoryError, match=r"alltoall.direct on 20000 ranks \(399980000 messages, one per pair of "
                                          r"ranks and step\) would need about [\d.]+ GB of memory; this machine has "
                                          r"105 MB free. An all-to-all sends every pair of ranks a block of its own"):
        rl.build("alltoall.direct", 20000)
