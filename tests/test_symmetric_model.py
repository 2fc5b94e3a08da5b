"""NCCL's model of its symmetric-memory allreduce kernels (ringlab.predict.symmetric): its constants give the
values of NCCL's formula worked out by hand, its pick between one-shot and two-shot is NCCL's, rl.predict uses it
for allreduce.oneshot and allreduce.twoshot on one NVLink host, and the link walk is unchanged everywhere else."""
import numpy as np
import pytest

import ringlab as rl
from ringlab.predict import symmetric as S
from ringlab.predict.costmodel import crossover as predicted_crossover
from ringlab.topology import cluster, preset, uniform

# NCCL's units: microseconds, and bytes per microsecond with GBps = 2^30 / 1e6 = 1073.741824.
# Hopper (cudaArch < 1000): smBw = 65 GBps = 69793.21856, peakBw = 320 GBps = 343597.38368 (480 GBps =
# 515396.07552 for the multimem two-shot); softmin(x, c, s) = c - s log1p((e^(c/s) - 1) e^(-x/s)), with
# e^(320/65) = 137.4248: on 1 block bw = 68925.974, on 2 136414.828, on 7 335413.953, on 64 343597.384 (the peak).


def test_one_shot_at_1_kib_on_8_hopper_gpus():
    # busBytes = nRanks x nBytes x 9 = 8 x 1024 x 9 = 73728; baseLat (LL) = 4.5
    # 64 blocks: 73728 / 343597.384 = 0.214576, softplus(0.214576 - 1) = log1p(e^-0.785423) = 0.375643 -> 4.875643
    # fewest blocks within 2.5% of that (<= 4.997534): 1 block 73728 / 68925.974 = 1.069669,
    #   softplus(0.069669) = 0.728588 -> 5.228588, too slow; 2 blocks 73728 / 136414.828 = 0.540469,
    #   softplus(-0.459531) = log1p(e^-0.459531) = 0.489549 -> 4.989549 on 2 blocks
    got = S.kernel_time("AllReduce_AGxLL_R", 1024, 8, "hopper")
    assert (got.blocks, got.microseconds) == (2, pytest.approx(4.989549, rel=1e-6))


def test_two_shot_at_1_kib_and_16_mib_on_8_hopper_gpus():
    # busBytes = 2 x nBytes x (nRanks - 1) / nRanks = 2 x 1024 x 7 / 8 = 1792; baseLat = 7.8
    # 64 blocks: softplus(1792 / 343597.384 - 1) = log1p(e^-0.994785) = 0.314667 -> 8.114667 (x 1.025 = 8.317534)
    # 1 block: softplus(1792 / 68925.974 - 1) = log1p(e^-0.974001) = 0.320321 -> 8.120321, within: 1 block
    small = S.kernel_time("AllReduce_RSxLD_AGxST", 1024, 8, "hopper")
    assert (small.blocks, small.microseconds) == (1, pytest.approx(8.120321, rel=1e-6))
    # 16 MiB: busBytes = 2 x 16777216 x 7 / 8 = 29360128
    # 64 blocks: 29360128 / 343597.384 - 1 = 84.449219 (softplus of a large x is x) -> 92.249219 (x 1.025 = 94.555449)
    # 6 blocks (bw 323266.759): 7.8 + 89.823220 = 97.623220, too slow; 7 blocks: 29360128 / 335413.953 - 1
    #   = 86.534009 -> 94.334009 on 7 blocks
    large = S.kernel_time("AllReduce_RSxLD_AGxST", 16 << 20, 8, "hopper")
    assert (large.blocks, large.microseconds) == (7, pytest.approx(94.334009, rel=1e-6))


def test_multimem_two_shot_at_16_mib_on_8_hopper_gpus():
    # busBytes = nBytes / nRanks + nBytes = 2097152 + 16777216 = 18874368; busMultiplier = nRanks = 8;
    # most blocks divUp(16, 8) = 2; peak 480 GBps = 515396.076
    # 2 blocks: softmin(2 x 69793.219 x 8, 515396.076, 69793.219) = 515383.431; 18874368 / 515383.431 - 1
    #   = 35.621992 -> 43.421992 (x 1.025 = 44.507542); 1 block: bw 485256.171, 7.8 + 37.895678 = 45.695678: 2 blocks
    got = S.kernel_time("AllReduce_RSxLDMC_AGxSTMC", 16 << 20, 8, "hopper")
    assert (got.blocks, got.microseconds) == (2, pytest.approx(43.421992, rel=1e-6))


