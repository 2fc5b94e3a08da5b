import numpy as np
import pytest

import ringlab as rl
from ringlab.topology.presets import NVLINK1, NVLINK2, PCIE3_X16, QPI, RATINGS
from ringlab.predict.rings import best_ring, ring_report, ring_time_per_byte
from ringlab.topology import from_matrix, preset_names, uniform


def test_presets_have_published_sources_and_assumed_latencies():
    for name in preset_names():
        topo = rl.topology.preset(name)
        assert topo.name == name and topo.nranks in (2, 4, 8, 16, 32, 72, 128)
        assert "published" in topo.source or "public" in topo.source
        assert "assumed" in topo.notes
    with pytest.raises(ValueError, match="unknown topology preset 'dgx3'"):
        rl.topology.preset("dgx3")


def test_the_machines_of_the_published_sweeps_have_presets():
    names = set(preset_names())
    assert {"hgx-a100-8", "hgx-h100-8", "hgx-h200-8", "h100-pcie-nvlink-2", "rtx4090-8-p2p-off", "rtx4090-8-p2p-on",
            "pcie3-switch-2", "pcie3-switch-2-p2p-off", "ib-2x8-h100", "ib-16x8-h100"} <= names
    assert rl.topology.preset("ib-16x8-h100").nranks == 128 and rl.topology.preset("ib-2x8-h100").nranks == 16


def test_links_are_rated_as_nccl_rates_them():
    """NVLink and PCIe carry NCCL's ratings (src/graph/topo.h): an H100 NVLink 20.6 of 25 GB/s, PCIe 3.0 x16
    12 of 15.754; the peak stays the link's bandwidth, the rate is what the cost model uses."""
    h100 = rl.topology.preset("hgx-h100-8")
    assert h100.links[0].bandwidth == 450e9 and h100.links[0].rate == pytest.approx(18 * 20.6e9)
    pcie = rl.topology.preset("pcie3-switch-4").links[0]
    assert pcie.bandwidth == PCIE3_X16 and pcie.rate == pytest.approx(12e9)
    assert rl.topology.preset("rtx4090-8-p2p-on").links[0].rate == pytest.approx(24e9)  # 4.0 x16: 24 GB/s
    assert "NCCL" in h100.notes or "NCCL" in h100.source or "rating" in h100.notes
    assert h100.switch_reduce and not rl.topology.preset("hgx-a100-8").switch_reduce
    assert uniform(4, 1e9, 0.0).links[0].rate == 1e9  # models are taken at their word


def test_p2p_off_stages_through_host_memory():
    """Without peer access a copy goes up to host memory and back down: on the 2-GPU switch box both
    directions of the switch's one uplink, which is half-duplex."""
    off, on = rl.topology.preset("pcie3-switch-2-p2p-off"), rl.topology.preset("pcie3-switch-2")
    assert len(on.route(0, 1)) == 2  # gpu0 -> switch -> gpu1
    up_and_down = off.route(0, 1)
    assert len(up_and_down) == 4
    uplink = next(i for i, link in enumerate(off.links) if link.b == "host-memory")
    assert {2 * uplink, 2 * uplink + 1} <= set(up_and_down)
    assert not off.links[uplink].duplex and on.links[0].duplex
    p2p_off = rl.topology.preset("rtx4090-8-p2p-off")
    assert all(not link.duplex for link in p2p_off.links if link.kind == "host")


def test_half_duplex_and_via_are_checked():
    from ringlab.topology import Link, Topology

    with pytest.raises(ValueError, match="efficiency in"):
        Topology("t", ("a", "b"), (Link("a", "b", 1e9, 0.0, "pcie", efficiency=1.5),))
    with pytest.raises(ValueError, match="via node 'memory' is not in the topology"):
        Topology("t", ("a", "b"), (Link("a", "b", 1e9, 0.0),), via="memory")


def test_pcie_arithmetic_behind_the_presets():
    assert PCIE3_X16 == pytest.approx(8e9 * 128 / 130 * 16 / 8, rel=1e-3)  # 8 GT/s, 128b/130b, x16
    assert QPI * 2 == pytest.approx(25.6e9)


