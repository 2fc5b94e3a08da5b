"""Properties of the training planner (rl.plan, Transformer, the search, ``ringlab plan``) for any input a learner
can give: either an error that names what is wrong, or a plan whose numbers agree with each other, with the
module's documented accounting, and with counts written out here independently. The examples at the end are the
inputs that once gave a silently wrong answer or an unclear error."""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import ringlab as rl
from ringlab.cli import main
from ringlab.train import Transformer, planner
from ringlab.train.planner import GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES, search
from ringlab.train.transformer import PRESETS

ROOT = Path(__file__).resolve().parent.parent
COMPUTE = json.loads((ROOT / "ringlab" / "data" / "gpu_compute.json").read_text())["gpus"]
PLANNABLE = sorted(g for g, d in COMPUTE.items() if d.get("matmul_tflops_bf16"))  # a published matmul rate
SCALE = float(os.environ.get("PLAN_EXAMPLES_SCALE", 1))  # e.g. 30 to hunt longer than CI's few seconds
FEW = settings(max_examples=int(150 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(max_examples=int(30 * SCALE), deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARALLEL = ("tp", "cp", "ep", "pp", "dp")

# -- inputs ---------------------------------------------------------------------------------------------------


@st.composite
def shapes(draw) -> Transformer:
    """A small transformer of any legal shape: grouped or not, gated or not, tied or not, dense or experts."""
    heads = draw(st.sampled_from([1, 2, 4, 8, 16, 32]))
    hidden = heads * draw(st.sampled_from([8, 16, 64, 128]))
    kv = draw(st.sampled_from([None] + [k for k in (1, 2, 4, 8, 16, 32) if heads % k == 0]))
    experts = draw(st.sampled_from([1, 1, 2, 4, 8]))
    return Transformer(draw(st.integers(1, 12)), hidden, heads, draw(st.integers(1, 4 * hidden)),
                       draw(st.integers(2, 70_000)), kv_heads=kv, gated=draw(st.booleans()), experts=experts,
                       top_k=draw(st.integers(1, experts)), tied=draw(st.booleans()))


models = st.one_of(shapes(), st.sampled_from(sorted(PRESETS)).map(Transformer.preset))


@st.composite
def machines(draw):
    gpu = draw(st.sampled_from(PLANNABLE))
    per_node = min(draw(st.sampled_from([1, 2, 4, 8])), rl.topology.machines.GPUS[gpu].most)
    nodes = draw(st.sampled_from([1, 2, 4, 8, 16]))
    return rl.topology.cluster(gpu, nodes, per_node)


@st.composite
def layouts(draw, gpus: int, heads: int = 1, experts: int = 1) -> dict:
    """A layout, legal or not: mostly one whose sizes divide the GPUs, heads, experts and batch, so that most
    examples make a plan and the rest break one rule or a few."""
    legal = draw(st.integers(0, 3)) > 0
    layout, left = {}, gpus
    for key in ("tp", "pp", "cp"):
        size = draw(st.sampled_from([1, 1, 2, 4, 8]))
        if legal:
            while left % size or (key == "tp" and heads % size):
                size //= 2
            left //= size
        layout[key] = size
    dp = max(1, gpus // (layout["tp"] * layout["pp"] * layout["cp"]))
    ep = draw(st.sampled_from([1, 1, 2, 4, 8]))
    while legal and (experts % ep or dp * layout["cp"] % ep):
        ep //= 2
    layout["ep"] = ep
    layout["vp"] = draw(st.sampled_from([1, 1, 2]))
    if legal and layout["pp"] == 1:
        layout["vp"] = 1
    layout["zero"] = draw(st.integers(0, 3))
    layout["micro_batch"] = draw(st.sampled_from([1, 2, 4]))
    layout["global_batch"] = draw(st.integers(1, 8).map(lambda k: k * dp * layout["micro_batch"]) if legal else
                                  st.integers(1, 600))
    layout["seq"] = draw(st.sampled_from([128, 1000, 2048, 4096, 8192, 32768]))
    layout["precision"] = draw(st.sampled_from(planner.PRECISIONS))
    layout["recompute"] = draw(st.sampled_from(planner.RECOMPUTE))
    layout["attention"] = draw(st.sampled_from(["flash", "flash", "unfused"]))
    schedules = ["interleaved"] if legal and layout["vp"] > 1 else ["1f1b", "1f1b", "gpipe", "zero-bubble"]
    layout["schedule"] = draw(st.sampled_from(schedules if legal else schedules + ["interleaved"]))
    layout["grad_reduce_in_fp32"] = draw(st.booleans())
    layout["ends_in_pipeline_split"] = draw(st.sampled_from([False, False, False, True]))
    layout["cp_comm"] = draw(st.sampled_from(planner.CP_COMM))
    layout["optimizer_dtype"] = draw(st.sampled_from(["fp32", "fp32", "bf16"]))
    return layout


def broken_rules(model: Transformer, topology, L: dict) -> list[str]:
    """What is wrong with a layout, by the rules the planner documents, as words its error must contain."""
    gpus = topology.machine.nodes * topology.machine.gpus_per_node
    tp, pp, cp, ep, vp, mb = (L[k] for k in ("tp", "pp", "cp", "ep", "vp", "micro_batch"))
    # Megatron-Core counts the embedding and the loss as a layer each where ends_in_pipeline_split
    ends = 2 if L.get("ends_in_pipeline_split") else 0
    if ends and (model.layers + ends) % pp:
        return ["ends_in_pipeline_split"]
    if gpus % (tp * pp * cp):
        return ["does not divide the"]
    dp = gpus // (tp * pp * cp)
    micro = L["global_batch"] // (dp * mb)
    rules = [(model.heads % tp, "attention heads"), (pp * vp > model.layers + ends, "stages, more than"),
             (vp > 1 and pp == 1, "needs pp > 1"), (L["schedule"] == "interleaved" and vp == 1, "needs vp > 1"),
             (L["schedule"] in ("gpipe", "zero-bubble") and vp > 1, "vp must be 1"),
             (ep > 1 and not model.moe, "no experts"), (model.experts % ep or dp * cp % ep, f"ep={ep}"),
             (L["global_batch"] % (dp * mb), "global_batch"), (L["seq"] % (2 * cp if cp > 1 else 1), "seq"),
             (L["precision"] not in COMPUTE[topology.machine.gpu]["peak_tflops"]
              or not COMPUTE[topology.machine.gpu]["peak_tflops"][L["precision"]], "fp8"),
             (L["schedule"] == "zero-bubble" and pp > 1 and 0 < micro < pp, "micro-batches")]
    return [word for broken, word in rules if broken]


# -- 1. any input: a clear error or a plan whose numbers agree --------------------------------------------------


def check_plan(p, model: Transformer, topology, L: dict) -> None:
    """Everything a plan's numbers must satisfy, written from the module's docstrings."""
    m = topology.machine
    gpus = m.nodes * m.gpus_per_node
    for kind, value in list(p.memory.items()) + list(p.time.items()) + list(p.hidden.items()):
        assert math.isfinite(value) and value >= 0, (kind, value)
    assert math.isfinite(p.step_seconds) and p.step_seconds > 0
    # the step is compute plus what each parallelism leaves exposed, the bubble and the optimizer; hidden time
    # is apart and is never part of the step
    assert p.step_seconds == pytest.approx(sum(p.time.values()))
    assert p.time["compute"] == pytest.approx(sum(p.compute_parts.values()))
    for par in PARALLEL:
        calls = [c for c in p.collectives if c.parallelism == par]
        for c in calls:
            assert 0 <= c.exposed <= c.total * (1 + 1e-9) and c.seconds > 0 and c.calls > 0, c
        assert p.time.get(par, 0.0) == pytest.approx(sum(c.exposed for c in calls), abs=1e-12)
        if par == "cp" and L.get("cp_comm") == "all_gather":
            assert p.hidden.get("cp", 0.0) == 0  # gathered whole before attention: nothing hides it
        assert p.time.get(par, 0.0) + p.hidden.get(par, 0.0) == pytest.approx(sum(c.total for c in calls), abs=1e-12)
    # the layout: data parallelism is what tp x pp x cp leave, expert parallelism carved out of dp x cp
    dp = gpus // (L["tp"] * L["pp"] * L["cp"])
    assert p.layout["dp"] == dp and dp * L["tp"] * L["pp"] * L["cp"] == gpus and p.gpus == gpus
    assert p.layout["micro_batches"] * dp * L["micro_batch"] == L["global_batch"]
    assert (dp * L["cp"]) % L["ep"] == 0
    groups = {c.parallelism: c.ranks for c in p.collectives}
    for par, size in (("tp", L["tp"]), ("cp", L["cp"]), ("ep", L["ep"])):
        assert groups.get(par, size) == size
    # the pipeline's bubble, the closed form of its schedule (1F1B and GPipe: (p-1)/(v m) of the compute)
    if L["pp"] == 1:
        assert "bubble" not in p.time
    elif L["schedule"] in ("1f1b", "gpipe", "interleaved"):
        m_ = p.layout["micro_batches"]
        assert p.time["bubble"] == pytest.approx(p.time["compute"] * (L["pp"] - 1) / (L["vp"] * m_))
    # throughput and MFU from their definitions, with FLOPs counted here
    tokens = L["global_batch"] * L["seq"]
    assert p.tokens_per_second_per_gpu == pytest.approx(tokens / p.step_seconds / gpus)
    flops = 6 * matmul_params(model) + 12 * model.layers * model.hidden * L["seq"] if not model.mla else \
        model.flops_per_token(L["seq"])
    peak = COMPUTE[m.gpu]["peak_tflops"]["bf16"] * 1e12
    assert p.mfu == pytest.approx(p.tokens_per_second_per_gpu * flops / peak)
    assert p.mfu > 0
    # no kernel beats its precision's peak: the matrix products (a third more when fully recomputed) and
    # attention (FlashAttention computes half a causal mask's scores, its backward 2.5 forwards)
    per_gpu = tokens / gpus
    full = L["recompute"] == "full"
    recomputed = full or L["recompute"] == "selective"  # Megatron-Core's selective: the core attention runs again
    # the matmuls of the stage that sets the pace, whose layers and head are counted here: the last stage holds the
    # output layer; where the embedding and the loss count as layers, a middle stage holds a layer more than the
    # first and last (none with two stages), and either may set the pace
    head = 6 * model.vocab * model.hidden * (4 / 3 if full else 1)
    layers = 6 * model.matmul_params() * (4 / 3 if full else 1) - head
    pp, ends = L["pp"], bool(L.get("ends_in_pipeline_split")) and L["pp"] > 1
    slots = -(-(model.layers + 2 * ends) // pp)
    stages = [(slots - ends, pp)] + ([(slots - (pp == 2), 0)] if ends else [])  # (layers, share of the head)
    matmul = min(held * pp / model.layers * layers + share * head for held, share in stages) if pp > 1 else \
        layers + head
    assert p.compute_parts["matmul"] >= per_gpu * matmul / (COMPUTE[m.gpu]["peak_tflops"][L["precision"]] * 1e12) \
        * (1 - 1e-9)
    attention = model.attention_flops_per_token(L["seq"]) * (
        (2 if recomputed else 1) / 2 + 2.5 / 2 if L["attention"] != "unfused" else (4 if recomputed else 3))
    held = min(h for h, _ in stages) * pp / model.layers if pp > 1 else 1  # the fewest layers a pace-setter holds
    assert p.compute_parts["attention"] >= per_gpu * attention * held / peak * (1 - 1e-9)
    if L["precision"] != "fp8" and (L["attention"] == "unfused" or m.gpu in planner.ATTENTION_RATES):
        # where matmuls run at most at the bf16 peak and attention at a published kernel's rate, MFU is under 1
        # (in fp8 it is over the bf16 peak, as the planner defines it, and can pass 1; at the fallback rate, the
        # matmul rate for FlashAttention's forward and backward alike, counted PaLM's way, it passes 1 on GH200)
        assert p.mfu <= 1, f"MFU {p.mfu:.3f}"
    # an MFU over 100% is always said to be a count, not a GPU beyond its peak
    assert (p.mfu > 1) == any(n.startswith(f"MFU {p.mfu:.1%} is over 100%") for n in p.notes)
    # fits: the memory per GPU against what a program is told the GPU has (published), less the CUDA context
    told = COMPUTE[m.gpu].get("reported_total_bytes") or (COMPUTE[m.gpu].get("memory_gb") or
                                                           COMPUTE[m.gpu]["memory_bytes"] / 1e9) * 2 ** 30
    capacity = told - planner.CUDA_CONTEXT
    assert capacity < COMPUTE[m.gpu]["memory_gb"] * 2 ** 30  # never the GB it is sold with read as GiB
    assert p.capacity == pytest.approx(capacity)
    assert p.fits == (sum(p.memory.values()) <= capacity)
    # weights, gradients and the optimizer of a model on one stage: every weight split over tp, sharded as ZeRO
    # says (the planner leaves out the final norm's h weights and splits the norms over tp: under 1e-4 of any real
    # model's weights)
    if L["pp"] == 1 and not model.moe:
        shard = dp * L["cp"]
        weights = (model.params - model.hidden) / L["tp"]
        grad = GRAD_BYTES if L["grad_reduce_in_fp32"] else WEIGHT_BYTES
        bf16_state = L.get("optimizer_dtype") == "bf16"  # bf16 moments, no master copy, the 16-bit gradients as they are
        main_grad = 0 if L["grad_reduce_in_fp32"] or L["zero"] >= 3 or bf16_state else 4  # fp32 copy of a 16-bit shard
        assert p.memory["weights"] == pytest.approx(WEIGHT_BYTES * weights / (shard if L["zero"] >= 3 else 1))
        assert p.memory["gradients"] == pytest.approx(grad * weights / (shard if L["zero"] >= 2 else 1))
        assert p.memory["optimizer"] == pytest.approx(
            ((4 if bf16_state else OPTIMIZER_BYTES) + main_grad) * weights / (shard if L["zero"] >= 1 else 1))


def plan_or_error(model, topology, L):
    """rl.plan's answer, or the error it raised, which must be a ValueError or TypeError."""
    try:
        return rl.plan(model, topology, **L), None
    except (ValueError, TypeError) as err:
        return None, str(err)


@FEW
@given(model=models, topology=machines(), data=st.data())
def test_any_layout_gives_a_clear_error_or_a_plan_whose_numbers_agree(model, topology, data):
    gpus = topology.machine.nodes * topology.machine.gpus_per_node
    L = data.draw(layouts(gpus, model.heads, model.experts))
    p, err = plan_or_error(model, topology, L)
    broken = broken_rules(model, topology, L)
    if broken:
        assert err is not None, f"{broken} broken, yet planned: {p!r}"
        assert any(word in err for word in broken), f"error {err!r} names none of {broken}"
        return
    assert err is None, f"a legal layout refused: {err}"
    check_plan(p, model, topology, L)


# -- 2. monotonic by construction ---------------------------------------------------------------------------------
H100x2 = rl.topology.cluster("h100", nodes=2)


@st.composite
def legal(draw, layers_max=12):
    """A model and a layout of it that the planner accepts on two 8-GPU nodes."""
    model = draw(shapes())
    assume(model.layers <= layers_max)
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8) if model.heads % t == 0]))
    pp = draw(st.sampled_from([q for q in (1, 2) if q <= model.layers]))
    cp = draw(st.sampled_from([1, 2]))
    assume(tp * pp * cp <= 16)
    dp = 16 // (tp * pp * cp)
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if model.experts % e == 0 and dp * cp % e == 0]))
    mb = draw(st.sampled_from([1, 2]))
    L = dict(tp=tp, pp=pp, cp=cp, ep=ep, zero=draw(st.integers(0, 3)), micro_batch=mb,
             global_batch=dp * mb * draw(st.integers(1, 4)), seq=draw(st.sampled_from([1024, 4096])),
             precision=draw(st.sampled_from(["bf16", "fp8"])), recompute=draw(st.sampled_from(planner.RECOMPUTE)),
             attention=draw(st.sampled_from(["flash", "unfused"])))
    return model, L


