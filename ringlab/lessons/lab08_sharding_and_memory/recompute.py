"""Lab 08's activation memory: what autograd keeps for the backward pass of a small transformer, layer by layer, without
and with full recomputation (``torch.utils.checkpoint``), against Korthikanti et al.'s count for the same shape; the
time the extra forward costs, measured here; and the planner's prediction for Llama 3 70B (``rl.plan``)."""
from __future__ import annotations

import statistics
import time

from ...lab.findings import Finding
from ...measure.units import format_bytes

# The measured stack: 4 of ringlab's transformer layers (pre-norm, causal, unfused attention, a GELU feed-forward 4x
# the hidden width, no dropout), bf16 so that its bytes are the count's 16-bit ones; small, so a step takes
# milliseconds.
SHAPE = dict(layers=4, seq=128, batch=4, hidden=64, heads=4)
REPEATS = 9  # forward + backward runs timed each way; the median is kept
ABOUT_ONE = (0.5, 2.0)  # the extra time counts as "about one forward" between half and twice a forward's time
# Llama 3 70B on 256 H100s (lab 11's first layout), and the same with twice the micro-batch on half the tensor group
LAYOUTS = (dict(tp=8, pp=4, micro_batch=1), dict(tp=4, pp=4, micro_batch=4))
GiB = 2 ** 30


def make_stack(layers: int = SHAPE["layers"], hidden: int = SHAPE["hidden"], heads: int = SHAPE["heads"], seed: int = 0,
               dtype: str = "bfloat16"):
    """``layers`` of :class:`ringlab.train.sequence.TransformerLayer` (feed-forward 4 x hidden), in ``dtype`` (a
    torch dtype's name)."""
    import torch

    from ...train.sequence import TransformerLayer

    return torch.nn.ModuleList(TransformerLayer(hidden, heads, 4 * hidden, seed=seed + i)
                               for i in range(layers)).to(getattr(torch, dtype))


def _forward(stack, x, recompute: bool):
    from torch.utils.checkpoint import checkpoint

    for layer in stack:
        x = checkpoint(layer, x, use_reentrant=False) if recompute else layer(x)
    return x


def kept_by_layer(stack, x, recompute: bool) -> list[int]:
    """Bytes autograd keeps alive for the backward pass, by the layer whose forward saved them: each saved tensor's
    whole storage, counted once however many views of it are saved (a view keeps its storage alive); parameters
    not counted. Measured with ``torch.autograd.graph.saved_tensors_hooks``; with ``recompute`` each layer runs under
    ``torch.utils.checkpoint`` (full recomputation)."""
    import torch

    parameters = {p.untyped_storage().data_ptr() for p in stack.parameters()}
    seen, sizes = set(), [0] * len(stack)
    layer = 0  # the layer running now: its forward's saved tensors are counted to it

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            sizes[layer] += storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        for layer in range(len(stack)):
            x = _forward(stack[layer:layer + 1], x, recompute)
    return sizes


def korthikanti_bytes(seq: int, batch: int, hidden: int, heads: int) -> dict:
    """What one such layer keeps by Korthikanti et al.'s count (2022, 16-bit): ``ringlab.train.Transformer``'s
    per-token count for this shape (its 32 h: the paper's 34 h less the two dropout masks) times the tokens, plus the
    softmax's 2 a s^2 b that an unfused attention keeps (the paper's 5 a s^2 b less the dropout's 3); with full
    recomputation, the layer's input, 2 s b h."""
    from ...train.transformer import Transformer

    shape = Transformer(layers=1, hidden=hidden, heads=heads, ffn=4 * hidden, vocab=1, gated=False)
    tokens = seq * batch
    return {"per_token": shape.activation_bytes_per_token(), "scores": 2 * heads * seq * seq * batch,
            "full": shape.activation_bytes_per_token() * tokens + 2 * heads * seq * seq * batch,
            "recompute": 2 * tokens * hidden,
            "uncounted": 4 * tokens * 2 + seq * seq}  # LayerNorms' means and 1/std (bf16), the causal mask (bool)


