"""Lab 09's room: the lessons' words follow their numbers, the exercise checks accept the reference and refuse a
wrong answer, the group machines are the preset's links, and the plots draw."""
import numpy as np
import pytest

from ringlab.lessons.lab09_model_parallelism import attention, experts, mesh
from ringlab.train.tensor import mesh_groups


def test_the_mapping_lesson_follows_its_numbers():
    row = lambda name, measured, tensor, data: {
        "mapping": name, "tensor_gpus": [], "data_gpus": [], "tensor_bytes": 4.0, "data_bytes": 1.0, "tensor_calls": 4,
        "measured_s": measured, "predicted_s": tensor + data, "predicted_tensor_s": tensor, "predicted_data_s": data}
    good = mesh.mapping_lesson([row("tensor inside nodes", 1.1, 0.8, 0.2), row("tensor across nodes", 3.3, 2.9, 0.1)])
    assert good.conclusions == ("the tensor group carries most of the bytes",
                                "the tensor-inside-nodes mapping is faster on the emulated machine",
                                "the measured steps match the predictions on the emulated machine")
    assert "the rest is this CPU's work (compute, Python), counted as the CPU time it took" in good.text
    columns = dict(mesh.MAPPING_COLUMNS)  # the sentence gives the bytes as the table above it does
    mib = dict(row("tensor inside nodes", 1.1, 0.8, 0.2), tensor_bytes=6291.0, data_bytes=6291.0)
    shown = mesh.mapping_lesson([mib, row("tensor across nodes", 3.3, 2.9, 0.1)]).text
    assert (f"sends {6291 / 2**20:{columns['tensor MiB a step'][1]}} MiB a step in its tensor group" in shown
            and f"and {6291 / 2**20:{columns['data MiB a step'][1]}} MiB in its data group" in shown), shown
    modelled = mesh.mapping_lesson([dict(row("tensor inside nodes", 1.0, 0.8, 0.2), compute="model", wall_s=0.1),
                                    dict(row("tensor across nodes", 3.0, 2.9, 0.1), compute="model", wall_s=0.2)])
    assert modelled.conclusions == good.conclusions
    assert "within 0.05% of the predicted collectives: with compute='model' this CPU's work never counts" in modelled.text
    assert "This machine took 100.0 and 200.0 ms of wall time a step" in modelled.text
    apart = mesh.mapping_lesson([dict(row("tensor inside nodes", 1.5, 0.8, 0.2), compute="model"),
                                 dict(row("tensor across nodes", 4.5, 2.9, 0.1), compute="model")])
    assert "the measured steps do not match the predictions on the emulated machine" in apart.conclusions
    # with modelled compute the CPU's work is not in a step, so it is not what set them apart
    assert "with compute='model' this CPU's work never counts: the emulated links and the cost model disagree" in (
        apart.text) and "this CPU's work is not small" not in apart.text
    tie = mesh.mapping_lesson([row("tensor inside nodes", 2.0, 0.8, 0.2), row("tensor across nodes", 2.1, 2.9, 0.1)])
    assert "the two mappings take about as long on the emulated machine" in tie.conclusions
    assert "the measured steps do not match the predictions on the emulated machine" in tie.conclusions


def test_group_machines_are_the_presets_links():
    from ringlab.topology import preset

    spec, bandwidth, latency = mesh.group_machine(preset("ib-2x8-h100"), [0, 8], scale=100)
    assert spec == f"uniform:{bandwidth / 1e9:.6g}:{latency * 1e6:.6g}@100" and bandwidth == pytest.approx(48e9)
    spec, _, _ = mesh.group_machine(preset("ib-2x8-h100"), [0, 8])  # the lesson's: the H100s' own speed
    assert spec == f"uniform:{bandwidth / 1e9:.6g}:{latency * 1e6:.6g}"


def test_the_imbalance_lesson_follows_its_numbers():
    row = lambda router, per_expert, capacity, sent, seconds: {
        "router": router, "per_expert": per_expert, "capacity": capacity, "mean_pair": 2, "sent": sent,
        "imbalance": max(per_expert) / np.mean(per_expert), "measured_s": seconds, "predicted_s": seconds}
    finding = experts.imbalance_lesson([row("as initialised", [2, 2], 1, 10, 1.0), row("skewed", [4, 0], 3, 30, 2.0)])
    assert finding.conclusions == ("the skewed router loads its busiest expert more",
                                   "the skewed router's all-to-alls move more bytes",
                                   "the skewed layer takes longer on the emulated machine")
    assert "it did not grow with the busiest expert's load here" in finding.text
    computed = experts.imbalance_lesson([dict(row("as initialised", [2, 2], 1, 10, 1.0), predicted_s=0.9, wall_s=0.1),
                                         dict(row("skewed", [4, 0], 3, 30, 2.0), predicted_s=1.7, padded=3)])
    assert ("this CPU's work came to 100.0 ms a step as initialised and 300.0 ms skewed, while the busiest expert's "
            "tokens went from 2 to 4: it grew") in computed.text
    assert "this machine took 100.0 ms of wall time" in computed.text and "(3 padded ones)" in computed.text


