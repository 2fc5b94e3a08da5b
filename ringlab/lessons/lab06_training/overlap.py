"""Lab 06's buckets and overlap: the measured sweep read back in sentences, the step-time model of the exercise
(:func:`check_step_time`) and its predictions set against the sweep.

The rows come from :func:`ringlab.train.overlap.measure_overlap`; alpha and B from
:func:`ringlab.predict.fitting.fit_rows` on :func:`ringlab.train.overlap.time_bucket_allreduce`'s rows.
"""
from __future__ import annotations

import numpy as np

from ...measure.units import format_bytes
from ...lab.exercises import exercise
from ...lab.findings import Finding

# the emulated machine of the overlap lesson, in virtual time with modelled compute (compute="model"): every rank on
# its own 0.25 GB/s port (2 Gb/s Ethernet), 50 us a message, so that averaging the wide model's 5.3 MB of gradients
# on 2 ranks (2 x 2.65 MB: about 21 ms) takes about as long as a backward pass of 256 samples a rank (about 20 ms
# of a fast CPU, 50 ms of a slow one). The passes' compute is this CPU's, timed alone before the sweep
# (train.overlap.time_compute) and then the same in every step of every setting: with each thread's CPU time
# counted instead, a busy machine made the backward pass and the allreduces slower beside each other (two threads
# of a process sharing caches and Python's lock) and, in one of five runs of CI, cost overlap all it hid.
# Modelled, overlap's gain depends only on the compute against the links' time: measured with a fast CPU's passes
# (an AMD EPYC Zen 4: 9.5 ms forward, 20 ms backward) the best setting with overlap is 23% shorter than without,
# 13% at 2.5 times that compute (about what an AVX2-only Zen 1 EPYC took: backward 51 ms in CI), and above the 5%
# counted as noise from a CPU 4 times faster to one 6 times slower (tests/test_train_overlap.py).
MACHINE = "uniform:0.25:50"
EMULATED_PER_RANK = 256

CLEAR_DIFFERENCE = 0.05  # step times within 5% count as "no clear difference" on a shared, noisy machine

OVERLAP_COLUMNS = {"bucket_bytes (B)": "bucket_bytes", "buckets": "buckets", "overlap": "overlap",
                   "step (ms)": "step_s", "waiting (ms)": "waited_s", "backward (ms)": "backward_s",
                   "allreduces (ms)": "allreduce_s"}  # for ringlab.measure.tables.table(measure_overlap's rows, ...)
PREDICTED_COLUMNS = {**OVERLAP_COLUMNS, "predicted (ms)": "predicted_s"}  # after predict_sweep


def _step_time(compute, nbytes, buckets, n, alpha, B, overlap):
    one = 2 * (n - 1) * (alpha + nbytes / (buckets * n * B))  # one bucket's ring allreduce
    return max(compute + one, buckets * one) if overlap else compute + buckets * one


@exercise(_step_time, "model")
def check_step_time(step_time):
    """``step_time(compute, nbytes, buckets, n, alpha, B, overlap)``: seconds per step when ``nbytes`` of
    gradients go in ``buckets`` equal buckets, each a ring allreduce on ``n`` ranks (alpha a step, B bytes/s),
    after ``compute`` seconds of forward and backward, or, with ``overlap``, during them."""
    from ...lab.exercises import compare

    cases = [dict(compute=c, nbytes=k, buckets=b, n=n, alpha=a, B=bw, overlap=o) for c, k, b, n, a, bw, o in [
        (20e-3, 5 << 20, 1, 2, 30e-6, 1e9, False),    # one bucket: overlap or not, the same
        (20e-3, 5 << 20, 1, 2, 30e-6, 1e9, True),
        (20e-3, 5 << 20, 8, 2, 30e-6, 1e9, False),    # more buckets, more latencies
        (20e-3, 5 << 20, 8, 2, 30e-6, 1e9, True),     # compute-bound: the last bucket's allreduce sticks out
        (2e-3, 64 << 20, 16, 4, 5e-6, 10e9, True),    # communication-bound: the allreduces set the pace
        (50e-3, 100 << 20, 25, 8, 10e-6, 20e9, True),
        (50e-3, 100 << 20, 25, 8, 10e-6, 20e9, False)]]
    compare(step_time, "step_time", cases, _step_time,
             "one bucket's ring allreduce takes 2(n-1)(alpha + (nbytes/buckets)/(n B)). Without overlap the step "
             "computes, then runs every bucket's allreduce. With overlap the allreduces run during compute, but "
             "the last bucket is only ready when backward ends: the step ends at compute plus one bucket's "
             "allreduce, or when all the allreduces are done, whichever is later.")
    print("Correct: without overlap compute + k buckets' allreduces; with it max(compute + one bucket, k buckets).")