def _median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats + 1):  # the first warms up
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def measure_recompute(shape: dict = SHAPE, repeats: int = REPEATS) -> dict:
    """The stack of ``shape`` run forward and backward on this CPU without and with full recomputation: the bytes
    each layer keeps (:func:`kept_by_layer`), Korthikanti et al.'s count beside them, and the median seconds of a
    forward and of a forward + backward each way (one thread)."""
    import torch

    from ...train.task import one_thread

    stack = make_stack(shape["layers"], shape["hidden"], shape["heads"])
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape["seq"], shape["batch"], shape["hidden"], generator=gen).to(torch.bfloat16).requires_grad_()
    kept = {mode: kept_by_layer(stack, x, mode == "recompute") for mode in ("keep", "recompute")}

    def step(recompute):
        _forward(stack, x, recompute).float().pow(2).mean().backward()

    with one_thread():
        seconds = {"forward": _median_seconds(lambda: _forward(stack, x, False), repeats),
                   "keep": _median_seconds(lambda: step(False), repeats),
                   "recompute": _median_seconds(lambda: step(True), repeats)}
    return {"shape": dict(shape), "kept": kept, "count": korthikanti_bytes(shape["seq"], shape["batch"],
                                                                             shape["hidden"], shape["heads"]),
            "seconds": seconds, "repeats": repeats}


def recompute_rows(result: dict) -> list[dict]:
    """Per layer: bytes kept without and with recomputation (measured), and Korthikanti et al.'s count of each."""
    count = result["count"]
    return [{"layer": i, "keep": keep, "count": count["full"], "recompute": again, "count_recompute": count["recompute"]}
            for i, (keep, again) in enumerate(zip(result["kept"]["keep"], result["kept"]["recompute"]))]


RECOMPUTE_COLUMNS = {"layer": "layer", "kept (B)": "keep", "Korthikanti et al. (B)": "count",
                     "kept, recomputing (B)": "recompute", "Korthikanti et al., recomputing (B)": "count_recompute"}


def recompute_lesson(result: dict, about_one=ABOUT_ONE) -> Finding:
    """What the measured bytes and times say: each layer against the count, what recomputation keeps instead, and what
    the extra forward cost on this CPU."""
    s = result["shape"]
    count, kept = result["count"], result["kept"]
    layers = len(kept["keep"])
    keep, again = max(kept["keep"]), max(kept["recompute"])
    extra = keep - count["full"]
    said = [f"Without recomputation each of the {layers} layers kept up to {format_bytes(keep)} for its backward "
            f"({s['seq']} tokens x {s['batch']} sequences, hidden {s['hidden']}, {s['heads']} heads, bf16); "
            f"Korthikanti et al.'s count for this shape is {format_bytes(count['full'])} "
            f"({count['per_token']:.0f} B a token, plus the softmax's {format_bytes(count['scores'])} that an "
            "unfused attention keeps)" + (
                "; exactly." if extra == 0 else
                f"; the {format_bytes(extra)} more are LayerNorm's means and inverse deviations and the causal mask, "
                "which the count leaves out." if extra == count["uncounted"] else
                f"; the measured bytes are {format_bytes(abs(extra))} {'more' if extra > 0 else 'less'} "
                "than the count.")]
    share = again / keep
    said.append(f"With full recomputation (torch.utils.checkpoint) each layer kept {format_bytes(again)}, "
                f"{share:.1%} of it" + (": its input alone, the count's 2 s b h." if again == count["recompute"] else
                                         f", against the count's {format_bytes(count['recompute'])} (its input)."))
    sec = result["seconds"]
    added = sec["recompute"] - sec["keep"]
    ratio = added / sec["forward"] if sec["forward"] > 0 else float("inf")
    about = about_one[0] <= ratio <= about_one[1]
    if added <= 0:
        observed = "recomputation took no longer on this machine"
        said.append(f"On this CPU a step took {sec['keep'] * 1e3:.2f} ms keeping everything and "
                    f"{sec['recompute'] * 1e3:.2f} ms recomputing: no longer, so here the timer's noise is larger "
                    "than a forward.")
    else:
        observed = ("recomputation cost about one more forward on this machine" if about else
                    "recomputation cost other than one more forward on this machine")
        said.append(f"On this CPU a step (forward and backward, median of {result['repeats']}) took "
                    f"{sec['keep'] * 1e3:.2f} ms keeping everything and {sec['recompute'] * 1e3:.2f} ms recomputing: "
                    f"{added * 1e3:.2f} ms more, {added / sec['keep']:.0%} of the step, against "
                    f"{sec['forward'] * 1e3:.2f} ms for a forward alone: " + (
                        "about one more forward, the price of the memory saved." if about else
                        f"{ratio:.1f} forwards' time, not one: at these small sizes the checkpoint's own work "
                        "(saving the random state, re-running Python) weighs more than the arithmetic."
                        if ratio > about_one[1] else
                        f"{ratio:.1f} of a forward's time, less than the forward it runs again: on this machine the "
                        "timer's noise is as large as the difference."))
    conclusions = (f"recomputation keeps {share:.1%} of a layer's activations",
                   "the measured bytes are the count's" + ("" if extra == 0 else " plus what it leaves out"
                                                           if extra == count["uncounted"] else " give or take"))
    return Finding(" ".join(said), conclusions, (observed,))


