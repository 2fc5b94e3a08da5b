"""Real GPU machines for the stand-ins of cupy and NVML: what each GPU is, where it sits, what reaches what.

The figures are those published in ``../shared/published`` (the file is named beside each
machine); where a source did not print something the value is assumed and says so.
``RINGLAB_GPUSIM_MACHINE`` picks the machine (default: the H100 box), and ``CUDA_VISIBLE_DEVICES``
chooses and orders the GPUs CUDA shows, as the driver does; NVML ignores it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

# NVML's answers for the common ancestor of two GPUs (nvmlGpuTopologyLevel_t)
SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM = 10, 20, 30, 40, 50


@dataclass(frozen=True)
class Gpu:
    name: str
    bus_id: str                      # as NVML prints it: 8-digit domain
    pcie_max: tuple[int, int]        # generation, width
    pcie_current: tuple[int, int]
    nvlinks_to_switch: int = 0       # NVLinks into NVSwitches (0: none, NVLink queries are NotSupported)
    nvlink_version: int = 0
    architecture: int = 0            # nvmlDeviceArchitecture_t


@dataclass(frozen=True)
class Machine:
    name: str
    source: str
    driver: str
    gpus: tuple[Gpu, ...]
    levels: tuple[tuple[int, ...], ...]   # NVML topology level between GPU i and j
    peer: tuple[tuple[bool, ...], ...]    # cudaDeviceCanAccessPeer / NVML P2P read, i to j
    topo: tuple[tuple[str, ...], ...] = field(default=())  # what `nvidia-smi topo -m` prints between GPUs

    def can_access_peer(self, i: int, j: int) -> bool:
        return i != j and self.peer[i][j]


def _square(n: int, value_off, value_on=None):
    return tuple(tuple(value_on if i == j else value_off for j in range(n)) for i in range(n))


def _h100() -> Machine:
    # B03/C05: 8x H100 80GB HBM3 SXM, pciBusID 19,3b,4c,5d,9b,bb,cb,db, NVLink 4 through NVSwitch
    # (18 links per GPU), every pair P2P (B03 connectivity all 1), driver 595.71.05. PCIe Gen5 x16 is
    # the H100 SXM's link (not printed there); GPUs 0-3 on one socket, 4-7 on the other: assumed.
    buses = ["19", "3b", "4c", "5d", "9b", "bb", "cb", "db"]
    gpus = tuple(Gpu("NVIDIA H100 80GB HBM3", f"00000000:{b.upper()}:00.0", (5, 16), (5, 16), 18, 4, 9)
                 for b in buses)
    levels = tuple(tuple(0 if i == j else NODE if i // 4 == j // 4 else SYSTEM for j in range(8)) for i in range(8))
    return Machine("h100-hgx-8", "B03_kr_h100x8_hgx_p2p.json, C05_kr_h100x8_nvbandwidth.json", "595.71.05",
                   gpus, levels, _square(8, True, False), _square(8, "NV18", "X"))


def _rtx4090() -> Machine:
    # D02 / B05: 8x RTX 4090 on dual EPYC 7542, no PCIe switch, SYS between every pair; stock driver,
    # so P2P is unavailable (B05 connectivity is the identity). Gen4 x16 (the card's link; not printed).
    # Bus ids were not printed: assumed, one root port each. Driver as B06's box (550.90.07), assumed.
    buses = ["01", "21", "41", "61", "81", "a1", "c1", "e1"]
    gpus = tuple(Gpu("NVIDIA GeForce RTX 4090", f"00000000:{b.upper()}:00.0", (4, 16), (4, 16), 0, 0, 8)
                 for b in buses)
    return Machine("rtx4090-8", "D02_chlc_rtx4090x8_topo.json, B05_chlc_rtx4090x8_p2p_stockdriver.json",
                   "550.90.07", gpus, _square(8, SYSTEM, 0), _square(8, False, False), _square(8, "SYS", "X"))


def _rtx2080ti() -> Machine:
    # D01 / B07: 2x RTX 2080 Ti, PCIe Gen3 x16 behind one PCIe switch (PIX), P2P not supported,
    # driver 550.90.07. Bus ids not printed: assumed.
    gpus = tuple(Gpu("NVIDIA GeForce RTX 2080 Ti", f"00000000:{b}:00.0", (3, 16), (3, 16), 0, 0, 6)
                 for b in ("3D", "3E"))
    return Machine("rtx2080ti-2", "D01_autodl_rtx2080ti_x2_topo.json, B07_autodl_rtx2080ti_x2_p2p.json",
                   "550.90.07", gpus, _square(2, SINGLE, 0), _square(2, False, False), _square(2, "PIX", "X"))


def _v100_station() -> Machine:
    # B02: NVIDIA DGX Station, 4x Tesla V100, every pair joined by NVLink 2 (P2P connectivity all 1; about
    # 97 GB/s both ways between any two, so two links a pair: NV2). One Xeon, PCIe Gen3 x16 (the V100's
    # link): assumed, as are the bus ids and the host bridge between them. NVLink is in `topo` only: the
    # NVML stand-in models NVLink through NVSwitches, so it answers NotSupported for these direct links.
    gpus = tuple(Gpu("Tesla V100-DGXS-32GB", f"00000000:{b}:00.0", (3, 16), (3, 16), 0, 2, 5)
                 for b in ("07", "08", "0E", "0F"))
    return Machine("v100-dgxstation-4", "B02_ugache_dgxstation_v100x4_p2p.json", "550.90.07", gpus,
                   _square(4, HOSTBRIDGE, 0), _square(4, True, False), _square(4, "NV2", "X"))


MACHINES = {m.name: m for m in (_h100(), _rtx4090(), _rtx2080ti(), _v100_station())}
DEFAULT = "h100-hgx-8"


def current() -> Machine:
    """The machine ``RINGLAB_GPUSIM_MACHINE`` names."""
    name = os.environ.get("RINGLAB_GPUSIM_MACHINE", DEFAULT)
    if name not in MACHINES:
        raise ValueError(f"RINGLAB_GPUSIM_MACHINE={name!r}: choose one of {', '.join(sorted(MACHINES))}")
    return MACHINES[name]


def visible() -> list[int]:
    """The machine's GPUs that CUDA shows, in CUDA's order: ``CUDA_VISIBLE_DEVICES`` lists indices
    (as the driver reads it, an entry that is not a valid index ends the list), unset shows all."""
    count = len(current().gpus)
    masked = os.environ.get("CUDA_VISIBLE_DEVICES")
    if masked is None:
        return list(range(count))
    shown: list[int] = []
    for entry in masked.split(","):
        entry = entry.strip()
        if not entry.isdigit() or int(entry) >= count or int(entry) in shown:
            break
        shown.append(int(entry))
    return shown
