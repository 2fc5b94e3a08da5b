"""Lab 10's NCCL lessons: every verdict follows its numbers. Each lesson function is driven with numbers from both
sides of each of its verdicts, and its words must change with them; then the real predictions say what NCCL's model
and its ring search say (issue 51)."""
import pytest

from ringlab.lessons.lab10_inside_nccl import nccl

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


def _channel_row(board, found, speed, graph, channels, logged, port=164.8e9, first=60e9):
    return {"board": board, "arch": "hopper", "links": 8, "link_Bps": 20.6e9, "port_Bps": port, "found": found,
            "speed_Bps": speed, "first_Bps": first, "graph": graph, "channels": channels, "logged": logged,
            "printed": str(logged), "source": "a log", "per_nic": 2}


def test_channel_words_follow_the_search_and_the_logs():
    said = nccl.describe_channels([_channel_row("8 x H800", 4, 40e9, 8, 16, 16)])
    assert ("the search keeps 4 channels of 40 GB/s (160 GB/s in all, more than the 2 of 60 GB/s, the fastest speed "
            "it tries, would carry), doubled to 8 (ncclTopoDupChannels) and again to 16 (ncclTopoPostset): "
            "NCCL_DEBUG=INFO printed 16 (a log).") in said
    assert "not the fastest speed that fits" in said and "2 channels for each network card" in said
    fastest = nccl.describe_channels([_channel_row("8 x H100", 6, 60e9, 12, 24, 24, port=370.8e9)])
    assert "6 channels of 60 GB/s (360 GB/s in all), doubled to 12" in fastest and "fastest speed it tries" not in fastest
    missed = nccl.describe_channels([_channel_row("8 x H800", 4, 40e9, 4, 8, 16)])
    assert "not doubled by ncclTopoDupChannels" in missed
    assert "but NCCL_DEBUG=INFO printed 16 (a log): the rule misses this board." in missed
    unlogged = nccl.describe_channels([dict(_channel_row("8 x B200", 8, 90e9, 16, 32, None), printed="none published")])
    assert unlogged.split("\n")[0].endswith("no published log here to hold it against.")


def test_the_channels_are_the_searchs_24_16_and_32():
    rows = {r["board"]: r for r in nccl.channel_rows()}
    assert rows["8 x H800"]["found"] == 4 and rows["8 x H800"]["speed_Bps"] == 40e9  # not 2 of 60 GB/s
    assert [rows[b]["channels"] for b in ("8 x A100", "8 x H100", "8 x H800", "8 x B200")] == [24, 24, 16, 32]
    said = nccl.describe_channels(list(rows.values()))
    assert "8 x H800: 8 NVLinks at NCCL's 20.6 GB/s each, a port of 164.8 GB/s" in said
    assert "printed 16 (nccl#892" in said and "rule misses" not in said


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


def _nvls(collective, speedups, n=8):
    """Rows of one collective at 1 KiB, 1 MiB, 1 GiB with NVLS's speedups over the ring; busbw by the speedup."""
    from ringlab.lessons.lab10_inside_nccl.nccl import PORT_SHARE
    return [{"collective": collective, "ranks": n, "bytes": size, "speedup": s, "ring_busbw_Bps": 100e9, "efficiency": 0.85,
             "nvls_busbw_Bps": 100e9 * s, "ring_port": PORT_SHARE["ring"][collective](n),
             "nvls_port": PORT_SHARE["nvls"][collective](n)} for size, s in zip((1024, MiB, 1 << 30), speedups)]


def test_nvls_words_follow_where_it_wins_and_the_port_counts():
    lose = nccl.describe_nvls(_nvls("allgather", [0.5, 0.8, 0.75]))
    assert "allgather: the ring is faster at every size from 1 KiB to 1 GiB (NVLS takes 1.25x to 2.00x its time)" \
        in lose
    assert "carries 1.00 K each way with NVLS against the ring's 0.88 K, 0.88x the ring's speed by bytes" in lose
    assert "0.88 x 0.85 = 0.74, and the model's bus bandwidth for NVLS is 0.75 of the ring's with each call's" in lose
    assert "the switch saves no bytes in all-gather and reduce-scatter" in lose and "(n-1)/n = 0.88" in lose
    win = nccl.describe_nvls(_nvls("allreduce", [0.5, 1.1, 1.3]))
    assert "allreduce: NVLS is faster at 2 of 3 sizes, from 1 MiB (up to 1.30x)" in win
    assert "1.12 K each way with NVLS against the ring's 1.75 K, 1.56x the ring's speed by bytes" in win
    assert "1.56 x 0.85 = 1.32, and the model's bus bandwidth for NVLS is 1.30 of the ring's with" in win
    assert "saves no bytes" not in win
    exact = nccl.describe_nvls(_nvls("allgather", [0.5, 0.8, 0.744]))
    assert "= 0.74, and the model's bus bandwidth for NVLS is 0.74 of the ring's." in exact and "fill" not in exact
    # were NVLS to win an all-gather, the words would say so
    gather_win = nccl.describe_nvls(_nvls("allgather", [0.5, 1.2, 0.9]))
    assert "allgather: NVLS is faster at 1 of 3 sizes, from 1 MiB (up to 1.20x)" in gather_win


def test_on_one_h100_node_nvls_wins_large_allreduces_and_never_an_all_gather_or_reduce_scatter():
    rows = nccl.nvls_rows()
    for collective in ("allgather", "reduce_scatter"):
        mine = [r for r in rows if r["collective"] == collective]
        assert all(r["speedup"] < 1 and r["choice"].startswith("ring") for r in mine)
        # at the largest size NVLS's busbw is NCCL's NVLS efficiency x (n-1)/n of the ring's: 0.85 x 7/8
        assert mine[-1]["nvls_busbw_Bps"] / mine[-1]["ring_busbw_Bps"] == pytest.approx(0.85 * 7 / 8, rel=0.02)
    allreduce = [r for r in rows if r["collective"] == "allreduce"]
    assert allreduce[-1]["choice"] == "nvls/Simple" and allreduce[-1]["speedup"] > 1.25
    assert allreduce[0]["choice"].startswith("ring")
    said = nccl.describe_nvls(rows)
    assert "allgather: the ring is faster at every size" in said and "allreduce: NVLS is faster at" in said