def predict_sweep(rows: list[dict], step_time, fit) -> tuple[list[dict], float]:
    """The rows of ``measure_overlap`` with ``predicted_s`` added: ``step_time`` at each row's bucket count,
    with ``fit``'s alpha and bandwidth and the compute measured without overlap (the median over those rows of
    step time less waiting). Returns (rows, compute seconds)."""
    plain = [row for row in rows if not row["overlap"]]
    if not plain:
        raise ValueError("no rows measured without overlap, so no compute time to predict from")
    compute = float(np.median([row["step_s"] - row["waited_s"] for row in plain]))
    predicted = [dict(row, predicted_s=float(step_time(compute, row["gradient_bytes"], row["buckets"], row["ranks"],
                                                       fit.alpha, fit.bandwidth, row["overlap"])))
                 for row in rows]
    return predicted, compute


def describe_prediction(rows: list[dict], fit, compute: float) -> str:
    """Where the model of :func:`predict_sweep`'s rows puts the fastest bucket size, against where it was measured."""
    first = rows[0]
    rate = (f"B = {fit.bandwidth / 1e9:.3g} GB/s" if fit.bandwidth < float("inf") else
            "no cost per byte (the times did not grow with the bytes: the machine was busy; run it again)")
    lines = [f"Model inputs: alpha = {fit.alpha * 1e6:.3g} us a ring step and {rate}, "
             f"fitted here to one bucket's allreduce on these {first['ranks']} ranks; compute = {compute * 1e3:.3g} ms "
             f"a step, measured here without overlap; {format_bytes(first['gradient_bytes'])} of gradients."]
    for overlap in (False, True):
        mine = [row for row in rows if row["overlap"] == overlap]
        guess, best = min(mine, key=lambda r: r["predicted_s"]), min(mine, key=lambda r: r["step_s"])
        said = (f"{'With' if overlap else 'Without'} overlap the model puts the fastest step at {_setting(guess)}: "
                f"{guess['predicted_s'] * 1e3:.3g} ms predicted; measured, the fastest was {_setting(best)}: "
                f"{best['step_s'] * 1e3:.3g} ms")
        lines.append(said + (" (the same setting)." if guess is best else
                             f" (the model's choice measured {guess['step_s'] * 1e3:.3g} ms)."))
    whole = min((row for row in rows if not row["overlap"]), key=lambda r: r["buckets"])
    alone = whole["buckets"] * fit.seconds(whole["gradient_bytes"] / whole["buckets"])
    if whole["allreduce_s"] > alone * (1 + CLEAR_DIFFERENCE):
        gap, skew = whole["allreduce_s"] - alone, whole["skew_s"]
        said = (f"Without overlap at {_setting(whole)} the allreduces took {whole['allreduce_s'] * 1e3:.3g} ms a step "
                f"in training, against {alone * 1e3:.3g} ms from the fit (timed alone, each call from a barrier). "
                f"The ranks began the first one a median {skew * 1e3:.3g} ms apart: a rank reaches it when its own "
                "backward ends and waits there for the slower rank, a wait the model leaves out")
        lines.append(said + (f"; that is most of the {gap * 1e3:.3g} ms difference." if skew >= gap / 2 else
                             f". That is less than half of the {gap * 1e3:.3g} ms difference: the rest is the "
                             "allreduce itself running slower in training than alone."))
    errors = [row["predicted_s"] / row["step_s"] - 1 for row in rows]
    worst = max(errors, key=abs)
    lines.append(f"Predicted step times differed from the measured ones by {min(errors):+.0%} to {max(errors):+.0%} "
                 f"(negative: predicted shorter; worst {worst:+.0%}).")
    on = [row for row in rows if row["overlap"] and row["buckets"] > 1]
    off = [row for row in rows if not row["overlap"]]
    error = lambda mine: float(np.median([row["predicted_s"] / row["step_s"] - 1 for row in mine]))  # noqa: E731
    if on and off and error(on) < error(off) - CLEAR_DIFFERENCE:
        said = (f"The model was more optimistic with overlap, in 2 buckets or more (median {error(on):+.0%}), "
                f"than without ({error(off):+.0%}): it lets the allreduces take nothing from the backward pass they "
                "overlap.")
        backward_on, backward_off = (float(np.median([row["backward_s"] for row in mine])) for mine in (on, off))
        if backward_on > backward_off * (1 + CLEAR_DIFFERENCE):
            said += (f" Here they did: backward took a median {backward_on * 1e3:.3g} ms with overlap (2 buckets or "
                     f"more) against {backward_off * 1e3:.3g} ms without.")
        lines.append(said)
    return "\n".join(lines)


