"""Lab 05's predictions for machines nobody here runs, beside the published sweeps of those machines
(ringlab.lab.predictions)."""
import pytest

import ringlab as rl
from ringlab.lab.predictions import (describe_crossovers, describe_machines, describe_with_ranks, machines_at,
                                     published_sweeps, tree_against_ring, with_ranks)
from ringlab.measure import published
from ringlab.predict.costmodel import crossover


def test_published_sweeps_are_those_the_preset_models():
    h100 = published_sweeps("hgx-h100-8")
    assert [label[-5:] for label in h100] == ["(A01)", "(A05)"]  # A07 is an H200: another preset
    a05 = published.load("A05_azure_nd_h100_v5_8xh100_allreduce_busbw").data["rows"]
    at_64m = next(r for r in a05 if r["bytes"] == 64 << 20)
    assert {"bytes": 64 << 20, "busbw_Bps": at_64m["busbw_Bps"] or at_64m["inplace_busbw_Bps"]} in h100[
        next(label for label in h100 if label.endswith("(A05)"))]
    assert published_sweeps("dgx1-v100") == {}


def test_machines_at_one_size_pair_predictions_with_published_rows_of_that_size():
    predicted, found = machines_at(["dgx1-v100", "hgx-h100-8"], 64 << 20, ["allreduce.ring", "allreduce.tree"])
    assert [(r["topology"], r["algorithm"]) for r in predicted] == [
        ("dgx1-v100", "allreduce.ring"), ("dgx1-v100", "allreduce.tree"),
        ("hgx-h100-8", "allreduce.ring"), ("hgx-h100-8", "allreduce.tree")]
    assert [(r["topology"], r["label"][-5:], r["bytes"]) for r in found] == [("hgx-h100-8", "(A05)", 64 << 20)]
    text = describe_machines(predicted, found)
    ring = predicted[2]
    ratio = found[0]["busbw_Bps"] / ring["busbw"]
    assert f"{ratio:.2f}x the ring's prediction" in text
    assert ratio > 1.1 and "NCCL reached more than the predicted ring (this machine's switch can add" in text
    assert text.splitlines()[0].endswith("No published sweep of this machine at this size in ringlab's data set.")


def test_describe_machines_words_the_ratio():
    predicted = [{"topology": "dgx1-v100", "algorithm": "allreduce.ring", "seconds": 1e-3, "busbw": 100e9}]
    close, low = ({"topology": "dgx1-v100", "label": "X", "bytes": 1, "busbw_Bps": b} for b in (95e9, 50e9))
    assert "0.95x the ring's prediction: close to it." in describe_machines(predicted, [close])
    assert "0.50x the ring's prediction: the model is optimistic for this machine." in describe_machines(
        predicted, [low])


def test_with_ranks_matches_the_cost_model_and_splits_the_ring():
    ranks = [2, 16, 64]
    seconds = with_ranks(["allreduce.ring", "allreduce.tree"], 1 << 20, ranks, 10e9, 5e-6)
    network = rl.topology.uniform(64, bandwidth=10e9, latency=5e-6)
    assert seconds["allreduce.ring"][-1] == pytest.approx(rl.predict(rl.build("allreduce.ring", 64), 1 << 20,
                                                                     network).seconds)
    text = describe_with_ranks(seconds, ranks, 1 << 20, 10e9, 5e-6)
    fastest = min(seconds, key=lambda name: seconds[name][-1])
    assert f"; {fastest} is the fastest." in text
    latency = 2 * 63 * 5e-6  # 2(n-1) messages at 64 ranks
    assert f"from 0.01 to {latency * 1e3:.2f} ms" in text


def test_tree_against_ring_panel():
    sizes = [1 << k for k in range(10, 27, 4)]
    panel = tree_against_ring("hgx-h100-8", sizes)
    assert panel["crossover"] == crossover("allreduce.tree", "allreduce.ring", rl.topology.preset("hgx-h100-8"))
    assert [r["bytes"] for r in panel["predicted"] if r["algorithm"] == "ring"] == sizes
    largest = {r["algorithm"]: r["busbw_Bps"] for r in panel["predicted"] if r["bytes"] == sizes[-1]}
    ring_big, tree_big = largest["ring"], largest["tree"]
    assert ring_big > tree_big  # past the crossover the ring is ahead
    assert {r["algorithm"][-5:] for r in panel["published"]} == {"(A01)", "(A05)"}
    assert panel["crossover_busbw_Bps"] > 0
    text = describe_crossovers({"hgx-h100-8": panel})
    assert text.startswith("hgx-h100-8 (8 GPUs): the ring is predicted faster from ")
