"""Lab 08's NCCL and mesh lessons: every verdict follows its numbers. Each lesson function is driven with numbers
from both sides of each of its verdicts, and its words must change with them; then the real predictions say what
NCCL's model and Megatron's arithmetic say (issue 51)."""
import pytest

from ringlab.lessons.lab08_beyond_data_parallelism import mesh, nccl

MiB = 1 << 20


def _published(margin, error=0.02):
    """Two runs where the model picks what NCCL ran (one with busbw off by ``error``), one where it does not."""
    agree = lambda busbw: {"source": "X", "collective": "allreduce", "ranks": 8, "bytes": 1 << 30, "nccl_ran": "NVLS",
                           "model_picks": "nvls", "busbw_Bps": busbw, "model_busbw_Bps": 100e9, "margin": 0.0}
    differ = {"source": "Y", "collective": "allreduce", "ranks": 4, "bytes": 1 << 30, "nccl_ran": "Ring",
              "model_picks": "nvls", "busbw_Bps": 90e9, "model_busbw_Bps": 100e9, "margin": margin}
    return [agree(100e9), agree(100e9 * (1 - error)), differ]


def test_published_tie_or_miss_follows_the_margin_against_the_models_error():
    tie = nccl.describe_published(_published(margin=0.01, error=0.03))
    assert "the model picks the same algorithm in 2, and predicts their busbw within 3%" in tie
    assert "predicts Ring 1% slower" in tie and "a tie it cannot call" in tie and "miss" not in tie
    miss = nccl.describe_published(_published(margin=0.20, error=0.03))
    assert "predicts Ring 20% slower" in miss and "further apart than the model's 3% where it agrees, so a miss" in miss
    assert "tie it cannot call" not in miss
    every = nccl.describe_published(_published(margin=0.01)[:2])
    assert every.endswith("It picks what NCCL ran in every one.")


def _forced(ratio, picks, share):
    sizes = [8 * MiB, 64 * MiB]
    return {"sizes": sizes, "ratio": ratio, "picks": picks, "share": share}


def test_forced_ring_words_follow_agreement_and_speed():
    agree_slow = nccl.describe_forced_ring(_forced([1.5, 1.5], ["nvlstree", "nvlstree"], [0.3, 0.5]))
    assert "the two agree that NCCL leaves the ring there" in agree_slow
    assert agree_slow.endswith("the choice agrees, the speed does not.")
    disagree_slow = nccl.describe_forced_ring(_forced([1.5, 1.5], ["nvlstree", "ring"], [0.3, 0.5]))
    assert "they disagree at 64 MiB" in disagree_slow and "the choice agrees" not in disagree_slow
    assert disagree_slow.endswith("below the model's speed as well as off its choice.")
    agree_fast = nccl.describe_forced_ring(_forced([1.5, 1.0], ["nvlstree", "ring"], [0.8, 0.9]))
    assert "by more than 10% at 1 of 2 sizes" in agree_fast and "the two agree" in agree_fast
    assert agree_fast.endswith("predicts for its pick.")


def _pat(top_speedup, linear, log, ring_back):
    """Rows at 2 and 64 nodes, 4 KiB and 16 MiB; at 64 nodes PAT's time at 4 KiB is the ring's / ``top_speedup``."""
    rows = []
    for nodes in (2, 64):
        for nbytes in (4096, 16 * MiB):
            pat = 1.0
            ring = top_speedup if nodes == 64 and nbytes == 4096 else (0.5 if nbytes > 4096 and
                                                                        (ring_back or nodes == 2) else 2.0)
            rows.append({"nodes": nodes, "bytes": nbytes, "choice": "pat/Simple" if ring > pat else "ring/LL",
                         "pat_s": pat, "ring_s": ring, "pat_steps": max(1, nodes.bit_length() - 1),
                         "ring_steps": nodes - 1, "pat_latency_s": linear + log + 8e-6, "pat_linear_s": linear,
                         "pat_log_s": log, "ring_latency_s": ring})
    return rows


