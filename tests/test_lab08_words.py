"""Lab 08's sharding lessons: every clause that concludes follows the numbers beside it. Each lesson is driven with
numbers from both sides of each verdict; the words must change with them, and a cause is named only where the numbers
show it (issue 51)."""
from ringlab.lessons.lab08_sharding_and_memory import sharding
from ringlab.train.zero import zero_memory

PSI, N = 1000, 2  # the fake runs' parameters and ranks
FP64 = sharding.ADAM_FP64


def _sharding(times=(0.020, 0.021, 0.021, 0.030), predicted=(0.018, 0.019, 0.019, 0.027), calls=(1, 6, 6, 9),
              sent=(1.0, 1.0, 1.0, 1.5), extra_state=0):
    """A result as measure_sharding returns it: memory exactly the paper's formula (plus ``extra_state`` bytes of
    optimizer state on rank 0), bytes sent as multiples of data parallelism's."""
    base = 2 * (N - 1) / N * PSI * 8
    rows = []
    for stage, variant in enumerate(sharding.VARIANTS):
        held = dict(zero_memory(PSI, N, stage, **FP64))
        held["optimizer_state"] += extra_state
        rows.append({"variant": variant, "held": [held, held], "sent": [sent[stage] * base] * 2, "calls": calls[stage],
                     "measured_s": times[stage], "predicted_s": predicted[stage],
                     "formula": sum(zero_memory(PSI, N, stage, **FP64).values())})
    return {"rows": rows, "machine": "uniform:0.05:20", "ranks": N, "nparams": PSI}


def test_the_memory_sentence_says_exact_or_where_it_differs():
    exact = sharding.sharding_lesson(_sharding()).text
    assert "each exactly the paper's formula" in exact and "step count" not in exact
    off = sharding.sharding_lesson(_sharding(extra_state=24)).text
    assert "each exactly" not in off and "24 B more optimizer state" in off
    assert "torch's Adam keeps a step count for each tensor" in off  # unsharded excess: not the pieces
    assert "one element larger" not in off  # stage 3 holds no more beyond the formula than data parallelism
    pieces = _sharding()
    for row in pieces["rows"][1:]:  # sharded rows: rank 0's pieces 8 bytes over a share in each kind they shard
        for kind in ("optimizer_state", "gradients", "parameters")[:sharding.STAGE[row["variant"]]]:
            row["held"][0] = dict(row["held"][0], **{kind: row["held"][0][kind] + 8})
    text = sharding.sharding_lesson(pieces).text
    assert "8 B more parameters, 8 B more gradients, 8 B more optimizer state" in text
    assert "rank 0's piece is one element larger than the others' (in the parameters, gradients, optimizer state)" \
        in text and "step count" not in text


def test_the_traffic_sentence_compares_with_the_papers_table_computed():
    agree = sharding.sharding_lesson(_sharding()).text
    assert "1.00x, 1.00x, 1.50x what plain data parallelism sends" in agree
    assert "the paper's table gives 1.00x, 1.00x, 1.50x; they agree." in agree
    differ = sharding.sharding_lesson(_sharding(sent=(1.0, 1.0, 1.0, 2.0))).text
    assert "1.00x, 1.00x, 2.00x what plain data parallelism sends" in differ
    assert "they differ at stage 3." in differ and "they agree" not in differ
    assert "stage 3 sends 2.0x what data parallelism sends" in sharding.sharding_lesson(
        _sharding(sent=(1.0, 1.0, 1.0, 2.0))).conclusions


def test_the_time_sentence_follows_the_steps():
    slow = sharding.sharding_lesson(_sharding())
    assert "stage 3 took 1.4x as long as stage 2, sending 1.50x its bytes in 9 collectives to 6" in slow.text
    assert "stage 3 is the slowest on the emulated machine" in slow.conclusions
    quick = sharding.sharding_lesson(_sharding(times=(0.020, 0.021, 0.021, 0.022)))
    assert "stage 3 was not clearly slower (1.0x stage 2)" in quick.text and "its bytes in" not in quick.text
    assert "stage 3 is not clearly the slowest on the emulated machine" in quick.conclusions
    apart = sharding.sharding_lesson(_sharding(times=(0.020, 0.021, 0.040, 0.060)))
    assert "did not take as long as each other (1.90x)" in apart.text
    assert "stages 1 and 2 do not take as long as each other on the emulated machine" in apart.conclusions


