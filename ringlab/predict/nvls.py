"""Allreduce inside the switch (NVLS, NVLink SHARP): a closed form, because no schedule can say it.

Every ringlab algorithm is a schedule of point-to-point transfers between ranks; a rank adds what
it receives. On third-generation NVSwitch (H100, H200) the switch itself can add: NCCL's NVLS
algorithm has each GPU load its shard of the result through a multicast address, the switch
fetching that shard from all n GPUs and adding as it goes, then store the sum once to a multicast
address that the switch copies to all n GPUs. Per GPU, each way, that is K(n+1)/n bytes
(K up for the n shards the others add, K/n for its own shard's store; K/n down for its sum, K for
everyone's stores), where a ring moves 2K(n-1)/n each way. So

    time  = latency + K (n+1) / (n * rate * efficiency)
    busbw = 2 (n-1) / (n+1) * rate * efficiency      (nccl-tests' definition, 2(n-1)/n x K / time)

which passes the ring's ceiling (busbw = rate): 1.56x the rate at n = 8 before the efficiency.

The latency (25 us) and the efficiency (0.85 on Hopper, 0.74 on Blackwell) are the figures of NCCL's
tuning model for NVLS (``src/graph/tuning.cc``: hardware latency of NVLS over NVLink, ``nvlsEfficiency``),
the rate is the GPU's NVLink port at its preset rating. This is a labelled model of what NCCL does, not a
ringlab algorithm: nothing here runs it.
"""
from __future__ import annotations

from ..schedule import bus_factor, check_count
from ..topology import Topology
from .tuning import HW_LATENCY, NVLS_EFFICIENCY

LATENCY = HW_LATENCY["nvlink"]["nvls"]["Simple"]  # NCCL's hardware latency of NVLS over NVLink, per call
EFFICIENCY = NVLS_EFFICIENCY["hopper"]            # NCCL's nvlsEfficiency for Hopper (Blackwell: 0.74)
SOURCE = ("a closed form of NVLS (in-switch reduction), with NCCL's NVLS latency and efficiency from its tuning "
          "model (src/graph/tuning.cc, NVIDIA/nccl at 5067397)")


def efficiency(topology: Topology) -> float:
    """NCCL's NVLS efficiency for the topology's GPU generation (Hopper's where the topology does not say)."""
    arch = topology.machine.arch if topology.machine is not None else "hopper"
    if arch not in NVLS_EFFICIENCY:
        raise ValueError(f"{topology.name}: {arch} GPUs have no NVLS (NCCL's NVLS needs Hopper or later)")
    return NVLS_EFFICIENCY[arch]


def nvls_algbw(port: float, efficiency: float, nranks: int) -> float:
    """Bytes/s of size an NVLS allreduce over ``nranks`` GPUs reaches: each moves K(n+1)/n each way at its
    ``port``'s rate (bytes/s) times NCCL's ``efficiency``."""
    return port * efficiency * nranks / (nranks + 1)


def nvls_gather_algbw(port: float, efficiency: float) -> float:
    """Bytes/s of size (nccl-tests' all-gather and reduce-scatter size K, the whole buffer) an NVLS all-gather or
    reduce-scatter reaches: the switch copies each GPU's stored shard to all n GPUs (all-gather), or loads each
    shard from all n and adds (reduce-scatter), so every GPU's port carries K one way (its own shard included),
    at its ``port``'s rate times NCCL's ``efficiency``. A ring carries K(n-1)/n: with nothing for the switch to
    add in all-gather, NVLS has no bytes to save there."""
    return port * efficiency


def port_rate(topology: Topology) -> float:
    """Bytes/s each way of the slowest GPU port into the switch (its peak times its rating)."""
    ports = [link.rate for link, joins_rank in topology.link_classes() if link.kind == "nvswitch" and joins_rank]
    if not ports:
        raise ValueError(f"{topology.name} has no NVSwitch ports")
    return min(ports)


def nvls_allreduce(nbytes: int, topology: Topology, nranks: int | None = None) -> float:
    """Predicted seconds of an NVLS allreduce of ``nbytes`` per GPU on an NVSwitch ``topology``, over all
    its GPUs or the first ``nranks`` of them."""
    nbytes = check_count("nbytes", nbytes, minimum=0)
    if not topology.switch_reduce:
        raise ValueError(f"{topology.name}: its switches cannot add (NVLS needs third-generation NVSwitch, "
                         "as in the hgx-h100-8 and hgx-h200-8 presets)")
    n = topology.nranks if nranks is None else check_count("nranks", nranks, minimum=2)
    if n > topology.nranks:
        raise ValueError(f"NVLS over {n} GPUs: topology {topology.name} has {topology.nranks}")
    return LATENCY + nbytes / nvls_algbw(port_rate(topology), efficiency(topology), n)


def nvls_busbw(nbytes: int, topology: Topology) -> float:
    """nccl-tests' bus bandwidth (bytes/s) of :func:`nvls_allreduce`."""
    return nbytes / nvls_allreduce(nbytes, topology) * bus_factor("allreduce", topology.nranks)