def rebuilt(model: Transformer, **change) -> Transformer:
    kw = dict(layers=model.layers, hidden=model.hidden, heads=model.heads, ffn=model.ffn, vocab=model.vocab,
              kv_heads=model.kv_heads, gated=model.gated, experts=model.experts, top_k=model.top_k, tied=model.tied)
    return Transformer(**(kw | change))


@FEW
@given(legal(), st.integers(1, 6))
def test_more_layers_weigh_more_and_compute_longer(case, more):
    model, L = case
    p = rl.plan(model, H100x2, **L)
    q = rl.plan(rebuilt(model, layers=model.layers + more), H100x2, **L)
    assert q.memory["weights"] >= p.memory["weights"]
    assert q.model_flops_per_token > p.model_flops_per_token
    if model.layers % L["pp"] == 0 and (model.layers + more) % L["pp"] == 0:
        # even stages only: uneven ones scale the whole step, the output head and the loss too, by the busiest
        # stage's share of the layers, so 3 layers on 2 stages compute longer than 4 (an approximation the
        # planner makes, not a promise it breaks)
        assert q.time["compute"] > p.time["compute"]


@FEW
@given(legal(), st.integers(2, 4))
def test_a_larger_batch_on_the_same_layout_takes_no_less_time(case, times):
    model, L = case
    p = rl.plan(model, H100x2, **L)
    q = rl.plan(model, H100x2, **(L | {"global_batch": L["global_batch"] * times}))
    assert q.step_seconds >= p.step_seconds * (1 - 1e-12)
    assert q.time["compute"] == pytest.approx(p.time["compute"] * times)


