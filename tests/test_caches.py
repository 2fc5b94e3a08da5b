"""The caches of schedules and plans hold a bounded weight in bytes (the cache's bytes, RINGLAB_CACHE_BYTES),
not only a bounded count: a few huge ones never pile up for the rest of the process."""
import pytest

import ringlab as rl
from ringlab.mpi.plan import bounded
from ringlab.mpi.collectives import _built, _schedule_bytes
from ringlab.mpi.plan import compile_plan


def test_entries_and_weight_are_both_bounded():
    calls = []

    @bounded(3, len, lambda: 10)
    def make(n):
        calls.append(n)
        return "x" * n

    for n in (1, 2, 3, 4):  # four entries: the first goes
        make(n)
    assert make.cache_info()["entries"] == 3
    make(1)
    assert calls == [1, 2, 3, 4, 1]
    make(4), make(4)  # kept: no new call
    assert calls == [1, 2, 3, 4, 1]
    make(9)  # 9 + the others would pass 10: the least recently used go until it fits
    assert make.cache_info()["weight"] <= 10
    make(11)  # heavier than the whole bound: returned, never kept
    make(11)
    assert calls.count(11) == 2 and make.cache_info()["weight"] <= 10


def test_schedules_and_plans_have_weights_that_grow_with_them():
    small, large = rl.build("broadcast.chain", 4, segments=2), rl.build("broadcast.chain", 4, segments=2000)
    assert _schedule_bytes(large) > 100 * _schedule_bytes(small)
    assert _built.cache_info()["max_weight"] == compile_plan.cache_info()["max_weight"] == 64 << 20
    plan = compile_plan(large, 1, 1 << 20, 8)
    assert sum(len(s.sends) + len(s.recvs) for s in plan.steps) > 1000


def test_the_cache_bytes_come_from_the_environment(monkeypatch):
    from ringlab.mpi.private import cache_bytes

    monkeypatch.setenv("RINGLAB_CACHE_BYTES", "1G")
    assert cache_bytes() == 1 << 30 and compile_plan.cache_info()["max_weight"] == 1 << 30
    monkeypatch.setenv("RINGLAB_CACHE_BYTES", "0")
    plan = compile_plan(rl.build("allreduce.ring", 4), 0, 1000, 8)  # made, never kept
    assert compile_plan(rl.build("allreduce.ring", 4), 0, 1000, 8) is not plan
    monkeypatch.setenv("RINGLAB_CACHE_BYTES", "-3")
    with pytest.raises(ValueError, match="RINGLAB_CACHE_BYTES"):
        cache_bytes()
