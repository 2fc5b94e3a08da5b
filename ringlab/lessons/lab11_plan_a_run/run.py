"""Lab 11's run: Llama 3 70B on 32 nodes of 8 H100s, planned by ``rl.plan``; what a plan says, in sentences computed
from its numbers; the exercises (the bytes of weights, gradients and optimizer a GPU holds; the 1F1B bubble)."""
from __future__ import annotations

import math

from ...lab.exercises import NotDoneYet, exercise
from ...lab.findings import Finding
from ...lab.words import plural
from ...topology import cluster
from ...train.planner import GRAD_BYTES, OPTIMIZER_BYTES, WEIGHT_BYTES, plan
from ...train.transformer import Transformer

MODEL = "llama3-70b"
GPU, NODES = "h100", 32
GLOBAL_BATCH, SEQ = 512, 8192  # 512 sequences of 8192 tokens: 4M tokens a step
START = dict(tp=8, pp=4, zero=1, micro_batch=1)  # Megatron-LM's usual start: a node's tensor group, 4 stages
GIB = 2 ** 30
STATE_BYTES = WEIGHT_BYTES + GRAD_BYTES + OPTIMIZER_BYTES  # 2 + 4 + 12 = 18 bytes a parameter
TIME_WORDS = {"compute": "compute", "tp": "exposed tensor-parallel collectives", "cp": "the exposed context ring",
              "ep": "the exposed expert all-to-all", "pp": "pipeline sends", "bubble": "the pipeline bubble",
              "dp": "exposed data-parallel collectives", "optimizer": "the optimizer's update"}


def model() -> Transformer:
    """The lab's model (:data:`MODEL`)."""
    return Transformer.preset(MODEL)


def machine(gpu: str = GPU, nodes: int = NODES, gpus_per_node: int = 8):
    """``nodes`` nodes of ``gpus_per_node`` GPUs, one 400 Gbit/s NIC a GPU (``rl.topology.cluster``)."""
    return cluster(gpu, nodes, gpus_per_node)


def first_plan(**layout):
    """The lab's run with :data:`START` (or ``layout``) planned."""
    return plan(model(), machine(), global_batch=GLOBAL_BATCH, seq=SEQ, **{**START, **layout})


MICRO_BATCH = ("micro-batch", "micro-batches")  # plural()'s arguments


def _seconds(seconds: float) -> str:
    """'0.13 s', or 'under 0.01 s' where two decimals would print a time that is not there as 0.00."""
    return f"{seconds:.2f} s" if round(seconds, 2) > 0 else "under 0.01 s"


def describe_plan(p) -> Finding:
    """What a plan says: whether it fits and by how much, where the memory goes, where the step goes, and the
    throughput it predicts."""
    kinds = sorted(p.memory.items(), key=lambda kv: -kv[1])
    room = p.capacity - p.memory_total
    fit = (f"fits: {p.memory_total / GIB:.1f} GiB of the {p.capacity / GIB:.1f} GiB a process can hold on an "
           f"{p.gpu.upper()}, {room / GIB:.1f} GiB to spare" if p.fits else
           f"does not fit: {p.memory_total / GIB:.1f} GiB, {-room / GIB:.1f} GiB more than the "
           f"{p.capacity / GIB:.1f} GiB a process can hold on an {p.gpu.upper()}")
    micro = p.layout["micro_batches"]
    said = [f"Predicted for {p.model.name} on {plural(p.gpus, p.gpu.upper())} at {p.layout_str()} "
            f"({plural(micro, *MICRO_BATCH)} a step): it {fit}. The most memory goes to {kinds[0][0]} "
            f"({kinds[0][1] / GIB:.1f} GiB), then {kinds[1][0]} ({kinds[1][1] / GIB:.1f} GiB)."]
    comm = {k: v for k, v in p.time.items() if k not in ("compute", "optimizer")}
    worst = max(comm, key=comm.get) if comm else None
    if worst and round(comm[worst], 2) > 0:
        rest = (f"; the largest of the rest is {TIME_WORDS.get(worst, worst)}, {comm[worst]:.2f} s "
                f"({comm[worst] / p.step_seconds:.0%})")
    else:  # 0.00 s would read as nothing: say how small it is
        rest = f"; the largest of the rest, {TIME_WORDS.get(worst, worst)}, takes under 0.01 s" if worst else ""
    share = p.time["compute"] / p.step_seconds
    share = "over 99%" if 0.995 <= share < 1 else f"{share:.0%}"  # not "100%" beside a rest that is not nothing
    said.append(f"A step takes {p.step_seconds:.2f} s, {share} of it compute" + rest
                + f". That is {p.tokens_per_second_per_gpu:,.0f} tokens/s per GPU, {p.tflops_per_gpu:.0f} TFLOP/s of "
                  f"model FLOPs per GPU, an MFU of {p.mfu:.1%}.")
    hidden = sum(p.hidden.values())
    if hidden > 0:
        said.append(f"Another {_seconds(hidden)} of collectives run hidden behind compute "
                    f"({', '.join(f'{k} {_seconds(v)}' for k, v in p.hidden.items() if v > 0)}).")
    conclusions = ("fits" if p.fits else "does not fit", f"most memory: {kinds[0][0]}",
                   f"largest after compute: {worst}" if worst else "nothing but compute")
    return Finding(" ".join(said), conclusions)


