"""NCCL's own model (ringlab.predict.nccl): its constants, its algorithms on rails and trees, its choice."""
import pytest

import ringlab as rl
from ringlab.measure import published
from ringlab.predict import tuning as T
from ringlab.predict.harness import Harness, gpus_per_process, harness
from ringlab.predict.nccl import LL_PCIE_SHARE, machine_facts, predict_nccl
from ringlab.topology import cluster, uniform

GB, US = 1e9, 1e-6
BIG = 1 << 40  # where latency is noise


def close(a, b, rel=1e-9):
    return a == pytest.approx(b, rel=rel)


def test_a_ring_across_nodes_runs_one_channel_per_nic():
    """2 x 8 H100: eight NDR rails at what the GPU's PCIe 5.0 path to its NIC carries (NCCL's rating, 48 GB/s of
    the NIC's 50), not one NIC; NVLink would allow 8/7 of the port (each GPU sends one channel in 8 to its NIC)."""
    two = rl.topology.preset("ib-2x8-h100")
    f = machine_facts(two)
    rail = min(50 * GB, rl.topology.pcie_bandwidth(5, 16) * 6 / (8 * 128 / 130))
    assert close(f.net, 8 * rail) and close(f.port, 18 * 20.6 * GB)
    assert close(predict_nccl("allreduce", BIG, two, "ring", "Simple").busbw, min(8 * rail, f.port * 8 / 7), 1e-4)
    one_nic = cluster("h100", 2, nics_per_node=1)
    assert close(predict_nccl("allreduce", BIG, one_nic, "ring", "Simple").busbw, rail, 1e-4)
    a100 = rl.topology.preset("ib-16x8-a100")  # HDR 200G behind PCIe 4.0: 24 GB/s a rail, 192 in all (nccl#812)
    assert close(predict_nccl("allreduce", BIG, a100, "ring", "Simple").busbw, 192 * GB, 1e-3)


def test_the_pipelined_ring_pays_the_network_latency_on_inter_node_steps_only():
    two = rl.topology.preset("ib-2x8-h100")
    p = predict_nccl("allreduce", 8, two, "ring", "LL")
    steps, crossing = 2 * 15, 2 * (2 - 1)
    intra = max(T.HW_LATENCY["nvlink"]["ring"]["LL"], T.NET_OVERHEAD["intel"])
    assert close(p.latency, T.BASE_LATENCY["ring"]["LL"] + (steps - crossing) * intra
                 + crossing * T.HW_LATENCY["net"]["ring"]["LL"])
    one = predict_nccl("allreduce", 8, rl.topology.preset("hgx-h100-8"), "ring", "LL")
    assert close(one.latency, T.BASE_LATENCY["ring"]["LL"] + 14 * T.HW_LATENCY["nvlink"]["ring"]["LL"])


def test_a_network_plugin_adds_the_latency_it_reports_to_every_network_step():
    """AWS's EFA plugin reports 35 us (P5en, P6-B200), NCCL's InfiniBand transport 0: NCCL adds it to each
    inter-node step of the ring and each level of the tree, twice for Simple (the flush)."""
    efa, ib = cluster("b200", 4, fabric="efa"), cluster("b200", 4, fabric="ib")
    assert T.NET_LATENCY["efa"] == 35 * US and T.NET_LATENCY["ib"] == 0
    for algorithm, protocol, crossings in (("ring", "LL", 2 * 3), ("ring", "Simple", 2 * 3), ("tree", "LL", 2 * 2),
                                           ("tree", "LL128", 2 * 2), ("nvlstree", "Simple", 2 * 2)):
        gap = (predict_nccl("allreduce", 1 << 20, efa, algorithm, protocol).latency
               - predict_nccl("allreduce", 1 << 20, ib, algorithm, protocol).latency)
        ring_plateau = T.RING_PLATEAU["ampere+"] if (algorithm, protocol) == ("ring", "Simple") else 1
        per_step = 35 * US * (2 if protocol == "Simple" else 1)
        assert close(gap, crossings * per_step * ring_plateau), (algorithm, protocol)


