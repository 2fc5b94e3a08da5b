"""Lab 08's sharding, experts and attention lessons: every clause that concludes follows the numbers beside it.
Each lesson is driven with numbers from both sides of each verdict; the words must change with them, and a cause is
named only where the numbers show it (issue 51)."""
import numpy as np
import pytest

from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab08_beyond_data_parallelism import attention, experts, sharding
from ringlab.train.attention import merge
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
    assert "prices stage 1's collectives 6% above data parallelism's: the same bytes in 6 calls instead of 1, so the " \
           "difference is 5 more message latencies" in more
    heavier = sharding.sharding_lesson(_sharding(sent=(1.0, 1.2, 1.2, 1.5))).text
    assert "6% above data parallelism's. Beyond" in heavier and "latencies" not in heavier


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


def _loads(skewed_table, skew_extra=0.0):
    even = [[64, 64, 64, 64]] * 4
    rows = []
    for router, table, extra in (("as initialised", even, 0.0), ("skewed", skewed_table, skew_extra)):
        per_expert = np.asarray(table).sum(axis=0).tolist()
        rows.append({"router": router, "per_expert": per_expert, "capacity": int(np.max(table)), "table": table,
                     "token_bytes": 512, "mean_pair": 64.0, "imbalance": max(per_expert) / np.mean(per_expert),
                     "sent": 3 * int(np.max(table)) * 512 * 3, "padded": 3, "measured_s": 1.0 + extra,
                     "predicted_s": 0.5})
    return rows


def test_the_imbalance_lesson_places_the_largest_count_and_names_the_wait_only_when_both_grew():
    diagonal = [[160, 32, 32, 32], [100, 52, 52, 52], [100, 52, 52, 52], [100, 52, 52, 52]]
    finding = experts.imbalance_lesson(_loads(diagonal, skew_extra=0.5))
    assert "was 160 (rank 0 to rank 0: its own expert) against a mean of 64" in finding.text
    assert "the busiest expert's tokens went from 256 to 460: it grew with the busiest expert's load" in finding.text
    off = [[32, 160, 32, 32]] + [[52, 100, 52, 52]] * 3
    assert "was 160 (rank 0 to rank 1) against" in experts.imbalance_lesson(_loads(off)).text
    flat = experts.imbalance_lesson(_loads(diagonal))
    assert "it did not grow with the busiest expert's load here" in flat.text and "costs twice" not in flat.text


def test_capacity_drops_follow_the_table_and_padding_is_the_factor_that_drops_nothing():
    skewed = [[160, 32, 32, 32], [100, 52, 52, 52], [100, 52, 52, 52], [100, 52, 52, 52]]
    rows = experts.capacity_rows(_loads(skewed))
    by = {(r["router"], r["scheme"]): r for r in rows}
    assert by[("as initialised", "capacity factor 1.0")]["dropped"] == 0
    skew1 = by[("skewed", "capacity factor 1.0")]
    assert skew1["block"] == 64 and skew1["dropped"] == 96 + 3 * 36 and skew1["sent"] == 3 * 64 * 512
    assert by[("skewed", "capacity factor 2.0")]["dropped"] == 160 - 128
    assert by[("skewed", "padded to the largest count")]["no_drop_factor"] == pytest.approx(2.5)
    assert by[("skewed", "dropless (variable sizes)")]["sent"] == 204 * 512  # the busiest sender's tokens for others
    finding = experts.capacity_lesson(rows)
    assert finding.conclusions == ("capacity factor 1.0 drops no tokens with the router as initialised",
                                   "capacity factor 1.0 drops tokens with the router skewed")
    assert "would drop none / none / none" in finding.text and "would drop 204 (19.9%) / 140 (13.7%) / 32 (3.1%)" \
        in finding.text
    assert "capacity factor 2.50, the smallest that drops nothing here" in finding.text
    assert "padding sends 2.4x as much" in finding.text
    even = experts.capacity_lesson(experts.capacity_rows(_loads([[64] * 4] * 4)))
    assert "as much as padding" in even.text and "drops tokens" not in " ".join(even.conclusions)
    with pytest.raises(ValueError, match="one expert a rank"):
        experts.capacity_rows([dict(_loads([[64] * 4] * 4)[0], per_expert=[1] * 8)])


