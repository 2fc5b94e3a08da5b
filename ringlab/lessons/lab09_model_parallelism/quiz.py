"""Lab 09's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

from ...lab.quiz import Question, Quiz

MiB = 1 << 20


def _tp_mib(batch, sequence, hidden, itemsize, t):
    """What one GPU sends in the ring allreduce of one block's activations, counted from ringlab's schedule."""
    from ...algorithms import build
    from ...simulate import traffic

    nbytes = batch * sequence * hidden * itemsize
    return traffic(build("allreduce.ring", t), nbytes, itemsize)["sent"][0] / MiB


def _dispatch_table(n, big, small):
    """KiB from rank s to rank d: ``big`` into rank 0 (expert 0's), ``small`` to every other rank, nothing home."""
    return [[0 if s == d else big if d == 0 else small for d in range(n)] for s in range(n)]


def _dropless_ms(n, big, small, gbps, us):
    """A dropless dispatch (rl.alltoallv's pairwise rounds) on uniform links, as ``predict_alltoallv`` prices it."""
    import numpy as np

    from ...predict import predict_alltoallv
    from ...topology import from_spec

    topology, _ = from_spec(f"uniform:{gbps}:{us}", n)
    return predict_alltoallv(np.array(_dispatch_table(n, big, small)) * 1024, topology) * 1e3


def _dropless_fields(n, big, small, gbps, us):
    return {"round": us / 1e3 + big * 1024 / (gbps * 1e9) * 1e3, "rounds": n - 1,
            "even": _dropless_ms(n, small, small, gbps, us)}


def _ring_attention_mib(n, tokens, kv_heads, head_dim, itemsize):
    """What one rank sends as a layer's key/value blocks go round the ring: ``allgather.ring``'s traffic."""
    from ...algorithms import build
    from ...simulate import traffic

    nbytes = 2 * tokens * kv_heads * head_dim * itemsize  # keys and values of the whole sequence
    return traffic(build("allgather.ring", n), nbytes, itemsize)["sent"][0] / MiB


def _ulysses_mib(n, tokens, heads, head_dim, itemsize):
    """What one rank sends in one Ulysses attention's forward: ``ulysses_bytes``."""
    from ...train.ulysses import ulysses_bytes

    return ulysses_bytes(tokens, 1, heads, head_dim, n, itemsize)["forward"] / MiB


def _zero_bubble_percent(p, m, forward, backward):
    """ZB-H1's bubble over the ideal time, in %, counted from its timeline (``ringlab.predict.schedules``)."""
    from ...predict.schedules import schedule_timeline

    return 100 * schedule_timeline("zero-bubble", p, m, forward=forward, backward=backward).bubble_over_ideal


QUIZ = Quiz("09", [
    Question(
        "Tensor parallelism over {t} GPUs: a block's activations are {batch} sequences x {sequence} tokens x {hidden} "
        "features in fp16. How many MiB does each GPU send in one ring allreduce of them?",
        _tp_mib, given=dict(batch=8, sequence=2048, hidden=4096, itemsize=2, t=8), unit="MiB",
        derived=lambda batch, sequence, hidden, itemsize, t: {"buffer": batch * sequence * hidden * itemsize / MiB},
        worked="The buffer is {batch} x {sequence} x {hidden} x {itemsize} bytes = {buffer:.0f} MiB, and a ring allreduce sends "
               "2(t-1)/t of it from every GPU: {answer:.0f} MiB, twice per block (forward and backward), every step. "
               "That is why the tensor dimension goes on NVLink.",
        hint="2(n-1)/n of the buffer, with the buffer batch x sequence x hidden x 2 bytes."),
    Question(
        "A dropless dispatch over {n} ranks on links of {gbps} GB/s and {us} us each way: every other rank sends {big} "
        "KiB to rank 0 (the popular expert's) and {small} KiB to each of the rest; rank 0 sends {small} KiB to each. "
        "rl.alltoallv runs {n}-1 pairwise rounds (round k: rank r sends to r+k). How many ms does it take?",
        _dropless_ms, given=dict(n=4, big=512, small=64, gbps=1, us=20), unit="ms",
        derived=_dropless_fields,
        worked="In every round one rank sends rank 0 its {big} KiB, and a round lasts as long as its largest message: "
               "{us} us + {big} KiB / {gbps} GB/s = {round:.3f} ms, {rounds} rounds, {answer:.2f} ms "
               "(`predict_alltoallv`). Padding every block to {big} KiB would take as long: the bytes dropless saves "
               "are on the quiet links. With every message {small} KiB it would take {even:.2f} ms.",
        hint="Each round: latency + the largest message of that round / the bandwidth; add up the n-1 rounds."),
    Question(
        "Ring attention over {n} ranks: a sequence of {tokens} tokens, keys and values of {kv_heads} heads x {head_dim} "
        "in bf16 ({itemsize} bytes). How many MiB does each rank send in one layer's forward as the key/value blocks "
        "go round the ring?",
        _ring_attention_mib, given=dict(n=8, tokens=131072, kv_heads=8, head_dim=128, itemsize=2), unit="MiB",
        derived=lambda n, tokens, kv_heads, head_dim, itemsize: {
            "whole": 2 * tokens * kv_heads * head_dim * itemsize / MiB, "steps": n - 1},
        worked="The keys and values of the whole sequence are {whole:.0f} MiB; each rank holds 1/{n} and passes a block "
               "on at each of {steps} steps, exactly as `allgather.ring` moves its chunks: (n-1)/n of {whole:.0f} MiB, "
               "{answer:.0f} MiB, hidden behind the attention compute where it overlaps.",
        hint="A ring all-gather: (n-1)/n of the whole sequence's keys and values from every rank."),
    Question(
        "DeepSpeed-Ulysses over {n} ranks: a sequence of {tokens} tokens, {heads} heads x {head_dim} in bf16 "
        "({itemsize} bytes), every head with its own keys and values (no grouped-query attention). How many MiB does "
        "each rank send in one attention's forward (both all-to-alls)?",
        _ulysses_mib, given=dict(n=8, tokens=131072, heads=64, head_dim=128, itemsize=2), unit="MiB",
        derived=lambda n, tokens, heads, head_dim, itemsize: {
            "shard": tokens // n * heads * head_dim * itemsize / MiB,
            "ring": _ring_attention_mib(n, tokens, heads, head_dim, itemsize)},
        worked="A rank holds {tokens}/{n} tokens: {shard:.0f} MiB of each of Q, K, V and the output. An all-to-all keeps "
               "1/{n} of a buffer and sends the rest, so the first sends (n-1)/n of Q, K and V and the second (n-1)/n "
               "of the output: 4 x {shard:.0f} x ({n}-1)/{n} = {answer:.0f} MiB (`ulysses_bytes`). A ring would pass "
               "(n-1)/n of the whole sequence's K and V, {ring:.0f} MiB, and that grows with the sequence.",
        hint="Four shards of s/n tokens x heads x width x 2 bytes, (n-1)/n of each sent."),
    Question(
        "Zero-bubble ZB-H1 with {p} stages and {m} micro-batches, a forward taking {forward} and a backward {backward} "
        "(split evenly into B, the input's gradient, and W, the weights'). What is its bubble, in % of the ideal "
        "time m(F + B + W) a stage computes?",
        _zero_bubble_percent, given=dict(p=4, m=8, forward=1, backward=2), unit="%",
        derived=lambda p, m, forward, backward: {"half": backward / 2,
                                                  "one_f_one_b": 100 * (p - 1) / m},
        worked="ZB-H1 fills the drain with the W passes nobody waits for: its bubble is (p-1)(T_F + T_B - T_W) a stage, "
               "({p}-1)({forward} + {half:g} - {half:g}) over {m} x ({forward} + {backward}): {answer:.1f}%, counted from "
               "the timeline, against 1F1B's (p-1)/m = {one_f_one_b:.1f}% for the same memory (p micro-batches).",
        hint="(p-1)(T_F + T_B - T_W) / (m (T_F + T_B + T_W)), with T_B = T_W = half the backward."),
])