def test_the_tree_is_log_depth_across_nodes_and_meets_the_published_small_size_time():
    a100 = rl.topology.preset("ib-16x8-a100")
    p = predict_nccl("allreduce", 4, a100, "tree", "LL")
    assert close(p.latency, T.BASE_LATENCY["tree"]["LL"] + 2 * (7 * T.HW_LATENCY["nvlink"]["tree"]["LL"]
                                                                 + 4 * T.HW_LATENCY["net"]["tree"]["LL"]))
    # 16 nodes x 8 A100: 58.2 us for 4 bytes, published (A08); the flat ring would pay 254 steps
    assert 0.9 < p.seconds / 58.2e-6 < 1.1
    assert predict_nccl("allreduce", 4, a100).algorithm == "tree"
    assert predict_nccl("allreduce", 4, a100, "ring").seconds > 2 * p.seconds


def test_nvls_efficiency_is_the_generations():
    for name, eff in (("hgx-h100-8", 0.85), ("hgx-b200-8", 0.74)):
        topo = rl.topology.preset(name)
        got = predict_nccl("allreduce", BIG, topo, "nvls").busbw
        assert close(got, 2 * 7 / 9 * machine_facts(topo).port * eff, 1e-4)
    with pytest.raises(ValueError, match="nvls cannot run allreduce on hgx-a100-8: its switches cannot add"):
        predict_nccl("allreduce", 1 << 20, rl.topology.preset("hgx-a100-8"), "nvls")


def test_nvls_inside_one_host_pays_its_pipeline_and_the_loops_of_smaller_chunks():
    """8 H100s: 16 NVLS channels x 8 heads; NCCL's chunk is 128K from 1 GiB, 64K from 64 MiB, 32K from 8 MiB,
    16K below; three stages, so two loops (or twice the call, where it is less than a loop) of transfer, and a
    Simple NVLink step (3.4 us) for each loop beyond those of 128K chunks."""
    h100 = rl.topology.preset("hgx-h100-8")
    assert T.NVLS_LOOP_SYNC == 3.4 * US
    for size, chunk in ((1 << 30, 128 << 10), ((1 << 30) - 1, 64 << 10), (64 << 20, 64 << 10),
                        ((64 << 20) - 1, 32 << 10), (8 << 20, 32 << 10), ((8 << 20) - 1, 16 << 10)):
        assert T.nvls_chunk(size, 16 * 8) == chunk
        p = predict_nccl("allreduce", size, h100, "nvls")
        loop = 128 * chunk
        assert close(p.fill, 2 * min(size, loop) / p.algbw + size / loop * (1 - chunk / (128 << 10)) * 3.4 * US)
        assert close(p.seconds, p.latency + p.fill + size / p.algbw) and close(p.tuner_seconds, p.seconds - p.fill)
    small = predict_nccl("allreduce", 1 << 20, h100, "nvls")  # less than a loop (2 MiB): twice the call
    assert close(small.fill, 2 * small.nbytes / small.algbw + 0.5 * 7 / 8 * 3.4 * US)
    # B200: 24 channels, so its chunk halves at 96 MiB
    assert T.nvls_chunk(96 << 20, 24 * 8) == 64 << 10 and T.nvls_chunk((96 << 20) - 1, 24 * 8) == 32 << 10
    # the step at 1 GiB, where the chunk doubles: predicted as published on 8x H100 (A05: 438.5 -> 466.4 GB/s)
    at = {s: predict_nccl("allreduce", s, h100, "nvls").busbw for s in (512 << 20, 1 << 30)}
    a05 = {r["bytes"]: r["inplace_busbw_Bps"] for r in
           published.load("A05_azure_nd_h100_v5_8xh100_allreduce_busbw").data["rows"]}
    for step in (at[1 << 30] / at[512 << 20], a05[1 << 30] / a05[512 << 20]):
        assert 1.04 < step < 1.09
    # not one host: NVL72 spans 18; not NVLS, not allreduce: nothing
    assert predict_nccl("allreduce", 8 << 20, rl.topology.preset("gb200-nvl72"), "nvls").fill == 0
    assert predict_nccl("allreduce", 8 << 20, h100, "ring", "Simple").fill == 0
    assert predict_nccl("allreduce", 8 << 20, cluster("h100", 2), "nvlstree").fill == 0


