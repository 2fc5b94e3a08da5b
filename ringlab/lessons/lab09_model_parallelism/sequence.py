"""Lab 09's sequence parallelism (Megatron's) and DeepSpeed-Ulysses, on ranks simulated as threads of this process
(no MPI): each split layer against the unsplit one, the bytes each rank sends by collective, the activations it keeps
by part beside Korthikanti et al.'s formula, and Ulysses' bytes against ring attention's as the sequence grows with
the ranks."""
from __future__ import annotations

from ...lab.findings import Finding
from ...lab.words import and_join

# a small layer that 2 and 3 ranks both split: heads and tokens divide by 6, the MLP's features by 2 and 3
TOKENS, BATCH, HIDDEN, HEADS, FFN = 12, 2, 24, 6, 48
RANKS = (2, 3)
DROPOUT = 0.1
EQUAL = 1e-9  # relative, in float64
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "regather")
# the 10 s b h that tensor parallelism leaves whole (Korthikanti et al. 2022, section 4.2.2), in 16-bit activations
# and 1-byte masks: the two LayerNorms' inputs (4) and dropout masks (2), the QKV and first MLP inputs (4)
PAPER_SBH = {"norm": 6, "column input": 4}
# the paper's GPT-3 175B row (Table 3): sequence 2048, hidden 12288, 96 heads, tensor parallelism 8
GPT3 = {"name": "GPT-3 175B", "tokens": 2048, "batch": 1, "hidden": 12288, "heads": 96, "ranks": 8}


def _layer(dtype):
    from ...train.sequence import TransformerLayer

    return TransformerLayer(hidden=HIDDEN, heads=HEADS, ffn=FFN, dropout=DROPOUT, seed=1).to(dtype)


