"""Lab 05's predictions for machines nobody here runs, beside the published sweeps of those machines
(ringlab.lessons.lab05_scaling.predictions)."""
import io
import pytest

import ringlab as rl
from ringlab.lessons.lab05_scaling.predictions import (describe_crossovers, describe_machines, describe_with_ranks,
                                                       machines_at, published_sweeps, with_ranks)
from ringlab.lessons.lab05_scaling.predictions import (DBTREE_SEGMENTS, dbtree_seconds, describe_hierarchy,
                                                       hierarchical_against_flat, rings_on, trees_against_ring)
from ringlab.measure import published


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
    assert f"from 10 us to {latency * 1e6:.3g} us" in text  # microseconds, not "0.01 ms"
    assert "e+0" not in text  # never '1.02e+04 us': lab 05's microseconds(), whole microseconds above 1000


def test_trees_against_ring_panel():
    sizes = [1 << k for k in range(10, 29, 2)]
    panel = trees_against_ring("hgx-h100-8", sizes)
    assert {r["algorithm"] for r in panel["predicted"]} == {"tree", "dbtree", "ring"}
    assert [r["bytes"] for r in panel["predicted"] if r["algorithm"] == "ring"] == sizes
    by = {(r["algorithm"], r["bytes"]): r["busbw_Bps"] for r in panel["predicted"]}
    cross = panel["crossover"]  # from there on the ring is at least as fast, and just below it it is not
    assert cross is not None and all(by["ring", k] >= by["dbtree", k] for k in sizes if k >= cross)
    assert by["ring", sizes[sizes.index(cross) - 1]] < by["dbtree", sizes[sizes.index(cross) - 1]]
    assert by["dbtree", sizes[-1]] > 2 * by["tree", sizes[-1]]  # the binomial tree moves the whole buffer each step
    assert {r["algorithm"][-5:] for r in panel["published"]} == {"(A01)", "(A05)"}
    text = describe_crossovers({"hgx-h100-8": panel})
    assert text.startswith("hgx-h100-8 (8 GPUs): the ring (in the plain order 0..n-1) is predicted faster than the "
                           f"double binary tree from {rl.measure.units.format_bytes(cross)} up; the double binary "
                           "tree leads from 1 KiB to ")


def _leaders(panel):
    by = {(r["algorithm"], r["bytes"]): r["busbw_Bps"] for r in panel["predicted"]}
    sizes = sorted({k for _, k in by})
    return sizes, {k: "ring" if by["ring", k] >= by["dbtree", k] else "dbtree" for k in sizes}


def test_crossovers_follow_every_row_a_ring_that_leads_in_a_middle_range_only():
    """The DGX-1's ring leads the double binary tree at 256 KiB .. 1 MiB only (8.87 vs 8.41 GB/s at 256 KiB), and the
    tree again from 2 MiB: a search back from the largest size found no crossover and said 'never'."""
    from ringlab.measure.units import format_bytes

    sizes = [1 << k for k in range(10, 31)]  # 1 KiB .. 1 GiB, as lab 05 draws it
    panel = trees_against_ring("dgx1-v100", sizes)
    _, leader = _leaders(panel)
    ring = [k for k in sizes if leader[k] == "ring"]
    assert ring and ring[0] > sizes[0] and ring[-1] < sizes[-1]  # the model's numbers: a middle range
    assert ring == [k for k in sizes if ring[0] <= k <= ring[-1]]  # one run
    assert panel["leads"] == [(sizes[0], sizes[sizes.index(ring[0]) - 1], "dbtree"), (ring[0], ring[-1], "ring"),
                              (sizes[sizes.index(ring[-1]) + 1], sizes[-1], "dbtree")]
    assert [(c["bytes"], c["leader"]) for c in panel["crossovers"]] == [
        (ring[0], "ring"), (sizes[sizes.index(ring[-1]) + 1], "dbtree")]
    assert panel["crossover"] == ring[0]  # the plot marks where the ring takes the lead
    text = describe_crossovers({"dgx1-v100": panel})
    assert "never" not in text
    assert (f"predicted faster than the double binary tree from {format_bytes(ring[0])} to {format_bytes(ring[-1])} "
            f"only; the double binary tree leads from 1 KiB to {format_bytes(sizes[sizes.index(ring[0]) - 1])} and "
            f"from {format_bytes(sizes[sizes.index(ring[-1]) + 1])} up.") in text


def test_crossovers_where_the_ring_never_leads_and_where_it_always_does():
    from ringlab.measure.units import format_bytes

    big = [1 << k for k in range(21, 31)]  # 2 MiB .. 1 GiB: the DGX-1's double binary tree leads at every size
    never = trees_against_ring("dgx1-v100", big)
    assert set(_leaders(never)[1].values()) == {"dbtree"}
    assert never["leads"] == [(big[0], big[-1], "dbtree")] and never["crossovers"] == [] and never["crossover"] is None
    text = describe_crossovers({"dgx1-v100": never})
    assert (f"is never predicted faster than the double binary tree here, at any size from {format_bytes(big[0])} to "
            f"{format_bytes(big[-1])}.") in text
    always = trees_against_ring("hgx-h100-8", big)  # the H100's ring leads from 1 MiB up
    assert set(_leaders(always)[1].values()) == {"ring"} and always["crossover"] is None
    text = describe_crossovers({"hgx-h100-8": always})
    assert "predicted at least as fast as the double binary tree at every size here, from 2 MiB to 1 GiB." in text
    assert "never" not in text and "leads from" not in text


