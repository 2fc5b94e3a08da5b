"""Large batches, in one process: k ranks of data parallelism train on a batch k times as large (their
slices together), so a large batch here is what k ranks would see. Against the batch-b baseline, on the
same number of samples (k times fewer steps), :func:`large_batch_runs` trains at batch k x b

- at the baseline's learning rate;
- at k times it from the first step (the linear scaling rule);
- at k times it reached over a linear warm-up from the baseline's rate (Goyal et al. 2017, published:
  ImageNet in one hour at 8192 images per batch, with 5 epochs of warm-up).

Everything is seeded (data, batches, initial weights) and runs on one thread: the runs are the same
every time on a machine. Plain SGD (no momentum) by default, so that the learning rate alone sets how
far a step goes.
"""
from __future__ import annotations

import torch

from ..schedule import check_count
from .scaling import PER_RANK
from .task import batches, make_data, make_model, one_thread

LR, MOMENTUM = 0.1, 0.0  # the baseline's: batch PER_RANK


def scaled_lr(base_lr: float, k: int, step: int, warmup: int) -> float:
    """The linear scaling rule with a linear warm-up: ``base_lr`` at step 0, ``base_lr * k`` from ``warmup`` on."""
    if step >= warmup:
        return base_lr * k
    return base_lr * (1 + (k - 1) * step / warmup)


def train_run(name: str, batch_size: int, steps: int, lr_at, momentum: float = MOMENTUM,
              evaluations: int = 24) -> dict:
    """Train the task's MLP ``steps`` steps of ``batch_size`` at learning rate ``lr_at(step)``; test accuracy
    and loss at the start and at ``evaluations`` evenly spaced steps. Returns the run with its ``points``."""
    steps, batch_size = check_count("steps", steps), check_count("batch_size", batch_size)
    x, y, x_test, y_test = make_data()
    batch = batches(x, y, 1, batch_size)
    model = make_model()
    sgd = torch.optim.SGD(model.parameters(), lr=lr_at(0), momentum=momentum)
    loss_fn = torch.nn.CrossEntropyLoss()
    marks = {round(steps * (i + 1) / evaluations) for i in range(evaluations)}

    def point(step):
        with torch.no_grad():
            out = model(x_test)
        return {"step": step, "samples": step * batch_size, "loss": float(loss_fn(out, y_test)),
                "accuracy": float((out.argmax(dim=1) == y_test).float().mean())}

    points = [point(0)]
    with one_thread():
        for step in range(steps):
            for group in sgd.param_groups:
                group["lr"] = lr_at(step)
            sgd.zero_grad()
            inputs, targets = batch(0, step)
            loss_fn(model(inputs), targets).backward()
            sgd.step()
            if step + 1 in marks:
                points.append(point(step + 1))
    return {"name": name, "batch": batch_size, "steps": steps, "samples": steps * batch_size,
            "lr": lr_at(steps - 1), "first_lr": lr_at(0), "points": points}


def large_batch_runs(k: int = 8, samples: int = 19200, warmup_samples: int = 4096, batch: int = PER_RANK,
                     lr: float = LR, momentum: float = MOMENTUM, evaluations: int = 24) -> list[dict]:
    """The baseline (``batch`` at ``lr``) and three runs at batch ``k * batch`` (the module docstring),
    every one on ``samples`` samples; warm-up over ``warmup_samples`` samples. Each run has ``name``,
    ``batch``, ``steps``, ``samples``, ``lr`` (the last step's), ``first_lr``, ``warmup_steps`` and
    ``points`` ({step, samples, loss, accuracy} on the test points)."""
    k = check_count("k", k, minimum=2)
    large = k * batch
    if samples % large or samples <= 0:
        raise ValueError(f"samples must be a positive multiple of k x batch = {large}, so that every run sees "
                         f"exactly that many; got {samples}")
    steps = samples // large
    warmup = warmup_samples // large
    if not 1 <= warmup < steps:
        raise ValueError(f"warmup_samples must give 1 to {steps - 1} steps of {large}; got {warmup_samples} "
                         f"({warmup} steps)")
    plans = [(f"batch {batch}, lr {lr:g} (baseline)", batch, samples // batch, lambda s: lr, 0),
             (f"batch {large}, lr {lr:g} (the same)", large, steps, lambda s: lr, 0),
             (f"batch {large}, lr {k * lr:g}, no warm-up", large, steps, lambda s: k * lr, 0),
             (f"batch {large}, lr {k * lr:g}, warm-up over {warmup} steps", large, steps,
              lambda s: scaled_lr(lr, k, s, warmup), warmup)]
    return [{**train_run(name, size, count, lr_at, momentum, evaluations), "warmup_steps": w, "k": k}
            for name, size, count, lr_at, w in plans]