def test_blackwell_figures():
    # sm100: baseLat (LL allreduce) = 11, smBw = 55 GBps = 59055.800, peak 600 GBps = 644245.094; busBytes 73728
    # 64 blocks: softplus(73728 / 644245.094 - 1) = log1p(e^-0.885559) = 0.345350 -> 11.345350 (x 1.025 = 11.628983)
    # 1 block: bw 59053.944, softplus(0.248486) = 0.825088 -> 11.825088; 2 blocks: bw 118104.700,
    #   softplus(-0.375740) = 0.522822 -> 11.522822 on 2 blocks
    got = S.kernel_time("AllReduce_AGxLL_R", 1024, 8, "blackwell")
    assert (got.blocks, got.microseconds) == (2, pytest.approx(11.522822, rel=1e-6))
    assert S.symmetric_seconds("oneshot", 1024, 8, "blackwell") == pytest.approx(11.522822e-6, rel=1e-6)


def test_nccl_picks_one_shot_small_and_two_shot_large_on_8_hopper_gpus():
    # NCCL weighs time x (1 + 2.5% a block): 1 KiB one-shot 4.989549 x 1.05 = 5.239 against two-shot
    # 8.120321 x 1.025 = 8.323; 64 KiB one-shot 17.567968 on 7 blocks x 1.175 = 20.642 against two-shot
    # 8.416680 on 2 blocks x 1.05 = 8.838
    assert S.pick(1024, 8, "hopper").kernel == "AllReduce_AGxLL_R"
    assert S.pick(64 << 10, 8, "hopper") == S.Choice("AllReduce_RSxLD_AGxST", pytest.approx(8.416680, rel=1e-6), 2)
    # with NVLS the multicast kernels join in: LL through multicast (busMultiplier 1.1) wins the small sizes,
    # the switch's two-shot the large ones
    assert S.pick(1024, 8, "hopper", multimem=True).kernel == "AllReduce_AGxLLMC_R"
    assert S.pick(16 << 20, 8, "hopper", multimem=True).kernel == "AllReduce_RSxLDMC_AGxSTMC"
    # NCCL leaves LL kernels out from 2 GiB, and every kernel from 64 GiB
    assert S.allowed(2 << 30) == ["AllReduce_RSxLD_AGxST"]
    assert S.pick(64 << 30, 8, "hopper") is None


@pytest.mark.parametrize("nranks, multimem, size", [(8, False, 16887), (8, True, 16928), (4, False, 35393),
                                                     (4, True, 34147), (2, False, 71668)])
def test_crossover_is_where_nccl_switches_on_hopper(nranks, multimem, size):
    """About 17 KB at 8 ranks, 35 KB at 4, 72 KB at 2: research.md's figures from an independent re-implementation
    of NCCL's model (/tmp/p49/symmodel.py), to the byte."""
    assert S.crossover(nranks, "hopper", multimem) == size
    one = S.pick(size - 1, nranks, "hopper", multimem).kernel
    two = S.pick(size, nranks, "hopper", multimem).kernel
    assert S.KERNELS[one].shot == "allreduce.oneshot" and S.KERNELS[two].shot == "allreduce.twoshot"