def _one(nranks: int, sequence_parallel: bool, dtype) -> tuple[float, dict, dict]:
    """(largest relative difference from the unsplit layer, bytes rank 0 sent by collective, bytes it kept by part)."""
    import torch

    from ...train.sequence import ParallelLayer, SimulatedRanks, saved_activations

    layer = _layer(dtype)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(TOKENS, BATCH, HIDDEN, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(True)
    weights = torch.randn(TOKENS, BATCH, HIDDEN, generator=gen, dtype=torch.float64).to(dtype)
    y = layer(x, seed=5)
    (y.double() * weights.double()).sum().backward()

    def work(group):
        split = ParallelLayer(layer, group, sequence_parallel=sequence_parallel)
        mine = split.scatter_input(x.detach()).clone().requires_grad_(True)
        out = []
        saved = saved_activations(split, lambda: out.append(split(mine, seed=5)))
        (out[0].double() * split.scatter_input(weights).double()).sum().backward()
        sent = dict(group.sent)  # a layer's collectives; the replicated gradients' allreduce is once a step
        split.sum_replicated_gradients()
        pairs = [(out[0], split.scatter_input(y)), (mine.grad, split.scatter_input(x.grad)),
                 (split.qkv_weight.grad, layer.qkv.weight.grad[split.qkv_rows]),
                 (split.proj_weight.grad, layer.proj.weight.grad[:, split.proj_columns]),
                 (split.fc1_weight.grad, layer.fc1.weight.grad[split.ffn_rows]),
                 (split.fc2_weight.grad, layer.fc2.weight.grad[:, split.ffn_rows]),
                 (split.norm1_weight.grad, layer.norm1.weight.grad), (split.norm2_bias.grad, layer.norm2.bias.grad)]
        worst = max(float((a.detach().double() - b.detach().double()).abs().max() / b.detach().double().abs().max())
                    for a, b in pairs)
        return worst, sent, dict(saved)

    done = SimulatedRanks(nranks).run(work)
    return max(d for d, _, _ in done), done[0][1], done[0][2]


def measure_sequence_parallel(ranks=RANKS) -> list[dict]:
    """One layer split over t simulated ranks, tensor parallelism and sequence parallelism, for each t in ``ranks``:
    the largest difference from the unsplit layer (float64: output, input's and weights' gradients, dropout on), and
    in 16 bits, as the paper counts, the bytes rank 0 sent by collective and the activations it kept by part."""
    import torch

    from ...train.sequence import layer_traffic

    rows = []
    for t in ranks:
        for mode in ("tensor", "sequence"):
            difference, _, _ = _one(t, mode == "sequence", torch.float64)
            _, sent, saved = _one(t, mode == "sequence", torch.float16)
            rows.append({"ranks": t, "mode": mode, "difference": difference, "sent": sent, "saved": saved,
                         "counted": dict(layer_traffic(TOKENS, BATCH, HIDDEN, t, 2, sequence_parallel=mode == "sequence")),
                         "tokens": TOKENS, "batch": BATCH, "hidden": HIDDEN, "heads": HEADS, "itemsize": 2})
    return rows


SEQUENCE_COLUMNS = {"t": "ranks", "split": "mode", "largest difference (relative)": ("difference", ".1e"),
                    "allreduce (KiB)": ("allreduce_bytes", ".2f"), "all-gather (KiB)": ("allgather_bytes", ".2f"),
                    "reduce-scatter (KiB)": ("reduce_scatter_bytes", ".2f"),
                    "re-gather (KiB)": ("regather_bytes", ".2f"), "norm regions kept (KiB)": ("norm_bytes", ".2f"),
                    "column inputs kept (KiB)": ("column_bytes", ".2f")}


def sequence_rows(rows: list[dict]) -> list[dict]:
    """The rows with rank 0's bytes by collective and by part as columns, for the table (its headers say KiB)."""
    return [{**r, **{f"{c}_bytes": r["sent"].get(c, 0) for c in COLLECTIVES},
             "norm_bytes": r["saved"].get("norm", 0), "column_bytes": r["saved"].get("column input", 0)} for r in rows]


def paper_bytes(row: dict) -> dict:
    """The paper's pieces of what tensor parallelism leaves whole, for ``row``'s layer on one rank: 6 s b h in the norm
    regions, 4 s b h of column inputs (16-bit), each divided by t under sequence parallelism."""
    sbh = row["tokens"] * row["batch"] * row["hidden"]
    share = row["ranks"] if row["mode"] == "sequence" else 1
    return {part: k * sbh / share for part, k in PAPER_SBH.items()}


def sequence_lesson(rows: list[dict], model: dict = GPT3) -> Finding:
    """Equal or not; whether sequence parallelism's all-gathers and reduce-scatters carry what tensor parallelism's
    allreduces do, and what the re-gather adds; how many times smaller each part of the kept activations is, against
    t; the measured pieces against the paper's 10 s b h; and the paper's formula at ``model``'s size."""
    from ...train.sequence import megatron_activation_bytes

    worst = max(r["difference"] for r in rows)
    equal = worst < EQUAL
    said = [f"Every split ({and_join(sorted({r['ranks'] for r in rows}))} ranks, tensor and sequence parallelism, "
            f"dropout {DROPOUT:g}) differs from the unsplit layer by at most {worst:.1e} (relative, output and every "
            "gradient): " + ("the same layer, in float64." if equal else "not the same layer.")]
    conclusions = ["each split equals the unsplit layer" if equal else "a split differs from the unsplit layer"]
    same_bytes, shrinks, unchanged = True, [], True
    for t in sorted({r["ranks"] for r in rows}):
        tp = next(r for r in rows if r["ranks"] == t and r["mode"] == "tensor")
        sp = next(r for r in rows if r["ranks"] == t and r["mode"] == "sequence")
        pair = sp["sent"].get("allgather", 0) + sp["sent"].get("reduce_scatter", 0)
        same_bytes &= pair == tp["sent"].get("allreduce", 0)
        regather = sp["sent"].get("regather", 0)
        norm = tp["saved"]["norm"] / sp["saved"]["norm"]
        column = tp["saved"]["column input"] / sp["saved"]["column input"]
        unchanged &= all(tp["saved"].get(p) == sp["saved"].get(p) for p in ("attention", "mlp"))
        shrinks.append((t, norm, column))
        said.append(f"At t = {t}: rank 0 sent {tp['sent'].get('allreduce', 0) / 2**10:.2f} KiB in 4 allreduces under "
                    f"tensor parallelism and {pair / 2**10:.2f} KiB in 4 all-gathers and 4 reduce-scatters under sequence "
                    f"parallelism" + (", the same bytes" if pair == tp["sent"].get("allreduce", 0) else
                                      f", {pair / tp['sent'].get('allreduce', 1):.2f}x as much")
                    + f", plus {regather / 2**10:.2f} KiB re-gathered in backward "
                    f"({regather / max(pair, 1):.0%} more); it kept {norm:.2f}x fewer bytes in the norm regions and "
                    f"{column:.2f}x fewer column inputs.")
    conclusions.append("sequence parallelism sends what tensor parallelism sends, plus the re-gather" if same_bytes
                       else "sequence parallelism sends other bytes than tensor parallelism")
    t_fold = all(abs(norm / t - 1) < 1e-9 and abs(column / t - 1) < 1e-9 for t, norm, column in shrinks)
    conclusions.append("the norm regions and column inputs shrink t-fold" if t_fold else
                       "the norm regions and column inputs do not shrink t-fold")
    said.append(("Both parts shrink exactly t-fold" if t_fold else "These parts do not shrink t-fold")
                + ("; attention's and the MLP's own activations are the same under both, already split by heads and "
                   "features." if unchanged else "; attention's or the MLP's activations differ between the two."))
    tp = next(r for r in rows if r["mode"] == "tensor")
    paper = sum(paper_bytes(tp).values())
    measured = tp["saved"]["norm"] + tp["saved"]["column input"]
    said.append(f"The paper's 10 s b h (16-bit) is {paper / 2**10:.2f} KiB for this layer; rank 0 kept "
                f"{measured / 2**10:.2f} KiB in those two parts under tensor parallelism, "
                + (f"{(measured - paper):.0f} bytes more: LayerNorm's mean and 1/std, two numbers a token for each "
                   "norm, which the paper leaves out." if measured > paper else
                   "the same." if measured == paper else f"{paper - measured:.0f} bytes less."))
    m = model
    whole = megatron_activation_bytes(m["tokens"], m["batch"], m["hidden"], m["heads"], m["ranks"])
    split = megatron_activation_bytes(m["tokens"], m["batch"], m["hidden"], m["heads"], m["ranks"],
                                      sequence_parallel=True)
    said.append(f"At {m['name']}'s size (s = {m['tokens']}, h = {m['hidden']}, {m['heads']} heads, t = {m['ranks']}) the "
                f"paper's formula gives {whole / 2**20:.0f} MiB of activations a rank keeps for one layer and one sequence "
                f"with tensor parallelism and {split / 2**20:.0f} MiB with sequence parallelism too: {1 - split / whole:.0%} less, "
                "for no more bytes on the wire than the allreduces (and the re-gather, which Megatron overlaps).")
    return Finding(" ".join(said), tuple(conclusions))


# -- Ulysses -----------------------------------------------------------------------------------------------------

ULYSSES_TOKENS, ULYSSES_WIDTH = 4, 4  # a rank's tokens and a head's width, small: the check is exactness


def ulysses_against_full(nranks: int = 2, heads: int = HEADS, causal: bool = True) -> dict:
    """Ulysses attention (two all-to-alls) on ``nranks`` simulated ranks against attention on the whole sequence on
    one: the largest relative difference (output and the gradients of q, k, v) and the bytes a rank sent, counted
    and by ``ulysses_bytes``. Raises ValueError where the heads do not divide by the ranks."""
    import torch

    from ...train.sequence import SimulatedRanks, attend
    from ...train.ulysses import ulysses_attention, ulysses_bytes

    tokens = ULYSSES_TOKENS * nranks
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(tokens, 1, heads, ULYSSES_WIDTH, generator=gen, dtype=torch.float64).requires_grad_(True)
               for _ in range(3))
    weights = torch.randn(tokens, 1, heads, ULYSSES_WIDTH, generator=gen, dtype=torch.float64)
    full = attend(q, k, v, causal).view(q.shape)
    (full * weights).sum().backward()

    def work(group):
        mine = slice(group.rank * ULYSSES_TOKENS, (group.rank + 1) * ULYSSES_TOKENS)
        mq, mk, mv = (t.detach()[mine].clone().requires_grad_(True) for t in (q, k, v))
        out = ulysses_attention(mq, mk, mv, group, causal=causal)
        forward = group.sent["alltoall"]
        (out * weights[mine]).sum().backward()
        pairs = [(out, full[mine]), (mq.grad, q.grad[mine]), (mk.grad, k.grad[mine]), (mv.grad, v.grad[mine])]
        return max(float((a - b).detach().abs().max() / b.detach().abs().max()) for a, b in pairs), forward

    done = SimulatedRanks(nranks).run(work)
    return {"ranks": nranks, "heads": heads, "tokens": tokens, "causal": causal,
            "difference": max(d for d, _ in done), "sent_forward": done[0][1],
            "expected_forward": ulysses_bytes(tokens, 1, heads, ULYSSES_WIDTH, nranks, itemsize=8)["forward"]}


