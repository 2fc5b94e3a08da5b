"""Caches with a bound on what they hold, not only on how many entries: a few huge schedules or plans
(a million segments, a gigabyte buffer cut into pieces) must not pile up for the rest of the process."""
from __future__ import annotations

import functools
import threading
from collections import OrderedDict


def bounded(entries: int, weight, limit: int):
    """Memoise a function of hashable arguments, least recently used first out, keeping at most
    ``entries`` results whose ``weight(result)`` add up to at most ``limit`` (a heavier result than
    ``limit`` is returned without being kept). Thread-safe; ``.cache_clear()`` and ``.cache_info()``."""

    def decorate(function):
        kept: OrderedDict = OrderedDict()
        lock = threading.Lock()
        total = [0]

        @functools.wraps(function)
        def cached(*args, **kwargs):
            key = (args, tuple(sorted(kwargs.items())))
            with lock:
                if key in kept:
                    kept.move_to_end(key)
                    return kept[key][0]
            result = function(*args, **kwargs)
            heft = weight(result)
            if heft > limit:
                return result
            with lock:
                if key not in kept:
                    kept[key] = (result, heft)
                    total[0] += heft
                    while len(kept) > entries or total[0] > limit:
                        total[0] -= kept.popitem(last=False)[1][1]
            return result

        def cache_clear() -> None:
            with lock:
                kept.clear()
                total[0] = 0

        def cache_info() -> dict:
            return {"entries": len(kept), "weight": total[0], "max_entries": entries, "max_weight": limit}

        cached.cache_clear, cached.cache_info = cache_clear, cache_info
        return cached

    return decorate
