"""Machines named in one string, for ``RINGLAB_EMULATE``, ``ringlab bench --emulate`` and ``rl.emulate``.

A SPEC is a preset name (``hgx-h100-8``, see :func:`~ringlab.topology.preset_names`), a machine by description
as :func:`~ringlab.topology.cluster` builds it (``GPU:NODESxGPUS`` with options: :func:`cluster_from`, e.g.
``h100:2x8`` or ``mi300x:1x8``), ``uniform:GBPS:US`` (every pair of ranks linked alike: GB/s each way per rank,
microseconds a message, taken as written) or ``nodes:RANKS:GBPS:US`` (nodes of RANKS consecutive ranks, free
inside a node, and GBPS each way per rank between nodes, US microseconds a message:
:func:`~ringlab.topology.joined_nodes`), optionally followed by ``@SCALE`` (how many times slower than that machine
to run).
"""
from __future__ import annotations

import math
import re

from .graph import GB, Topology, joined_nodes, uniform
from .machines import FABRICS, GPUS, cluster
from .presets import preset, preset_names

CLUSTER_FORM = "GPU:NODESxGPUS[:nics=N][:nic=GBPS][:fabric=F][:sharp][:nvls=on|off][:p2p=on|off][:pcie=GEN]"
CLUSTER_OPTIONS = (f"nics=N (NICs a node), nic=GBPS (each NIC's Gbit/s), fabric={'|'.join(FABRICS)}, sharp (the "
                   "fabric reduces), nvls=on|off (NVSwitch machines), p2p=on|off and pcie=GEN (PCIe boxes of "
                   "consumer GPUs)")
FORMS = ("a preset name (e.g. hgx-h100-8), a machine by description GPU:NODESxGPUS (e.g. h100:2x8, mi300x:1x8), "
         "uniform:GBPS:US (e.g. uniform:1:50) or nodes:RANKS:GBPS:US (e.g. nodes:2:1:50), optionally followed by "
         "@SCALE")


def cluster_from(spec: str) -> Topology:
    """The machine ``GPU:NODESxGPUS[:option...]`` describes, as :func:`~ringlab.topology.cluster` builds it: GPU one
    of ``GPUS`` (h100, mi300x, gh200, rtx4090, ...), NODES nodes of GPUS GPUs, and the options ``nics=N``,
    ``nic=GBPS``, ``fabric=ib|roce|efa|slingshot``, ``sharp``, ``nvls=on|off``, ``p2p=on|off``, ``pcie=GEN``; e.g.
    ``h100:2x8``, ``a100:16x8:nic=200``, ``mi300x:1x8``, ``gh200:16x4:fabric=slingshot:nic=200``,
    ``rtx4090:1x8:p2p=off``. A ValueError says what is wrong and lists the GPUs and options."""
    parts = spec.split(":")
    shape = re.fullmatch(r"(\d+)x(\d+)", parts[1]) if len(parts) > 1 else None
    if parts[0] not in GPUS or shape is None:
        raise ValueError(f"cannot read machine {spec!r}: a machine by description is {CLUSTER_FORM}, GPU one of "
                         f"{', '.join(GPUS)}, e.g. h100:2x8, mi300x:1x8, gh200:2x4 or rtx4090:1x8:p2p=off")
    options = {}
    for part in parts[2:]:
        key, _, value = part.partition("=")
        try:
            if key in ("nics", "pcie") and value:
                options["nics_per_node" if key == "nics" else "pcie"] = int(value)
            elif key == "nic" and value:
                options["nic_gbps"] = float(value)
            elif key == "fabric" and value:
                options["fabric"] = value
            elif key == "sharp" and not value:
                options["sharp"] = True
            elif key in ("nvls", "p2p") and value in ("on", "off"):
                options[key] = value == "on"
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"machine {spec!r}: cannot read {part!r}; the options are {CLUSTER_OPTIONS}") from None
    try:
        return cluster(parts[0], int(shape.group(1)), int(shape.group(2)), **options)
    except ValueError as err:
        raise ValueError(f"machine {spec!r}: {err}") from None


def from_spec(spec: str, nranks: int | None = None) -> tuple[Topology | None, float]:
    """(topology, scale) for ``spec``; a uniform machine is built for ``nranks`` ranks (None: checked only,
    no topology). A ValueError says what is wrong and what a SPEC looks like."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"an emulated machine is {FORMS}; got {spec!r}")
    machine, _, scale_text = spec.strip().partition("@")
    scale = _number(scale_text, "SCALE", spec) if scale_text else 1.0
    if scale <= 0:
        raise ValueError(f"{spec!r}: SCALE must be > 0 (how many times slower), got {scale_text}")
    if machine.startswith("uniform:"):
        parts = machine.split(":")
        if len(parts) != 3:
            raise ValueError(f"{spec!r}: a uniform machine is uniform:GBPS:US, e.g. uniform:1:50")
        gbps, us = _number(parts[1], "GBPS", spec), _number(parts[2], "US", spec)
        if gbps <= 0 or us < 0:
            raise ValueError(f"{spec!r}: GBPS must be > 0 and US >= 0")
        if nranks is None:
            return None, scale
        return uniform(nranks, bandwidth=gbps * GB, latency=us * 1e-6, name=f"uniform {gbps:g} GB/s, {us:g} us"), scale
    if machine.startswith("nodes:"):
        parts = machine.split(":")
        if len(parts) != 4:
            raise ValueError(f"{spec!r}: simulated nodes are nodes:RANKS:GBPS:US, e.g. nodes:2:1:50")
        per, gbps, us = _number(parts[1], "RANKS", spec), _number(parts[2], "GBPS", spec), _number(parts[3], "US", spec)
        if per < 1 or per != int(per) or gbps <= 0 or us < 0:
            raise ValueError(f"{spec!r}: RANKS must be a whole number >= 1, GBPS > 0 and US >= 0")
        if nranks is None:
            return None, scale
        return joined_nodes(nranks, int(per), bandwidth=gbps * GB, latency=us * 1e-6,
                            name=f"nodes of {int(per)} ranks, {gbps:g} GB/s, {us:g} us between them"), scale
    if machine.split(":")[0] in GPUS and ":" in machine:
        return cluster_from(machine), scale
    if machine not in preset_names():
        raise ValueError(f"{spec!r} names no machine: {FORMS}; the presets are {', '.join(preset_names())}")
    return preset(machine), scale


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{spec!r}: {what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{spec!r}: {what} must be finite, got {text!r}")
    return value