def describe_overlap(rows: list[dict], cores: int) -> str:
    """What the sweep of ``measure_overlap`` says: the fastest setting without overlap and the fastest with
    overlap that can overlap (2 buckets or more), how far apart one bucket's runs with and without overlap
    are (overlap changes nothing there: the noise), whether overlap hid communication beyond that noise,
    and, from the backward and allreduce times, why."""
    off = [row for row in rows if not row["overlap"]]
    if not off or not any(row["overlap"] for row in rows):
        raise ValueError("need rows measured with overlap off and on")
    best_off, best_on, gain, noise = _gain(rows)
    lines = [_machine_sentence(rows[0], cores)]
    for said, best in (("Without overlap the fastest setting was", best_off),
                       ("With overlap the fastest" + (" that has something to overlap" if best_on["buckets"] > 1 else
                                                        " setting") + " was", best_on)):
        lines.append(f"{said} {_setting(best)}: a step took {best['step_s'] * 1e3:.3g} ms, "
                     f"{best['waited_s'] * 1e3:.3g} ms of it in step() waiting for communication "
                     f"({best['waited_s'] / best['step_s']:.0%}).")
    single = [row for row in rows if row["buckets"] == 1]
    if {row["overlap"] for row in single} == {False, True}:
        one_off, one_on = (next(r for r in single if r["overlap"] == o) for o in (False, True))
        apart = abs(one_on["step_s"] / one_off["step_s"] - 1)
        lines.append(f"With one bucket overlap has nothing to overlap (the allreduce can only start when backward "
                     f"ends), and the step took {one_on['step_s'] * 1e3:.3g} ms with it against "
                     f"{one_off['step_s'] * 1e3:.3g} ms without: {apart:.0%} apart"
                     + (", which is noise here (the machine's other work), so only a larger difference counts."
                        if apart > CLEAR_DIFFERENCE else f", within the {CLEAR_DIFFERENCE:.0%} counted as noise."))
    saved = (best_off["step_s"] - best_on["step_s"]) * 1e3
    if gain > noise:
        lines.append(f"Overlap hid communication here: that step was {gain:.0%} shorter than the fastest without "
                     f"overlap ({saved:.3g} ms of the {best_off['waited_s'] * 1e3:.3g} ms it waited).")
    elif gain >= -noise:
        lines.append(f"Overlap made no clear difference here: the fastest steps with and without it were {gain:+.0%} "
                     f"apart, within the {noise:.0%} of noise.")
    else:
        lines.append(f"Overlap made the fastest step {-gain:.0%} longer here ({-saved:.3g} ms), more than the "
                     f"{noise:.0%} of noise.")
    same = _same_setting(off, best_on)
    lines.append(_why(best_on, same, 1 - best_on["step_s"] / same["step_s"], noise, cores))
    return "\n".join(lines)


def _gain(rows: list[dict]) -> tuple[dict, dict, float, float]:
    """(fastest row without overlap, :func:`best_overlapping`, the share of its step overlap saved, the noise):
    the noise is the larger of :data:`CLEAR_DIFFERENCE` and how far apart one bucket's steps with and without
    overlap were (overlap has nothing to overlap there, so that gap is the machine's own)."""
    off = [row for row in rows if not row["overlap"]]
    best_off, best_on = min(off, key=lambda r: r["step_s"]), best_overlapping(rows)
    noise = CLEAR_DIFFERENCE
    single = [row for row in rows if row["buckets"] == 1]
    if {row["overlap"] for row in single} == {False, True}:
        one_off, one_on = (next(r for r in single if r["overlap"] == o) for o in (False, True))
        noise = max(noise, abs(one_on["step_s"] / one_off["step_s"] - 1))
    return best_off, best_on, 1 - best_on["step_s"] / best_off["step_s"], noise