def test_on_aws_the_efa_plugins_nvls_chunk_moves_the_step_to_where_the_p6_sweep_shows_it():
    """AWS's EFA plugin sets NCCL_NVLS_CHUNKSIZE=512K: on 8 B200s (24 channels x 8 heads) NCCL then runs 512K
    chunks from 6 GiB and 64K below, where its own 128K default would switch at 1.5 GiB. The published P6-B200
    sweep (A42) steps between 4 and 8 GiB, not between 1 and 2."""
    assert T.NVLS_CHUNK_BY_FABRIC["efa"] == 512 << 10
    six = 6 << 30  # 64 x (24 channels x 8 heads) x 512 KiB
    assert T.nvls_chunk(six, 24 * 8, 512 << 10) == 512 << 10 and T.nvls_chunk(six - 1, 24 * 8, 512 << 10) == 64 << 10
    assert T.nvls_chunk(2 << 30, 24 * 8) == 128 << 10 and T.nvls_chunk(2 << 30, 24 * 8, 512 << 10) == 64 << 10
    aws, plain = rl.topology.preset("efa-1x8-b200"), rl.topology.preset("hgx-b200-8")
    assert aws.machine.fabric == "efa" and aws.name == cluster("b200", 1, fabric="efa").name == "efa-1x8-b200"
    assert "aws-ofi-nccl" in aws.source

    def step(topology, small, large):
        return (predict_nccl("allreduce", large, topology, "nvls").busbw /
                predict_nccl("allreduce", small, topology, "nvls").busbw)

    a42 = {r["bytes"]: r["busbw_Bps"] for r in
           published.load("A42_mlengineering_b200x8_p6_1node_allreduce_bench_busbw").data["rows"]}
    assert a42[8 << 30] / a42[4 << 30] > 1.10 and a42[2 << 30] / a42[1 << 30] < 1.03  # published
    assert step(aws, 4 << 30, 8 << 30) > 1.07 and step(aws, 1 << 30, 2 << 30) < 1.03  # predicted, on AWS
    assert step(plain, 4 << 30, 8 << 30) < 1.03 and step(plain, 1 << 30, 2 << 30) > 1.03  # NCCL's default chunk
    # below 1.5 GiB both run the same chunks: the same prediction
    assert close(predict_nccl("allreduce", 1 << 30, aws).seconds, predict_nccl("allreduce", 1 << 30, plain).seconds)
    # across hosts the one-node pipeline is not modelled, plugin or not
    assert predict_nccl("allreduce", 8 << 30, rl.topology.preset("efa-4x8-b200"), "nvlstree").fill == 0