def test_the_dispatch_lesson_follows_its_numbers():
    def way(router, name, block, dropped, sent, into, seconds, predicted=None, difference=1e-16):
        return {"router": router, "way": name, "block": block, "dropped": dropped, "dropped_share": dropped / 4096,
                "per_expert": [1, 2], "sent": sent, "busiest_in": into, "measured_s": seconds,
                "predicted_s": seconds if predicted is None else predicted, "difference": difference,
                "factor": 1.25 if name.startswith("capacity") else None}

    rows = [way("even", "padded", 300, 0, 100, 90, 1.0), way("even", "capacity factor 1.25", 320, 0, 110, 96, 1.05),
            way("even", "dropless", "variable", 0, 80, 70, 0.8),
            way("skewed", "padded", 999, 0, 300, 280, 3.0), way("skewed", "capacity factor 1.25", 320, 2700, 110, 96, 1.0),
            way("skewed", "dropless", "variable", 0, 100, 279, 2.97)]
    finding = experts.dispatch_lesson(rows)
    assert finding.conclusions == (
        "dropless sends fewer bytes than padding with the router even",
        "with the router even dropless is quicker than padding on the emulated machine",
        "capacity factor 1.25 drops no tokens with the router even",
        "dropless sends fewer bytes than padding with the router skewed",
        "with the router skewed dropless takes as long as padding on the emulated machine",
        "capacity factor 1.25 drops tokens with the router skewed",
        "the measured steps match the predictions on the emulated machine", "every way equals the one-rank layer")
    assert ("Router skewed (the experts got [1, 2] tokens): dropless sent 67% fewer bytes than padding in 0.99x its time, "
            "since the busiest receiver took as many bytes") in finding.text
    assert ("dropless sent 20% fewer bytes than padding in 0.80x its time, its busiest receiver taking 0.78x padding's "
            "bytes; the capacity took 1.05x padding's time and dropped 0.0% of the tokens.") in finding.text
    rows[5] = way("skewed", "dropless", "variable", 0, 100, 140, 2.97)
    assert "in 0.99x its time, though its busiest receiver took 0.50x padding's bytes" in experts.dispatch_lesson(rows).text
    rows[2] = way("even", "dropless", "variable", 0, 120, 95, 1.2, predicted=1.0, difference=1e-3)
    worse = experts.dispatch_lesson(rows)
    assert "dropless sends no fewer bytes than padding with the router even" in worse.conclusions
    assert "with the router even dropless is slower than padding on the emulated machine" in worse.conclusions
    assert worse.conclusions[-2:] == ("the measured steps do not match the predictions on the emulated machine",
                                      "a way differs from the one-rank layer")


def test_the_attention_lesson_says_equal_and_observes_the_overlap():
    result = {"ranks": 4, "difference": 1e-15, "causal": True, "block_bytes": 1024, "passed_bytes": 3072,
              "sequence": 64, "overlapped_s": 1.0, "serial_s": 1.0, "compute_s": 0.5, "cores": 2}
    finding = attention.attention_lesson(result)
    assert finding.conclusions == ("ring attention equals full attention",)
    assert finding.observations == ("overlapping did not clearly pay on this machine",)


def test_the_checks_take_the_reference_and_refuse_a_wrong_answer():
    import ringlab.train.attention as reference_attention

    assert mesh.check_mesh_groups(mesh_groups, strict=True) is mesh_groups
    with pytest.raises(AssertionError, match="Hint"):
        mesh.check_mesh_groups(lambda w, d, t, inner=True: mesh_groups(w, d, t, not inner), strict=True)
    assert experts.check_padded_bytes(experts._padded_bytes, strict=True) is experts._padded_bytes
    with pytest.raises(AssertionError, match="Hint"):
        experts.check_padded_bytes(lambda table, b: sum(map(sum, table)) * b, strict=True)
    assert attention.check_merge(reference_attention.merge, strict=True) is reference_attention.merge

    def no_rescale(m, l, o, scores, v):  # forgets to rescale what it had when the maximum grows
        top = np.maximum(m, scores.max(-1))
        p = np.exp(scores - top[:, None])
        return top, l + p.sum(-1), o + p @ v

    with pytest.raises(AssertionError, match="Hint"):
        attention.check_merge(no_rescale, strict=True)


def test_the_plots_draw():
    from ringlab.viz import parallelism as P

    rows = [{"mapping": m, "measured_s": 1e-5, "predicted_tensor_s": 5e-6, "predicted_data_s": 1e-6,
             "machine": "ib-2x8-h100"} for m in ("tensor inside nodes", "tensor across nodes")]
    assert len(P.mapping_bars(rows).data) == 3
    loads = [{"router": "as initialised", "per_expert": [3, 5], "imbalance": 1.25},
             {"router": "skewed", "per_expert": [8, 0], "imbalance": 2.0}]
    assert len(P.expert_load_bars(loads).data) == 2
