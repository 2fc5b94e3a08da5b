"""What lab 06 says about a model that does not fit, worded from ringlab's counts: the bytes a pipeline
boundary carries against a data-parallel allreduce, and the bubble read off a drawn schedule."""
from __future__ import annotations

from ...lab.exercises import compare, exercise
from ...lab.words import plural
from ...measure.units import format_bytes
from ...predict.pipeline import bubble_fraction, idle_slots


def describe_pipeline_traffic(row: dict) -> str:
    """Sentences on one :func:`ringlab.predict.pipeline.pipeline_traffic` row: weights per device, bytes per
    step each way, and the bubble that the pipeline pays instead."""
    n, m = row["devices"], row["microbatches"]
    params = row["weight_bytes"] // row["bytes_per_value"]
    ratio = row["allreduce_bytes"] / row["pipeline_bytes"]
    lines = [f"{row['layers']} layers of hidden size {row['hidden']} hold {_count(params)} parameters: "
             f"{format_bytes(row['weight_bytes'])} of weights at {row['bytes_per_value']} bytes each, and as much "
             f"again of gradients (the optimizer's state comes on top). Data parallel, each of the {n} devices holds "
             f"all of it; cut into {n} stages, a device holds {format_bytes(row['stage_weight_bytes'])} of weights.",
             f"Per step ({m} micro-batches of {plural(row['microbatch'], 'sequence')} of "
             f"{plural(row['sequence'], 'token')}): a data-parallel device sends "
             f"{format_bytes(row['allreduce_bytes'])} in its ring allreduce, 2(n-1)/n of the gradients, and receives "
             f"as much; a pipeline boundary carries "
             f"{format_bytes(row['activation_bytes'])} per micro-batch each way (activations forward, their "
             f"gradients backward), {format_bytes(row['pipeline_bytes'])} per step each way."]
    if ratio >= 1:
        lines.append(f"That is {ratio:.3g}x fewer bytes each way across a pipeline link, because a boundary carries "
                     "batch x sequence x hidden values, not the 12 hidden^2 weights of every layer.")
    else:
        lines.append(f"Here the pipeline's boundaries carry {1 / ratio:.3g}x more than the allreduce: with so few "
                     "weights per token, activations outweigh gradients.")
    lines.append(f"The price is the bubble: with {n} stages and {m} micro-batches, {bubble_fraction(n, m):.0%} of "
                 "each step's stage-time is idle (predicted, GPipe's schedule).")
    return "\n".join(lines)


def describe_bubble(grid) -> str:
    """What the drawn schedule ``grid`` (stages x slots) shows, counted from it and set beside (n-1)/(m+n-1)."""
    stages, slots = len(grid), len(grid[0])
    microbatches = sum(cell is not None for cell in grid[0]) // 2
    idle = idle_slots(grid)
    per_stage = sorted({sum(cell is None for cell in row) for row in grid})
    same = (f"every stage idles {per_stage[0]} slots, 2(n-1) = {2 * (stages - 1)}: stage s waits s slots before its "
            "first forward, 2(n-1-s) between its last forward and its first backward, and s after its last backward"
            if len(per_stage) == 1 else f"stages idle {', '.join(map(str, per_stage))} slots")
    predicted = bubble_fraction(stages, microbatches)
    verdict = "the same" if abs(idle / (stages * slots) - predicted) < 1e-12 else "not the same"
    return (f"Counted from the chart: {stages} stages x {slots} slots = {stages * slots} stage-slots, {idle} of them "
            f"idle ({idle / (stages * slots):.1%}); {same}. The formula (n-1)/(m+n-1) = {stages - 1}/"
            f"{microbatches + stages - 1} gives {predicted:.1%}: {verdict}.")


def _count(n: int) -> str:
    return (f"{n / 1e9:.3g} billion" if n >= 1e9 else f"{n / 1e6:.3g} million" if n >= 1e6 else f"{n:,}")




def _bubble_fraction(n, m):
    return (n - 1) / (m + n - 1)


@exercise(_bubble_fraction, "formula")
def check_bubble_fraction(bubble_fraction):
    """``bubble_fraction(n, m)``: the idle share of a GPipe step, against the idle stage-slots counted in
    :func:`ringlab.predict.pipeline.gpipe_schedule`'s grid for n stages and m micro-batches."""
    from ...predict.pipeline import gpipe_schedule, idle_slots

    def counted(n, m):
        grid = gpipe_schedule(n, m)
        return idle_slots(grid) / (n * len(grid[0]))

    cases = [dict(n=n, m=m) for n, m in [(4, 8), (2, 1), (4, 1), (8, 4), (8, 32), (3, 5), (1, 6)]]
    compare(bubble_fraction, "bubble_fraction", cases, counted,
             "count a step's slots: the first micro-batch needs n-1 slots to reach the last stage, then the others "
             "follow one slot apart, and backward mirrors forward; each stage is busy for 2m of them.",
             rel_tol=1e-9, unit="(the idle share counted in the drawn schedule)")
    print("Correct: (n-1)/(m+n-1) of a GPipe step is bubble.")