def test_a_cause_for_the_time_beyond_the_collectives_is_named_only_where_the_numbers_show_it():
    same = sharding.sharding_lesson(_sharding())  # 2.0 ms beyond for both data parallelism and stage 1
    assert same.observations == ("stage 1 spends about as much beyond its collectives as data parallelism",)
    assert "about as much, though it ran 6 collectives to 1" in same.text and "Python" not in same.text
    grows = sharding.sharding_lesson(_sharding(times=(0.020, 0.031, 0.031, 0.045)))  # 2, 12, 12, 18 ms beyond
    assert grows.observations == ("stage 1 spends clearly more beyond its collectives than data parallelism",)
    assert "grows with the number of collectives a step runs (2.0 ms for 1, 12.0 ms for 6" in grows.text
    assert "about 2000 us for each collective beyond data parallelism's, the optimizer's Python" in grows.text
    flat = sharding.sharding_lesson(_sharding(times=(0.020, 0.031, 0.031, 0.029)))  # stage 3: 2 ms beyond, 9 calls
    assert "these numbers do not say where it went" in flat.text and "Python" not in flat.text
    less = sharding.sharding_lesson(_sharding(times=(0.030, 0.021, 0.021, 0.030)))
    assert less.observations == ("stage 1 spends clearly less beyond its collectives than data parallelism",)
    assert "10.0 ms less" in less.text


def test_the_model_sentence_names_latencies_only_for_the_same_bytes_in_more_calls():
    more = sharding.sharding_lesson(_sharding()).text
    # 2 ranks: an allreduce is 2 ring steps, each reduce-scatter or allgather 1
    assert "prices stage 1's collectives 6% above data parallelism's: the same bytes in 6 calls instead of 1, 6 ring " \
           "steps one after another instead of 2, so the difference is 4 more message latencies" in more
    heavier = sharding.sharding_lesson(_sharding(sent=(1.0, 1.2, 1.2, 1.5))).text
    assert "6% above data parallelism's. Beyond" in heavier and "latencies" not in heavier


def test_the_latencies_named_are_the_cost_models_difference_between_stage_1_and_data_parallelism():
    """On uniform links the same bytes cost the same bandwidth time either way, so what the cost model adds for stage 1
    is its extra ring steps times one link's latency: the count the sentence names (4 ranks: 18 steps against 6)."""
    from ringlab.algorithms import build
    from ringlab.predict import predict
    from ringlab.topology import from_spec

    n, latency = 4, 20e-6  # uniform:0.05:20, 20 us a message
    topology, _ = from_spec("uniform:0.05:20", n)
    sizes = sharding.unit_bytes(sharding.make_model())
    priced = {v: sum(predict(build(name, n), nbytes, topology).seconds for name, nbytes in sharding._calls(v, sizes))
              for v in sharding.VARIANTS[:2]}
    steps = {v: sharding.message_steps(v, len(sharding._calls(v, sizes)), n) for v in sharding.VARIANTS[:2]}
    assert steps == {"data parallel": 6, "ZeRO stage 1": 18}
    extra = priced["ZeRO stage 1"] - priced["data parallel"]
    assert abs(extra / ((steps["ZeRO stage 1"] - steps["data parallel"]) * latency) - 1) < 0.02, extra


def _scale_row(variant, seconds, algorithms, busbw):
    return {"machine": "hgx-h100-8", "ranks": 8, "variant": variant, "memory": 1e9, "gb": 1.0, "fits": True,
            "comm_s": seconds, "algorithms": algorithms, "busbw": busbw}


def test_the_scale_sentence_explains_the_same_bytes_taking_longer_from_the_picks():
    def rows(dp_algorithm, dp_busbw, ring_busbw, stage_s):
        rs_ag = {"reduce_scatter": "ring", "allgather": "ring"}
        return [_scale_row("data parallel", 0.054, {"allreduce": dp_algorithm}, {"allreduce": dp_busbw}),
                *(_scale_row(f"ZeRO stage {k}", stage_s, rs_ag, {c: ring_busbw for c in rs_ag}) for k in (1, 2)),
                _scale_row("ZeRO stage 3", 1.5 * stage_s, {**rs_ag}, {c: ring_busbw for c in rs_ag})]

    slower = sharding.describe_at_scale(rows("nvls", 489e9, 370e9, 0.0713))
    assert "yet take 1.32x as long: NCCL's model runs the allreduce by nvls at 489 GB/s of bus bandwidth, the " \
           "reduce-scatter by ring at 370 GB/s and the all-gather by ring at 370 GB/s." in slower
    alike = sharding.describe_at_scale(rows("ring", 370e9, 370e9, 0.0541))
    assert "and take about as long (1.00x)." in alike and "nvls" not in alike
    predicted = sharding.describe_at_scale(sharding.at_scale(machines=("hgx-h100-8",)))
    assert "the allreduce by nvls" in predicted and "the all-gather by ring" in predicted