def ulysses_said(result: dict) -> str:
    """A sentence on one Ulysses run."""
    equal = result["difference"] < EQUAL
    return (f"Ulysses on {result['ranks']} ranks, {result['heads']} heads, {result['tokens']} tokens of "
            f"{'causal ' if result['causal'] else ''}attention: it differs from attention on one rank by "
            f"{result['difference']:.1e} (output and gradients), {'the same' if equal else 'not the same'}; a rank sent "
            f"{result['sent_forward']:,} bytes in the forward's two all-to-alls"
            + (", as ulysses_bytes counts." if result["sent_forward"] == result["expected_forward"] else
               f", where ulysses_bytes counts {result['expected_forward']:,}."))


# a long-context layer: 4096 tokens a rank, 32 heads of 128 (a 4096-wide model), bf16
PER_RANK, LONG_HEADS, LONG_WIDTH = 4096, 32, 128
GROWTH = (2, 4, 8, 16, 32, 64)


def ulysses_rows(per_rank: int = PER_RANK, heads: int = LONG_HEADS, width: int = LONG_WIDTH, ranks=GROWTH,
                 itemsize: int = 2) -> list[dict]:
    """For each n, a sequence of n x ``per_rank`` tokens: the bytes a rank sends in one attention's forward under
    Ulysses (``ulysses_bytes``; None where the heads do not divide by n) and under ring attention (its K and V
    blocks round the ring, ``allgather.ring``'s traffic)."""
    from ...algorithms import build
    from ...simulate import traffic
    from ...train.ulysses import ulysses_bytes

    rows = []
    for n in ranks:
        tokens = n * per_rank
        kv = 2 * tokens * heads * width * itemsize
        ring = traffic(build("allgather.ring", n), kv, itemsize)["sent"][0]
        ulysses = ulysses_bytes(tokens, 1, heads, width, n, itemsize)["forward"] if heads % n == 0 else None
        rows.append({"ranks": n, "tokens": tokens, "heads": heads, "ring": ring, "ulysses": ulysses,
                     "bound": 4 * per_rank * heads * width * itemsize})  # 4 s0 h b: Ulysses' limit as n grows
    return rows


