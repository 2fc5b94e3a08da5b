"""A small real task that needs no download: classifying points of a generated Gaussian mixture.

Everything is seeded, so every rank builds the same data and the same initial model, and any
three trainers (ringlab's DistributedOptimizer, torch DDP, the parameter server) see the same
batches: rank (or worker) w takes slice w of the global batch of every step.
"""
from __future__ import annotations

import contextlib

import torch

FEATURES, CLASSES = 16, 8


def make_data(samples: int = 12000, seed: int = 0, spread: float = 0.8):
    """(x_train, y_train, x_test, y_test): CLASSES Gaussian clusters in FEATURES dimensions, 5:1 split."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(CLASSES, FEATURES, generator=gen) * spread
    labels = torch.randint(0, CLASSES, (samples,), generator=gen)
    points = centres[labels] + torch.randn(samples, FEATURES, generator=gen)
    cut = samples * 5 // 6
    return points[:cut], labels[:cut], points[cut:], labels[cut:]


def make_model(seed: int = 0, hidden: int = 64, dtype=torch.float32) -> torch.nn.Module:
    """A small MLP, the same on every rank for the same seed."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, CLASSES))
    return model.to(dtype)


def batches(x, y, nworkers: int, per_worker: int, seed: int = 1):
    """``batch(worker, step)``: worker's slice of step's global batch (a seeded shuffle per step)."""
    def batch(worker: int, step: int):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed * 100003 + step))
        chosen = order[(worker * per_worker) % len(x):][:per_worker]
        return x[chosen], y[chosen]
    return batch


def accuracy(model: torch.nn.Module, x, y) -> float:
    with torch.no_grad():
        return float((model(x.to(next(model.parameters()).dtype)).argmax(dim=1) == y).float().mean())


def weights(model: torch.nn.Module):
    """All parameters as one flat numpy array (float64), for comparisons."""
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach().double().numpy().copy()


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block (one rank's share of a core); as it was after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