@FEW
@given(legal())
def test_each_zero_stage_keeps_no_more_model_state_than_the_one_before(case):
    model, L = case
    state = []
    for zero in (0, 1, 2, 3):
        p = rl.plan(model, H100x2, **(L | {"zero": zero}))
        state.append(p.memory["weights"] + p.memory["gradients"] + p.memory["optimizer"])
    assert all(a >= b for a, b in zip(state, state[1:])), state


@FEW
@given(legal())
def test_recomputation_keeps_no_more_activations_and_computes_no_less(case):
    model, L = case
    plain = rl.plan(model, H100x2, **(L | {"recompute": None}))
    for how in ("selective", "full"):
        again = rl.plan(model, H100x2, **(L | {"recompute": how}))
        assert again.memory["activations"] <= plain.memory["activations"], how
        assert again.time["compute"] >= plain.time["compute"] * (1 - 1e-12), how


@FEW
@given(legal())
def test_a_layer_s_backward_holds_at_least_that_layer_s_activations(case):
    """Whatever is recomputed, one layer's backward needs its stored tensors at once: the first stage's
    activations are never fewer than one layer's for one micro-batch (the score matrices too, when attention is
    unfused and not recomputed selectively)."""
    model, L = case
    p = rl.plan(model, H100x2, **L)
    tokens = L["micro_batch"] * L["seq"] // L["cp"]
    layer = model.activation_bytes_per_token(fp8=L["precision"] == "fp8")
    if L["attention"] == "unfused" and L["recompute"] != "selective":
        layer += planner.SCORE_STORED * model.heads * L["seq"]
    assert p.memory["activations"] >= layer * tokens / L["tp"] * (1 - 1e-12)