def test_nccl_picks_by_its_tuners_model_not_by_what_the_call_then_costs():
    h100 = rl.topology.preset("hgx-h100-8")
    for size in (2 << 20, 8 << 20, 64 << 20):
        options = [predict_nccl("allreduce", size, h100, a, p) for a, p in
                   (("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("tree", "LL128"), ("nvls", "Simple"))]
        picked = predict_nccl("allreduce", size, h100)
        assert picked.tuner_seconds == min(o.tuner_seconds for o in options)
    # at 8 MiB the tuner's NVLS (25 us + transfer) beats LL128's ring, though its pipeline start-up then costs more
    eight = predict_nccl("allreduce", 8 << 20, h100)
    ll128 = predict_nccl("allreduce", 8 << 20, h100, "ring", "LL128")
    assert eight.algorithm == "nvls" and eight.tuner_seconds < ll128.tuner_seconds < eight.seconds


def test_ll_is_capped_by_nccl_and_over_pcie_by_its_writes():
    h100 = rl.topology.preset("hgx-h100-8")  # LL: half the port would be 185 GB/s; NCCL caps it at 141 on Hopper
    assert close(predict_nccl("allreduce", BIG, h100, "ring", "LL").busbw, T.LL_MAX_BW["hopper"][0], 1e-4)
    box = rl.topology.preset("rtx4090-8-p2p-on")  # 8 data bytes of every 16-byte store + a 26-byte PCIe header
    assert close(LL_PCIE_SHARE, 8 / 42)
    assert close(predict_nccl("allreduce", BIG, box, "ring", "LL").busbw, 31.5077e9 * LL_PCIE_SHARE, 1e-3)
    assert close(predict_nccl("allreduce", BIG, box, "ring", "Simple").busbw, 24 * GB, 1e-3)


def test_ll128_runs_over_nvlink_and_across_nodes_from_hopper_on():
    assert predict_nccl("allreduce", 1 << 24, rl.topology.preset("ib-2x8-h100"), "ring", "LL128").protocol == "LL128"
    for name in ("rtx4090-8-p2p-on", "ib-16x8-a100"):
        with pytest.raises(ValueError, match="does not run ring with LL128.*NVLink"):
            predict_nccl("allreduce", 1 << 24, rl.topology.preset(name), "ring", "LL128")


def test_nccls_choice_moves_with_size_and_machine():
    def picked(name, size):
        p = predict_nccl("allreduce", size, rl.topology.preset(name))
        return p.algorithm, p.protocol

    assert picked("hgx-h100-8", 1 << 10) == ("ring", "LL") and picked("hgx-h100-8", 1 << 30) == ("nvls", "Simple")
    assert picked("hgx-a100-8", 1 << 30) == ("ring", "Simple")
    assert picked("ib-2x8-h100", 1 << 10)[0] == "tree" and picked("ib-2x8-h100", 1 << 30)[0] == "nvlstree"
    forced = [predict_nccl("allreduce", 1 << 30, rl.topology.preset("ib-2x8-h100"), a).seconds
              for a in ("ring", "tree", "nvlstree")]
    assert predict_nccl("allreduce", 1 << 30, rl.topology.preset("ib-2x8-h100")).seconds == min(forced)


def test_nvlstree_sends_each_gpus_shard_through_its_own_nic():
    """Two nodes: a NIC carries K/G each way, so the network allows G x a rail of algbw; NVLS inside allows
    port x eff x G/(G+1); past two nodes the tree's inner nodes move twice that over the network."""
    two = rl.topology.preset("ib-2x8-h100")
    f = machine_facts(two)
    inside = f.port * 0.85 * 8 / 9
    assert close(predict_nccl("allreduce", BIG, two, "nvlstree").algbw, min(inside, f.net))
    thin = cluster("h100", 4, nic_gbps=100)
    assert close(predict_nccl("allreduce", BIG, thin, "nvlstree").algbw, machine_facts(thin).net / 2)


def test_pat_and_collnet_need_their_machines():
    spread = cluster("h100", 64, gpus_per_node=1)  # log-depth beats 63 network steps of the ring
    assert predict_nccl("allgather", 1 << 10, spread).algorithm == "pat"
    assert predict_nccl("allgather", 1 << 10, cluster("h100", 4, gpus_per_node=1)).algorithm == "ring"
    with pytest.raises(ValueError, match="pat cannot run allgather on ib-2x8-h100: PAT needs one GPU per node"):
        predict_nccl("allgather", 1 << 10, rl.topology.preset("ib-2x8-h100"), "pat")
    with pytest.raises(ValueError, match="collnet cannot run allreduce on ib-2x8-h100: .*sharp=True"):
        predict_nccl("allreduce", 1 << 30, rl.topology.preset("ib-2x8-h100"), "collnet")
    sharp = cluster("h100", 2, sharp=True)
    assert predict_nccl("allreduce", 1 << 30, sharp, "collnet").algbw == min(
        machine_facts(sharp).port * 0.85 * 8 / 9, machine_facts(sharp).net)


def test_reduction_overlaps_the_transfer():
    """A GPU adds while it copies: the slower of the two bounds the ring, not their sum."""
    link, adds = 10 * GB, 3 * GB
    topo = uniform(4, link, 0.0, reduce_rate=adds)
    p = predict_nccl("allreduce", BIG, topo, "ring", "Simple")
    assert close(p.algbw, min(link * 4 / 6, adds * 4 / 3))
    assert close(predict_nccl("allgather", BIG, topo, "ring", "Simple").algbw, link * 4 / 3)  # nothing to add


def test_the_benchmark_adds_what_it_times():
    assert gpus_per_process("./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8") == 8
    assert gpus_per_process(None, "# nThread 1 nGpus 2 minBytes 8") == 2 and gpus_per_process("mpirun -np 16 x") == 1
    g8, torch = harness("nccl-tests", 8), harness("all_reduce_bench.py")
    assert g8.seconds(1e-6) == g8.floor and g8.seconds(1.0) == 1.0  # a floor: launches overlap the GPUs' work
    assert torch.seconds(1.0) == 1.0 + torch.added  # the host's issue time passes between the two events
    assert harness().seconds(1e-6) == 1e-6 and isinstance(harness(), Harness)
    with pytest.raises(ValueError, match="unknown benchmark 'osu'"):
        harness("osu")


def test_bad_requests_say_what_is_wrong():
    h100 = rl.topology.preset("hgx-h100-8")
    with pytest.raises(ValueError, match="unknown algorithm 'dbtree'; NCCL's are: ring, tree"):
        predict_nccl("allreduce", 1024, h100, "dbtree")
    with pytest.raises(ValueError, match="unknown protocol 'll'"):
        predict_nccl("allreduce", 1024, h100, protocol="ll")
    with pytest.raises(ValueError, match="not 'gather'"):
        predict_nccl("gather", 1024, h100)
    with pytest.raises(ValueError, match="9 ranks: topology hgx-h100-8 has 8"):
        predict_nccl("allreduce", 1024, h100, nranks=9)
    assert rl.predict_nccl is predict_nccl


def test_nvls_all_gather_and_reduce_scatter_carry_the_whole_buffer_through_each_port_and_stay_inside_a_node():
    from ringlab.predict import predict_nccl
    from ringlab.predict.nvls import port_rate
    from ringlab.predict.tuning import NVLS_EFFICIENCY
    from ringlab.topology import preset
    node, size = preset("hgx-h100-8"), 1 << 32
    port = port_rate(node)
    for collective in ("allgather", "reduce_scatter"):
        nvls = predict_nccl(collective, size, node, algorithm="nvls")
        # K through the port one way at NCCL's NVLS efficiency: busbw (n-1)/n of that (nccl-tests' definition)
        assert nvls.busbw == pytest.approx(port * NVLS_EFFICIENCY["hopper"] * 7 / 8, rel=0.01)
        assert predict_nccl(collective, size, node).algorithm == "ring"  # as 8 H200s ran them (published A19)
        with pytest.raises(ValueError, match="across nodes need a CollNet plugin"):
            predict_nccl(collective, size, preset("ib-2x8-h100"), algorithm="nvls")
        with pytest.raises(ValueError, match="switches cannot add"):
            predict_nccl(collective, size, preset("hgx-a100-8"), algorithm="nvls")
        with pytest.raises(ValueError, match="at most 32 GPUs of a node"):  # NCCL_MAX_NVLS_ARITY: 72 GPUs, no NVLS
            predict_nccl(collective, size, preset("gb200-nvl72"), algorithm="nvls")
