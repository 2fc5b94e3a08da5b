"""What the ranks check before they train together: the same parameters, the same options, no problem on any
rank; a difference anywhere is the same ValueError everywhere, before any work (and never a hang)."""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from ..mpi import emulate
from ..mpi.private import check_agreement
from ..mpi.deadlines import DEFAULT, usable


def stepped_parameters(optimizer: torch.optim.Optimizer, named_parameters) -> list[tuple[str, torch.Tensor]]:
    """The parameters ``optimizer`` steps that require a gradient, in its param groups' order (the truth of
    what is averaged), each named as in ``named_parameters`` or by its place in the groups."""
    names = {id(p): name for name, p in named_parameters}
    found, seen = [], set()
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                found.append((names.get(id(p), f"param_groups[{g}][{i}]"), p))
    return found


def parameter_groups(optimizer) -> list[tuple[int, bool]]:
    """Every parameter of the optimizer's groups and whether it requires a gradient: what, if it changes,
    leaves gradients unaveraged."""
    return [(id(p), p.requires_grad) for group in optimizer.param_groups for p in group["params"]]


def agree_on(comm, what: str, named, options: dict, problems: list[str], timeout=DEFAULT) -> None:
    """Every rank checks that all ranks hold the same parameters (names, shapes, dtypes, in order) and
    options, and that none found a problem; a difference anywhere is the same ValueError everywhere."""
    shapes = [(name, list(p.shape), str(p.dtype)) for name, p in named]
    digest = hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]
    with emulate.inside():  # on an emulated machine, checking is not compute: nothing on this rank's clock
        check_agreement(comm, what, {"parameters": len(shapes), "problems": problems, **options,
                                     "names, shapes and dtypes": digest}, timeout=timeout)
    if problems:
        raise ValueError(f"{what}: {'; '.join(problems)}")


def agree_on_parameters(comm, what: str, named, timeout=DEFAULT) -> None:
    """:func:`agree_on` with no options: the same parameters everywhere, or the same ValueError everywhere."""
    agree_on(comm, what, named, {}, [], timeout)


def option_problems(bucket_bytes, overlap, trace, broadcast_initial, timeout) -> list[str]:
    problems = []
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, np.integer)) or bucket_bytes < 1:
        problems.append(f"bucket_bytes must be a whole number of bytes >= 1, got {bucket_bytes!r}")
    for name, value in (("overlap", overlap), ("trace", trace), ("broadcast_initial", broadcast_initial)):
        if not isinstance(value, bool):
            problems.append(f"{name} must be True or False, got {value!r}")
    if not usable(timeout):
        problems.append(f"timeout must be a number of seconds > 0 (or None: no limit), got {timeout!r}")
    if overlap is True:
        from mpi4py import MPI

        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            problems.append("overlap=True calls MPI from a second thread, which needs MPI_THREAD_MULTIPLE (this MPI "
                            "was started with less: see mpi4py.rc.thread_level); pass overlap=False")
    return problems