# -- 3. the shape's counts against counts written out here ----------------------------------------------------------


def counted(model: Transformer) -> dict:
    """Parameters counted here from the standard formulas, matrix by matrix."""
    h, L, V, E, f = model.hidden, model.layers, model.vocab, model.experts, model.ffn
    kv = (model.kv_heads or model.heads) * (h // model.heads)
    attention = h * h + 2 * h * kv + h * h          # q, k and v (grouped), o
    expert = (3 if model.gated else 2) * h * f       # gate, up, down; or up, down
    router = h * E if E > 1 else 0
    norms = 2 * h                                    # two a layer
    layer = attention + norms + router + E * expert
    total = L * layer + h + V * h + (0 if model.tied else V * h)  # final norm, embedding, head
    active = total - L * (E - model.top_k) * expert
    matmul = L * (attention + router + model.top_k * expert) + V * h  # the head multiplies, tied or not
    return {"params": total, "active": active, "matmul": matmul}


def matmul_params(model: Transformer) -> int:
    return counted(model)["matmul"]


@settings(max_examples=200, deadline=None)
@given(shapes(), st.sampled_from([1, 7, 128, 4096, 131072]))
def test_parameters_and_flops_are_the_standard_counts(model, seq):
    c = counted(model)
    assert model.params == c["params"]
    assert model.active_params == c["active"]
    assert model.matmul_params() == c["matmul"]
    assert model.flops_per_token(seq) == 6 * c["matmul"] + 12 * model.layers * model.hidden * seq
    # what a layer keeps (16-bit, FlashAttention): norms' inputs, attention's input, q, k, v and output, the
    # feed-forward's input, and per expert visited its up (and gate) output and the activation's
    h, f, kv = model.hidden, model.ffn, model.kv * model.head_dim
    per_expert = (6 if model.gated else 4) * f
    assert model.activation_bytes_per_token() == 4 * h + (2 * h + 2 * h + 4 * kv + 2 * h) + 2 * h + \
        model.top_k * per_expert


# -- 4. bad input: an error, fast, that names it -------------------------------------------------------------------
H100x32 = rl.topology.cluster("h100", nodes=32)
GOOD = dict(tp=8, pp=4, global_batch=512, seq=8192, zero=1)
NOT_WHOLE = [0, -1, -8, 2.0, 1.5, float("nan"), float("inf"), -float("inf"), True, False, "8", None, [8]]


@pytest.mark.parametrize("key", ["tp", "pp", "cp", "ep", "vp", "micro_batch", "global_batch", "seq", "zero",
                                 "offload_layers"])
@pytest.mark.parametrize("value", NOT_WHOLE, ids=repr)
def test_a_count_that_is_not_a_whole_number_is_refused_by_name(key, value):
    if key in ("zero", "offload_layers") and value in (0, False) and not isinstance(value, bool):
        return  # zero=0 and offload_layers=0 are legal
    with pytest.raises((ValueError, TypeError), match=key):
        rl.plan("llama3-70b", H100x32, **(GOOD | {key: value}))


@pytest.mark.parametrize("kwargs, words", [
    ({"tp": 3}, ["tp x pp x cp", "256 GPUs"]), ({"pp": 3}, ["tp x pp x cp"]), ({"cp": 3}, ["tp x pp x cp"]),
    ({"tp": 128, "pp": 2}, ["tp=128", "64 attention heads"]),
    ({"global_batch": 100}, ["global_batch 100", "micro_batch"]),
    ({"micro_batch": 3}, ["global_batch", "micro_batch 3"]),
    ({"precision": "fp4"}, ["precision", "'fp4'"]), ({"precision": None}, ["precision", "None"]),
    ({"zero": 4}, ["zero", "4"]), ({"zero": -1}, ["zero", "-1"]), ({"zero": 1.0}, ["zero", "1.0"]),
    ({"recompute": "all"}, ["recompute", "'all'"]), ({"attention": "sparse"}, ["attention", "'sparse'"]),
    ({"schedule": "fast"}, ["schedule", "'fast'"]), ({"cross_entropy": "liger"}, ["cross_entropy", "'liger'"]),
    ({"grad_reduce_in_fp32": "no"}, ["grad_reduce_in_fp32", "'no'"]),
    ({"precision_aware_optimizer": "yes"}, ["precision_aware_optimizer", "'yes'"]),
    ({"ends_in_pipeline_split": 1.0}, ["ends_in_pipeline_split", "1.0"]),
    ({"ends_in_pipeline_split": True, "pp": 8}, ["ends_in_pipeline_split", "pp=8"])])
def test_a_bad_setting_is_refused_naming_the_argument_and_the_value(kwargs, words):
    with pytest.raises((ValueError, TypeError)) as err:
        rl.plan("llama3-70b", H100x32, **(GOOD | kwargs))
    for word in words:
        assert word in str(err.value)


def test_a_bad_model_or_machine_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown gpu 'h1000'"):
        rl.topology.cluster("h1000", nodes=1)
    with pytest.raises(ValueError, match="unknown model 'llama9'"):
        rl.plan("llama9", H100x32, global_batch=8, seq=8)
    with pytest.raises(TypeError, match="model must be"):
        rl.plan(3, H100x32, global_batch=8, seq=8)
    with pytest.raises(ValueError, match="rtx4090"):  # no published matmul rate to plan with
        rl.plan("llama3-8b", rl.topology.cluster("rtx4090", nodes=1), global_batch=8, seq=1024)
    with pytest.raises(ValueError, match="fp8"):
        rl.plan("llama3-8b", rl.topology.cluster("a100", nodes=1), global_batch=8, seq=1024, precision="fp8")
    for key, value in (("layers", 0), ("hidden", -64), ("heads", 2.0), ("ffn", float("nan")), ("vocab", True),
                       ("kv_heads", 0), ("experts", 0), ("top_k", 3)):
        with pytest.raises(ValueError, match=key):
            Transformer(**(dict(layers=2, hidden=64, heads=8, ffn=128, vocab=100, experts=2) | {key: value}))


# -- 5. the search ---------------------------------------------------------------------------------------------------


@FEWER
@given(model=shapes(), nodes=st.sampled_from([1, 2]), gb=st.sampled_from([16, 32, 64]),
       seq=st.sampled_from([1024, 4096]))
def test_the_search_ranks_layouts_that_fit_and_its_reasons_are_true(model, nodes, gb, seq):
    topology = rl.topology.cluster("h100", nodes=nodes)
    found = search(model, topology, global_batch=gb, seq=seq)
    assert found.considered == len(found.best) + len(found.rejected)
    assert all(p.fits for p in found.best)
    times = [p.step_seconds for p in found.best]
    assert times == sorted(times)
    for layout, why in found.rejected:  # each loser's reason is what rl.plan says of that layout
        p, err = plan_or_error(model, topology, dict(layout, global_batch=gb, seq=seq))
        if why.startswith("does not fit"):
            assert p is not None and not p.fits, layout
            assert f"{p.memory_total / 2 ** 30:.1f} GiB" in why
        else:
            assert err == why
    for p in found.best[1:]:  # the kinds of time it spends more on, each by what it says
        why = found.why_slower(p)
        if why == "as fast as the best":
            assert p.step_seconds <= found.best[0].step_seconds * 1.01 + 1e-12 or all(
                p.time.get(k, 0) - found.best[0].time.get(k, 0) <= 0.005 * found.best[0].step_seconds
                for k in p.time)
            continue
        assert p.step_seconds >= found.best[0].step_seconds
        names = {v: k for k, v in {"tp": "exposed tensor-parallel time", "cp": "exposed context-parallel time",
                                   "ep": "exposed expert all-to-all", "pp": "pipeline sends",
                                   "dp": "exposed data-parallel time", "bubble": "pipeline bubble",
                                   "compute": "compute (recomputation, or uneven stages)",
                                   "optimizer": "optimizer update"}.items()}
        costs, _, saving = why.partition("; saves ")
        said = re.findall("(" + "|".join(map(re.escape, names)) + r") \+([0-9.]+) s", costs)
        assert said and ", ".join(f"{name} +{extra} s" for name, extra in said) == costs, why
        extra = {k: p.time.get(k, 0.0) - found.best[0].time.get(k, 0.0) for k in set(p.time) | set(found.best[0].time)}
        for name, more in said:
            assert extra[names[name]] == pytest.approx(float(more), abs=6e-4)
        least = min(extra.values())  # where it spends less than the best: said as the largest saving, or not at all
        if least < -0.005 * found.best[0].step_seconds:
            name, less = re.fullmatch("(" + "|".join(map(re.escape, names)) + r") ([0-9.]+) s", saving).groups()
            assert extra[names[name]] == pytest.approx(least, abs=1e-9) and float(less) == pytest.approx(-least, abs=6e-4)
        else:
            assert saving == "", why


# -- 6. the command line -------------------------------------------------------------------------------------------


def cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["plan", *map(str, args)])
        except SystemExit as stop:  # argparse's own refusals
            code = stop.code
    return code, out.getvalue(), err.getvalue()