def llama_plans(layouts=LAYOUTS, nodes: int = 32) -> list[dict]:
    """``rl.plan`` for Llama 3 70B on ``nodes`` nodes of 8 H100s (ZeRO-1, 512 sequences of 8192 tokens), each layout
    without and with full recomputation: activations and all memory a GPU (GiB), whether it fits, compute and step
    seconds (predicted)."""
    from ...topology import cluster
    from ...train.planner import plan
    from ...train.transformer import Transformer

    model, machine = Transformer.preset("llama3-70b"), cluster("h100", nodes)
    rows = []
    for layout in layouts:
        for recompute in (None, "full"):
            p = plan(model, machine, zero=1, global_batch=512, seq=8192, recompute=recompute, **layout)
            rows.append({**layout, "recompute": recompute or "none", "activations": p.memory["activations"] / GiB,
                         "memory": p.memory_total / GiB, "capacity": p.capacity / GiB, "fits": p.fits,
                         "compute_s": p.time["compute"], "step_s": p.step_seconds})
    return rows


PLAN_COLUMNS = {"tp": "tp", "pp": "pp", "micro-batch": "micro_batch", "recompute": "recompute",
                "activations (GiB)": ("activations", ".1f"), "memory a GPU (GiB)": ("memory", ".1f"),
                "fits": "fits", "compute (s)": ("compute_s", ".2f"), "step (s)": ("step_s", ".2f")}


def describe_plans(rows: list[dict]) -> Finding:
    """Layout by layout (predicted): what full recomputation saves and costs, and whether it is worth it there: only
    where the plan does not fit without it."""
    said, conclusions = [], []
    for keep, again in zip(rows[::2], rows[1::2]):
        name = f"tp={keep['tp']} pp={keep['pp']} micro-batch {keep['micro_batch']}"
        line = (f"{name}: full recomputation cuts activations from {keep['activations']:.1f} to "
                f"{again['activations']:.1f} GiB a GPU and adds {again['compute_s'] - keep['compute_s']:.2f} s of "
                f"compute a step ({again['compute_s'] / keep['compute_s'] - 1:.0%}: every layer's forward again), "
                f"{keep['step_s']:.1f} s to {again['step_s']:.1f} s a step. ")
        if keep["fits"]:
            line += (f"Without it the plan fits ({keep['memory']:.1f} of {keep['capacity']:.0f} GiB): recomputing "
                     "buys memory this layout does not need, so leave it off.")
            conclusions.append(f"{name}: leave recomputation off")
        elif again["fits"]:
            line += (f"Without it the plan does not fit ({keep['memory']:.1f} of {keep['capacity']:.0f} GiB); with it "
                     f"it does ({again['memory']:.1f} GiB): recomputation buys the fit, for "
                     f"{again['step_s'] - keep['step_s']:.1f} s a step.")
            conclusions.append(f"{name}: recompute to fit")
        else:
            line += (f"It does not fit either way ({keep['memory']:.1f} and {again['memory']:.1f} of "
                     f"{keep['capacity']:.0f} GiB): split the model further.")
            conclusions.append(f"{name}: fits neither way")
        said.append(line)
    return Finding("\n".join(said), tuple(conclusions))