def layout_params(m: Transformer, tp: int, pp: int) -> float:
    """Parameters of the busiest GPU's slice (dense models): the first stage's layers and the embedding (and the
    output head when one stage holds every layer), over ``tp``."""
    layers = math.ceil(m.layers / pp)
    ends = m.embedding_params + m.head_params if pp == 1 else max(m.embedding_params, m.head_params)
    return (layers * m.layer_params(False)[0] + ends) / tp


def _state_bytes(params, shards, zero):
    return (WEIGHT_BYTES * params / (shards if zero >= 3 else 1) + GRAD_BYTES * params / (shards if zero >= 2 else 1)
            + OPTIMIZER_BYTES * params / (shards if zero >= 1 else 1))


STATE_CASES = [dict(tp=8, pp=4, cp=1, zero=1), dict(tp=8, pp=1, cp=1, zero=0), dict(tp=4, pp=8, cp=1, zero=2),
               dict(tp=8, pp=1, cp=2, zero=3), dict(tp=2, pp=16, cp=1, zero=1)]


@exercise(_state_bytes, "formula")
def check_state_bytes(state_bytes):
    """``state_bytes(params, shards, zero)`` against the planner's weights + gradients + optimizer for Llama 3 70B on
    256 H100s in several layouts (``shards``: the data-parallel group times cp, which ZeRO shards over)."""
    m = model()
    for i, case in enumerate(STATE_CASES):
        p = plan(m, machine(), global_batch=GLOBAL_BATCH, seq=SEQ, **case)
        params, shards = layout_params(m, case["tp"], case["pp"]), p.layout["dp"] * case["cp"]
        want = p.memory["weights"] + p.memory["gradients"] + p.memory["optimizer"]
        got = state_bytes(params, shards, case["zero"])
        if got is None and i == 0:
            raise NotDoneYet("state_bytes returned None")
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-6):
            raise AssertionError(
                f"state_bytes(params={params:.4g}, shards={shards}, zero={case['zero']}) returned {got!r}; the planner "
                f"holds {want:.6g} bytes ({case}).\nHint: 2 bytes of bf16 weight, 4 of fp32 gradient and 12 of fp32 "
                "master weight and Adam moments a parameter; ZeRO 1 divides the 12 by shards, 2 also the 4, 3 also the 2.")
    print(f"Correct: {STATE_BYTES} bytes a parameter, sharded as ZeRO says, is what the planner holds in all "
          f"{len(STATE_CASES)} layouts.")


def _bubble(pp, vp, micro_batches):
    return (pp - 1) / (vp * micro_batches)


BUBBLE_CASES = [dict(tp=8, pp=4, vp=1, micro_batch=1), dict(tp=8, pp=4, vp=5, micro_batch=1),
                dict(tp=4, pp=8, vp=2, micro_batch=2), dict(tp=8, pp=8, vp=1, micro_batch=4),
                dict(tp=8, pp=2, vp=1, micro_batch=1)]


@exercise(_bubble, "formula")
def check_interleaved_bubble(bubble_fraction):
    """``bubble_fraction(pp, vp, micro_batches)`` against the planner's bubble over its compute in several layouts."""
    m = model()
    for i, case in enumerate(BUBBLE_CASES):
        p = plan(m, machine(), global_batch=GLOBAL_BATCH, seq=SEQ, zero=1, **case)
        want = p.time["bubble"] / p.time["compute"]
        got = bubble_fraction(case["pp"], case["vp"], p.layout["micro_batches"])
        if got is None and i == 0:
            raise NotDoneYet("bubble_fraction returned None")
        if isinstance(got, bool) or not isinstance(got, (int, float)) or not math.isclose(got, want, rel_tol=1e-9):
            raise AssertionError(
                f"bubble_fraction(pp={case['pp']}, vp={case['vp']}, micro_batches={p.layout['micro_batches']}) "
                f"returned {got!r}; the planner's bubble is {want:.6g} of its compute.\nHint: 1F1B idles each stage "
                "for pp-1 micro-batch slots while the pipeline fills and drains; interleaving vp chunks a stage makes "
                "each slot vp times shorter; m micro-batches share the cost.")
    print("Correct: (pp-1)/(vp x m) of the compute is bubble, in every layout the planner was asked.")
