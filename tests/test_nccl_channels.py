"""NCCL's channel count for a call (ringlab.predict.channels), worked by hand from NCCL's source, and its effect on
predict_nccl and on the published sweeps."""
import pytest

from ringlab.measure import published
from ringlab.predict import predict_nccl
from ringlab.predict.channels import call_channels, communicator_channels, graph_channels, search
from ringlab.topology import preset

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize("arch, port, found, graph, total", [
    ("ampere", 240.0, (6, 40.0), 12, 24),      # 12 links x 20 GB/s: 6 at 40, doubled at 20, doubled again
    ("hopper", 370.8, (6, 60.0), 12, 24),      # 18 x 20.6: 6 at 60 (360), doubled at 30 (60 >= 50), then 24
    ("hopper", 8 * 20.6, (4, 40.0), 8, 16),    # H800, 8 links: 4 at 40 (160 beats 2 x 60 and 3 x 50)
    ("blackwell", 721.8, (8, 90.0), 16, 32),
])
def test_communicator_channels_follow_nccls_search(arch, port, found, graph, total):
    # NCCL's logs print "24 coll channels" on 8 A100 (nccl-tests#100: "Channel 23/24") and on 8 H100 (p5), and
    # "16 coll channels" on 8 H800 (nccl#892)
    assert search(arch, port) == found
    assert graph_channels(arch, port) == graph
    assert communicator_channels(arch, port) == total


@pytest.mark.parametrize("nbytes, algorithm, protocol, nranks, used, threads", [
    (1 * MiB, "ring", "Simple", 8, 24, 512 + 32),   # 1 MiB >= 24 x 512 x 64 = 768 KiB: every channel, + sync warp
    (768 * KiB, "ring", "Simple", 8, 24, 544),
    (512 * KiB, "ring", "Simple", 8, 16, 544),      # 512 KiB < 17 x 32 KiB; not < 16 x 32 KiB
    (256 * KiB, "ring", "LL", 8, 8, 512),           # LL's threshold 8 x 8 ranks = 64 B a thread, as Simple's here
    (256 * KiB, "ring", "LL", 2, 24, 512),          # 2 ranks: 16 B a thread, 24 x 512 x 16 = 192 KiB <= 256 KiB
    (64 * KiB, "ring", "LL128", 8, 12, 640),        # 64 KiB / (640 x 8) = 12.8
    (16 * KiB, "ring", "Simple", 8, 1, 256 + 32),   # one channel, then threads halved once: 16 KiB = 256 x 64
    (1 * KiB, "ring", "LL", 8, 1, 96),              # halved to 64 threads (64 % 128 != 0 stops it), 3 warps at least
    (64 * KiB, "tree", "LL", 8, 16, 640),           # tree: no x ranks (64 KiB / (512 x 8) = 16); all threads always
])
def test_call_channels_by_hand(nbytes, algorithm, protocol, nranks, used, threads):
    got = call_channels(nbytes, algorithm, protocol, nranks, 24)
    assert (got.used, got.total, got.threads) == (used, 24, threads)


def test_pcie_rings_get_256_simple_threads():
    assert call_channels(64 * MiB, "ring", "Simple", 2, 2, ring_bw=12.0).threads == 256 + 32


def test_small_ring_call_runs_on_fewer_channels_at_their_share():
    topology = preset("hgx-a100-8")
    p = predict_nccl("allreduce", 256 * KiB, topology)
    assert (p.algorithm, p.protocol, p.channels, p.channels_total) == ("ring", "LL", 8, 24)
    assert p.seconds > p.tuner_seconds  # NCCL picked by its full-channel model
    assert p.rate == pytest.approx(p.channel_algbw) and p.channel_algbw < p.algbw
    # LL's cap is the whole GPU's: 8 of 24 channels get a third of the links' LL rate, which is under the cap
    full = predict_nccl("allreduce", 256 * KiB, topology, "ring", "LL")
    assert full.channel_algbw == pytest.approx(p.channel_algbw)
    # from 32 KiB to 512 KiB each channel added carries the same bytes: the call takes the same time
    times = [predict_nccl("allreduce", n * KiB, topology).seconds for n in (32, 64, 128, 256, 512)]
    assert max(times) == pytest.approx(min(times), rel=1e-9)