def measure_emulated_overlap(machine: str = MACHINE, per_rank: int = EMULATED_PER_RANK, steps: int = 8,
                             comm=None) -> dict | None:
    """The sweep of :func:`ringlab.train.overlap.measure_overlap` on the emulated ``machine`` (``rl.emulate``), in
    virtual time with modelled compute: every allreduce takes its links' time on the communication thread's
    clock, and the forward and backward passes on the main thread's take what this CPU took for them timed alone
    (:func:`ringlab.train.overlap.time_compute`, the same in every step), as a GPU's communication stream runs
    beside its compute without slowing it. ``per_rank`` samples a rank make a backward pass long enough to hide
    a good part of the communication; three bucket sizes: one layer, two layers, the whole model. Call on every
    rank; rank 0 gets ``measure_overlap``'s result, the others None."""
    from ...mpi.emulate import emulate
    from ...train.overlap import bucket_sizes, make_wide_model, measure_overlap, time_compute

    sizes = bucket_sizes(make_wide_model())
    compute = time_compute(comm, per_rank)
    with emulate(machine, compute="model"):
        return measure_overlap([sizes[1], sizes[2], sizes[-1]], steps=steps, per_rank=per_rank, comm=comm,
                               compute=compute)


def overlap_lesson(raw: list[dict], emulated: list[dict], cores: int, machine: str = MACHINE,
                   raw_shown: bool = False) -> Finding:
    """Overlap on this machine (``raw``, :func:`describe_overlap`'s rows) and on the emulated ``machine``
    (the same sweep run under ``rl.emulate``): whether it hid communication on each, worded from the rows. With
    ``raw_shown`` (the lab printed :func:`describe_overlap` of ``raw`` already), this machine's part is its verdict
    alone, not the paragraph again."""
    conclusions, observations = [], []
    for rows, where, out in ((emulated, "on the emulated machine", conclusions), (raw, "on this machine", observations)):
        _, _, gain, noise = _gain(rows)
        out.append(f"overlap hid communication {where}" if gain > noise else
                   f"overlap did not clearly hide communication {where}")
    here = (f"On this machine, as measured above, {observations[0].removesuffix(' on this machine')}." if raw_shown
            else f"On this machine: {describe_overlap(raw, cores)}")
    counted = ("its links' time beside this CPU's compute, timed alone and then modelled" if emulated[0].get("compute")
               else "its links' time plus this CPU's compute counted as CPU time, each thread's its own")
    said = [here, f"On the emulated {machine}, in virtual time ({counted}): {describe_overlap(emulated, cores)}"]
    return Finding("\n\n".join(said), tuple(conclusions), tuple(observations))


def best_overlapping(rows: list[dict]) -> dict:
    """The fastest row with overlap and 2 buckets or more (where there is something to overlap), else the fastest."""
    on = [row for row in rows if row["overlap"]]
    if not on:
        raise ValueError("no rows measured with overlap")
    return min([row for row in on if row["buckets"] > 1] or on, key=lambda r: r["step_s"])


def _same_setting(rows: list[dict], like: dict) -> dict:
    return next(row for row in rows if row["bucket_bytes"] == like["bucket_bytes"])


def timeline_traces(measured: dict, bucket_bytes: int | None = None) -> dict:
    """{"overlap off": trace, "overlap on": trace} at ``bucket_bytes`` (default: :func:`best_overlapping`'s)
    from ``measure_overlap``'s result, for :func:`ringlab.viz.overlap.overlap_timeline`."""
    rows, traces = measured["rows"], measured["traces"]
    if bucket_bytes is None:
        bucket_bytes = best_overlapping(rows)["bucket_bytes"]
    found = {row["overlap"]: trace for row, trace in zip(rows, traces) if row["bucket_bytes"] == bucket_bytes}
    if set(found) != {False, True}:
        raise ValueError(f"no setting of bucket_bytes={bucket_bytes} measured both ways; measured: "
                         f"{sorted({row['bucket_bytes'] for row in rows})}")
    buckets = _same_setting(rows, {"bucket_bytes": bucket_bytes})["buckets"]
    return {f"overlap off, {buckets} buckets": found[False], f"overlap on, {buckets} buckets": found[True]}