def no_nan(text: str):
    def refuse(word):
        raise AssertionError(f"{word} in the JSON")
    return json.loads(text, parse_constant=refuse)


@FEWER
@given(model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "gpt3-1.3b"]), nodes=st.sampled_from([1, 2, 4]),
       gpu=st.sampled_from(["h100", "a100", "b200"]), tp=st.sampled_from([1, 2, 8]), pp=st.sampled_from([1, 2]),
       zero=st.integers(0, 3), mb=st.sampled_from([1, 2]), recompute=st.sampled_from(["none", "selective", "full"]))
def test_ringlab_plan_json_is_rl_plan_s_numbers(tmp_path_factory, model, nodes, gpu, tp, pp, zero, mb, recompute):
    assume(tp * pp <= nodes * 8)
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    dp = nodes * 8 // (tp * pp)
    args = [model, "--gpus", nodes * 8, "--gpu", gpu, "--tp", tp, "--pp", pp, "--zero", zero, "--micro-batch", mb,
            "--global-batch", dp * mb * 2, "--seq", 2048, "--recompute", recompute, "--json", out]
    code, text, err = cli(*args)
    assert code == 0, err
    saved = no_nan(out.read_text())
    p = rl.plan(model, rl.topology.cluster(gpu, nodes, 8), tp=tp, pp=pp, zero=zero, micro_batch=mb,
                global_batch=dp * mb * 2, seq=2048, recompute=None if recompute == "none" else recompute)
    expected = json.loads(json.dumps(p.to_dict()))
    assert saved == expected
    assert f"step: {p.step_seconds:.3f} s" in text


