"""NVML discovery on the stand-in for NVML (tests/gpusim/pynvml.py), answering from real machines'
tables: the Topology found must be what `nvidia-smi topo -m` printed for the same box, and GPU i
must be CUDA device i however CUDA_VISIBLE_DEVICES picks and orders them."""
import json

import numpy as np
import pytest

from gpusim_support import SCRIPTS, run_python
from ringlab.measure import published
from ringlab.topology.codes import topology_from_codes
from ringlab.topology.presets import nvlink_per_link, pcie_bandwidth

pytestmark = pytest.mark.gpusim


def discover(machine: str, **env) -> dict:
    done = run_python([str(SCRIPTS / "gpusim_discover.py")], machine=machine, **env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def published_gpu_codes(name: str) -> list[list[str]]:
    """The GPU-to-GPU codes of a shipped `nvidia-smi topo -m` (the published data set)."""
    return published.load(name).data["codes"]


@pytest.mark.parametrize("machine, topo, pcie", [
    ("rtx2080ti-2", "D01_autodl_rtx2080ti_x2_topo", (3, 16)),
    ("rtx4090-8", "D02_chlc_rtx4090x8_topo", (4, 16)),
])
def test_discovered_pcie_boxes_match_their_published_topo_matrix(machine, topo, pcie):
    found = discover(machine)
    codes = published_gpu_codes(topo)
    assert found["facts"]["codes"] == codes
    assert found["facts"]["nvlink_version"] == 0  # NVLink queries answered NotSupported: no links invented
    assert all(g["pcie_max"] == list(pcie) for g in found["facts"]["gpus"])
    expected = topology_from_codes(codes, pcie=pcie_bandwidth(*pcie)).bandwidth_matrix()
    np.testing.assert_allclose(found["bandwidth"], expected)
    assert all(cell.startswith("no") for i, row in enumerate(found["facts"]["p2p_read"])
               for j, cell in enumerate(row) if i != j)  # both boxes: P2P not supported (B05, B07)


def test_discovered_h100_box_is_nv18_everywhere_over_nvswitch():
    found = discover("h100-hgx-8")
    facts = found["facts"]
    assert facts["driver"] == "595.71.05" and facts["nvlink_version"] == 4
    assert {g["name"] for g in facts["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    codes = [["X" if i == j else "NV18" for j in range(8)] for i in range(8)]
    assert facts["codes"] == codes  # 18 links to the switches each, past-the-end link indices ignored
    expected = topology_from_codes(codes, pcie=pcie_bandwidth(5, 16), nvlink_rate=nvlink_per_link(4, True))
    np.testing.assert_allclose(found["bandwidth"], expected.bandwidth_matrix())
    assert all(cell == "OK" for i, row in enumerate(facts["p2p_read"]) for j, cell in enumerate(row) if i != j)


def test_gpu_i_is_cuda_device_i_whatever_cuda_visible_devices_says():
    found = discover("h100-hgx-8", CUDA_VISIBLE_DEVICES="3,1")
    facts = found["facts"]
    assert facts["cuda_to_nvml"] == [3, 1]
    assert [g["bus"] for g in facts["gpus"]] == ["00000000:5D:00.0", "00000000:3B:00.0"]  # NVML's GPUs 3 and 1
    assert facts["codes"] == [["X", "NV18"], ["NV18", "X"]]
    assert len(found["bandwidth"]) == 2


def test_each_rank_discovers_the_gpu_it_will_use():
    found = discover("rtx4090-8", CUDA_VISIBLE_DEVICES="6")
    assert [g["bus"] for g in found["facts"]["gpus"]] == ["00000000:C1:00.0"] and found["facts"]["codes"] == [["X"]]
