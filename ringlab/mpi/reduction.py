"""The reduction a collective applies where two ranks' data meet: NCCL's operators, and bfloat16.

``op`` names one of :data:`OPS`, as NCCL's ``ncclRedOp_t`` does: ``sum``, ``prod``, ``max``, ``min``
and ``avg`` (the sum divided by the number of ranks). A :class:`Reduction` says how a received chunk
lands where the run meets it (``landing``: reduced into the buffer, or copied for a schedule's copy) and
finishes ``avg`` on the ranks that hold the result (``finish``). It works for numpy and cupy alike (the
ufunc is looked up on the array module). A utility of :mod:`ringlab.mpi`'s layers: it imports none of them.

bfloat16 comes from ``ml_dtypes`` (numpy has no such type; cupy 14 takes the same dtype). MPI has
no bfloat16 either and cannot even read such an array's buffer, so a bfloat16 buffer travels as its
raw 16-bit words (:func:`wire_dtype`) and is seen as bfloat16 only where it is reduced.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..schedule import REDUCE

OPS = ("sum", "prod", "max", "min", "avg")
_UFUNCS = {"sum": "add", "prod": "multiply", "max": "maximum", "min": "minimum", "avg": "add"}
MPI_OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN", "avg": "SUM"}  # avg: MPI's SUM, then / n


def bfloat16() -> np.dtype | None:
    """ml_dtypes' bfloat16 as a numpy dtype (None where ml_dtypes is not installed)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def is_bfloat16(dtype) -> bool:
    """Whether ``dtype`` is ml_dtypes' bfloat16 (by its scalar type's name: numpy's ``dtype.name`` is
    worked out in Python on every read, and every call on a numpy array asks this)."""
    return getattr(getattr(dtype, "type", None), "__name__", None) == "bfloat16"


def is_number_type(dtype) -> bool:
    """Whether a collective can carry and reduce this dtype: numpy's numbers, and bfloat16."""
    return isinstance(dtype, np.dtype) and (dtype.kind in "biufc" or is_bfloat16(dtype))


def wire_dtype(dtype) -> np.dtype:
    """The dtype MPI sees for a buffer of ``dtype``: bfloat16 as its raw 16-bit words, any other as it is."""
    return np.dtype(np.uint16) if is_bfloat16(dtype) else np.dtype(dtype)


def problems(op, dtype, kind: str | None) -> list[str]:
    """What is wrong with reducing ``dtype`` by ``op`` in collective ``kind`` (None: a schedule's own)."""
    if not isinstance(op, str) or op not in OPS:
        return [f"op must be one of {', '.join(OPS)}, got {op!r}"]
    if op != "sum" and kind in ("broadcast", "allgather", "gather", "scatter", "alltoall"):
        return [f"op={op!r} reduces, and {kind} reduces nothing: leave op out"]
    if op in ("max", "min") and isinstance(dtype, np.dtype) and dtype.kind == "c":
        return [f"op={op!r} needs real numbers: complex numbers have no order (MPI refuses them too)"]
    return []


@dataclass(frozen=True)
class Reduction:
    """How received data is combined with this rank's: ``land(xp, target, arrived)`` does it in place;
    ``finish(xp, flat, n)`` completes ``avg`` once the sum is in ``flat``. ``view``: the dtype the
    arithmetic sees when the buffers travel as raw words (bfloat16), else None."""

    op: str = "sum"
    view: np.dtype | None = None

    @property
    def ufunc(self) -> str:
        return _UFUNCS[self.op]

    def land(self, xp, target, arrived) -> None:
        if self.view is not None:
            target, arrived = target.view(self.view), arrived.view(self.view)
        getattr(xp, self.ufunc)(target, arrived, out=target)

    def landing(self, xp, op: str, target, arrived) -> tuple:
        """How ``arrived`` lands in ``target`` for a transfer of ``op`` (the schedule's ``"reduce"`` or
        ``"copy"``), as ``(function, arguments)`` for the run to call: for numpy, the ufunc itself with a
        positional ``out`` (the cheapest call numpy has), on views in the arithmetic's dtype."""
        if op != REDUCE:
            return (np.copyto, (target, arrived)) if xp is np else (copy_in, (target, arrived))
        if xp is not np:
            return self.land, (xp, target, arrived)
        if self.view is not None:
            target, arrived = target.view(self.view), arrived.view(self.view)
        return getattr(np, self.ufunc), (target, arrived, target)

    def finish(self, xp, flat, n: int) -> None:
        """``avg``: divide the sum by ``n`` in place, floats as they are, integers toward zero as C (and
        NCCL) divide them; any other op: nothing to do."""
        if self.op != "avg" or n == 1:
            return
        if self.view is not None:
            flat = flat.view(self.view)
        if flat.dtype.kind in "iu":
            quotient = xp.floor_divide(flat, n)  # rounds down; C rounds negative quotients up, toward zero
            inexact = xp.not_equal(xp.multiply(quotient, n), flat)
            xp.add(quotient, xp.logical_and(inexact, xp.less(flat, 0)), out=quotient)
            flat[...] = quotient
        else:
            xp.true_divide(flat, n, out=flat)


SUM = Reduction()


def copy_in(target, arrived) -> None:
    """Replace ``target``'s elements with ``arrived``'s (numpy or cupy, device to device alike)."""
    target[...] = arrived


def reduction(op: str, dtype) -> Reduction:
    """The Reduction for ``op`` on buffers of ``dtype`` (checked by :func:`problems` first)."""
    return Reduction(op, np.dtype(dtype) if is_bfloat16(dtype) else None) if (op != "sum" or is_bfloat16(dtype)) else SUM
