"""Accumulation and large batches (lab 06), worded from the runs: k micro-batches accumulated on one rank
against k ranks each taking one, and batch k x b at the same rate, at k times it, and with warm-up,
against batch b."""
from __future__ import annotations

from ...lab.exercises import compare, exercise

SAME_WEIGHTS = 1e-6  # largest absolute weight difference that counts as "the same weights"
SAME_ACCURACY = 0.01  # within 1 point (20 of 2,000 test points): about the same accuracy


def describe_accumulation(row: dict, tolerance: float = SAME_WEIGHTS) -> str:
    """What :func:`ringlab.train.accumulation.check_accumulation`'s row says."""
    n, steps, dtype, micro = row["ranks"], row["steps"], row["dtype"], row["micro_batch"]
    said = (f"{n} ranks each taking one micro-batch of {micro} a step, and one process accumulating the {n} "
            f"micro-batches before each step ({steps} steps of plain SGD, {dtype}): their weights differ by at most "
            f"{row['difference']:.1e} (the largest weight is {row['largest_weight']:.2f})")
    if row["difference"] <= tolerance and row["accumulating_difference"] <= tolerance:
        lines = [f"{said}, under {tolerance:.0e}: the same weights, up to the order in which floats were added.",
                 f"{n} ranks each accumulating 2 micro-batches (the first backward pass inside no_sync()) against one "
                 f"process accumulating {2 * n}: {row['accumulating_difference']:.1e}, the same again."]
    else:
        worst = max(row["difference"], row["accumulating_difference"])
        lines = [f"{said}; with ranks each accumulating 2 micro-batches against one process accumulating {2 * n}, "
                 f"{row['accumulating_difference']:.1e}. {worst:.1e} is more than {tolerance:.0e}: these runs did not "
                 "average the same gradients."]
    apart = row["one_micro_batch_difference"]
    lines.append(f"One process taking only the first micro-batch ends {apart:.1e} away from the ranks"
                 + (": a different run is told apart." if apart > tolerance else
                    ": no further than the others, so these differences tell nothing apart."))
    return "\n".join(lines)


def _roles(runs: list[dict]) -> dict:
    """{baseline, same, scaled, warm}: :func:`ringlab.train.large_batch.large_batch_runs`' runs, by what they did."""
    baseline = min(runs, key=lambda run: run["batch"])
    large = [run for run in runs if run["batch"] > baseline["batch"]]
    try:
        return {"baseline": baseline,
                "same": next(r for r in large if r["lr"] == baseline["lr"]),
                "scaled": next(r for r in large if r["lr"] > baseline["lr"] and not r["warmup_steps"]),
                "warm": next(r for r in large if r["warmup_steps"])}
    except StopIteration:
        raise ValueError("need the baseline and three large-batch runs (same rate, k times it, with warm-up), "
                         "as large_batch_runs returns them") from None


def _at(run: dict, step: int) -> dict:
    """The run's evaluation nearest ``step`` (the later of two as near)."""
    return min(run["points"], key=lambda p: (abs(p["step"] - step), -p["step"]))