def test_dgx1_links():
    v100 = rl.topology.preset("dgx1-v100")
    links_per_gpu = {g: 0 for g in v100.ranks}
    for link in v100.links:
        if link.kind == "nvlink":
            count = round(link.bandwidth / NVLINK2)
            assert count in (1, 2)  # at most 2 NVLinks between a pair
            links_per_gpu[link.a] += count
            links_per_gpu[link.b] += count
    assert set(links_per_gpu.values()) == {6}
    p100 = rl.topology.preset("dgx1-p100")
    matrix = p100.bandwidth_matrix()
    assert matrix[0, 1] == NVLINK1 and matrix[3, 7] == NVLINK1
    assert matrix[3, 4] == NVLINK1  # no direct link: two NVLink hops, still NVLink speed
    assert len(p100.route(3, 4)) == 2 and len(p100.route(3, 7)) == 1


def test_routes_prefer_the_fast_path_and_cross_qpi_between_sockets():
    topo = rl.topology.preset("dual-socket-qpi-8")
    kinds = [topo.links[c // 2].kind for c in topo.route(0, 7)]
    assert kinds == ["pcie", "pcie", "qpi", "pcie", "pcie"]
    assert [topo.links[c // 2].kind for c in topo.route(0, 1)] == ["pcie", "pcie"]  # same switch


def test_uniform_and_from_matrix():
    u = uniform(5, bandwidth=2e9, latency=1e-6)
    assert u.route(1, 3) == (2, 7)
    m = from_matrix([[0, 5e9, 0], [5e9, 0, 1e9], [0, 1e9, 0]], latency=1e-6)
    assert len(m.links) == 2 and m.bandwidth_matrix()[0, 2] == 1e9
    with pytest.raises(ValueError, match="no path from rank0 to rank2"):
        from_matrix([[0, 1, 0], [1, 0, 0], [0, 0, 0]]).route(0, 2)


def test_best_ring_on_dgx1_uses_double_links_and_beats_the_plain_order():
    v100 = rl.topology.preset("dgx1-v100")
    order, per_byte = best_ring(v100)
    assert sorted(order) == list(range(8)) and order[0] == 0
    assert per_byte == pytest.approx(1 / (2 * NVLINK2 * RATINGS["nvlink-v100"]))  # every edge a double NVLink
    report = ring_report(v100)
    assert report["slowdown_of_plain"] > 1.5  # 0..7 crosses 3->4 and 7->0 over single or no links
    p100 = ring_report(rl.topology.preset("dgx1-p100"))
    assert p100["slowdown_of_plain"] == pytest.approx(2.0, rel=0.01)


def test_dual_socket_plain_order_is_already_best_but_a_scramble_is_not():
    topo = rl.topology.preset("dual-socket-qpi-8")
    assert ring_report(topo)["slowdown_of_plain"] == pytest.approx(1.0)
    scrambled = [0, 4, 1, 5, 2, 6, 3, 7]  # crosses QPI eight times
    assert ring_time_per_byte(scrambled, topo) == pytest.approx(4 / (QPI * RATINGS["qpi"]))


@pytest.mark.parametrize("seed", range(4))
def test_ring_search_above_the_exhaustive_limit_finds_a_hidden_fast_ring(seed):
    n = 12
    order = np.random.default_rng(seed).permutation(n)
    matrix = np.full((n, n), 1e9)
    for a, b in zip(order, np.roll(order, -1)):
        matrix[a, b] = matrix[b, a] = 10e9
    topo = from_matrix(matrix)
    assert ring_time_per_byte(list(range(n)), topo) > 1 / 10e9  # the plain order shares fast links
    found, per_byte = best_ring(topo)
    assert sorted(found) == list(range(n))
    assert per_byte == pytest.approx(1 / 10e9)


def test_peer_bandwidth_matrix_takes_the_direct_link_and_never_relays_through_a_gpu():
    from ringlab.topology.presets import pcie_bandwidth

    bridged = rl.topology.preset("h100-pcie-nvlink-2").peer_bandwidth_matrix()
    assert bridged[0, 1] == bridged[1, 0] == 300e9  # the NVLink bridge, not the PCIe path
    v100 = rl.topology.preset("dgx1-v100")
    peer = v100.peer_bandwidth_matrix()
    linked = {(v100.ranks.index(l.a), v100.ranks.index(l.b)): l.bandwidth for l in v100.links
              if l.a in v100.ranks and l.b in v100.ranks}
    for (a, b), bandwidth in linked.items():
        assert peer[a, b] == peer[b, a] == bandwidth
    unlinked = [(a, b) for a in range(8) for b in range(8) if a != b and (a, b) not in linked and (b, a) not in linked]
    assert unlinked and all(peer[a, b] <= pcie_bandwidth(3, 16) for a, b in unlinked)  # over PCIe, not NVLink hops


def test_best_gpus_picks_the_subset_whose_slowest_pair_is_fastest():
    from ringlab.predict.rings import best_gpus

    matrix = np.full((6, 6), 10.0)
    for a, b in ((1, 3), (3, 4), (1, 4)):
        matrix[a, b] = matrix[b, a] = 50.0
    matrix[1, 3] = 40.0  # one direction slower: the pair counts at its slower one
    matrix[4, 1] = 45.0
    assert best_gpus(matrix, 3) == ([1, 3, 4], 40.0)
    assert best_gpus(matrix, 2) == ([3, 4], 50.0)
    with pytest.raises(ValueError, match="count must be from 2 to the 6 GPUs"):
        best_gpus(matrix, 7)
    with pytest.raises(ValueError, match="must be square"):
        best_gpus(matrix[:5], 2)


def test_cluster_builds_nodes_of_nvlink_domains_joined_by_nics():
    from ringlab.topology import cluster, pcie_bandwidth

    two = cluster("h100", 2)
    assert two.name == "ib-2x8-h100" and two.nranks == 16 and two.machine.nics_per_node == 8
    assert two.machine.arch == "hopper" and two.switch_reduce and two.machine.nic_bandwidth == 50e9
    gpu_nic = {link.b: link for link in two.links if link.a == "gpu9" and link.kind == "pcie"}
    assert list(gpu_nic) == ["nic9"] and gpu_nic["nic9"].bandwidth == pcie_bandwidth(5, 16)
    a100 = rl.topology.preset("ib-16x8-a100")  # A100 is a PCIe 4.0 device
    assert {link.bandwidth for link in a100.links if link.kind == "pcie"} == {pcie_bandwidth(4, 16)}
    assert a100.machine.nic_bandwidth == 25e9 and not a100.switch_reduce
    shared = cluster("h100", 2, nics_per_node=2, fabric="roce")
    nics = {link.b for link in shared.links if link.kind == "pcie"}
    assert shared.name == "roce-2x8-h100-2nic" and nics == {"nic0", "nic1", "nic2", "nic3"}
    assert {link.kind for link in shared.links} == {"nvswitch", "pcie", "roce"}
    rack = rl.topology.preset("gb200-nvl72")
    assert rack.nranks == 72 and rack.machine.arch == "blackwell" and rack.links[0].rate == pytest.approx(18 * 40.1e9)
    assert rl.topology.preset("hgx-h100-8").machine == cluster("h100", 1).machine
    assert cluster("b200", 1, nvls=False).name == "hgx-b200-8-nvls-off" and not cluster("b200", 1, nvls=False).switch_reduce


def test_cluster_refuses_what_it_cannot_build():
    from ringlab.topology import cluster

    with pytest.raises(ValueError, match="unknown gpu 'v100'; known: a100, h100, h200, b200, gb200"):
        cluster("v100", 2)
    with pytest.raises(ValueError, match="unknown fabric 'tcp'; known: ib, roce, efa"):
        cluster("h100", 2, fabric="tcp")
    with pytest.raises(ValueError, match="nics_per_node must be from 1 to the 8 GPUs of a node, got 9"):
        cluster("h100", 2, nics_per_node=9)
    with pytest.raises(ValueError, match="nodes must be >= 1, got 0"):
        cluster("h100", 0)


def test_every_multi_node_preset_is_a_cluster_of_its_description():
    from ringlab.topology.machines import GPUS, variant

    multi = [rl.topology.preset(name) for name in preset_names() if rl.topology.preset(name).machine.nodes > 1]
    assert {t.name for t in multi} >= {"ib-2x4", "ib-2x8-h100", "ib-16x8-a100", "ib-2x64-gb200"}
    for topo in multi:
        assert topo.machine.gpu in GPUS and variant(topo).links == topo.links  # rebuilt from its Machine alike
    box = rl.topology.preset("ib-2x4")  # GPUs without NVLink: one PCIe 3.0 switch a node, its NIC behind it
    assert box.machine.intra == "pcie" and len(box.route(0, 4)) == 6  # gpu, switch, nic, fabric, nic, switch
