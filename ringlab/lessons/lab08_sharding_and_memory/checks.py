"""Lab 08's exercises: the fewest GPUs on which a model fits at each ZeRO stage, worked out from the paper's formulas;
and what stage 3 sends on any number of ranks, derived from what the lab measured on four."""
from __future__ import annotations

import math
import statistics

from ...lab.exercises import NotDoneYet, exercise
from .sharding import H100_MEMORY, VARIANTS, WIDTHS, _calls


def _held(psi, n, stage, k=12):
    from ...train.zero import zero_memory
    return sum(zero_memory(psi, n, stage, state_bytes=k).values())


def _split(psi, stage, k=12) -> tuple[float, float]:
    """(bytes a GPU keeps whole, bytes shared out over the GPUs) at ``stage``, by the paper's formulas."""
    from ...train.zero import zero_memory

    sharded_from = {"optimizer_state": 1, "gradients": 2, "parameters": 3}
    parts = zero_memory(psi, 1, stage, state_bytes=k)
    sharded = sum(v for kind, v in parts.items() if stage >= sharded_from[kind])
    return sum(parts.values()) - sharded, sharded


def _fewest_gpus(psi, stage, capacity=H100_MEMORY, k=12):
    """The least number of GPUs on which each holds at most ``capacity`` bytes at ``stage``, or None."""
    whole, sharded = _split(psi, stage, k)
    if whole > capacity or (whole == capacity and sharded > 0):
        return None
    n = max(1, math.ceil(sharded / (capacity - whole))) if sharded else 1
    while _held(psi, n, stage, k) > capacity:  # the float division's last digit
        n += 1
    while n > 1 and _held(psi, n - 1, stage, k) <= capacity:
        n -= 1
    return n


FEWEST_CASES = [dict(psi=p, stage=s, capacity=c) for p, c in ((70e9, 80e9), (13e9, 80e9), (7.5e9, 24e9), (1e9, 80e9))
                for s in range(4)]


@exercise(_fewest_gpus, "answer")
def check_fewest_gpus(fewest_gpus):
    """``fewest_gpus(psi, stage, capacity, k)`` against the least count the paper's formulas allow, or None where no
    count does; a wrong count is explained by what that many GPUs would hold."""
    answered = False  # a number returned yet: until then None everywhere is the untouched placeholder
    for case in FEWEST_CASES:
        psi, stage, capacity = case["psi"], case["stage"], case["capacity"]
        got, want = fewest_gpus(psi, stage, capacity), _fewest_gpus(psi, stage, capacity)
        if got is None and want is not None and not answered:
            raise NotDoneYet("fewest_gpus returned None")
        answered = answered or got is not None
        call = f"fewest_gpus({psi / 1e9:g}e9, stage={stage}, capacity={capacity / 1e9:g}e9)"
        gb = lambda n: _held(psi, n, stage, 12) / 1e9
        if want is None and got is not None:
            whole = _split(psi, stage)[0] / 1e9
            raise AssertionError(f"{call} returned {got!r}, but no number of GPUs fits: at stage {stage} each GPU still "
                                 f"holds about {whole:.0f} GB unsharded, however many there are, more than "
                                 f"{capacity / 1e9:g} GB.\nHint: only what a stage shards shrinks with n; what it "
                                 "keeps whole must fit on its own.")
        if want is not None and got is None:
            raise AssertionError(f"{call} returned None, but {want} GPUs fit: each holds {gb(want):.1f} GB.\nHint: "
                                 "solve (what stays whole) + (what is sharded) / n <= capacity for n.")
        if want is not None and (isinstance(got, bool) or not isinstance(got, (int, float)) or got != want):
            if isinstance(got, (int, float)) and not isinstance(got, bool) and 1 <= got < want:
                why = f"on {got:g} GPUs each holds {gb(math.ceil(got)):.1f} GB, more than {capacity / 1e9:g}"
            elif isinstance(got, (int, float)) and not isinstance(got, bool) and got > want:
                why = f"{want} already suffice: each holds {gb(want):.1f} GB"
            else:
                why = f"the answer is a whole number of GPUs, {want}"
            raise AssertionError(f"{call} returned {got!r}; {why}.\nHint: a count of GPUs is whole: round the n "
                                 "that solves the formula up, and check that one fewer does not fit.")
    print("Correct: 70B needs ZeRO-3 and 14 H100s at least (stages 1 and 2 keep 280 and 140 GB whole); 13B fits on 6, "
          "4 and 3 at stages 1, 2 and 3.")


def counted_sent(nranks: int, widths=WIDTHS) -> dict:
    """Bytes a rank sends a step (mean over ranks) for the lesson's MLP on ``nranks`` ranks, variant by variant,
    counted from ringlab's ring schedules in float64: what :func:`measure_sharding` measures."""
    from ...train.zero import sent_bytes

    sizes = [s for a, b in zip(widths, widths[1:]) for s in (8 * a * b, 8 * b)]  # each weight, then its bias
    return {v: sum(statistics.mean(sent_bytes(name, nranks, nbytes, 8)) for name, nbytes in _calls(v, sizes))
            for v in VARIANTS}


def _stage3_sent(sent, ranks, new_ranks):
    return sent["ZeRO stage 3"] * ((new_ranks - 1) / new_ranks) / ((ranks - 1) / ranks)


@exercise(_stage3_sent, "answer")
def check_stage3_sent(stage3_sent):
    """``stage3_sent(sent, ranks, new_ranks)`` against what ringlab's schedules send at stage 3 on ``new_ranks``, from
    what they sent on ``ranks`` (``sent``: bytes a rank sent a step, by variant, as the lab's table has them)."""
    for ranks, new in ((4, 8), (4, 2), (3, 16), (8, 5)):
        sent, want = counted_sent(ranks), counted_sent(new)["ZeRO stage 3"]
        got = stage3_sent(sent, ranks, new)
        if got is None and (ranks, new) == (4, 8):
            raise NotDoneYet("stage3_sent returned None")
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-6):
            stage1_there = counted_sent(new)["ZeRO stage 1"]
            if isinstance(got, (int, float)) and math.isclose(got, sent["ZeRO stage 3"], rel_tol=1e-6):
                why = (f"that is what a rank sent on {ranks} ranks; on {new} every ring sends a different share of its "
                       "buffer")
            elif isinstance(got, (int, float)) and math.isclose(got, stage1_there, rel_tol=1e-6):
                why = f"that is what stage 1 sends on {new} ranks; stage 3 runs one collective more"
            else:
                why = f"the schedules send {want:,.0f} B"
            raise AssertionError(f"stage3_sent(sent on {ranks} ranks, {ranks}, {new}) returned {got!r}; {why}.\n"
                                 "Hint: from the table, how many times stage 3 sends what stage 1 does; and from lab 03, "
                                 "how a ring's bytes a rank change with the number of ranks.")
    print("Correct: stage 3 sends 3 (n-1)/n of the model a rank, half as much again as stages 1 and 2, and the share "
          "(n-1)/n grows towards 1 with the ranks.")