def _why(on: dict, off: dict, gain: float, noise: float, cores: int) -> str:
    """The same bucket size with and without overlap (``gain``: the step's share saved, against ``noise``): what
    the waiting did, and what backward and the allreduces took."""
    ms = lambda s: f"{s * 1e3:.3g} ms"  # noqa: E731
    hidden = max(on["allreduce_s"] - on["waited_s"], 0.0)
    said = (f"At {_setting(on)}, overlap {_changed('the waiting', off['waited_s'], on['waited_s'])}: of "
            f"{ms(on['allreduce_s'])} of allreduces a step, {ms(hidden)} ran while step() was not waiting for them "
            "(during backward).")
    slower_backward = on["backward_s"] / off["backward_s"]
    slower_allreduce = on["allreduce_s"] / off["allreduce_s"]
    took = (f"backward took {ms(on['backward_s'])} against {ms(off['backward_s'])} without overlap "
            f"({slower_backward:.2g}x) and the allreduces {ms(on['allreduce_s'])} against {ms(off['allreduce_s'])} "
            f"({slower_allreduce:.2g}x)")
    if gain > noise and on.get("compute"):
        return (f"{said} And {took}: the compute is modelled, so nothing beside it slows it down here; on a GPU "
                "NCCL's kernels take a few of its SMs, and the compute beside them slows a little.")
    if gain > noise:
        return f"{said} And {took}" + (": the communication ran beside the computation at little cost to it."
                                        if slower_backward <= 1 + noise else
                                        ": slower, but by less than the wait it hid.")
    if max(slower_backward, slower_allreduce) > 1 + noise and _virtual(on):
        return (f"{said} But {took}: in virtual time each thread counts only its own CPU time, so this is this CPU "
                "doing the same work slower beside the other thread (caches, memory, Python's lock shared), and the "
                "step gained nothing.")
    if max(slower_backward, slower_allreduce) > 1 + noise:
        return (f"{said} But {took}: on {_cores(cores)} each rank's backward pass and its communication thread "
                "compete for the same cores (and MPI waits for a peer by polling, which keeps a core busy), so what "
                "ran side by side ran slower, and the step gained nothing. Overlap pays where communication has "
                "resources of its own: on GPUs, NCCL's kernels take a few of the many SMs and the links and NICs "
                "move the bytes while the rest of the GPU computes.")
    return (f"{said} And {took}: about as long as without overlap, so the step could only gain what ran during "
            "backward, and here that was too little to show.")


def _changed(what: str, before: float, after: float) -> str:
    """'cut the waiting from 3 ms to 1 ms', 'raised ...', or 'left ... about the same (2.9 ms against 3 ms)'."""
    if after < before * (1 - CLEAR_DIFFERENCE):
        return f"cut {what} from {before * 1e3:.3g} ms to {after * 1e3:.3g} ms"
    if after > before * (1 + CLEAR_DIFFERENCE):
        return f"raised {what} from {before * 1e3:.3g} ms to {after * 1e3:.3g} ms"
    return f"left {what} about the same ({after * 1e3:.3g} ms against {before * 1e3:.3g} ms)"


def _virtual(row: dict) -> bool:
    """Whether ``row`` was measured in virtual time (on an emulated machine)."""
    return str(row.get("clock", "")).startswith("virtual")


def _machine_sentence(row: dict, cores: int) -> str:
    nranks, load = row["ranks"], row.get("load")
    if _virtual(row) and row.get("compute"):
        forward, backward = row["compute"]
        said = (f"{nranks} ranks, each running its forward and backward passes on one thread and, with overlap, its "
                f"allreduces on another, the passes' compute modelled: {forward * 1e3:.3g} ms forward and "
                f"{backward * 1e3:.3g} ms backward a step, what this CPU took for them timed alone before the sweep "
                "(the slower rank's median), the same in every step of every setting. The allreduces take their "
                "links' time beside it and slow it down in nothing, as a GPU's compute and communication streams run "
                "side by side.")
    elif _virtual(row):
        said = (f"{nranks} ranks, each running its backward pass on one thread and, with overlap, its allreduces on "
                "another, each thread's compute counted as its own CPU time: however many of them share "
                f"{_cores(cores)}, neither waits for the other's core, as a GPU's compute and communication streams "
                "do not.")
    if _virtual(row):
        if row.get("wall_step_s") is not None:
            said += (f" (On this machine's own clock a step took {row['wall_step_s'] * 1e3:.3g} ms here: what its "
                     "CPU took, not the emulated machine's time.)")
        return said
    said = (f"{nranks} ranks on {_cores(cores)}: each rank runs its backward pass on one thread and, with overlap, "
            f"its allreduces on another, so up to {2 * nranks} threads want {_cores(cores)}.")
    if load is not None and load > max(cores, 2 * nranks):
        said += (f" The machine's load average was {load:.2g} when the sweep ended, more than these ranks' "
                 f"{2 * nranks} threads: other processes wanted the cores too, so every time here includes waiting "
                 "for them.")
    return said


def _setting(row: dict) -> str:
    cap = "1 B (a bucket a parameter)" if row["bucket_bytes"] == 1 else format_bytes(row["bucket_bytes"])
    return f"{row['buckets']} bucket{'s' * (row['buckets'] != 1)} (bucket_bytes {cap})"


def _cores(cores: int) -> str:
    return f"{cores} core{'s' * (cores != 1)}"