def _ring(overlapped, serial, compute, ranks=4, cores=2, difference=1e-15):
    return {"ranks": ranks, "difference": difference, "causal": True, "block_bytes": 16384, "passed_bytes": 3 * 16384,
            "sequence": 1024, "overlapped_s": overlapped, "serial_s": serial, "compute_s": compute, "cores": cores}


def test_the_attention_lesson_names_a_cause_only_where_the_numbers_show_one():
    paid = attention.attention_lesson(_ring(0.006, 0.010, 0.005))
    assert paid.observations == ("overlapping paid on this machine",)
    assert "overlapping paid here, 1.67x of the 2.00x there was" in paid.text and "cores" not in paid.text
    little = attention.attention_lesson(_ring(0.010, 0.010, 0.0095))
    assert little.observations == ("overlapping did not clearly pay on this machine",)
    assert "the compute took 95% of the call and the transfers 5%; overlapping hides only the smaller" in little.text
    assert "same cores" not in little.text
    waiting = attention.attention_lesson(_ring(0.010, 0.010, 0.0004))  # all transfer: nothing to hide it behind
    assert "the compute took 4% of the call and the transfers 96%" in waiting.text
    crowded = attention.attention_lesson(_ring(0.010, 0.010, 0.005, ranks=4, cores=2))
    assert "4 ranks share 2 cores: no core sat idle" in crowded.text
    roomy = attention.attention_lesson(_ring(0.010, 0.010, 0.005, ranks=4, cores=8))
    assert "these numbers do not say why" in roomy.text and "same cores" not in roomy.text
    assert "ring attention differs from full attention" in attention.attention_lesson(
        _ring(0.01, 0.01, 0.005, difference=1e-3)).conclusions


def test_merge_folds_a_row_that_sees_no_key_in_a_block_without_nan():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((9, 3)), rng.standard_normal((9, 2))
    masked = np.zeros((4, 9), dtype=bool)
    masked[0, :4] = True  # row 0 sees nothing of the first block
    masked[2, :] = True   # row 2 sees no key at all
    m, l, o = np.full(4, -np.inf), np.zeros(4), np.zeros((4, 2))
    for block in (slice(0, 4), slice(4, 9)):
        scores = np.where(masked[:, block], -np.inf, q @ k[block].T / np.sqrt(3))
        m, l, o = merge(m, l, o, scores, v[block])
    assert np.isfinite(o).all() and np.isfinite(l).all()
    assert l[2] == 0 and (o[2] == 0).all() and m[2] == -np.inf  # nothing seen: nothing added
    seen = [0, 1, 3]
    scores = np.where(masked, -np.inf, q @ k.T / np.sqrt(3))[seen]
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    assert np.allclose(o[seen] / l[seen, None], weights / weights.sum(axis=1, keepdims=True) @ v, rtol=1e-12)


def test_the_merge_check_refuses_a_merge_that_gives_nan_on_a_masked_row():
    def naive(m, l, o, scores, v):  # exp(-inf - (-inf)) on a row with no key yet
        top = np.maximum(m, scores.max(axis=-1))
        rescale = np.exp(m - top)
        p = np.exp(scores - top[..., None])
        return top, l * rescale + p.sum(axis=-1), o * rescale[..., None] + p @ v

    with np.errstate(invalid="ignore"), pytest.raises(AssertionError, match=r"rows \[0\].*NaN(.|\n)*Hint"):
        attention.check_merge(naive, strict=True)
    assert attention.check_merge(merge, strict=True) is merge
    with pytest.raises(NotDoneYet):
        attention.check_merge(lambda m, l, o, scores, v: None, strict=True)


def test_the_padding_check_counts_the_diagonal_as_the_text_says():
    off_diagonal_only = lambda table, b: (len(table) - 1) * max(table[s][d] for s in range(len(table))
                                                                 for d in range(len(table)) if s != d) * b
    with pytest.raises(AssertionError, match="Hint"):
        experts.check_padded_bytes(off_diagonal_only, strict=True)
    assert experts._padded_bytes([[3, 1], [2, 2]], 8) == 24  # the largest count, 3, is rank 0's own
