"""Pipeline parallelism on paper: the GPipe schedule, its bubble, and what crosses a stage boundary.

A model cut into n stages on n devices runs each global batch as m micro-batches. In GPipe's
schedule (Huang et al. 2019) every stage runs all m forward passes, then all m backward passes,
each as soon as the stage before it (forward) or after it (backward) has handed over that
micro-batch's activations or their gradients. With one time slot per pass, a step takes
2(m + n - 1) slots, of which each stage is busy 2m: the idle share, the *bubble*, is
(n - 1) / (m + n - 1). :func:`gpipe_schedule` builds the slots from the dependencies alone, so
the formula can be checked against it.

Between stages only a micro-batch's activations travel forward and their gradients backward;
data parallelism moves every weight's gradient instead. :func:`pipeline_traffic` counts both for
a stack of GPT-style transformer layers, with the parameter count Narayanan et al. (2021) use for
them: 12 h^2 + 13 h per layer of hidden size h (embeddings left out).
"""
from __future__ import annotations

FORWARD, BACKWARD = "F", "B"


def _check_counts(stages, microbatches) -> None:
    for name, value in (("stages", stages), ("microbatches", microbatches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")


def gpipe_schedule(stages: int, microbatches: int) -> list[list[tuple[str, int] | None]]:
    """``grid[stage][slot]``: ``("F", j)`` or ``("B", j)`` for micro-batch j's forward or backward pass, or
    None where the stage is idle. Each stage takes its passes in GPipe's order (forwards 0..m-1, then
    backwards m-1..0) and runs one the first slot its input is ready: a forward after the stage before
    has run it, a backward after the stage after has (the last stage: after its own forward)."""
    _check_counts(stages, microbatches)
    order = [(FORWARD, j) for j in range(microbatches)] + [(BACKWARD, j) for j in reversed(range(microbatches))]
    finished: dict[tuple[str, int, int], int] = {}  # (pass, micro-batch, stage) -> the slot it ran in
    upcoming = [0] * stages  # per stage: how many of its passes have run
    grid: list[list[tuple[str, int] | None]] = [[] for _ in range(stages)]
    slot = 0
    while min(upcoming) < len(order):
        ran = []
        for stage in range(stages):
            if upcoming[stage] == len(order):
                grid[stage].append(None)
                continue
            kind, j = order[upcoming[stage]]
            needs = ((FORWARD, j, stage - 1) if kind == FORWARD else
                     (BACKWARD, j, stage + 1) if stage < stages - 1 else (FORWARD, j, stage))
            ready = (kind == FORWARD and stage == 0) or finished.get(needs, slot) < slot
            grid[stage].append((kind, j) if ready else None)
            if ready:
                ran.append((kind, j, stage))
                upcoming[stage] += 1
        for key in ran:
            finished[key] = slot
        slot += 1
    return grid


def idle_slots(grid) -> int:
    """The stage-slots of ``grid`` in which nothing runs."""
    return sum(cell is None for row in grid for cell in row)


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The idle share of a GPipe step, (n - 1) / (m + n - 1), passes of equal length."""
    _check_counts(stages, microbatches)
    return (stages - 1) / (microbatches + stages - 1)


def transformer_layer_parameters(hidden: int) -> int:
    """Parameters of one GPT-style transformer layer: attention (4 h x h weights and 4 h biases), a 4h MLP
    (8 h^2 + 5 h) and two layer norms (4 h), 12 h^2 + 13 h in all."""
    return 12 * hidden * hidden + 13 * hidden


def pipeline_traffic(hidden: int, sequence: int, layers: int, microbatch: int, microbatches: int, devices: int,
                     bytes_per_value: int = 2) -> dict:
    """Bytes per training step for ``layers`` transformer layers on ``devices`` devices, two ways.

    Pipeline: ``devices`` stages of ``layers / devices`` layers; each boundary carries, per micro-batch of
    ``microbatch`` sequences of ``sequence`` tokens, the activations forward and their gradients backward
    (``microbatch * sequence * hidden`` values each). Data parallel: every device holds all the layers and
    a ring allreduce averages all their gradients; a device sends (and receives) 2(n-1)/n of them,
    counted from ringlab's ring schedule. Both see the same global batch of ``microbatch * microbatches``
    sequences. ``bytes_per_value``: 2 for fp16 or bf16.
    """
    from ..algorithms import build
    from ..simulate import traffic

    _check_counts(devices, microbatches)
    for name, value in (("hidden", hidden), ("sequence", sequence), ("layers", layers), ("microbatch", microbatch),
                        ("bytes_per_value", bytes_per_value)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    if layers % devices:
        raise ValueError(f"{layers} layers do not split evenly into {devices} stages")
    weights = layers * transformer_layer_parameters(hidden) * bytes_per_value
    activation = microbatch * sequence * hidden * bytes_per_value
    allreduce = traffic(build("allreduce.ring", devices), weights)["sent"][0] if devices > 1 else 0
    return {"hidden": hidden, "sequence": sequence, "layers": layers, "microbatch": microbatch,
            "microbatches": microbatches, "devices": devices, "bytes_per_value": bytes_per_value,
            "weight_bytes": weights, "stage_weight_bytes": weights // devices,
            "activation_bytes": activation,  # one micro-batch, one boundary, one way
            "pipeline_bytes": microbatches * activation,  # a boundary per step, each way: forward and backward
            "allreduce_bytes": allreduce,  # a data-parallel device per step, each way (sent, and received)
            "bubble": bubble_fraction(devices, microbatches)}
