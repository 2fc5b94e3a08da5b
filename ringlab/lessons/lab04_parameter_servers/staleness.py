"""The staleness of an asynchronous parameter server's pushes, read back per worker.

``pushes`` is what :class:`ringlab.train.ParameterServer` records on a server: ``(worker, staleness)``
for every push, in the order the server applied them. A push of staleness s missed exactly the s
updates applied just before it (each push is one update), so the order alone says whose updates
each worker's pushes missed, and which pushes came after every other worker had finished.
"""
from __future__ import annotations

import numpy as np


def by_worker(pushes) -> dict[int, dict]:
    """Per worker: ``pushes``, ``mean`` and ``max`` staleness, and ``fresh`` (pushes of staleness 0)."""
    out = {}
    for worker in sorted({w for w, _ in pushes}):
        mine = np.array([s for w, s in pushes if w == worker])
        out[worker] = {"pushes": len(mine), "mean": float(mine.mean()), "max": int(mine.max()),
                       "fresh": int((mine == 0).sum())}
    return out


def missed_updates(pushes) -> dict[int, dict[int, int]]:
    """{worker: {author: how many of author's updates that worker's pushes missed}}, from the order."""
    authors = [w for w, _ in pushes]
    out: dict[int, dict[int, int]] = {w: {} for w in sorted(set(authors))}
    for i, (worker, stale) in enumerate(pushes):
        if stale > i:
            raise ValueError(f"push {i} of worker {worker} has staleness {stale}, but only {i} updates came "
                             "before it: these pushes are not in the order the server applied them")
        for author in authors[i - stale:i]:
            out[worker][author] = out[worker].get(author, 0) + 1
    return out


def alone_from(pushes, worker: int) -> int:
    """The index of the first push after every other worker's last one (``len(pushes)`` when the others
    pushed last)."""
    others = [i for i, (w, _) in enumerate(pushes) if w != worker]
    return others[-1] + 1 if others else 0


def describe_staleness(pushes, straggler: int) -> str:
    """Sentences on how stale the straggler's pushes were against the other workers', and what it did to
    theirs, each worded from ``pushes``."""
    workers = by_worker(pushes)
    if straggler not in workers:
        raise ValueError(f"worker {straggler} made no push; the pushes are of workers {sorted(workers)}")
    mine = workers[straggler]
    others = [s for w, s in pushes if w != straggler]
    if not others:
        return f"Only worker {straggler} pushed: nobody else moved the weights, so none of its pushes was stale."
    others_mean = float(np.mean(others))
    start = alone_from(pushes, straggler)
    early = [s for w, s in pushes[:start] if w == straggler]  # while some other worker still ran
    late = [s for _, s in pushes[start:]]  # all the straggler's: the others had finished
    lines = [f"Mean staleness: the straggler (worker {straggler}) {mine['mean']:.1f} over {_pushes(mine['pushes'])}, "
             f"the other workers {others_mean:.1f} over {_pushes(len(others))}."]
    if early:
        staler = np.mean(early) > others_mean
        lines.append(f"While the others still ran, its {_pushes(len(early))} had mean staleness {np.mean(early):.1f} "
                     f"(up to {max(early)}), " + (f"more than the others' {others_mean:.1f}: in the time it computes "
                                                  "one gradient, the fast workers push several updates." if staler else
                                                  f"no more than the others' {others_mean:.1f}."))
    if late:
        fresh = sum(1 for s in late if s == 0)
        after = f"so {fresh} of them had staleness 0" if fresh < len(late) else "so every one had staleness 0"
        if late[0] > 0 and fresh == len(late) - 1:
            after += f", all but the first, which had {late[0]}: it pulled before the others' last push"
        lines.append(f"{len(late)} of its {mine['pushes']} pushes came after every other worker had finished; from "
                     f"then on nobody else moved the weights between its pull and its push, {after}.")
    if mine["mean"] < others_mean:
        least = mine["mean"] < min(v["mean"] for w, v in workers.items() if w != straggler)
        lines.append(("So the straggler's pushes were the least stale of all workers'" if least else
                      "So the straggler's pushes were less stale than the others' on average")
                     + (f", because {len(late)} of its {mine['pushes']} pushes came when it ran alone." if late
                        else "."))
    else:
        lines.append("So the straggler's pushes were staler than the others' on average"
                     + (": it never ran alone." if not late else
                        ": its stale pushes while the others ran outweighed the fresh ones it made alone." if early
                        else "."))
    missed = missed_updates(pushes)
    total = sum(n for w, counts in missed.items() if w != straggler for n in counts.values())
    caused = sum(counts.get(straggler, 0) for w, counts in missed.items() if w != straggler)
    if total:
        even = 1 / (len(workers) - 1)  # each fast worker's missed updates, shared evenly by the other workers
        lines.append(f"What it did to the others: of the {total} updates their pushes missed, {caused} "
                     f"({caused / total:.0%}) were the straggler's, "
                     + (f"less than an even share ({even:.0%}): it pushes rarely, so it adds little to their "
                        "staleness." if caused / total < even else f"at least an even share ({even:.0%})."))
        if early:
            lines.append(("Its harm is rather in what it pushes" if caused / total < even else "And in what it pushes")
                         + f": each early push is a gradient of weights "
                         f"{np.mean(early):.1f} updates old on average, added to the weights the fast workers pull "
                         "next.")
    return "\n".join(lines)