def test_dbtree_takes_its_best_segment_count():
    topology = rl.topology.preset("hgx-h100-8")
    small, s_small = dbtree_seconds(topology, 1 << 10)
    big, s_big = dbtree_seconds(topology, 1 << 28)
    assert s_small < s_big
    assert big == min(rl.predict(rl.build("allreduce.dbtree", 8, segments=s), 1 << 28, topology).seconds
                      for s in DBTREE_SEGMENTS)


def test_two_searched_rings_beat_one_on_the_dgx1():
    rows = rings_on("dgx1-v100", 64 << 20)
    plain, one, two = rows
    assert plain["orders"] == "plain 0..n-1" and one["rings"] == 1 and two["rings"] == 2
    assert two["seconds"] < one["seconds"] < plain["seconds"]
    assert two["orders"].count(";") == 1  # the best ring and it backwards


def test_hierarchical_against_flat_on_two_nodes():
    sizes = [1 << k for k in range(20, 29, 4)]
    curves = hierarchical_against_flat("ib-2x8-h100", sizes, local=8)
    labels = list(curves)
    assert labels[:2] == ["flat ring: predicted", "hierarchical (8 per node): predicted"]
    assert any("A03, Ring (NCCL_ALGO=RING)" in label for label in labels)
    text = describe_hierarchy(curves, 1 << 28)
    flat, hier = (curves[k][-1]["busbw_Bps"] for k in labels[:2])
    assert f"{hier / flat:.1f}x the flat ring's" in text
    assert ("between the two predictions" in text) or ("above both" in text) or ("below both" in text)
    assert "NCCL's ring is not" not in text  # no machine given: no model of what NCCL ran
    beside = describe_hierarchy(curves, 1 << 28, machine="ib-2x8-h100").split("\n")
    ring = next(line for line in beside if "NCCL_ALGO=RING" in line)
    assert "NCCL's ring is not the one flat ring above: it runs a ring channel through every network card (8 a node)" \
        in ring
    model = rl.predict_nccl("allreduce", 1 << 28, rl.topology.preset("ib-2x8-h100"), algorithm="ring")
    expected = (1 << 28) / model.seconds * 2 * 15 / 16
    published = next(r["busbw_Bps"] for label, rows in curves.items() if "NCCL_ALGO=RING" in label for r in rows
                     if r["bytes"] == 1 << 28)
    assert f"expects {expected / 1e9:.0f} GB/s; the published run reached {published / expected:.0%} of it" in ring
    assert ("well below its hardware" in ring) == (published < 0.5 * expected)  # A03 is: 28% (nccl-tests #290)
    default = next(line for line in beside if "not forced" in line)
    assert "NCCL's model picks nvlstree/Simple at this size" in default and "well below its hardware" in default


def test_describe_forced_ring_follows_the_published_numbers():
    from ringlab.lessons.lab05_scaling.predictions import describe_forced_ring

    sweeps = published_sweeps("ib-2x8-h100", algorithm=True)
    text = describe_forced_ring(sweeps)
    assert text.startswith("Published, 11 sizes from 8 MiB to 8 GiB")
    assert "The largest gap: 1.89x at 8 MiB (73.0 against 38.6 GB/s of busbw)." in text
    same = {"a (Ring (NCCL_ALGO=RING))": [{"bytes": 1, "busbw_Bps": 2.0}], "b": [{"bytes": 1, "busbw_Bps": 1.0}]}
    assert "more than 10% slower at 1." in describe_forced_ring(same)
    assert "The forced ring was never slower" in describe_forced_ring(same)
    assert "more than 10% slower at none." in describe_forced_ring({k: [dict(r, busbw_Bps=1.0)] for k, v in same.items()
                                                                     for r in v})
    with pytest.raises(ValueError, match="NCCL_ALGO=Ring forced"):
        describe_forced_ring({"b": []})


def test_each_published_sweep_at_its_largest_message_is_one_table_row():
    from ringlab.lessons.lab05_scaling.predictions import LARGEST_COLUMNS, against_published, largest_rows
    from ringlab.measure.tables import table

    against = against_published("allreduce")
    rows = largest_rows(against)
    assert [r["sweep"] for r in rows] == list(against)
    for row, sweep in zip(rows, against.values()):
        assert row["bytes"] == max(r["bytes"] for r in sweep)
        assert row["ratio"] == pytest.approx(row["predicted_Bps"] / row["measured_Bps"], rel=1e-6)
    out = io.StringIO()
    table(rows, LARGEST_COLUMNS, out=out)
    assert len(out.getvalue().splitlines()) == len(rows) + 1


