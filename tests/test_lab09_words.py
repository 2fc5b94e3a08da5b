"""Lab 09's experts and attention lessons: every clause that concludes follows the numbers beside it. Each lesson is
driven with numbers from both sides of each verdict; the words must change with them, and a cause is named only where
the numbers show it (issue 51)."""
import numpy as np
import pytest

from ringlab.lab.exercises import NotDoneYet
from ringlab.lessons.lab09_model_parallelism import attention, experts
from ringlab.train.attention import merge


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


def test_routing_words_are_the_tables_own_loads():
    from ringlab.lessons.lab09_model_parallelism.experts import describe_routing

    even = describe_routing([[5, 5], [5, 5]])
    assert even.splitlines()[0] == "rank 0:     5     5"
    assert "loads against the even share: 1.00, 1.00 (largest count 5, 1.00x a rank's even share" in even
    skewed = describe_routing([[9, 1], [7, 3]])
    assert "loads against the even share: 1.60, 0.40 (largest count 9, 1.80x a rank's even share" in skewed