@pytest.mark.parametrize("args, words", [
    (["--tp", "3"], ["does not divide the 16 GPUs"]), (["--tp", "0"], ["tp", "0"]), (["--pp", "-2"], ["pp", "-2"]),
    (["--gpus", "0"], ["--gpus"]), (["--gpus", "-16"], ["--gpus"]), (["--gpus", "12"], ["--gpus 12"]),
    (["--gpu", "h1000"], ["h1000"]), (["--gpu", "rtx4090"], ["rtx4090"]), (["--seq", "0"], ["seq", "0"]),
    (["--global-batch", "3"], ["global_batch 3"]), (["--nic-gbps", "nan"], ["nic_gbps", "nan"]),
    (["--nic-gbps", "-400"], ["nic_gbps"]), (["--fabric", "carrier-pigeon"], ["carrier-pigeon"]),
    (["--shape", "2,64,8"], ["--shape"]), (["--shape", "2,64,5,128,100"], ["heads"]),
    (["--top", "0", "--search"], ["--top", "0"]), (["--top", "-1", "--search"], ["--top", "-1"]),
    (["--micro-batch", "0"], ["micro_batch", "0"]), (["--gpus-per-node", "0"], ["--gpus-per-node"]),
    (["--precision", "fp8", "--gpu", "a100"], ["fp8"]), (["--global-batch", "x"], ["--global-batch", "'x'"]),
    (["--zero", "5"], ["--zero", "5"])])