def test_pat_words_follow_the_speedup_the_terms_and_the_large_sizes():
    linear = nccl.describe_pat(_pat(1.5, linear=179e-6, log=24e-6, ring_back=False))
    assert "At 64 nodes PAT takes 6 steps to the ring's 63 (10.5x fewer)" in linear
    assert "1.5x as fast as the ring, not 10.5x" in linear and "so the linear term sets it" in linear
    assert "hopefully we'll manage to remove it" in linear
    assert "At 16 MiB the ring is the faster on 2 nodes" in linear and "on 64 PAT is faster at every size" in linear
    assert "wins back" not in linear
    log = nccl.describe_pat(_pat(0.8, linear=5e-6, log=30e-6, ring_back=True))
    assert "slower than the ring (1.2x as long)" in log and "so the log-depth part sets it" in log
    assert "the ring is the faster on 2 and 64 nodes" in log and "faster at every size" not in log
    never = nccl.describe_pat([dict(r, choice="ring/LL") for r in _pat(0.8, 5e-6, 30e-6, True)])
    assert never.startswith("NCCL's model picks the ring, never PAT")
    nowhere = nccl.describe_pat(_pat(1.5, 179e-6, 24e-6, ring_back=False)[2:])  # 64 nodes only: PAT at both sizes
    assert "The ring does not win back at 16 MiB" in nowhere
    refused = nccl.describe_pat(_pat(1.5, 179e-6, 24e-6, False), {"nodes": 8, "gpus_per_node": 8,
                                                                  "reason": "PAT needs one GPU per node"})
    assert refused.endswith('does not run PAT at all: PAT needs one GPU per node (tuning.cc, ncclPatEnable: '
                            '"PAT only supports 1 GPU per node").')
    allowed = nccl.describe_pat(_pat(1.5, 179e-6, 24e-6, False), {"nodes": 8, "gpus_per_node": 1, "reason": None})
    assert allowed.endswith("the model would run PAT too.")


def test_nvlink_port_is_links_not_channels():
    whole = nccl.describe_nvlink_port({"machine": "m", "port_Bps": 370.8e9, "link_Bps": 20.6e9, "links": 18.0,
                                       "per_nic": 2})
    assert "18 NVLinks of 20.6 GB/s" in whole and "a count of links, not of channels" in whole
    assert "NCCL_DEBUG=INFO" in whole and "2 channels for each network card" in whole
    odd = nccl.describe_nvlink_port({"machine": "m", "port_Bps": 300e9, "link_Bps": 20.6e9, "links": 300 / 20.6,
                                     "per_nic": 2})
    assert "14.56 times NCCL's rate for one link" in odd and "not a whole number of links" in odd


def test_choices_and_protocols_words_follow_their_rows():
    row = lambda size, choice: {"machine": "m", "ranks": 8, "collective": "allreduce", "bytes": size, "choice": choice}
    same = nccl.describe_choices([row(1024, "ring/LL"), row(MiB, "ring/LL")])
    assert same.endswith("ring/LL at 1 KiB, at every size.")
    moved = nccl.describe_choices([row(1024, "ring/LL"), row(MiB, "nvls/Simple")])
    assert moved.endswith("ring/LL at 1 KiB; nvls/Simple from 1 MiB.")
    proto = lambda p, size, seconds: {"protocol": p, "bytes": size, "latency_s": 1e-6, "algbw_Bps": 1e9,
                                      "seconds": seconds, "machine": "m"}
    ll = nccl.describe_protocols([proto("LL", 1024, 1), proto("LL", MiB, 1), proto("Simple", 1024, 2),
                                  proto("Simple", MiB, 2)])
    assert "Fastest: LL from 1 KiB to 1 MiB." in ll
    split = nccl.describe_protocols([proto("LL", 1024, 1), proto("LL", MiB, 3), proto("Simple", 1024, 2),
                                     proto("Simple", MiB, 2)])
    assert "Fastest: LL from 1 KiB to 1 KiB; Simple from 1 MiB to 1 MiB." in split


def _megatron(tensor_bytes, inside_s, across_s, data_inside_s=0.06, data_across_s=0.6):
    row = lambda name, call, data: {"mapping": name, "tensor_algorithm": "a/P", "tensor_call_s": call,
                                    "micro_batch_s": 320 * call, "tensor_step_s": 16 * 320 * call,
                                    "data_algorithm": "b/P", "data_step_s": data}
    return {"model": "M", "hidden": 8192, "layers": 80, "tokens": 4096, "tensor": 8, "data": 8, "micro_batches": 16,
            "weights": 70e9, "activation_bytes": 64 * MiB, "tensor_calls": 320, "tensor_bytes": tensor_bytes,
            "data_bytes": 16 << 30, "rows": [row("tensor inside nodes", inside_s, data_across_s),
                                              row("tensor across nodes", across_s, data_inside_s)]}