def test_rl_predict_prices_the_kernels_on_an_8_gpu_h100_node():
    node = preset("hgx-h100-8")
    one, two = rl.build("allreduce.oneshot", 8), rl.build("allreduce.twoshot", 8)
    small = rl.predict(one, 1024, node)
    assert small.kernel == "AllReduce_AGxLL_R" and small.seconds == pytest.approx(4.989549e-6, rel=1e-6)
    assert small.steps["latency"][0] == pytest.approx(4.5e-6) and small.steps["bottleneck"][0] == -1
    large = rl.predict(two, 16 << 20, node)
    assert large.kernel == "AllReduce_RSxLD_AGxST" and large.seconds == pytest.approx(94.334009e-6, rel=1e-6)
    assert np.allclose(large.steps["latency"], 3.9e-6)  # 7.8 us over its two synchronisations
    assert large.steps["time"][0] == pytest.approx(large.steps["time"][1])
    # one-shot beats two-shot at small sizes, loses at large; by plain time (no block penalty) from ~22 KB
    for size in (256, 4096, 16 << 10):
        assert rl.predict(one, size, node).seconds < rl.predict(two, size, node).seconds
    for size in (32 << 10, 1 << 20, 256 << 20):
        assert rl.predict(one, size, node).seconds > rl.predict(two, size, node).seconds
    assert predicted_crossover("allreduce.oneshot", "allreduce.twoshot", node) == pytest.approx(22252, rel=0.01)
    # the same from cluster("h100", nodes=1); "auto" is what NCCL would run; both methods; no elements, no call
    same = cluster("h100", nodes=1)
    assert rl.predict(one, 1024, same, protocol="auto").seconds == small.seconds
    assert rl.predict(one, 1024, same, method="explicit").seconds == small.seconds
    assert rl.predict(one, 3, node, itemsize=4).seconds == 0.0
    # four of the eight GPUs: the kernel's figures for 4 ranks
    four = rl.predict(rl.build("allreduce.oneshot", 4), 1024, node, rank_map=[1, 3, 5, 7])
    assert four.seconds == pytest.approx(S.symmetric_seconds("oneshot", 1024, 4, "hopper"))
    assert rl.predict(one, 1024, preset("hgx-b200-8")).seconds == pytest.approx(11.522822e-6, rel=1e-6)


def test_the_link_walk_everywhere_else():
    """Values computed before the symmetric model was added (same code path since)."""
    flat = uniform(8, 100e9, 5e-6)  # a CPU machine: no GPU generation
    # one-shot at 1 KiB: 7 latencies in a row and 7 KiB into each rank: 7 x 5e-6 + 7 x 1024 / 100e9
    before = {("oneshot", 1024): 3.5071680000000004e-05, ("oneshot", 1 << 20): 0.00010840032,
              ("oneshot", 256 << 20): 0.01882548192, ("twoshot", 1024): 7.001792000000001e-05,
              ("twoshot", 1 << 20): 8.835008000000001e-05, ("twoshot", 256 << 20): 0.00476762048}
    for (name, size), seconds in before.items():
        p = rl.predict(rl.build(f"allreduce.{name}", 8), size, flat)
        assert p.kernel is None and p.seconds == pytest.approx(seconds, rel=1e-12)
    assert before["oneshot", 1024] == pytest.approx(7 * 5e-6 + 7 * 1024 / 100e9, rel=1e-12)
    two_nodes = cluster("h100", nodes=2)
    assert rl.predict(rl.build("allreduce.oneshot", 16), 1024, two_nodes).seconds == pytest.approx(
        7.018442189054725e-05, rel=1e-12)
    assert rl.predict(rl.build("allreduce.twoshot", 16), 1 << 20, two_nodes).seconds == pytest.approx(
        0.00016272566766169152, rel=1e-12)
    # a ring protocol asked for on the NVLink node: the links, with NCCL's LL costs, as before
    node = preset("hgx-h100-8")
    ll = rl.predict(rl.build("allreduce.oneshot", 8), 1024, node, protocol="LL")
    assert ll.kernel is None and ll.seconds == pytest.approx(1.0845081456149672e-05, rel=1e-12)
    # not every pair on NVLink (hybrid cube-mesh, PCIe), or one NVLink domain over several hosts
    for name in ("dgx1-v100", "dual-socket-qpi-8", "rtx4090-8-p2p-on", "gb200-nvl72"):
        assert rl.predict(rl.build("allreduce.oneshot", 8), 1024, preset(name)).kernel is None, name
    # other algorithms keep the link walk on the node
    assert rl.predict(rl.build("allreduce.ring", 8), 1024, node).kernel is None
