"""Predictions set against a measured sweep, size by size: the cost model held to real machines.

The rows are nccl-tests rows as ``ringlab import`` reads them or ``ringlab.measure.published``
ships them (``bytes``, ``busbw_Bps`` or only ``inplace_busbw_Bps``). What stands for what NCCL ran:

- ``"ring"``: ringlab's ring (``allreduce.ring``, ``allgather.ring``, ``reduce_scatter.ring``) with
  NCCL's protocol costs, the fastest protocol at each size (``protocol="auto"``);
- ``"nvls"``: the in-switch allreduce's closed form (``predict.nvls``), on presets whose switch adds;
- ``"best"``: the faster of those two where both apply, as NCCL's tuner picks its algorithm by size.
  ringlab's binomial tree is left out: NCCL's tree is a pipelined double binary tree, which moves
  far less than a binomial tree of whole buffers.
"""
from __future__ import annotations

from ..algorithms import build
from ..schedule import bus_factor
from ..topology import Topology
from .costmodel import predict
from .nvls import SOURCE as NVLS_SOURCE, nvls_allreduce

MODELS = ("ring", "nvls", "best")


def model_seconds(model: str, collective: str, nbytes: int, topology: Topology, nranks: int | None = None,
                  itemsize: int = 4) -> tuple[float, str]:
    """(predicted seconds, what was predicted) for ``collective`` of ``nbytes`` on ``topology``."""
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
    nranks = topology.nranks if nranks is None else nranks
    options = []
    if model in ("ring", "best"):
        p = predict(build(f"{collective}.ring", nranks), nbytes, topology, itemsize, protocol="auto")
        options.append((p.seconds, f"ring, {p.protocol}"))
    if model == "nvls" or (model == "best" and collective == "allreduce" and topology.switch_reduce
                           and nranks == topology.nranks):
        if collective != "allreduce":
            raise ValueError(f"the NVLS closed form is for allreduce, not {collective}")
        options.append((nvls_allreduce(nbytes, topology, nranks), "NVLS (closed form)"))
    return min(options)


def versus(rows: list[dict], topology: Topology, collective: str = "allreduce", model: str = "best",
           nranks: int | None = None, itemsize: int = 4) -> list[dict]:
    """One row per measured size > 0: ``bytes``, ``measured_busbw`` (out of place where printed, else
    in place), ``predicted_busbw``, ``ratio`` (predicted / measured) and ``predicted`` (which model)."""
    nranks = topology.nranks if nranks is None else nranks
    factor = bus_factor(collective, nranks)
    out = []
    for row in rows:
        measured = row.get("busbw_Bps") if row.get("busbw_Bps") is not None else row.get("inplace_busbw_Bps")
        if not row["bytes"] or not measured:
            continue
        seconds, how = model_seconds(model, collective, row["bytes"], topology, nranks, itemsize)
        busbw = row["bytes"] / seconds * factor
        out.append({"bytes": row["bytes"], "measured_busbw": measured, "predicted_busbw": busbw,
                    "ratio": busbw / measured, "predicted": how})
    return out


__all__ = ["MODELS", "model_seconds", "versus", "NVLS_SOURCE"]