def ulysses_lesson(rows: list[dict]) -> Finding:
    """Which sends less as the sequence grows with the ranks, from which n on; whether Ulysses' bytes a rank stay
    flat; where it cannot go for want of heads."""
    able = [r for r in rows if r["ulysses"] is not None]
    unable = [r for r in rows if r["ulysses"] is None]
    mib = lambda b: f"{b / 2**20:,.0f} MiB"
    said = [f"{rows[0]['tokens'] // rows[0]['ranks']} tokens a rank, {rows[0]['heads']} heads, the sequence growing "
            f"with the ranks: " + "; ".join(
                f"n = {r['ranks']}: ring {mib(r['ring'])}, Ulysses "
                + (mib(r["ulysses"]) if r["ulysses"] is not None else "impossible") for r in rows) + "."]
    more = [r for r in able if r["ring"] > r["ulysses"]]
    same = [r for r in able if r["ring"] == r["ulysses"]]
    conclusions = []
    if more:
        said.append(f"From n = {more[0]['ranks']} the ring sends more, {more[-1]['ring'] / more[-1]['ulysses']:.1f}x at "
                    f"n = {more[-1]['ranks']}: it passes (n-1)/n of the whole sequence's keys and values, which grow "
                    "with n, while an all-to-all sends (n-1)/n of a rank's own share"
                    + (f" (at n = {and_join([r['ranks'] for r in same])} the two send the same)." if same else "."))
        conclusions.append(f"Ulysses sends less than the ring from n = {more[0]['ranks']}")
    else:
        said.append("The ring never sends more than Ulysses here.")
        conclusions.append("the ring never sends more than Ulysses here")
    bound = rows[0]["bound"]
    under = all(r["ulysses"] <= bound for r in able)
    grows = max(r["ring"] for r in able) / min(r["ring"] for r in able)
    said.append("Ulysses' bytes a rank " + (f"stay under 4 s0 h b = {mib(bound)} (s0 the tokens a rank), nearing it "
                                            "from below" if under else f"pass 4 s0 h b = {mib(bound)}")
                + f", while the ring's grow {grows:.1f}x over the same n.")
    conclusions.append("Ulysses' bytes a rank stay under 4 s0 h b" if under else "Ulysses' bytes a rank pass 4 s0 h b")
    if unable:
        said.append(f"At n = {and_join([r['ranks'] for r in unable])} Ulysses cannot run at all: {rows[0]['heads']} heads "
                    "do not divide by so many ranks (each rank needs whole heads), while the ring goes on; and an "
                    "all-to-all crosses every pair of ranks, so Ulysses stays inside a node's NVLink, the ring "
                    "crosses nodes neighbour to neighbour.")
        conclusions.append(f"Ulysses stops at {max(r['ranks'] for r in able)} ranks for {rows[0]['heads']} heads")
    return Finding(" ".join(said), tuple(conclusions))