def _pushes(count: int) -> str:
    return f"{count} push" if count == 1 else f"{count} pushes"


def describe_waiting(workers_by_mode: dict, straggler: int) -> str:
    """Sentences on how much of their time the workers spent waiting, in each mode, worded from what
    :meth:`ringlab.train.ParameterServer.run` returned on the workers.

    ``workers_by_mode``: ``{mode: [record of worker 0, worker 1, ...]}``, each record with
    ``wait_seconds`` (pushing and pulling, waiting for the server included) and ``compute_seconds``.
    """
    lines = []
    for mode, records in workers_by_mode.items():
        if not 0 <= straggler < len(records):
            raise ValueError(f"worker {straggler} is not among the {len(records)} workers of the {mode!r} run")
        share = [r["wait_seconds"] / max(r["wait_seconds"] + r["compute_seconds"], 1e-12) for r in records]
        fast = [s for w, s in enumerate(share) if w != straggler]
        mean = float(np.mean(fast)) if fast else 0.0
        shown = int(f"{mean:.0%}"[:-1]) / 100  # the words follow the share as printed: 50.04% is "about half"
        amount = ("most of their time" if shown > 0.5 else "about half their time" if shown >= 0.4
                  else "a small part of their time" if shown < 0.2 else "a fair part of their time")
        spread = (f"{mean:.0%} each" if f"{min(fast):.0%}" == f"{max(fast):.0%}" else
                  f"{mean:.0%} on average, {min(fast):.0%} to {max(fast):.0%}") if fast else ""
        lines.append(f"{mode.capitalize()}: the fast workers spent {amount} waiting ({spread}); the straggler "
                     f"(worker {straggler}) "
                     f"{share[straggler]:.0%}." if fast else
                     f"{mode.capitalize()}: only the straggler ran; it spent {share[straggler]:.0%} of its time waiting.")
    if {"sync", "async"} <= workers_by_mode.keys():
        sync, asyn = ([r["wait_seconds"] / max(r["wait_seconds"] + r["compute_seconds"], 1e-12)
                       for w, r in enumerate(workers_by_mode[m]) if w != straggler] for m in ("sync", "async"))
        if sync and asyn:
            lower = f"{np.mean(asyn):.0%}" != f"{np.mean(sync):.0%}" and np.mean(asyn) < np.mean(sync)  # as printed
            lines.append("Synchronously a fast worker cannot start its next step until the server has every "
                         "push, the straggler's included; asynchronously it only waits for the server's reply to "
                         "its own push" + (", so it waits less." if lower else
                                           ", yet here it did not wait less: the server, busy with the others' "
                                           "pushes, was the bottleneck."))
    return "\n".join(lines)
