"""Lab 11's quiz: each expected answer computed by ringlab's planner from the stated inputs."""
from __future__ import annotations

from ...lab.quiz import Question, Quiz

GIB = 2 ** 30


def _plan(**layout):
    from .run import GLOBAL_BATCH, SEQ, machine, model
    from ...train.planner import plan

    settings = {"global_batch": GLOBAL_BATCH, "seq": SEQ, **layout}
    return plan(model(), machine(), **settings)


def _state_gib(tp, pp, zero):
    p = _plan(tp=tp, pp=pp, zero=zero)
    return (p.memory["weights"] + p.memory["gradients"] + p.memory["optimizer"]) / GIB


def _state_fields(tp, pp, zero):
    from .run import layout_params, model

    p = _plan(tp=tp, pp=pp, zero=zero)
    return {"params": layout_params(model(), tp, pp) / 1e9, "dp": p.layout["dp"],
            "parts": ", ".join(f"{k} {p.memory[k] / GIB:.2f}" for k in ("weights", "gradients", "optimizer"))}


def _bubble_percent(tp, pp, vp):
    p = _plan(tp=tp, pp=pp, vp=vp, zero=1)
    return 100 * p.time["bubble"] / p.time["compute"]


def _bubble_fields(tp, pp, vp):
    p = _plan(tp=tp, pp=pp, vp=vp, zero=1)
    return {"m": p.layout["micro_batches"], "dp": p.layout["dp"], "bubble_s": p.time["bubble"]}


def _faster_tp(first, second, model_parallel):
    a, b = (_plan(tp=t, pp=model_parallel // t, zero=1) for t in (first, second))
    return f"tp={first}" if a.step_seconds <= b.step_seconds else f"tp={second}"


def _tp_fields(first, second, model_parallel):
    a, b = (_plan(tp=t, pp=model_parallel // t, zero=1) for t in (first, second))
    calls = [sum(c.calls for c in p.collectives if c.parallelism == "tp") for p in (a, b)]
    crossing = [next(c.where for c in p.collectives if c.parallelism == "tp") for p in (a, b)]
    return {"a_s": a.step_seconds, "b_s": b.step_seconds, "a_tp": a.time["tp"], "b_tp": b.time["tp"],
            "pa": model_parallel // first, "pb": model_parallel // second, "calls": calls[1] / calls[0],
            "a_where": crossing[0], "b_where": crossing[1]}


def _context_rows(seq, global_batch):
    from .layouts import context_rows

    return context_rows(seq=seq, global_batch=global_batch)


def _smallest_cp(seq, global_batch):
    fitting = [r for r in _context_rows(seq, global_batch) if r["fits"]]
    return str(fitting[0]["cp"]) if fitting else "none"


def _cp_fields(seq, global_batch):
    rows = _context_rows(seq, global_batch)
    return {"memories": ", ".join(f"cp={r['cp']}: {r['memory_gib']:.0f} GiB" for r in rows),
            "capacity": rows[0]["capacity_gib"]}


def _mfu_percent(tokens_per_second_per_gpu, seq, gpu):
    from .run import model
    from ...train.planner import compute_data

    return 100 * tokens_per_second_per_gpu * model().flops_per_token(seq) / (compute_data()[gpu]["peak_tflops"]["bf16"] * 1e12)


def _mfu_fields(tokens_per_second_per_gpu, seq, gpu):
    from .run import model
    from ...train.planner import compute_data

    return {"flops": model().flops_per_token(seq) / 1e9, "peak": compute_data()[gpu]["peak_tflops"]["bf16"]}


QUIZ = Quiz("11", [
    Question(
        "Llama 3 70B on 256 H100s at tp={tp}, pp={pp}, ZeRO-{zero}. How many GiB of weights, gradients and optimizer "
        "state does the busiest GPU hold (2 + 4 + 12 bytes a parameter)?",
        _state_gib, given=dict(tp=8, pp=4, zero=1), derived=_state_fields, unit="GiB",
        worked="The first stage's slice is {params:.3f}B parameters (its layers and the embedding, over tp). ZeRO-1 "
               "shards only the 12 bytes of optimizer over the dp={dp} group: 2 + 4 + 12/{dp} bytes a parameter, "
               "{answer:.2f} GiB (the planner's {parts} GiB).",
        hint="params x (2 + 4 + 12 / dp), with params = (80/pp layers x a layer's weights + the embedding) / tp."),
    Question(
        "Llama 3 70B on 256 H100s at tp={tp}, pp={pp}, vp={vp} (interleaved 1F1B), 512 sequences a step. What share of "
        "the compute does the pipeline bubble add, in percent?",
        _bubble_percent, given=dict(tp=4, pp=8, vp=2), derived=_bubble_fields, unit="%",
        worked="dp = 256 / ({tp} x {pp}) = {dp}, so each pipeline runs m = 512 / {dp} = {m} micro-batches; the bubble is "
               "(pp-1)/(vp x m) = {answer:.2f}% of the compute ({bubble_s:.2f} s a step, predicted).",
        hint="(pp - 1) / (vp x m), with m the micro-batches each pipeline runs a step."),
    Question(
        "On 256 H100s (8 a node), which step does the planner predict faster for Llama 3 70B: tp={first} with pp="
        "{pa}, or tp={second} with pp={pb} (ZeRO-1, the same dp)?",
        _faster_tp, given=dict(first=8, second=16, model_parallel=32), derived=_tp_fields,
        choices=("tp=8", "tp=16"),
        worked="{answer}: {a_s:.2f} s at tp={first} ({a_tp:.2f} s of exposed tensor collectives) against {b_s:.2f} s at "
               "tp={second} ({b_tp:.2f} s): each GPU runs {calls:.1f}x the tensor collectives at tp={second}, on "
               "{b_where} GPUs against {a_where}.",
        hint="Every layer's collectives carry the micro-batch's whole hidden states whatever tp is; how many layers "
             "does each GPU hold?"),
    Question(
        "Llama 3 70B at {seq} tokens a sequence, {global_batch} sequences a step, tp=8, pp=4, ZeRO-1 on 256 H100s. What "
        "is the smallest context parallelism (cp) that fits?",
        _smallest_cp, given=dict(seq=131072, global_batch=32), derived=_cp_fields,
        choices=("1", "2", "4", "8", "none"),
        worked="{answer}: predicted {memories}, against {capacity:.0f} GiB; activations fall as 1/cp.",
        hint="Activations are most of the memory at 128k tokens, and each GPU keeps 1/cp of every sequence's."),
    Question(
        "A run of Llama 3 70B at {seq} tokens a sequence measures {tokens_per_second_per_gpu} tokens/s per "
        "{gpu_name}. What is its MFU, in percent (PaLM's 6N + 12 L h s FLOPs a token, N the parameters in matrix "
        "multiplications, the bf16 dense peak)?",
        _mfu_percent, given=dict(tokens_per_second_per_gpu=1000, seq=8192, gpu="h100"), derived=lambda **k: {
            **_mfu_fields(**k), "gpu_name": k["gpu"].upper()}, unit="%",
        worked="{flops:.0f} GFLOP a token x {tokens_per_second_per_gpu} tokens/s = {answer:.1f}% of {peak} TFLOP/s "
               "(`model.flops_per_token(seq)`; the peak from ringlab's published GPU figures).",
        hint="tokens/s x model.flops_per_token(seq) / the GPU's bf16 peak."),
])