def test_ringlab_plan_refuses_bad_arguments_in_one_line_without_a_traceback(args, words):
    base = {"--gpus": "16", "--global-batch": "64", "--seq": "4096"}
    given_keys = set(args[::2])
    argv = ([] if "--shape" in given_keys else ["llama3-8b"]) + [x for k, v in base.items() if k not in given_keys
                                                                 for x in (k, v)] + args
    code, out, err = cli(*argv)
    assert code != 0, out
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_ringlab_plan_fails_in_a_real_process_without_a_traceback():
    done = subprocess.run([sys.executable, "-m", "ringlab", "plan", "llama3-8b", "--gpus", "16", "--tp", "0",
                           "--global-batch", "64", "--seq", "4096"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "tp must be a whole number >= 1, got 0" in done.stderr


# -- the inputs that once gave a wrong answer or an unclear error -------------------------------------------------


def test_full_recomputation_with_unfused_attention_holds_the_recomputed_layer_s_scores():
    # the layer being recomputed stores its score matrices again (5 bytes a score): they were left out, and the
    # activations said 0.8 GiB where they are 2.1 GiB
    model = Transformer.preset("gpt3-6.7b")
    kw = dict(tp=8, global_batch=8, seq=8192, attention="unfused", recompute="full")
    p = rl.plan(model, rl.topology.cluster("a100", nodes=1), **kw)
    scores = planner.SCORE_STORED * model.heads * 8192 * 8192 / 8
    assert p.memory["activations"] > scores


def test_full_recomputation_of_a_single_layer_keeps_no_more_than_storing_it():
    # the recomputed layer's input is the checkpoint already counted: it was counted twice
    model = Transformer(1, 64, 4, 128, 1000)
    one = rl.topology.cluster("h100", nodes=1)
    kw = dict(global_batch=8, seq=1024)
    assert rl.plan(model, one, recompute="full", **kw).memory["activations"] == pytest.approx(
        rl.plan(model, one, **kw).memory["activations"])


def test_expert_and_context_parallelism_together_are_laid_out():
    # ep=2 with cp=2 on 16 GPUs: the expert-data group (8 ranks) was laid 4 apart, 32 GPUs wide, and refused
    p = rl.plan("mixtral-8x7b", rl.topology.cluster("h100", nodes=2), cp=2, ep=2, zero=1, global_batch=8, seq=8192)
    groups = {(c.parallelism, c.collective): c.ranks for c in p.collectives}
    assert groups[("ep", "alltoall")] == 2 and groups[("dp", "reduce_scatter")] in (16, 8)
    assert p.step_seconds > 0


@pytest.mark.parametrize("kwargs", [{"zero": 2.0}, {"zero": 1.0}, {"grad_reduce_in_fp32": "no"},
                                    {"precision_aware_optimizer": "yes"}, {"ends_in_pipeline_split": 1}])
def test_a_float_zero_or_a_word_for_a_switch_is_refused(kwargs):
    # zero=2.0 planned as ZeRO-2, and grad_reduce_in_fp32="no" as True (a non-empty string is true)
    (key, value), = kwargs.items()
    with pytest.raises(ValueError, match=f"{key} must be .*got {value!r}"):
        rl.plan("llama3-8b", rl.topology.cluster("h100", nodes=1), global_batch=8, seq=1024, **kwargs)


def test_ringlab_plan_top_must_be_positive():
    # --top 0 printed no plan and --top -1 all but the last, and both exited 0
    for top in ("0", "-1"):
        code, out, err = cli("llama3-8b", "--gpus", "8", "--global-batch", "8", "--seq", "1024", "--search",
                             "--top", top)
        assert code == 2 and f"--top must be at least 1, got {top}" in err


@pytest.mark.parametrize("gpu", ["mi300x", "gh200"])
def test_a_group_of_one_gpu_a_node_on_a_pairwise_machine_is_priced(gpu):
    # tp=8 on two MI300X nodes: the data-parallel group has one GPU a node, and NCCL's model raised numpy's
    # "zero-size array to reduction operation minimum which has no identity" looking for a ring inside a node
    per_node = rl.topology.machines.GPUS[gpu].most
    p = rl.plan("llama3-8b", rl.topology.cluster(gpu, 2, per_node), tp=per_node, global_batch=8, seq=4096)
    assert p.step_seconds > 0 and p.time["dp"] > 0
    # such a group's ring crosses the network at every hop: its NICs set the pace, as on an H100 node's NICs
    from ringlab.predict import predict_nccl
    from ringlab.train.planner import group_topology
    pairwise = predict_nccl("allreduce", 2 ** 30, group_topology(rl.topology.cluster(gpu, 2, per_node), 2, per_node))
    switched = predict_nccl("allreduce", 2 ** 30, group_topology(rl.topology.cluster("h100", 2, 8), 2, 8))
    assert pairwise.seconds == pytest.approx(switched.seconds, rel=0.02)


def test_numpy_integers_plan_as_python_ints():
    # a sweep over np.arange hands the planner numpy integers: they were refused as "not a whole number"
    import numpy as np
    topology = rl.topology.cluster("h100", 2, 8)
    want = rl.plan("llama3-8b", topology, tp=8, zero=1, global_batch=16, seq=4096)
    got = rl.plan("llama3-8b", topology, tp=np.int64(8), zero=np.int32(1), global_batch=np.int64(16),
                  seq=np.int16(4096))
    assert got.step_seconds == want.step_seconds and got.memory == want.memory
    assert json.dumps(got.to_dict()) == json.dumps(want.to_dict())  # nothing of numpy's left in the layout
    with pytest.raises(ValueError, match="tp must be a whole number >= 1, got np.float64"):
        rl.plan("llama3-8b", topology, tp=np.float64(8.0), global_batch=16, seq=4096)


def test_an_mfu_over_100_percent_says_why():
    # no published attention rate on GH200: causal FlashAttention at the matmul rate, counted PaLM's way (every
    # score), passed the peak: "MFU 104.3%" with no word of why
    p = rl.plan(Transformer(2, 1024, 8, 1024, 100), rl.topology.cluster("gh200", 1, 1), global_batch=1, seq=32768)
    assert p.mfu > 1 and any("count every attention score" in n for n in p.notes)
    assert "count every attention score" in p.table()


def test_the_output_layer_and_the_loss_weigh_on_the_last_stage_alone():
    # the head's work was spread over every stage and scaled with the busiest stage's layers, so 3 layers on pp=2
    # (2 on the busiest stage) computed longer than 4 (2 on each)
    topology = rl.topology.cluster("h100", 1, 8)
    shape = dict(hidden=1024, heads=8, ffn=4096, vocab=128_000)
    step = {L: rl.plan(Transformer(L, **shape), topology, pp=2, global_batch=16, seq=2048).time["compute"]
            for L in (3, 4)}
    assert step[3] == pytest.approx(step[4])  # the last stage holds 2 layers and the head either way
    # one GPU of 8 data-parallel ranks runs every layer and the head on 1/8 of the tokens; one of 4 ranks of the
    # last stage runs half the layers on 1/4 of them, and the whole head on those: the head's work once more
    model = Transformer(4, **shape)
    one = rl.plan(model, topology, global_batch=16, seq=2048).compute_parts["matmul"]
    split = rl.plan(model, topology, pp=2, global_batch=16, seq=2048).compute_parts["matmul"]
    every = 6.0 * model.matmul_params()  # matmul FLOPs a token, forward and backward, the head's included
    head = 6.0 * shape["vocab"] * shape["hidden"]
    assert split == pytest.approx(one * (every + head) / every)
