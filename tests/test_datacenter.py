"""Lab 05 at datacenter scale (ringlab.lessons.lab05_scaling.datacenter): the predictions from one node to
many, where the ring's latency passes its transfer time, NCCL's choice, and the words computed from them."""
import pytest

import ringlab as rl
from ringlab.lessons.lab05_scaling import datacenter
from ringlab.lessons.lab05_scaling.datacenter import (at_scale, describe_nccl, describe_scale, design, nccl_at_scale,
                                                      ring_turning_point)


def test_the_design_is_nodes_of_eight_h100_with_a_nic_each():
    machine = design(100000)
    assert machine.nranks == 100000 and machine.machine.gpus_per_node == 8 and machine.machine.nics_per_node == 8
    assert machine.machine.nic_bandwidth == 50e9 and design(8).nranks == 8


def test_at_scale_predicts_every_algorithm_and_the_ring_turns_latency_bound():
    rows = at_scale([8, 64, 4096], 1 << 30)
    assert [(r["gpus"], r["algorithm"]) for r in rows] == [(n, a) for n in (8, 64, 4096) for a in datacenter.ALGORITHMS]
    assert all(r["source"] == "predicted (cost model)" and r["seconds"] > 0 for r in rows)
    ring = {r["gpus"]: r for r in rows if r["algorithm"] == "ring"}
    assert ring[64]["latency_s"] < ring[64]["transfer_s"] and ring[4096]["latency_s"] > ring[4096]["transfer_s"]
    tree = [r for r in rows if r["algorithm"] == "double binary tree"]
    assert all(r["segments"] in datacenter.DBTREE_SEGMENTS for r in tree)
    for r in tree:  # its best segment count: no other is predicted faster
        others = [rl.predict(rl.build("allreduce.dbtree", r["gpus"], segments=s), 1 << 30, design(r["gpus"])).seconds
                  for s in datacenter.DBTREE_SEGMENTS]
        assert r["seconds"] == min(others)
    assert ring[4096]["busbw_Bps"] == pytest.approx((1 << 30) / ring[4096]["seconds"] * 2 * 4095 / 4096)


def test_the_turning_point_is_where_the_predictions_cross_and_agrees_with_k_over_alpha_b():
    turning = ring_turning_point()
    n = turning["gpus"]
    assert n % 8 == 0 and turning["alpha_s"] == pytest.approx(7e-6) and turning["rate_Bps"] == pytest.approx(48e9)
    for gpus, bound in ((n - 8, False), (n, True)):
        p = rl.predict(rl.build("allreduce.ring", gpus), 1 << 30, design(gpus))
        assert (p.steps["latency"].sum() >= p.steps["transfer"].sum()) == bound
    assert abs(n - turning["formula_gpus"]) <= 8 and turning["formula_gpus"] == pytest.approx((1 << 30) / (7e-6 * 48e9))
    with pytest.raises(ValueError, match="does not pass its transfer time between 16 and 64 GPUs"):
        ring_turning_point(1 << 30, 16, 64)


def test_the_words_are_the_numbers():
    rows = at_scale([8, 512], 1 << 30)
    turning = {"gpus": 3200, "alpha_s": 7e-6, "rate_Bps": 48e9, "link": "nic0->gpu0 (pcie)", "formula_gpus": 3195.7}
    said = describe_scale(rows, turning)
    fastest = min((r for r in rows if r["gpus"] == 512), key=lambda r: r["seconds"])
    assert f"the {fastest['algorithm']} is fastest" in said.splitlines()[1]
    assert "from 3,200 GPUs" in said and "n = K/(alpha B) = 3,196 GPUs" in said and "alpha = 7 us" in said
    ring = next(r for r in rows if r["gpus"] == 512 and r["algorithm"] == "ring")
    assert f"{ring['steps']:,} steps" in said


def test_nccls_model_leaves_the_ring_for_trees_and_pat_at_scale():
    rows = nccl_at_scale([64, 16384], 1 << 30)
    small, large = rows
    assert large["tree_busbw_Bps"] > 10 * large["ring_busbw_Bps"] and small["ring_busbw_Bps"] > small["tree_busbw_Bps"]
    assert small["allgather_pick"].startswith("ring") and large["allgather_pick"].startswith("pat")
    said = describe_nccl(rows)
    assert "16,384 GPUs: NCCL's model picks" in said and "pat/" in said


def test_the_scale_plot_shows_both_panels_and_the_turning_point():
    from ringlab.viz import scale_plot

    rows = at_scale([8, 64], 1 << 20)
    fig = scale_plot(rows, {"gpus": 32})
    assert len(fig.data) == 2 * len(datacenter.ALGORITHMS) and "predicted" in fig.layout.title.text
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis2.type == "log"
    assert any("32 GPUs" in a.text for a in fig.layout.annotations)
