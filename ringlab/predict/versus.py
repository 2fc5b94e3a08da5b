"""Predictions set against a measured sweep, size by size: the cost model held to real machines.

The rows are nccl-tests rows as ``ringlab import`` reads them or ``ringlab.measure.published``
ships them (``bytes``, ``busbw_Bps`` or only ``inplace_busbw_Bps``). What stands for what NCCL ran
is NCCL's own model (``ringlab.predict.nccl``): ``"best"``, the algorithm and protocol its tuner
picks at each size, or one algorithm forced (``"ring"``, ``"tree"``, ``"nvls"``, ``"nvlstree"``,
``"collnet"``, ``"pat"``; alltoall and sendrecv have no tuner: ``"best"`` or ``"p2p"``, the grouped sends and
receives NCCL runs them as), with what the benchmark adds to each call (``ringlab.predict.harness``:
nccl-tests driving several GPUs from one thread, PyTorch's host overhead).
"""
from __future__ import annotations

from ..schedule import bus_factor
from ..topology import Topology
from .harness import Harness, harness
from .nccl import predict_nccl
from .tuning import ALGORITHMS

MODELS = ("best", *ALGORITHMS, "p2p")  # p2p: alltoall and sendrecv, NCCL's grouped sends (ringlab.predict.p2p)


def model_seconds(model: str, collective: str, nbytes: int, topology: Topology, nranks: int | None = None,
                  bench: Harness | None = None) -> tuple[float, str]:
    """(predicted seconds as ``bench`` measures them, "algorithm, protocol") for ``collective`` of ``nbytes``."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    p = predict_nccl(collective, nbytes, topology, None if model == "best" else model, nranks=nranks)
    return (bench or harness()).seconds(p.seconds), f"{p.algorithm}, {p.protocol}"


def versus(rows: list[dict], topology: Topology, collective: str = "allreduce", model: str = "best",
           nranks: int | None = None, bench: Harness | None = None) -> list[dict]:
    """One row per measured size > 0: ``bytes``, ``measured_busbw`` (out of place where printed, else
    in place), ``predicted_busbw``, ``ratio`` (predicted / measured) and ``predicted`` (which algorithm)."""
    nranks = topology.nranks if nranks is None else nranks
    factor = bus_factor(collective, nranks)
    out = []
    for row in rows:
        measured = row.get("busbw_Bps") if row.get("busbw_Bps") is not None else row.get("inplace_busbw_Bps")
        if not row["bytes"] or not measured:
            continue
        seconds, how = model_seconds(model, collective, row["bytes"], topology, nranks, bench)
        busbw = row["bytes"] / seconds * factor
        out.append({"bytes": row["bytes"], "measured_busbw": measured, "predicted_busbw": busbw,
                    "ratio": busbw / measured, "predicted": how})
    return out


__all__ = ["MODELS", "model_seconds", "versus"]
