"""Lab 06's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

from ...lab.quiz import Question, Quiz

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def _recipe_lr(nranks):
    from ...train.scaling import recipe

    return recipe(nranks)["lr"]


def _recipe_fields(nranks):
    from ...train.scaling import LR, PER_RANK

    return {"per_rank": PER_RANK, "base": LR, "batch": PER_RANK * nranks}


def _warmup_lr(base_lr, k, step, warmup):
    from .batches import _scaled_lr

    return _scaled_lr(base_lr, k, step, warmup)


def _steps_for(samples, nranks):
    from ...train.scaling import steps_for

    return steps_for(samples, nranks)


def _steps_fields(samples, nranks):
    from ...train.scaling import PER_RANK

    return {"per_rank": PER_RANK, "batch": PER_RANK * nranks, "one_rank": _steps_for(samples, 1)}


def _bubble(stages, microbatches):
    """The idle share of a GPipe step, counted in the slots of ringlab's schedule (not the closed form)."""
    from ...predict.pipeline import idle_slots

    grid = _gpipe(stages, microbatches)
    return idle_slots(grid) / (stages * len(grid[0]))


def _microbatches_for(stages, limit):
    """The fewest micro-batches whose counted bubble is under ``limit``."""
    m = 1
    while _bubble(stages, m) >= limit:
        m += 1
    return m


def _microbatches_fields(stages, limit):
    m = _microbatches_for(stages, limit)
    return {"bound": (stages - 1) * (1 / limit - 1), "at": _bubble(stages, m), "fewer": m - 1,
            "before": _bubble(stages, m - 1), "slots": len(_gpipe(stages, m)[0])}


def _gpipe(stages, microbatches):
    from ...predict.pipeline import gpipe_schedule

    return gpipe_schedule(stages, microbatches)


QUIZ = Quiz("06", [
    Question(
        "The speed-up runs train with {base:g} learning rate per {per_rank} samples, and every rank takes {per_rank} "
        "samples a step. What learning rate does the {nranks}-rank run use?",
        _recipe_lr, given=dict(nranks=4), derived=_recipe_fields,
        worked="Its global batch is {nranks} x {per_rank} = {batch}, {nranks} times one rank's, so the linear scaling "
               "rule multiplies the learning rate by {nranks}: {answer:g} (ringlab's `recipe({nranks})`, the lr column "
               "of the table).",
        hint="k times the batch, k times the learning rate."),
    Question(
        "Linear scaling with warm-up: base learning rate {base_lr:g}, k = {k} ranks, warm-up over {warmup} steps. What "
        "is the learning rate at step {step}?",
        _warmup_lr, given=dict(base_lr=0.05, k=8, step=5, warmup=10), derived=lambda base_lr, k, step, warmup: {
            "target": base_lr * k},
        worked="It climbs in a straight line from {base_lr:g} at step 0 to k x {base_lr:g} = {target:g} at step "
               "{warmup}: {base_lr:g} x (1 + (k-1) x {step}/{warmup}) = {answer:g} (exercise 1's rule).",
        hint="base_lr x (1 + (k-1) x step / warmup) before the warm-up ends."),
    Question(
        "The speed-up runs all train on {samples} samples. How many steps does the {nranks}-rank run take?",
        _steps_for, given=dict(samples=38400, nranks=4), unit="steps", rel_tol=0, derived=_steps_fields,
        worked="Each step takes {per_rank} samples on each of {nranks} ranks, {batch} in all: {samples} / {batch} = "
               "{answer} steps, against {one_rank} on one rank (ringlab's `steps_for`). Same samples, fewer and "
               "larger steps, so the accuracies compare like with like.",
        hint="samples / (samples per rank per step x ranks)."),
    Question(
        "A model is cut into n = {stages} pipeline stages, in GPipe's schedule, every forward and backward pass one "
        "slot. How many micro-batches m per step does it take, at the fewest, to keep the bubble (the share of the "
        "step a stage is idle) under {limit:.0%}?",
        _microbatches_for, given=dict(stages=4, limit=0.1), unit="micro-batches", rel_tol=0,
        derived=_microbatches_fields,
        worked="(n-1)/(m+n-1) < {limit:g} when m > (n-1)(1/{limit:g} - 1) = {bound:g}: m = {answer}, whose step of "
               "{slots} slots is {at:.3f} idle; with {fewer} it is {before:.3f}. Counted in ringlab's GPipe "
               "schedule (`ringlab.predict.pipeline.gpipe_schedule`). The price: a stage keeps the activations of "
               "every micro-batch until its backward pass.",
        hint="solve (n-1)/(m+n-1) < {limit:g} for m (Exercise 3's formula), then take the next whole number."),
])