@pytest.mark.parametrize("preset_name", ["hgx-a100-8", "hgx-h100-8", "hgx-b200-8"])
def test_from_1_mib_a_ring_call_has_every_channel(preset_name):
    # 24 x 512 x 64 = 768 KiB on 8 A100 or H100, 32 x 512 x 64 = 1 MiB on 8 B200
    topology = preset(preset_name)
    for nbytes in (1 * MiB, 4 * MiB, 64 * MiB, 1 << 30):
        p = predict_nccl("allreduce", nbytes, topology, "ring")
        assert p.channels == p.channels_total and p.seconds == pytest.approx(p.tuner_seconds)


@pytest.mark.parametrize("preset_name", ["hgx-a100-8", "hgx-h100-8", "hgx-b200-8", "dgx2-nvswitch"])
def test_busbw_and_time_grow_with_size(preset_name):
    topology = preset(preset_name)
    runs = [predict_nccl("allreduce", 1 << k, topology) for k in range(10, 31)]
    assert all(a.busbw <= b.busbw for a, b in zip(runs, runs[1:]))
    assert all(a.seconds <= b.seconds for a, b in zip(runs, runs[1:]))


def test_channels_not_derived_elsewhere():
    # NVLS keeps its own channels; several nodes, PCIe and RCCL: NCCL's search is not followed, all channels
    assert predict_nccl("allreduce", 64 * KiB, preset("hgx-h100-8"), "nvls").channels == 0
    assert predict_nccl("allreduce", 64 * KiB, preset("ib-2x8-h100"), "ring").channels == 0
    assert predict_nccl("allreduce", 64 * KiB, preset("pcie3-switch-4"), "ring").channels == 0
    assert predict_nccl("allreduce", 64 * KiB, preset("mi300x-8"), "ring").channels == 0


def _ratios(name, low, high):
    return [r["ratio"] for r in published.against_model(name) if low <= r["bytes"] <= high]


def test_small_sizes_of_b200_sweep_closer():
    # 8x B200 timed by all_reduce_bench.py: 32 KiB to 512 KiB were 1.13-1.31 on every channel
    ratios = _ratios("A42_mlengineering_b200x8_p6_1node_allreduce_bench_busbw", 32 * KiB, 512 * KiB)
    assert len(ratios) == 5 and 0.95 <= min(ratios) and max(ratios) <= 1.2


def test_small_sizes_of_h200_sweep_flat():
    # 8x H200 timed by all_reduce_bench.py: 32 KiB to 512 KiB were 0.82-0.99, now 0.81-0.84 (one shape)
    ratios = _ratios("A40_mlengineering_h200x8_allreduce_bench_sweep", 32 * KiB, 512 * KiB)
    assert len(ratios) == 5 and 0.78 <= min(ratios) and max(ratios) - min(ratios) <= 0.05


@pytest.mark.parametrize("name", ["A20_galvatron_dgx-a100-40gb_allreduce",
                                  "A21_facebookresearch-gcm_a100-80gb_allreduce",
                                  "A41_mlengineering_a100x8_nvlink3_allreduce_sweep",
                                  "A01_nccltests290_h100x8_hgx_1node_allreduce",
                                  "A05_azure_nd_h100_v5_8xh100_allreduce_busbw",
                                  "A40_mlengineering_h200x8_allreduce_bench_sweep"])
def test_large_sizes_unchanged(name):
    # the channel rule never binds from 1 MiB: the asymptote's agreement stays as it was
    for r in published.against_model(name):
        if r["bytes"] >= 1 << 30:
            assert 0.95 <= r["ratio"] <= 1.05


@pytest.mark.parametrize("name", ["A40_mlengineering_h200x8_allreduce_bench_sweep",
                                  "A42_mlengineering_b200x8_p6_1node_allreduce_bench_busbw"])
def test_flat_time_below_768_kib_is_what_was_measured(name):
    # 8 H200 and 8 B200, one process a GPU: from 32 KiB to 512 KiB the measured call takes the same time (39-40 us,
    # 47-53 us) over 16x the bytes, as NCCL's rule gives (each channel added brings its own 32 KiB)
    rows = [r for r in published.against_model(name) if 32 * KiB <= r["bytes"] <= 512 * KiB]
    measured = [r["bytes"] / r["measured_busbw"] for r in rows]
    predicted = [r["bytes"] / r["predicted_busbw"] for r in rows]
    assert len(rows) == 5
    assert max(measured) / min(measured) < 1.12 and max(predicted) / min(predicted) < 1.01
    assert 0.8 < sum(predicted) / sum(measured) < 1.25