def describe_large_batches(runs: list[dict]) -> str:
    """What :func:`ringlab.train.large_batch.large_batch_runs`' runs say, at equal samples and at equal steps."""
    role = _roles(runs)
    base, same, scaled, warm = role["baseline"], role["same"], role["scaled"], role["warm"]
    k = same["batch"] // base["batch"]
    end = {name: run["points"][-1] for name, run in role.items()}
    lines = [f"Every run saw {base['samples']:,} samples: batch {base['batch']} for {base['steps']} steps at lr "
             f"{base['lr']:g}, and batch {same['batch']} ({k} times it, what {k} ranks see together) for "
             f"{same['steps']} steps at lr {same['lr']:g}, at {scaled['lr']:g}, and at {warm['lr']:g} reached over "
             f"{warm['warmup_steps']} steps from {warm['first_lr']:g}.",
             "Test accuracy at the end: " + ", ".join(
                 f"{run['name']} {end[name]['accuracy']:.3f} (loss {end[name]['loss']:.3f})"
                 for name, run in role.items()) + "."]
    behind = end["baseline"]["accuracy"] - end["same"]["accuracy"]
    early = _at(base, same["steps"])
    if behind > SAME_ACCURACY:
        kept_up = end["same"]["accuracy"] >= early["accuracy"] - SAME_ACCURACY
        lines.append(f"At the baseline's rate the large batch ended {behind * 100:.1f} points behind: each of its "
                     f"steps follows a better average of the gradient but goes no further than a small-batch step, "
                     f"and it took {k} times fewer. "
                     + (f"Step for step it kept up ({end['same']['accuracy']:.3f} after {same['steps']} steps, the "
                        f"baseline {early['accuracy']:.3f} after {early['step']}): against steps the large batch looks "
                        "fine, against samples it is slow." if kept_up else
                        f"Even step for step it was behind ({end['same']['accuracy']:.3f} after {same['steps']} steps, "
                        f"the baseline {early['accuracy']:.3f} after {early['step']})."))
    else:
        lines.append(f"At the baseline's rate the large batch ended within {abs(behind) * 100:.1f} points of the "
                     f"baseline even with {k} times fewer steps: on this task the baseline's rate was already "
                     "more than enough.")
    gap = end["baseline"]["accuracy"] - end["scaled"]["accuracy"]
    if abs(gap) <= SAME_ACCURACY:
        lines.append(f"At {k} times the rate it ended within {abs(gap) * 100:.1f} points of the baseline: linear "
                     f"scaling held, {k} times fewer steps each going {k} times as far.")
    elif gap > 0:
        lines.append(f"At {k} times the rate it ended {gap * 100:.1f} points behind the baseline: linear scaling "
                     "did not fully hold at this k; it holds while one step changes the weights little.")
    else:
        lines.append(f"At {k} times the rate it ended {-gap * 100:.1f} points ahead of the baseline.")
    lines.append(_warmup_sentence(scaled, warm))
    return "\n".join(lines)


def _warmup_sentence(scaled: dict, warm: dict) -> str:
    w = warm["warmup_steps"]
    cold_early, warm_early = _at(scaled, w), _at(warm, w)
    start_loss = scaled["points"][0]["loss"]
    blew_up = max(p["loss"] for p in scaled["points"][1:]) > start_loss
    diff = warm["points"][-1]["accuracy"] - scaled["points"][-1]["accuracy"]
    said = (f"After the {w} warm-up steps the warmed-up run stood at {warm_early['accuracy']:.3f} against "
            f"{cold_early['accuracy']:.3f} without warm-up")
    published = ("Goyal et al. (2017, published) needed a gradual warm-up over the first epochs to train at "
                 "8192 images per batch with the learning rate scaled up linearly.")
    if blew_up:
        return (f"Without warm-up the test loss rose above its starting {start_loss:.2f} along the way: the full "
                f"rate from the first step was too much. {said}; at the end warm-up was {diff * 100:+.1f} points. "
                + published)
    if diff > SAME_ACCURACY:
        return f"{said}; at the end warm-up was {diff * 100:.1f} points ahead. " + published
    return (f"{said}, and at the end they were within {abs(diff) * 100:.1f} points: this small model takes "
            f"{scaled['lr']:g} from the first step without its loss ever rising, so warm-up bought nothing here. "
            + published)


def _scaled_lr(base_lr, k, step, warmup):
    return base_lr * k if step >= warmup else base_lr * (1 + (k - 1) * step / warmup)


@exercise(_scaled_lr, "schedule")
def check_scaled_lr(scaled_lr):
    """The linear scaling rule with linear warm-up: base_lr at step 0, base_lr * k from ``warmup`` on."""
    def rule(base_lr, k, step, warmup):
        return base_lr * k if step >= warmup else base_lr * (1 + (k - 1) * step / warmup)

    cases = [dict(base_lr=b, k=k, step=s, warmup=w) for b, k, s, w in
             [(0.001, 4, 0, 10), (0.001, 4, 5, 10), (0.001, 4, 10, 10), (0.001, 4, 500, 10), (0.1, 1, 3, 5),
              (0.01, 8, 2, 4)]]
    compare(scaled_lr, "scaled_lr", cases, rule,
             "at step 0 it is base_lr; it rises in a straight line to base_lr * k at step warmup; after that it "
             "stays at base_lr * k.", rel_tol=1e-9, unit="")
    print("Correct: linear scaling with a linear warm-up.")
