"""ringlab.train.sequence and .ulysses: Megatron's sequence parallelism and DeepSpeed-Ulysses equal the unsplit
computation (forward and every gradient, float64, against torch on one rank), on ranks simulated as threads of
this process and on 2 and 3 real ranks; the bytes each rank sends and the activations it keeps, measured."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the train extra)")

from ringlab.cluster.launch import run_mpi  # noqa: E402
from ringlab.train.sequence import (ParallelLayer, SimulatedRanks, TransformerLayer, attend,  # noqa: E402
                                    layer_traffic, megatron_activation_bytes, saved_activations)
from ringlab.train.ulysses import ulysses_attention, ulysses_bytes  # noqa: E402

SCRIPT = Path(__file__).parent / "mpi" / "sequence_equivalence.py"


def worst(pairs) -> float:
    return max(float((a.detach() - b.detach()).abs().max() / b.detach().abs().max()) for a, b in pairs)


def run_layer(nranks: int, sequence_parallel: bool, regather: bool = True, dropout: float = 0.1):
    """The layer split over simulated ranks against the unsplit one: (difference, sent, saved, output) per rank."""
    layer = TransformerLayer(hidden=12, heads=12, ffn=10, dropout=dropout, seed=1).double()
    x = torch.randn(4 * nranks, 2, 12, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(4 * nranks, 2, 12, dtype=torch.float64)
    y = layer(x, seed=5)
    (y * weights).sum().backward()

    def work(group):
        split = ParallelLayer(layer, group, sequence_parallel=sequence_parallel, regather=regather)
        mine = split.scatter_input(x.detach()).clone().requires_grad_(True)
        out = []
        saved = saved_activations(split, lambda: out.append(split(mine, seed=5)))
        (out[0] * split.scatter_input(weights)).sum().backward()
        split.sum_replicated_gradients()
        pairs = [(out[0], split.scatter_input(y)), (mine.grad, split.scatter_input(x.grad)),
                 (split.qkv_weight.grad, layer.qkv.weight.grad[split.qkv_rows]),
                 (split.proj_weight.grad, layer.proj.weight.grad[:, split.proj_columns]),
                 (split.fc1_weight.grad, layer.fc1.weight.grad[split.ffn_rows]),
                 (split.fc2_weight.grad, layer.fc2.weight.grad[:, split.ffn_rows]),
                 (split.fc2_bias.grad, layer.fc2.bias.grad), (split.proj_bias.grad, layer.proj.bias.grad),
                 (split.norm1_weight.grad, layer.norm1.weight.grad), (split.norm2_bias.grad, layer.norm2.bias.grad)]
        return worst(pairs), dict(group.sent), saved, out[0].detach()

    return SimulatedRanks(nranks).run(work), x.numel() * 8


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_sequence_parallel_layer_on_simulated_ranks_equals_the_unsplit_layer_and_sends_what_tensor_parallelism_does(
        nranks):
    tensor, activation = run_layer(nranks, sequence_parallel=False)
    sequence, _ = run_layer(nranks, sequence_parallel=True)
    for difference, *_ in tensor + sequence:
        assert difference < 1e-9
    assert worst([(torch.cat([output for *_, output in sequence]), tensor[0][3])]) < 1e-12  # SP's rows = TP's
    ring = 2 * (nranks - 1) * activation // nranks  # one ring allreduce of a (s, b, h) activation
    tokens = 4 * nranks
    assert tensor[0][1] == layer_traffic(tokens, 2, 12, nranks, 8, sequence_parallel=False)
    assert sequence[0][1]["allgather"] == layer_traffic(tokens, 2, 12, nranks, 8)["allgather"]
    assert sequence[0][1]["reduce_scatter"] == layer_traffic(tokens, 2, 12, nranks, 8)["reduce_scatter"]
    for (_, tp_sent, tp_saved, _), (_, sp_sent, sp_saved, _) in zip(tensor, sequence):
        assert tp_sent["allreduce"] == 4 * ring  # f and f-bar of attention and of the MLP, forward and backward
        assert sp_sent["allgather"] + sp_sent["reduce_scatter"] == tp_sent["allreduce"]  # the same bytes
        assert sp_sent["regather"] == 2 * (nranks - 1) * activation // nranks  # Megatron's backward all-gathers
        assert sp_saved["norm"] * nranks == tp_saved["norm"]  # LayerNorm and dropout activations: 1/t
        assert sp_saved["column input"] * nranks == tp_saved["column input"]
        assert sp_saved["attention"] == tp_saved["attention"] and sp_saved["mlp"] == tp_saved["mlp"]


def test_sequence_parallelism_keeping_the_gathered_input_skips_the_backward_gather_and_keeps_t_times_more():
    tensor, _ = run_layer(2, sequence_parallel=False)
    kept, _ = run_layer(2, sequence_parallel=True, regather=False)
    for (_, _, tp_saved, _), (difference, sent, saved, _) in zip(tensor, kept):
        assert difference < 1e-9 and "regather" not in sent
        assert saved["column input"] == tp_saved["column input"] and saved["norm"] * 2 == tp_saved["norm"]


def test_the_layer_refuses_what_it_cannot_split():
    layer = TransformerLayer(hidden=12, heads=4, ffn=10)
    with pytest.raises(ValueError, match="4 heads do not split over 3 ranks"):
        SimulatedRanks(3).run(lambda group: ParallelLayer(layer, group))
    with pytest.raises(ValueError, match="7 tokens do not divide by 2"):
        SimulatedRanks(2).run(lambda group: ParallelLayer(layer, group).scatter_input(torch.zeros(7, 1, 12)))
    with pytest.raises(ValueError, match="12 hidden features do not split into 5 heads"):
        TransformerLayer(hidden=12, heads=5)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_ulysses_on_simulated_ranks_equals_full_attention_and_sends_n_minus_1_over_n_of_qkv_and_output(nranks, causal):
    heads, tokens = 12, 3  # tokens a rank
    q, k, v = (torch.randn(tokens * nranks, 2, heads, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    weights = torch.randn(tokens * nranks, 2, heads, 4, dtype=torch.float64)
    full = attend(q, k, v, causal).view(q.shape)
    (full * weights).sum().backward()

    def work(group):
        mine = slice(group.rank * tokens, (group.rank + 1) * tokens)
        mq, mk, mv = (t.detach()[mine].clone().requires_grad_(True) for t in (q, k, v))
        out = ulysses_attention(mq, mk, mv, group, causal=causal)
        forward = group.sent["alltoall"]
        (out * weights[mine]).sum().backward()
        pairs = [(out, full[mine]), (mq.grad, q.grad[mine]), (mk.grad, k.grad[mine]), (mv.grad, v.grad[mine])]
        return worst(pairs), forward, group.sent["alltoall"]

    expected = ulysses_bytes(tokens * nranks, 2, heads, 4, nranks, itemsize=8)
    shard = tokens * 2 * heads * 4 * 8
    assert expected["forward"] == (nranks - 1) * 4 * shard // nranks
    for difference, forward, sent in SimulatedRanks(nranks).run(work):
        assert difference < 1e-12
        assert forward == expected["forward"] and sent == expected["forward"] + expected["backward"]


def test_ulysses_needs_heads_that_divide_by_the_ranks():
    q = torch.zeros(2, 1, 3, 4)
    with pytest.raises(ValueError, match="3 heads do not divide by 2 ranks"):
        SimulatedRanks(2).run(lambda group: ulysses_attention(q, q, q, group))
    with pytest.raises(ValueError, match="one shape"):
        SimulatedRanks(2).run(lambda group: ulysses_attention(q, q, q[:1], group))
    with pytest.raises(ValueError, match="tokens and heads that divide by 4 ranks; got 8 and 6"):
        ulysses_bytes(8, 1, 6, 4, 4)


def test_ulysses_bytes_per_rank_stay_flat_when_the_sequence_grows_with_the_ranks():
    per_rank = [ulysses_bytes(4096 * n, 1, 64, 128, n)["forward"] for n in (2, 4, 8, 16)]
    assert per_rank == sorted(per_rank) and per_rank[-1] < 4 * 4096 * 64 * 128 * 2  # -> 4 s0 h b from below


def test_a_failing_simulated_rank_raises_its_error_rather_than_leaving_the_others_waiting():
    def work(group):
        if group.rank == 1:
            raise RuntimeError("rank 1 fails")
        return group.run("allreduce.ring", torch.ones(4))

    with pytest.raises(RuntimeError, match="rank 1 fails"):
        SimulatedRanks(3, timeout=10).run(work)


@pytest.mark.parametrize("nranks", [2, 3])
def test_sequence_parallelism_and_ulysses_on_real_ranks_equal_torch_on_one(nranks):
    done = run_mpi(nranks, [str(SCRIPT)], timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows = {row["check"]: row for row in lines}
    assert len(rows) == 6
    for row in rows.values():
        assert row["difference"] < 1e-9, row
    tensor, sequence = rows["layer, tensor"], rows["layer, sequence"]
    kept = rows["layer, sequence, gathered input kept"]
    ring = 2 * (nranks - 1) * tensor["activation_bytes"] // nranks
    assert tensor["forward"] == {"allreduce": 2 * ring} and tensor["sent"] == {"allreduce": 4 * ring}
    assert sum(sequence["forward"].values()) == tensor["forward"]["allreduce"]
    assert sequence["sent"]["allgather"] + sequence["sent"]["reduce_scatter"] == tensor["sent"]["allreduce"]
    assert "regather" not in kept["sent"] and sequence["sent"]["regather"] == ring
    assert sequence["saved"]["norm"] * nranks == tensor["saved"]["norm"] == kept["saved"]["norm"] * nranks
    column = "column input"
    assert sequence["saved"][column] * nranks == tensor["saved"][column] == kept["saved"][column]
    for causal in (False, True):
        ulysses = rows[f"ulysses, causal={causal}"]
        assert ulysses["forward"] == (nranks - 1) * 4 * ulysses["shard_bytes"] // nranks
        assert ulysses["sent"] == 2 * ulysses["forward"]


def test_what_tensor_parallelism_leaves_whole_is_the_papers_10_sbh_and_sequence_parallelism_splits_it():
    nranks, tokens, batch, hidden = 2, 8, 2, 12
    tensor, _ = run_layer(nranks, sequence_parallel=False)
    sequence, _ = run_layer(nranks, sequence_parallel=True)
    sbh, stats = tokens * batch * hidden, 2 * 2 * tokens * batch * 8  # LayerNorm's mean and 1/std a token, twice
    for (_, _, tp, _), (_, _, sp, _) in zip(tensor, sequence):
        # float64 here: LayerNorm inputs 2 x 8 sbh, bool masks 2 sbh, column inputs 2 x 8 sbh; in 16 bits the
        # paper's 4 + 2 + 4 = 10 sbh
        assert tp["norm"] == 2 * 8 * sbh + 2 * sbh + stats and tp["column input"] == 2 * 8 * sbh
        assert sp["norm"] == tp["norm"] / nranks and sp["column input"] == tp["column input"] / nranks
    whole = megatron_activation_bytes(tokens, batch, hidden, 12, nranks)
    split = megatron_activation_bytes(tokens, batch, hidden, 12, nranks, sequence_parallel=True)
    assert whole - split == pytest.approx(10 * sbh * (1 - 1 / nranks))  # exactly the part that was left whole
    assert megatron_activation_bytes(2048, 1, 12288, 96) == pytest.approx(2048 * 12288 * (34 + 5 * 96 * 2048 / 12288))


def test_layer_traffic_is_the_same_with_and_without_sequence_parallelism_but_for_megatrons_regather():
    for nranks in (2, 4, 8):
        sp = layer_traffic(4096, 1, 8192, nranks)
        tp = layer_traffic(4096, 1, 8192, nranks, sequence_parallel=False)
        assert sp["allgather"] + sp["reduce_scatter"] == tp["allreduce"]
        assert sp["regather"] == tp["allreduce"] // 4  # one more all-gather for each of the two column layers
    with pytest.raises(ValueError, match="4095 tokens do not divide by 2"):
        layer_traffic(4095, 1, 8192, 2)