def test_the_megatron_lesson_follows_its_numbers():
    real = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3e-4, across_s=3e-3))
    assert real.conclusions == ("of the same order: bytes alone do not say which group needs NVLink",
                                "the tensor group inside the nodes blocks less",
                                "tensor inside the nodes is faster even with nothing overlapped")
    assert "1.25x the data group's step" in real.text and "10.0x, on every micro-batch" in real.text
    assert "So the tensor group belongs on a node's NVLink, and that mapping is the faster one" in real.text
    heavy = mesh.megatron_lesson(_megatron(200 << 30, inside_s=3e-4, across_s=3e-3))
    assert heavy.conclusions[0] == "the tensor group carries most of the bytes"
    light = mesh.megatron_lesson(_megatron(1 << 30, inside_s=3e-4, across_s=3e-3))
    assert light.conclusions[0] == "the data group carries most of the bytes"
    reversed_links = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3e-3, across_s=3e-4))
    assert reversed_links.conclusions[1:] == ("the tensor group across the nodes blocks less",
                                              "with nothing overlapped, tensor across the nodes is faster")
    close = mesh.megatron_lesson(_megatron(20 << 30, inside_s=3.0e-4, across_s=3.2e-4, data_inside_s=0.01,
                                           data_across_s=1.0))
    assert close.conclusions[1:] == ("the tensor group inside the nodes blocks less",
                                     "with nothing overlapped, tensor across the nodes is faster")
    assert "though with nothing overlapped the other mapping would be faster" in close.text


def test_the_mapping_lesson_says_why_its_tensor_group_carries_the_bytes():
    row = lambda name, measured, hidden: {
        "mapping": name, "tensor_gpus": [], "data_gpus": [], "tensor_bytes": 4.0, "data_bytes": 1.0,
        "tensor_calls": 4, "measured_s": measured, "predicted_s": measured, "predicted_tensor_s": measured,
        "predicted_data_s": 0.0, "hidden": hidden, "tokens": 4096, "tensor": 2}
    narrow = mesh.mapping_lesson([row("tensor inside nodes", 1.0, 8), row("tensor across nodes", 3.0, 8)])
    assert "8 x 8^2 / 2 weights, 256x fewer: the activations outweigh the gradients" in narrow.text
    wide = mesh.mapping_lesson([row("tensor inside nodes", 1.0, 8192), row("tensor across nodes", 3.0, 8192)])
    assert "8 x 8192^2 / 2 weights, 4.0x as many: at this width the gradients outweigh" in wide.text


def test_nccls_model_of_pat_at_64_nodes_is_1_5x_not_log_depth():
    rows = nccl.pat_rows(nodes=(2, 64), sizes=(1 << 12, 1 << 24))
    top = [r for r in rows if r["nodes"] == 64]
    assert all(r["choice"].startswith("pat") for r in top)  # at 64 nodes PAT at every size here
    small = top[0]
    assert small["ring_s"] / small["pat_s"] == pytest.approx(1.5, abs=0.1)
    assert small["pat_linear_s"] == pytest.approx(64 * 2.8e-6) and small["pat_linear_s"] > small["pat_log_s"]
    assert small["pat_latency_s"] == pytest.approx(8e-6 + small["pat_log_s"] + small["pat_linear_s"])
    said = nccl.describe_pat(rows, nccl.pat_refusal())
    assert "on 64 PAT is faster at every size here" in said and "PAT needs one GPU per node" in said


def test_the_port_is_18_nvlinks_and_the_mesh_at_llama_size():
    assert round(nccl.nvlink_port()["links"], 6) == 18  # 370.8 GB/s = 18 x 20.6 GB/s
    result = mesh.megatron_mesh()
    assert result["tensor_calls"] == 320 and result["activation_bytes"] == 4096 * 8192 * 2
    assert result["weights"] == pytest.approx(70.55e9, rel=1e-3)
    assert result["tensor_bytes"] / result["data_bytes"] == pytest.approx(1.22, abs=0.02)
    finding = mesh.megatron_lesson(result)
    assert finding.conclusions == ("of the same order: bytes alone do not say which group needs NVLink",
                                   "the tensor group inside the nodes blocks less",
                                   "tensor inside the nodes is faster even with nothing overlapped")
