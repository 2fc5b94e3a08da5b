"""NCCL's three protocols as cost terms: what a step costs besides moving bytes, and what share
of a link's rate carries data.

A schedule says which chunks move at each step; how a real library moves them adds costs that the
plain alpha-beta model (one latency per message, the link's rate) leaves out. NCCL has three ways,
and its tuner picks one per call from a model of each (published in its source,
``src/graph/tuning.cc``):

- ``LL`` (low latency): every 8-byte store carries 4 bytes of data and a 4-byte flag, so the
  receiver polls its memory instead of waiting for a fence. The lowest latency, half the rate.
- ``LL128``: 128-byte lines, 120 bytes of data and an 8-byte flag; NCCL enables it by default only
  where every path is NVLink, which keeps 128-byte stores in order.
- ``Simple``: large chunks and a memory fence per step: the whole rate, the highest latency.

Each costs a base latency per call (launching the kernel, setting up) and a latency per step that
depends on the hardware the step crosses: NVLink, PCIe (and the paths through host bridges and
CPU sockets), or the network. The figures below are NCCL's ring figures for its default tuning.

Why these terms: held to published nccl-tests sweeps (``benchmarks/model_vs_published.py``), the
bare model (1-2 us a message, links at their peak) was too optimistic in the middle sizes, by up to
1.5x on 8x H100 and 1.7x on a PCIe box, and too pessimistic at the small end. A step costs NCCL
microseconds of protocol (flags, fences, a thread block's loop), not the wire's one, and NCCL's
tuner moves from LL to LL128 to Simple as messages grow, trading latency for rate. The terms below
are NCCL's own figures (``ringlab.predict.tuning``, their one home), not fitted to those sweeps. The
other missing term, links reaching less than their signalling peak, lives on the links
(``Link.efficiency``, set by the presets). The published sweeps are now held to NCCL's whole model
(``ringlab.predict.nccl``: its algorithms across nodes, LL's cap, LL's rate over PCIe); these terms
are what a ringlab schedule pays when it runs NCCL's way.

These are NCCL's model figures, labelled as such: not measured here, and a model of NCCL rather
than NCCL. Left out here: NCCL's cap on LL and LL over PCIe (``ringlab.predict.nccl`` has both).
"""
from __future__ import annotations

from dataclasses import dataclass

from .tuning import BASE_LATENCY, HW_LATENCY, LL128_SHARE, LL_SHARE, US

SOURCE = ("NCCL's tuning model (src/graph/tuning.cc, ncclTunerConstantsDefaults: ring base and "
          "hardware latencies; protocol rate shares), NVIDIA/nccl at 5067397, 2026-06-11")

# The hardware a message crosses, from a link's kind, slowest class winning along a route.
NVLINK, PCIE, NET = 0, 1, 2
HARDWARE = ("nvlink", "pcie", "net")
_KIND_CLASS = {"nvlink": NVLINK, "nvswitch": NVLINK, "xgmi": NVLINK, "pcie": PCIE, "qpi": PCIE, "upi": PCIE,
               "fabric": PCIE, "host": PCIE}  # xgmi: AMD's Infinity Fabric between GPUs, which RCCL types as NVLink


def hardware_class(kind: str) -> int:
    """NVLINK, PCIE or NET for a link kind; kinds of the generic models (port, ring, direct) and
    networks (ib, eth) count as the network."""
    return _KIND_CLASS.get(kind, NET)


@dataclass(frozen=True)
class Protocol:
    """One of NCCL's protocols: ``base_latency`` per call, ``step_latency`` per step by hardware
    (``nvlink``, ``pcie``, ``net``; seconds), the ``rate_share`` of a link's rate that carries data,
    and whether NCCL uses it by default only where every path is NVLink."""

    name: str
    base_latency: float
    step_latency: dict
    rate_share: float
    nvlink_only: bool = False

    def latency(self, hardware: int) -> float:
        return self.step_latency[HARDWARE[hardware]]


def _ring(name: str, share: float, nvlink_only: bool = False) -> Protocol:
    """A protocol with NCCL's ring latencies (``ringlab.predict.tuning``)."""
    return Protocol(name, BASE_LATENCY["ring"][name], {hw: HW_LATENCY[hw]["ring"][name] for hw in HARDWARE}, share,
                    nvlink_only)


PROTOCOLS = {"LL": _ring("LL", LL_SHARE), "LL128": _ring("LL128", LL128_SHARE, nvlink_only=True),
             "Simple": _ring("Simple", 1.0)}
AUTO = "auto"


def protocol(name: str) -> Protocol:
    """``LL``, ``LL128`` or ``Simple`` (any case)."""
    for key, value in PROTOCOLS.items():
        if key.lower() == str(name).lower():
            return value
    raise ValueError(f"unknown protocol {name!r}; known: {', '.join(PROTOCOLS)} (or {AUTO!r}: the fastest)")
