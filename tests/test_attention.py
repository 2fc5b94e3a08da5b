"""ringlab.train.attention: ring attention on 2 and 3 real ranks equals full attention (causal or not, overlapped
or not, several heads), and the online softmax it folds blocks with is exact."""
import json
from pathlib import Path

import numpy as np
import pytest

from ringlab.cluster.launch import run_mpi
from ringlab.train.attention import attention, merge

SCRIPT = Path(__file__).parent / "mpi" / "ring_attention.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_ring_attention_equals_full_attention(nranks):
    done = run_mpi(nranks, [str(SCRIPT)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 4
    for row in rows:
        assert row["difference"] < 1e-9, row
    k_and_v = 2 * 5 * 2 * 3 * 8  # one rank's block: 2 heads x 5 tokens x (3 + 3) values of 8 bytes
    assert rows[0]["sent"] == (nranks - 1) * k_and_v  # n-1 blocks passed on, as a ring allgather does


def test_merging_blocks_one_at_a_time_is_the_softmax_of_them_all():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((9, 3)), rng.standard_normal((9, 2))
    m, l, o = np.full(4, -np.inf), np.zeros(4), np.zeros((4, 2))
    for block in (slice(0, 2), slice(2, 7), slice(7, 9)):
        m, l, o = merge(m, l, o, q @ k[block].T / np.sqrt(3), v[block])
    assert np.allclose(o / l[:, None], attention(q, k, v), rtol=1e-12, atol=0)


ZIGZAG = Path(__file__).parent / "mpi" / "ring_attention_zigzag.py"


@pytest.mark.parametrize("nranks", [2, 3])
def test_ring_attention_in_the_zigzag_layout_equals_full_attention_and_balances_causal_work(nranks):
    from ringlab.train.attention import causal_work

    pytest.importorskip("torch", reason="the reference gradients are torch autograd's (the train extra)")
    done = run_mpi(nranks, [str(ZIGZAG)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(row["layout"], row["causal"]) for row in rows] == [
        ("contiguous", False), ("contiguous", True), ("zigzag", False), ("zigzag", True)]
    for row in rows:
        assert row["difference"] < 1e-9, row  # the output and the gradients of q, k and v
        assert row["forward_sent"] == (nranks - 1) * row["block_bytes"]  # K and V passed on n-1 times
        assert row["backward_sent"] == 2 * (nranks - 1) * row["block_bytes"] + row["block_bytes"]  # + dK, dV home
        tile = row["chunk"] ** 2  # scores in one (chunk x chunk) block, a chunk being 1/2n of the sequence
        if row["causal"]:  # contiguous: the diagonal block is computed whole, its masked half too
            extra = 1 if row["layout"] == "contiguous" else 0
            assert row["work"] == [(blocks + extra) * tile for blocks in causal_work(nranks, row["layout"])], row
        else:
            assert row["work"] == [4 * nranks * tile] * nranks  # every rank: its 2 chunks against all 2n
    contiguous, zigzag = rows[1]["work"], rows[3]["work"]
    assert len(set(zigzag)) == 1 and max(contiguous) > max(zigzag)
    assert sum(contiguous) == sum(zigzag) + nranks * 9  # the same unmasked scores, plus the masked diagonal halves


def test_causal_work_per_rank_contiguous_grows_with_the_rank_zigzag_is_even():
    from ringlab.train.attention import causal_work, layout_chunks

    assert causal_work(4) == [3, 7, 11, 15]  # 4r + 3 blocks of the 2n x 2n grid
    assert causal_work(4, "zigzag") == [9, 9, 9, 9]  # 2n + 1 on every rank
    assert layout_chunks(4, "zigzag") == [(0, 7), (1, 6), (2, 5), (3, 4)]
    for n in (1, 2, 3, 8):
        assert sum(causal_work(n)) == sum(causal_work(n, "zigzag")) == n * (2 * n + 1)
    with pytest.raises(ValueError, match="layout must be one of"):
        causal_work(2, "striped")


def attention_gradients(q, k, v, grad_out, causal):
    """dq, dk, dv of sum(attention(q, k, v) * grad_out) by hand (softmax's Jacobian), checked against torch
    autograd in the multi-rank test."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape[-2:], dtype=bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dp = grad_out @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.sqrt(q.shape[-1])
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ grad_out


@pytest.mark.parametrize("layout", ["contiguous", "zigzag"])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_simulated_ring_attention_equals_full_attention_in_either_layout(layout, nranks):
    from ringlab.train.attention import causal_work, simulate_ring_attention, simulate_ring_attention_backward

    rng = np.random.default_rng(nranks)
    q, k, v = (rng.standard_normal((2, 2 * nranks * 3, 4)) for _ in range(3))
    for causal in (False, True):
        out, work = simulate_ring_attention(q, k, v, nranks, causal=causal, layout=layout)
        assert np.allclose(out, attention(q, k, v, causal=causal), rtol=1e-12, atol=1e-12)
        grad_out = rng.standard_normal(v.shape)
        grads = simulate_ring_attention_backward(q, k, v, grad_out, nranks, causal=causal, layout=layout)
        for got, expected in zip(grads, attention_gradients(q, k, v, grad_out, causal)):
            assert np.allclose(got, expected, rtol=1e-12, atol=1e-12)
        extra = 1 if layout == "contiguous" else 0  # the diagonal block, computed whole
        assert work == ([9 * (b + extra) for b in causal_work(nranks, layout)] if causal else [4 * nranks * 9] * nranks)


def test_a_sequence_the_layout_cannot_cut_is_refused():
    from ringlab.train.attention import shard, token_positions

    assert token_positions(12, 3, 1, "zigzag").tolist() == [2, 3, 8, 9]
    assert shard(np.arange(12.0)[:, None], 3, 2, "zigzag")[:, 0].tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="cuts the sequence into 6 equal parts; 9 tokens do not divide by 6"):
        token_positions(9, 3, 0, "zigzag")


def test_the_transfer_hides_once_a_block_holds_flop_rate_over_bandwidth_times_half_the_bytes_an_element():
    from ringlab.train.attention import hiding_block, hiding_examples

    assert hiding_block(1e15, 1e11, bytes_per_element=2) == pytest.approx(1e4)  # c >= F b / (2 B)
    assert hiding_block(1e15, 1e11, computed=0.5) == pytest.approx(2e4)  # causal zigzag: half the tiles a step
    examples = hiding_examples()
    assert examples["NVLink"]["tokens"] == pytest.approx(989e12 / 450e9)  # about 2,200 tokens
    assert examples["400G NIC"]["tokens"] == pytest.approx(989e12 / 50e9)  # about 19,800 tokens
    assert all("published peaks" in row["label"] for row in examples.values())
    with pytest.raises(ValueError, match="bandwidth must be a positive number"):
        hiding_block(1e15, 0.0)
