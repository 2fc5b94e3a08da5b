"""Plan a training run: memory, compute and every collective of a transformer step on a device mesh.

``rl.plan(model, topology, tp=, pp=, cp=, ep=, vp=, zero=, micro_batch=, global_batch=, seq=, precision=,
recompute=)`` says whether a layout fits in each GPU's memory, how long a step takes and where the time goes. Data
parallelism is what the GPUs leave: ``dp = GPUs / (tp x pp x cp)``; expert parallelism is carved out of it, as in
Megatron-LM.

Where the ranks sit. As a launcher (Megatron-LM, torchtitan) lays them out: tensor parallelism fastest (inside a
node first), then context, then data, then pipeline; the expert layers fold context and data into expert
parallelism next to tensor and the expert-data group after it (Megatron-Core's expert rank generator). Each group's
collectives are priced by ``ringlab.predict.predict_nccl`` on the GPUs that group spans, each GPU keeping its own
NVLink port and its share of its node's NICs (the groups of a node run side by side on separate rails), with NCCL's
choice of algorithm.

Compute. FLOPs from the shape (:mod:`ringlab.train.transformer`) at the GPU's published peak for the precision
at the rate a large matrix multiplication reaches on it, measured and published (Stas Bekman's "Maximum Achievable
Matmul FLOPS" in ml-engineering; ``ringlab/data/gpu_compute.json``, its source in each entry), in bf16, and in fp8
where measured. Attention runs as FlashAttention does, skipping the
masked half of a causal mask, at the published rates of a kernel (``ringlab/data/kernel_rates.json``): the fastest
published for the GPU (cuDNN's on Hopper and Blackwell), or the one the run's software ran (FlashAttention-2's,
FlashAttention's). What is not a matrix multiplication (norms, the activation
function, residual adds, rotary embeddings, the optimizer's update) is bound by memory: its bytes at the GPU's
memory rate. With pipeline stages the busiest stage sets the pace: the one with the most layers, or the last, which
runs the output layer and the loss besides its layers (where ``ends_in_pipeline_split`` counts the loss as a layer,
that stage holds one layer fewer).

What is hidden and what is exposed, as Megatron-LM overlaps by default:

- tensor (with sequence parallelism: all-gather and reduce-scatter around attention and the feed-forward, forward
  and backward) and expert (all-to-all of tokens out and back) collectives block the layer: exposed;
- context parallelism passes keys and values around a ring while attention computes: exposed only where the
  transfer is longer than the attention it hides behind;
- data-parallel gradients are reduced while the last micro-batch's backward runs, and (ZeRO 1-2, Megatron's
  distributed optimizer) parameters gathered while the first forward runs; ZeRO-2 keeps its gradients only as
  shards, so it reduce-scatters every micro-batch's (PyTorch FSDP's ``no_sync`` documents the alternative: the full
  gradients held until the last), hidden behind the step's compute from the first backward on; ZeRO-3 (FSDP)
  gathers every layer's weights each micro-batch, forward and backward, hidden behind that micro-batch's compute;
- pipeline stages: the bubble of 1F1B, ``(pp - 1) / (vp x m)`` of the compute with ``m`` micro-batches and ``vp``
  virtual stages (interleaved), and the sends of its fill and drain; ``schedule=`` "gpipe" (the same bubble, all
  ``m`` micro-batches held) or "zero-bubble" (ZB-H1: about a third of 1F1B's bubble, 1F1B's memory), the closed forms
  of :mod:`ringlab.predict.schedules`, which builds each schedule from its dependencies.

Memory per GPU, as Megatron-LM's distributed optimizer documents it (docs/source/api-guide/dist_optimizer.md): bf16
weights (2 bytes), fp32 gradients (4) and fp32 master weights with Adam's two moments (12); ZeRO 1 shards the
optimizer over the data-parallel group (with context parallelism, its data x context ranks: Megatron-LM's
distributed_data_parallel.py at 92c8482e, line 313), 2 the gradients too, 3 the weights too.
``grad_reduce_in_fp32=False`` (as NeMo's and Megatron-Bridge's performance recipes set it) keeps the gradient buffer
in the weights' 16 bits, and the optimizer then keeps an fp32 copy of its shard of them (4 bytes), as the docs' "4 +
16/d" says, unless ``precision_aware_optimizer`` (which reads the 16-bit shard in place). Activations as
:meth:`Transformer.activation_bytes_per_token` counts them, divided by ``tp`` (sequence parallelism) and ``cp``, for
as many micro-batches as the first pipeline stage holds (``pp``, more when interleaved), and the fp32 logits of the
loss; ``recompute="full"`` keeps each layer's input only and runs the forward again in the backward. In fp8,
Transformer Engine keeps the GEMM inputs it quantised (``Transformer.activation_bytes_per_token(fp8=True)``).
``offload_layers`` (Megatron-Core's ``cpu_offloading_num_layers``, activations only) keeps at most the other layers'
activations on the GPU (Transformer Engine's CPU offloading); the copies are assumed hidden, as it overlaps them.
``ends_in_pipeline_split`` counts the embedding and the loss as a layer each when layers are split into stages
(Megatron-Core's ``account_for_embedding_in_pipeline_split`` and ``account_for_loss_in_pipeline_split``): the first
stage then holds one transformer layer fewer.

Left out, and said: zero-bubble schedules other than ZB-H1 (ZB-H2, ZB-V), tensor-parallel communication overlapped
with GEMMs, weights kept in fp8 (``fp8_param_gather``: still counted at 2 bytes), expert load imbalance, the memory
allocator's fragmentation, data loading, and NICs shared by different parallelisms at once.
"""
from __future__ import annotations

import json
import math
import numbers
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from ..lab.words import plural
from ..predict.nccl import predict_nccl
from ..predict.schedules import SCHEDULES, bubble_over_ideal, peak_in_flight
from ..topology.graph import GB
from ..topology.machines import GPUS, cluster
from .transformer import ACT_BYTES, Transformer

PRECISIONS = ("bf16", "fp16", "fp8")
RECOMPUTE = (None, "selective", "full")
ATTENTION = ("flash", "fa2", "fa1", "unfused")
CP_COMM = ("p2p", "all_gather")  # Megatron-Core's cp_comm_type values the planner prices (a2a, Ulysses', is not)
# The loss over the logits, bound by memory: bytes it moves a logit (a token's logits are the vocabulary, split over
# tp), read from Megatron-LM's code at 937571cf (Megatron-Core r0.8), for bf16 logits.
CROSS_ENTROPY_TRAFFIC = {
    # tensor_parallel/cross_entropy.py, one kernel a line: the fp32 cast (read 2, write 4), the max (read 4), the
    # in-place subtraction (8), exp (8), the sum (4), the division into probabilities (8); backward, the product with
    # the incoming gradient (8) and autograd's cast back to bf16 (read 4, write 2)
    "unfused": 6 + 4 + 8 + 8 + 4 + 8 + 8 + 6,  # 52
    # fusions/fused_cross_entropy.py (cross_entropy_loss_fusion=True): its jit-fused pieces, the cast with the max
    # (read 2, write 4), subtraction with exp and the sum (read 4, write 4), the division (8), and the backward's
    # product written as bf16 (read 4, write 2)
    "fused": 6 + 8 + 8 + 6,  # 28
    # Transformer Engine's parallel_cross_entropy (cross_entropy_fusion_impl="te"; TransformerEngine at 6f4bc334,
    # 2025-11, transformer_engine/common/triton/cross_entropy.py): an online softmax reads the bf16 logits (2), a
    # second kernel reads them again and writes the gradient in their place (4); backward, element_mul scales it in
    # place by the incoming gradient (4)
    "te": 2 + 4 + 4,  # 10
    # flash-attn 1.0.9's xentropy CUDA kernel (MosaicML's llm-foundry, loss_fn "fused_crossentropy";
    # csrc/xentropy/xentropy_kernel.cu): the forward reads the logits twice (the max, then the sum of exponentials:
    # 4), the backward reads them and writes the gradient (4)
    "xentropy": 4 + 4,  # 8
}
SCORE_TRAFFIC = 13    # bytes an unfused attention moves a score forward: written by Q K^T (2), read and written by the
#                       fused scale-mask-softmax (4), read and written by dropout with its 1-byte mask (5), read by
#                       the product with V (2); Korthikanti et al. keep 5 of them for the backward (their 5 a s / h)
SCORE_STORED = 5      # bytes a stored score costs (softmax input 2, its output 2, the dropout mask 1; ibid.)
WEIGHT_BYTES = 2      # bf16 (or fp16) weights
GRAD_BYTES = 4        # fp32 gradients, reduced in fp32: Megatron-LM's default (and the Llama 3 paper's, section 3.3.2);
#                       with grad_reduce_in_fp32=False the buffer takes the weights' dtype, WEIGHT_BYTES (Megatron-LM
#                       megatron/core/distributed/distributed_data_parallel.py at 92c8482e, line 168: "grad_dtype =
#                       torch.float if self.ddp_config.grad_reduce_in_fp32 else param.dtype")
MAIN_GRAD_BYTES = 4   # the optimizer's fp32 copy of its shard of 16-bit gradients (Megatron-LM
#                       megatron/core/optimizer/distrib_optimizer.py at 92c8482e, line 2399: "shard_main_param.grad =
#                       shard_model_grad.float()"; the precision-aware optimizer reads the 16-bit shard in place, line
#                       2397; Megatron-FSDP skips the copy, line 2377): docs/source/api-guide/dist_optimizer.md's
#                       "fp16 parameters, fp16 gradients: 4 + 16/d" bytes a parameter, 16 = OPTIMIZER_BYTES + this
OPTIMIZER_BYTES = 12  # fp32 master weights and Adam's two moments (ZeRO paper, K = 12; Megatron-LM's docs)
LOGIT_BYTES = 4       # the loss's logits in fp32
ADAM_TRAFFIC = 2 * GRAD_BYTES + 2 * OPTIMIZER_BYTES + WEIGHT_BYTES  # bytes an update reads and writes a parameter
# The optimizer's state a parameter by its dtype: fp32, master weights and Adam's two moments (OPTIMIZER_BYTES); bf16,
# the two moments in bf16 and no master copy, the bf16 weights updated in place (NeMo's Apex DistributedFusedAdam
# with dtype bf16: NeMo r2.0.0rc1 megatron_base_model.py stores no fp32 master where the state's dtype is the model's)
OPTIMIZER_STATE = {"fp32": OPTIMIZER_BYTES, "bf16": 4}
BACKWARD_TRAFFIC = 2  # an element-wise op's backward reads its input and the incoming gradient, writes one: 2x forward
BUCKET_PARAMS = 40_000_000  # Megatron-LM's default gradient bucket: 40M parameters
CUDA_CONTEXT = 400 * 2 ** 20  # what a process's CUDA context takes before its first tensor: "around 400MB if CUDA >=
#                               11.7 is used and lazy module loading enabled" (ptrblck, pytorch/pytorch#109888)
NCCL_BUFFERS = 32 * 2 * 4 * 2 ** 20  # per communicator: up to 32 channels x send/receive x NCCL_BUFFSIZE (4 MiB)
# Kernels at a real layer's shapes, from published kernel benchmarks (ringlab/data/kernel_rates.json, by id), none of
# them a training run the planner is judged on:
GEMM_SHAPE_FACTOR = 1502.8 / 1769.0  # a layer's 12 GEMMs (hidden 4096, 15872 tokens) on B300, Transformer Engine's
#                                      GEMM profiling (te-gemm-b300-bf16-layer), over B300's best-shape MAMF
#                                      (mamf-b300-bf16, ml-engineering): 0.85
FP8_GEMM_SPEEDUP = 32.014 / 20.285  # the same layer's GEMMs in fp8 with current scaling, quantisation included, over
#                                     bf16, on H200 NVL (te-gemm-h200nvl-fp8_current_autocast-layer)
ELEMENTWISE_SHARE = 3708.1 / 4800   # a fused RMSNorm's bytes/s over H200's HBM peak, cuDNN
#                                     (norm-h200-rmsnorm-llama3-8b-cudnn): element-wise work at that share of the peak
FA_BACKWARD = 2.5     # FlashAttention's backward: 5 matrix products to the forward's 2 (it recomputes Q K^T)
# Published attention rates (TFLOP/s, FlashAttention's FLOP counting) by GPU: (forward ids, backward ids) or a
# forward+backward id, with {} for the sequence length; H100 takes cuDNN's rates on the H200 (the same chip and
# clocks, faster memory: an upper bound for H100)
ATTENTION_RATES = {
    "h100": ("cudnn919-h200-fwd-causal-s{}", "cudnn919-h200-bwd-causal-s{}"),
    "h200": ("cudnn919-h200-fwd-causal-s{}", "cudnn919-h200-bwd-causal-s{}"),
    "gb200": ("cudnn922-gb200-fwd-causal-s{}", "cudnn922-gb200-bwd-causal-s{}"),
}
# FlashAttention-2's own published rates (Tri Dao's README charts, forward+backward, causal, head dim 128), for a run
# whose software ran FlashAttention-2 (attention="fa2")
FA2_RATES = {
    "a100": "fa2-a100-fwdbwd-causal-hd128-s{}",
    "h100": "fa2-h100-fwdbwd-causal-hd128-s{}",
}
ATTENTION_RATES["a100"] = (FA2_RATES["a100"],)  # on A100 FlashAttention-2 is the fastest published
# FlashAttention's (v1) published rates, the same charts' FlashAttention bars, for a run whose software ran it or its
# Triton port (flash-attn's flash_attn_triton.py, which says of itself "Overall Triton forward + backward is slightly
# slower than CUDA forward + backward": these rates are an upper bound for it)
FA1_RATES = {
    "a100": "fa1-a100-fwdbwd-causal-hd128-s{}",
    "h100": "fa1-h100-fwdbwd-causal-hd128-s{}",
}
OWN_RATES = {"fa2": ("FlashAttention-2", FA2_RATES), "fa1": ("FlashAttention (v1)", FA1_RATES)}
HEADS_MEASURED_FOR = "cudnn919-h200-"  # the published rates whose kernel was also measured at other head counts


@lru_cache(maxsize=1)
def compute_data() -> dict:
    """Each GPU's memory, peak FLOP/s and measured matmul rate, with sources (``ringlab/data/gpu_compute.json``)."""
    with resources.files("ringlab").joinpath("data/gpu_compute.json").open() as f:
        return json.load(f)["gpus"]


@lru_cache(maxsize=1)
def kernel_rates() -> dict:
    """Published kernel benchmarks by id (``ringlab/data/kernel_rates.json``), each with its source."""
    with resources.files("ringlab").joinpath("data/kernel_rates.json").open() as f:
        return {e["id"]: e for e in json.load(f)["entries"]}


def _log_interp(points: list, x: float) -> float:
    """Linear in log(x) between sorted (x, y) points, held at the ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + math.log(x / x0) / math.log(x1 / x0) * (y1 - y0)
    return points[-1][1]


def _by_seq(pattern: str, seq: int) -> float | None:
    """A published rate (FLOP/s) at ``seq`` tokens, interpolated in log(seq) between the sequence lengths measured,
    held at the ends; None where none is published."""
    rates = kernel_rates()
    points = sorted((s, rates[pattern.format(s)]["value"] * 1e12) for s in (1024, 2048, 4096, 8192, 16384, 32768)
                    if pattern.format(s) in rates)
    return _log_interp(points, seq) if points else None


@lru_cache(maxsize=1)
def attention_heads_data() -> dict:
    """cuDNN attention's rate at other head counts a call than its published benchmark's, as a share of the rate
    at that benchmark's 64 heads: measured on an H200 with the published rates' cuDNN (``ringlab/data/
    attention_heads.json``, with its provenance)."""
    with resources.files("ringlab").joinpath("data/attention_heads.json").open() as f:
        return json.load(f)


def attention_heads_share(seq: int, heads_per_call: float) -> tuple[float, float]:
    """The forward's and the backward's rate at ``heads_per_call`` (micro-batch x query heads on one GPU: the rate
    depends on their product) over the rate at the published benchmark's 64 heads, at ``seq`` tokens: measured
    (:func:`attention_heads_data`), interpolated in log(heads) and then log(seq), held at the ends measured."""
    by_seq = {}
    for r in attention_heads_data()["rows"]:
        by_seq.setdefault(r["seq"], []).append((r["heads"], r["fwd_share"], r["bwd_share"]))
    shares = []
    for which in (1, 2):  # forward, backward: in heads at each sequence length measured, then in the sequence length
        at_seq = [(s, _log_interp(sorted((r[0], r[which]) for r in rows), heads_per_call))
                  for s, rows in sorted(by_seq.items())]
        shares.append(_log_interp(at_seq, seq))
    return shares[0], shares[1]


def _own_rates(kernel: str, gpu: str) -> tuple[str, str]:
    """``kernel``'s ("fa2" or "fa1") name and the id pattern of its published rates on ``gpu``; a clear error where
    none are published."""
    name, rates = OWN_RATES[kernel]
    if gpu not in rates:
        raise ValueError(f"no published {name} rate for GPU {gpu!r}; published for: {', '.join(rates)} "
                         "(attention='flash' takes the fastest published kernel)")
    return name, rates[gpu]


def attention_seconds_per_flop(gpu: str, seq: int, fallback: float, kernel: str = "flash",
                               heads_per_call: float | None = None) -> tuple[float, float, str]:
    """Seconds a forward FLOP and a backward FLOP of causal FlashAttention take on ``gpu`` at ``seq`` tokens (FLOPs
    counted FlashAttention's way), from published kernel rates; ``fallback`` (FLOP/s) where none is published.
    ``kernel``: "flash" (the fastest published on that GPU: cuDNN's on Hopper and Blackwell), "fa2"
    (FlashAttention-2's own rates) or "fa1" (FlashAttention's, v1; both an error on a GPU they were not published
    for). ``heads_per_call`` (micro-batch
    x query heads on one GPU): where the rates are cuDNN 9.19's on H200 (published at 64 heads a call), they are
    scaled by :func:`attention_heads_share`, measured with that cuDNN on that GPU; elsewhere no such measurement
    exists and the published rate stands."""
    if kernel in OWN_RATES:
        name, pattern = _own_rates(kernel, gpu)
        both = _by_seq(pattern, seq)
        return 1 / both, 1 / both, f"published ({name}'s own, forward and backward together)"
    ids = ATTENTION_RATES.get(gpu)
    if ids and len(ids) == 2:
        fwd, bwd = _by_seq(ids[0], seq), _by_seq(ids[1], seq)
        if fwd and bwd:
            if heads_per_call is not None and ids[0].startswith(HEADS_MEASURED_FOR):
                f, b = attention_heads_share(seq, heads_per_call)
                return (1 / (fwd * f), 1 / (bwd * b), f"published (cuDNN's fused attention, at 64 heads a call); at "
                        f"{heads_per_call:g} heads a call x{f:.2f} forward, x{b:.2f} backward (measured by ringlab on an H200, "
                        "results/attention_and_layer_issue52.txt)")
            return 1 / fwd, 1 / bwd, "published (cuDNN's fused attention)"
    if ids and len(ids) == 1:
        both = _by_seq(ids[0], seq)
        if both:
            return 1 / both, 1 / both, "published (FlashAttention-2, forward and backward together)"
    return 1 / fallback, 1 / fallback, "no published attention rate for this GPU: at its matmul rate"


@dataclass(frozen=True)
class Compute:
    """One GPU's figures for planning: ``memory`` (bytes a training process can hold: the device memory a program is
    told it has, as published for the part (``reported_total_bytes``: CUDA's totalGlobalMem, below the GB it is sold
    with read as GiB by the driver's reserve), less :data:`CUDA_CONTEXT`; the sold GB as GiB where none is published),
    ``peak`` (FLOP/s by precision, dense), ``matmul`` (FLOP/s a transformer layer's matrix multiplications reach, by
    precision: the measured best-shape rate, MAMF, times :data:`GEMM_SHAPE_FACTOR`; fp8 that times
    :data:`FP8_GEMM_SPEEDUP`), ``hbm`` (bytes/s), ``source``."""

    gpu: str
    memory: float
    peak: dict
    matmul: dict
    hbm: float
    source: str

    @classmethod
    def of(cls, gpu: str) -> "Compute":
        data = compute_data()
        if gpu not in data:
            raise ValueError(f"no compute figures for GPU {gpu!r}; known: {', '.join(data)}")
        d = data[gpu]
        peak = {k: v * 1e12 for k, v in d["peak_tflops"].items() if v}
        if "bf16" not in peak or not d.get("matmul_tflops_bf16"):
            raise ValueError(f"GPU {gpu!r} has no published bf16 peak and measured matmul rate to plan with")
        best = d["matmul_tflops_bf16"] * 1e12 * GEMM_SHAPE_FACTOR  # at a layer's shapes, not the best one
        matmul = {"bf16": best, "fp16": best}
        if "fp8" in peak:
            matmul["fp8"] = best * FP8_GEMM_SPEEDUP
        told = d.get("reported_total_bytes") or float(d.get("memory_gb") or d["memory_bytes"] / 1e9) * 2 ** 30
        return cls(gpu, told - CUDA_CONTEXT, peak, matmul,
                   GPUS[gpu].reduce_rate * 3,  # ringlab's reduce rate is the memory rate / 3 (read two, write one)
                   f"{d.get('peak_source', '')}; matmul: {d.get('matmul_source', '')}")

    @property
    def efficiency(self) -> float:
        """The measured bf16 matmul rate over the bf16 peak."""
        return self.matmul["bf16"] / self.peak["bf16"]


@dataclass(frozen=True)
class Collective:
    """One kind of call a step makes: which parallelism, collective, bytes (nccl-tests' size), group size,
    NCCL's algorithm and protocol, seconds a call, calls a step, and the seconds of them left exposed."""

    parallelism: str
    collective: str
    nbytes: int
    ranks: int
    algorithm: str
    protocol: str
    seconds: float
    calls: float
    exposed: float
    where: str

    @property
    def total(self) -> float:
        return self.seconds * self.calls


@dataclass
class Plan:
    """A training step's plan (``rl.plan``). ``memory``: bytes per GPU by kind; ``time``: seconds per step by kind
    (compute, then what each parallelism leaves exposed, the pipeline bubble, the optimizer); ``hidden``: seconds
    of communication hidden behind compute; ``collectives``: every kind of call with its price; ``compute_parts``:
    ``time["compute"]`` split into the matrix products, attention and the memory-bound rest (norms, activations,
    residual adds, the loss), seconds per step each."""

    model: Transformer
    topology: str
    gpu: str
    gpus: int
    layout: dict
    memory: dict
    capacity: float
    time: dict
    hidden: dict
    collectives: list
    model_flops_per_token: float
    peak: float
    notes: list = field(default_factory=list)
    compute_parts: dict = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.memory_total <= self.capacity

    @property
    def memory_total(self) -> float:
        return sum(self.memory.values())

    @property
    def step_seconds(self) -> float:
        return sum(self.time.values())

    @property
    def tokens_per_step(self) -> int:
        return self.layout["global_batch"] * self.layout["seq"]

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_step / self.step_seconds / self.gpus

    @property
    def tflops_per_gpu(self) -> float:
        """Model FLOP/s per GPU (PaLM's convention), in TFLOP/s."""
        return self.tokens_per_second_per_gpu * self.model_flops_per_token / 1e12

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: model FLOP/s per GPU over the GPU's dense bf16 peak."""
        return self.tokens_per_second_per_gpu * self.model_flops_per_token / self.peak

    def layout_str(self) -> str:
        L = self.layout
        parts = [f"{k}={L[k]}" for k in ("tp", "pp", "cp", "ep", "vp", "dp") if L[k] > 1 or k == "dp"]
        return " ".join(parts) + f" zero={L['zero']} mb={L['micro_batch']}" + (
            f" recompute={L['recompute']}" if L["recompute"] else "") + (
            f" schedule={L['schedule']}" if L.get("schedule", "1f1b") not in ("1f1b", "interleaved") else "") + (
            f" loss={L['cross_entropy']}" if L.get("cross_entropy", "unfused") != "unfused" else "") + (
            f" attn={L['attention']}" if L.get("attention", "flash") != "flash" else "") + (
            f" cp_comm={L['cp_comm']}" if L.get("cp_comm", "p2p") != "p2p" else "")

    def to_dict(self) -> dict:
        return {"model": self.model.name or self.model.describe(), "topology": self.topology, "gpu": self.gpu,
                "gpus": self.gpus, "layout": dict(self.layout), "fits": self.fits, "memory": dict(self.memory),
                "memory_total": self.memory_total, "capacity": self.capacity, "time": dict(self.time),
                "compute_parts": dict(self.compute_parts), "hidden": dict(self.hidden),
                "step_seconds": self.step_seconds,
                "tokens_per_second_per_gpu": self.tokens_per_second_per_gpu, "tflops_per_gpu": self.tflops_per_gpu,
                "mfu": self.mfu, "collectives": [c.__dict__ | {"total": c.total} for c in self.collectives],
                "notes": list(self.notes), "label": "predicted by ringlab's planner, not measured"}

    def table(self) -> str:
        """The plan as text: memory and time by kind, then the collectives."""
        gib = 2 ** 30
        lines = [f"{self.model.name or 'model'} on {self.gpus} x {self.gpu} ({self.topology}): {self.layout_str()}, "
                 f"global batch {self.layout['global_batch']} x {self.layout['seq']} tokens, "
                 f"{self.layout['precision']} (predicted, not measured)",
                 f"memory per GPU: {self.memory_total / gib:.1f} GiB of {self.capacity / gib:.0f} GiB: "
                 f"{'fits' if self.fits else 'DOES NOT FIT'}"]
        lines += [f"  {k:<12} {v / gib:8.2f} GiB" for k, v in self.memory.items()]
        lines.append(f"step: {self.step_seconds:.3f} s, {self.tokens_per_second_per_gpu:,.0f} tokens/s per GPU, "
                     f"{self.tflops_per_gpu:.0f} TFLOP/s per GPU, MFU {self.mfu:.1%}")
        for k, v in self.time.items():
            lines.append(f"  {k:<12} {v:8.3f} s  {v / self.step_seconds:6.1%}")
            if k == "compute" and self.compute_parts:  # where compute goes, as the planner prices it apart
                lines.append("    of which " + ", ".join(f"{part} {s:.3f} s" for part, s in self.compute_parts.items()))
        lines += [f"  hidden behind compute: {k} {v:.3f} s" for k, v in self.hidden.items() if v > 0]
        if self.collectives:
            lines.append("collectives (per call; calls per step; exposed seconds a step):")
            for c in self.collectives:
                lines.append(f"  {c.parallelism:<6} {c.collective:<14} {_size(c.nbytes):>9} on {c.ranks:>5} ranks "
                             f"({c.where}) {c.algorithm}/{c.protocol}: {c.seconds * 1e3:8.3f} ms x {c.calls:g} "
                             f"-> {c.exposed:.3f} s exposed")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"Plan({self.model.name or 'model'} on {self.gpus} {self.gpu}: {self.layout_str()}; "
                f"{'fits' if self.fits else 'does not fit'} ({self.memory_total / 2 ** 30:.1f} GiB); "
                f"step {self.step_seconds:.3f} s, {self.tokens_per_second_per_gpu:,.0f} tok/s/GPU, MFU {self.mfu:.1%})")


def _size(n: float) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _whole(name: str, value, minimum: int = 1) -> int:
    """``value`` as a Python int (numpy's integers too: a sweep over ``np.arange`` plans), or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}")
    return int(value)


def _model(model) -> Transformer:
    if isinstance(model, str):
        return Transformer.preset(model)
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a rl.train.Transformer or a preset's name, got {type(model).__name__}")
    return model


def _machine(topology):
    machine = getattr(topology, "machine", None)
    if machine is None or machine.gpu not in GPUS:
        raise ValueError(f"plan needs a machine described by rl.topology.cluster(gpu, nodes, ...), which says its "
                         f"GPUs, nodes and NICs; {getattr(topology, 'name', topology)!r} does not")
    return machine


@lru_cache(maxsize=4096)
def _group(gpu: str, per_node: int, nodes: int, nics: int, nic_gbps: float, fabric: str, sharp: bool, nvls: bool):
    return cluster(gpu, nodes, per_node, nics_per_node=nics, nic_gbps=nic_gbps, fabric=fabric, sharp=sharp,
                   nvls=nvls)


def group_topology(topology, size: int, stride: int):
    """The GPUs one group of ``size`` ranks spans, ranks ``stride`` apart (as a launcher numbers them): as many a
    node as fit, each with its own NVLink port and its node's NICs shared in proportion. (None for one rank.)"""
    if size == 1:
        return None
    m = _machine(topology)
    G = m.gpus_per_node
    per_node = min(size, max(1, G // stride)) if stride < G else 1
    nodes = -(-size // per_node)
    if nodes > m.nodes:
        raise ValueError(f"a group of {size} ranks {stride} apart needs {nodes} nodes; the machine has {m.nodes}")
    nics = max(1, round(m.nics_per_node * per_node / G))
    # NCCL turns NVLS off where a communicator has 2 GPUs or fewer on a node (src/transport/nvls.cc, ncclNvlsInit)
    nvls = bool(getattr(topology, "switch_reduce", False)) and per_node > 2
    return _group(m.gpu, per_node, nodes, nics, m.nic_bandwidth * 8 / GB, m.fabric or "ib", bool(m.sharp),
                  nvls if GPUS[m.gpu].nvls else None)


@lru_cache(maxsize=65536)
def _price(collective: str, nbytes: int, topo) -> tuple:
    p = predict_nccl(collective, max(1, int(nbytes)), topo)
    return p.seconds, p.algorithm, p.protocol


def _where(topo) -> str:
    m = topo.machine
    return f"{m.gpus_per_node} a node" if m.nodes == 1 else f"{m.nodes} nodes x {m.gpus_per_node}"


def plan(model, topology, *, tp: int = 1, pp: int = 1, cp: int = 1, ep: int = 1, vp: int = 1, zero: int = 0,
         micro_batch: int = 1, global_batch: int, seq: int, precision: str = "bf16",
         recompute: str | None = None, attention: str = "flash", schedule: str = "1f1b",
         grad_reduce_in_fp32: bool = True, precision_aware_optimizer: bool = False, offload_layers: int = 0,
         ends_in_pipeline_split: bool = False, cross_entropy: str = "unfused", cp_comm: str = "p2p",
         optimizer_dtype: str = "fp32") -> Plan:
    """Plan one training step of ``model`` (a :class:`Transformer` or a preset's name) on ``topology`` (from
    ``rl.topology.cluster``): ``tp`` tensor (with sequence parallelism), ``pp`` pipeline (1F1B; ``vp`` virtual
    stages each, interleaved), ``cp`` context, ``ep`` expert parallelism; data parallelism is the rest. ``zero``
    0-3 (1: Megatron's distributed optimizer; 3: FSDP), ``micro_batch`` and ``global_batch`` in sequences of
    ``seq`` tokens, ``precision`` bf16, fp16 or fp8 (matmuls at that peak), ``recompute`` None, "selective"
    (Megatron-Core's: the core attention checkpointed, its forward run again in the backward; unfused, its scores
    are then not stored; FlashAttention stores none anyway, so there it costs an attention forward and saves no
    memory) or "full" (each layer's forward run again). ``attention``: "flash" (FlashAttention: the
    score matrix never reaches memory, the masked half of a causal mask skipped; at the fastest kernel published
    for the GPU), "fa2" (the same at FlashAttention-2's own published rates: for software that ran it), "fa1" (at
    FlashAttention's, v1: for software that ran it or its Triton port, for which they are an upper bound) or
    "unfused" (as before 2022:
    the scores written, softmaxed and dropped out in memory, every one computed). ``schedule``: the pipeline's,
    "1f1b" (interleaved when ``vp`` > 1), "interleaved" (the same, said outright: needs ``vp`` > 1), "gpipe" or
    "zero-bubble" (ZB-H1); see :mod:`ringlab.predict.schedules`. Megatron-Core's memory settings, by its names:
    ``grad_reduce_in_fp32`` (False: 16-bit gradient buffer, reduced in 16 bits), ``precision_aware_optimizer``,
    ``offload_layers`` (``cpu_offloading_num_layers``: that many layers' activations in host memory; needs pp=1),
    ``ends_in_pipeline_split`` (``account_for_embedding_in_pipeline_split`` and ``..._loss_...``);
    ``optimizer_dtype`` ("fp32": master weights and Adam's moments in fp32, 12 bytes a parameter; "bf16": the moments
    in bf16 and no master copy, 4 bytes, as :data:`OPTIMIZER_STATE` cites). ``cross_entropy``:
    how the loss runs over the logits, "unfused" (Megatron-LM's default: a kernel an operation), "fused"
    (``cross_entropy_loss_fusion``), "te" (Transformer Engine's) or "xentropy" (flash-attn's); its bytes a logit are
    :data:`CROSS_ENTROPY_TRAFFIC`. ``cp_comm``: how context parallelism moves keys and values, by Megatron-Core's
    ``cp_comm_type``: "p2p" (a ring, each block's transfer hidden behind the attention of the block before) or
    "all_gather" (gathered whole before attention runs, the transfer exposed: the Llama 3 paper's choice, 3.3.2).

    Returns a :class:`Plan` (``.fits``, ``.memory``, ``.time``, ``.step_seconds``, ``.tokens_per_second_per_gpu``,
    ``.mfu``): a prediction from published figures, never a measurement."""
    model = _model(model)
    m = _machine(topology)
    tp, pp, cp, ep, vp, micro_batch, global_batch, seq = (_whole(key, value) for key, value in (
        ("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep), ("vp", vp), ("micro_batch", micro_batch),
        ("global_batch", global_batch), ("seq", seq)))
    if isinstance(zero, bool) or not isinstance(zero, numbers.Integral) or zero not in (0, 1, 2, 3):
        raise ValueError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    zero = int(zero)
    for key, value in (("grad_reduce_in_fp32", grad_reduce_in_fp32), ("precision_aware_optimizer",
                       precision_aware_optimizer), ("ends_in_pipeline_split", ends_in_pipeline_split)):
        if not isinstance(value, bool):  # a string such as "no" would be true
            raise ValueError(f"{key} must be True or False, got {value!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be None, 'selective' or 'full', got {recompute!r}")
    if attention not in ATTENTION:
        raise ValueError(f"attention must be 'flash', 'fa2', 'fa1' or 'unfused', got {attention!r}")
    _one_of("cross_entropy", cross_entropy, CROSS_ENTROPY_TRAFFIC)
    _one_of("optimizer_dtype", optimizer_dtype, OPTIMIZER_STATE)
    _one_of("cp_comm", cp_comm, CP_COMM)
    offload_layers = _whole("offload_layers", offload_layers, minimum=0)
    if offload_layers and (offload_layers >= model.layers or pp > 1):
        # Megatron-Core's own checks (megatron/core/transformer/transformer_config.py at 92c8482e, lines 1053-1062)
        raise ValueError(f"offload_layers={offload_layers} must be under the model's {model.layers} layers, with "
                         f"pp=1 (Megatron-Core has no CPU offloading with pipeline parallelism), got pp={pp}")
    if ends_in_pipeline_split and (model.layers + 2) % pp:
        raise ValueError(f"ends_in_pipeline_split=True counts the embedding and the loss as layers: {model.layers} + "
                         f"2 must divide into pp={pp} stages (Megatron-Core's check)")
    gpus = m.nodes * m.gpus_per_node
    if gpus % (tp * pp * cp):
        raise ValueError(f"tp x pp x cp = {tp} x {pp} x {cp} = {tp * pp * cp} does not divide the {gpus} GPUs")
    dp = gpus // (tp * pp * cp)
    if model.heads % tp:
        raise ValueError(f"tp={tp} does not divide the model's {model.heads} attention heads")
    if pp * vp > model.layers + (2 if ends_in_pipeline_split else 0):
        raise ValueError(f"pp x vp = {pp} x {vp} stages, more than the model's {model.layers} layers")
    if vp > 1 and pp == 1:
        raise ValueError("vp (virtual pipeline stages) needs pp > 1")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
    if schedule == "interleaved" and vp == 1:
        raise ValueError("schedule='interleaved' needs vp > 1 virtual stages a GPU")
    if schedule in ("gpipe", "zero-bubble") and vp > 1:
        raise ValueError(f"schedule={schedule!r} runs one stage a GPU: vp must be 1, got {vp}")
    if ep > 1 and not model.moe:
        raise ValueError(f"ep={ep}, but the model has no experts")
    if model.experts % ep or dp * cp % ep:
        raise ValueError(f"ep={ep} must divide the {model.experts} experts and dp x cp = {dp * cp}")
    if global_batch % (dp * micro_batch):
        raise ValueError(f"global_batch {global_batch} does not divide into {dp} data-parallel ranks x micro_batch "
                         f"{micro_batch}")
    if seq % (2 * cp if cp > 1 else 1):
        raise ValueError(f"seq {seq} must divide into 2 x cp = {2 * cp} blocks (ring attention's zigzag)")
    gpu = Compute.of(m.gpu)
    if precision not in gpu.peak:
        raise ValueError(f"no published {precision} peak for {m.gpu}")
    micro = global_batch // (dp * micro_batch)   # micro-batches a step, per pipeline
    ends_split = ends_in_pipeline_split and pp > 1
    slots = -(-(model.layers + (2 if ends_split else 0)) // pp)  # a stage's share, the embedding and loss as layers
    L_first = slots - (1 if ends_split else 0)  # the first stage's (the memory's): the embedding takes a layer
    # the most layers a stage holds: a middle stage's, where there is one (with the ends counted as layers and two
    # stages, each holds one layer fewer than its share)
    L_stage = slots - (1 if ends_split and pp == 2 else 0)
    imbalance = L_stage * pp / model.layers
    h = model.hidden
    full = recompute == "full"
    notes = []

    # -- memory (bytes on the busiest GPU: the first pipeline stage, with the embedding) -------------------------
    moe_stage = min(L_first, model.moe_layers)    # expert layers on the first stage (dense ones come first)
    dense_layer, _ = model.layer_params(False)
    moe_dense, moe_experts = model.layer_params(True) if model.moe else (0, 0)
    ends = (model.embedding_params + model.head_params) if pp == 1 else max(model.embedding_params,
                                                                               model.head_params)
    dense = ((L_first - moe_stage) * dense_layer + moe_stage * moe_dense + ends) / tp
    experts = moe_stage * moe_experts / (tp * ep)
    shard, expert_shard = dp * cp, dp * cp // ep
    weights = WEIGHT_BYTES * (dense / (shard if zero >= 3 else 1) + experts / (expert_shard if zero >= 3 else 1))
    grad_bytes = GRAD_BYTES if grad_reduce_in_fp32 else WEIGHT_BYTES
    main_grad = (0 if grad_reduce_in_fp32 or precision_aware_optimizer or zero >= 3 or optimizer_dtype != "fp32"
                 else MAIN_GRAD_BYTES)  # a bf16 optimizer reads the 16-bit gradients as they are
    grads = grad_bytes * (dense / (shard if zero >= 2 else 1) + experts / (expert_shard if zero >= 2 else 1))
    optimizer = (OPTIMIZER_STATE[optimizer_dtype] + main_grad) * (dense / (shard if zero >= 1 else 1)
                                                 + experts / (expert_shard if zero >= 1 else 1))
    tokens_mb = micro_batch * seq // cp                   # tokens of one micro-batch on one GPU (before tp)
    flash, selective = attention in ("flash", "fa2", "fa1"), recompute == "selective"
    scores = model.heads * seq           # score elements a query has in one layer, all heads, over every key
    fp8 = precision == "fp8"
    stored = model.activation_bytes_per_token(fp8=fp8) + (0 if flash or selective else SCORE_STORED * scores)
    per_layer = (2 * ACT_BYTES * h if full else stored) * tokens_mb / tp
    pipeline_schedule = "interleaved" if vp > 1 else schedule  # 1F1B with virtual stages is interleaved (Megatron-LM)
    in_flight = 1 if pp == 1 else peak_in_flight(pipeline_schedule, pp, micro, vp)  # never more than there are
    logits = LOGIT_BYTES * tokens_mb * model.vocab / tp
    on_gpu = L_first - offload_layers  # Transformer Engine keeps at most the layers not offloaded on the GPU
    activations = max(in_flight * on_gpu * per_layer + (logits if pp == 1 else 0), on_gpu * per_layer + logits)
    if full:  # the layer being recomputed holds its whole activations again (scores too, unfused), less its input:
        activations += (stored - 2 * ACT_BYTES * h) * tokens_mb / tp  # that is the checkpoint counted above
    groups = sum(x > 1 for x in (tp, pp, cp, dp, ep)) + (pp > 1)
    buffers = NCCL_BUFFERS * groups
    if zero >= 3:  # two layers' weights gathered at once: the one computing and the one prefetched
        buffers += 2 * WEIGHT_BYTES * (dense_layer + (moe_experts / ep if model.moe else 0)) / tp
    memory = {"weights": weights, "gradients": grads, "optimizer": optimizer, "activations": activations,
              "buffers": buffers}

    # -- compute ------------------------------------------------------------------------------------------------
    tokens = global_batch * seq
    matmul_flops = 6.0 * model.matmul_params() * (4 / 3 if full else 1)
    # the attention's forward runs again in the backward: every layer's, or (selective) the core attention's, which
    # Megatron-Core checkpoints whatever the kernel (megatron/core/transformer/attention.py, checkpoint_core_attention)
    recomputed = full or selective
    matmul_rate = gpu.matmul[precision]
    attn_fwd = model.attention_flops_per_token(seq)           # forward, every score computed
    if flash:  # causal: FlashAttention skips the blocks above the diagonal; its backward is 2.5 forwards, in bf16
        fwd_s, bwd_s, attention_source = attention_seconds_per_flop(m.gpu, seq // cp, gpu.matmul["bf16"],
                                                                    attention, micro_batch * model.heads / tp)
        attn_seconds = attn_fwd / 2 * (fwd_s * (2 if recomputed else 1) + FA_BACKWARD * bwd_s)
    else:      # unfused: batched matrix products at the matmul rate, backward 2 forwards
        attention_source = "unfused: at the matmul rate"
        attn_seconds = attn_fwd * (4 if recomputed else 3) / gpu.matmul["bf16"]
    kv_dim = model.kv * model.head_dim if not model.mla else model.mla[1] + model.mla[3]
    width = (3 if model.gated else 2) * (model.ffn * (model.top_k + model.shared_experts) if model.moe else model.ffn)
    elementwise = ACT_BYTES * model.layers * (4 * h + 6 * h + width + 2 * (h + kv_dim))  # bytes forward, per token
    elementwise *= 1 + BACKWARD_TRAFFIC + (1 if full else 0)
    if not flash:  # the scores through memory, forward, backward, and again when recomputed
        elementwise += SCORE_TRAFFIC * model.layers * scores * (1 + BACKWARD_TRAFFIC + (1 if recomputed else 0))
    elementwise += CROSS_ENTROPY_TRAFFIC[cross_entropy] * model.vocab  # the loss, forward and backward, a token
    per_gpu = tokens / gpus
    attention_s = per_gpu * attn_seconds
    # The output layer and the loss run on the last pipeline stage alone (Megatron-LM: GPTModel builds its
    # output_layer only where post_process, on the last stage), beside its layers; the busiest stage sets the pace
    # (as Megatron-Bridge's pull request 5391 measured it: "the first and last pipeline stages carry more work than
    # the middle ones. Pipeline throughput is set by the slowest stage").
    head_matmul = 6.0 * model.vocab * h * (4 / 3 if full else 1)  # the output layer, as matmul_flops counts it
    # ... in 16 bits even in an fp8 run: Megatron-Core's output layer is its own tensor_parallel.ColumnParallelLinear
    # (a torch.matmul, megatron/core/tensor_parallel/layers.py), not one of Transformer Engine's fp8 layers
    # (megatron/core/models/gpt/gpt_model.py at 338af514, NeMo 24.07's, line 118; the same at 92c8482e, line 237)
    head_rate = gpu.matmul["bf16"] if precision == "fp8" else matmul_rate
    head_elementwise = CROSS_ENTROPY_TRAFFIC[cross_entropy] * model.vocab
    if pp == 1:
        layer_share, head_share = 1.0, 1.0     # every GPU runs every layer's share and the head's
    else:
        L_last = slots - (1 if ends_split else 0)  # the loss takes a layer's place where it is counted as one
        middle, last = (imbalance, 0.0), (L_last * pp / model.layers, float(pp))
        per_layer = matmul_flops - head_matmul, elementwise - head_elementwise
        work = lambda s: (per_gpu * (per_layer[0] * s[0] / matmul_rate + head_matmul * s[1] / head_rate)  # noqa: E731
                          + attention_s * s[0])
        layer_share, head_share = last if work(last) > work(middle) else middle
        if head_share:
            notes.append(f"the last stage computes the output layer and the loss besides its "
                         f"{plural(L_last, 'layer')}: the busiest stage, it sets the pace")
    compute_parts = {"matmul": per_gpu * ((matmul_flops - head_matmul) * layer_share / matmul_rate
                                          + head_matmul * head_share / head_rate),
                     "attention": attention_s * layer_share,
                     "elementwise": per_gpu * ((elementwise - head_elementwise) * layer_share
                                               + head_elementwise * head_share) / (gpu.hbm * ELEMENTWISE_SHARE)}
    compute = sum(compute_parts.values())
    if imbalance > 1 and not head_share:
        counted = ", the embedding and the loss counted as a layer each" if ends_split else ""
        notes.append(f"{plural(model.layers, 'layer')} {'does' if model.layers == 1 else 'do'} not divide evenly into {pp} stages{counted}: the busiest "
                     f"holds {L_stage}, {imbalance - 1:.1%} more than an even share, and sets the pace")
    mb_compute = compute / micro                    # one micro-batch, every layer of this stage, forward + backward
    fwd_share = 1 / (4 if full else 3)
    time = {"compute": compute}
    hidden = {}
    collectives = []

    def add(par, coll, nbytes, topo, calls, hide=0.0):
        seconds, algo, proto = _price(coll, nbytes, topo)
        total = seconds * calls
        exposed = max(0.0, total - hide)
        collectives.append(Collective(par, coll, int(nbytes), topo.machine.nodes * topo.machine.gpus_per_node,
                                      algo, proto, seconds, calls, exposed, _where(topo)))
        time[par] = time.get(par, 0.0) + exposed
        hidden[par] = hidden.get(par, 0.0) + total - exposed

    full_tensor = ACT_BYTES * tokens_mb * h         # one micro-batch's hidden states, gathered over tp
    if tp > 1:
        topo = group_topology(topology, tp, 1)
        # sequence parallelism's collectives a layer, of each kind: forward 2 (an all-gather before attention and one
        # before the MLP, a reduce-scatter after each), backward 2 (each one's gradient runs the other kind), full
        # recomputation's forward 2 more: "four all-gathers and four reduce-scatters" without it (Korthikanti et al.
        # 2022, section 4.2.2)
        per_layer_calls = 4 + (2 if full else 0)
        add("tp", "allgather", full_tensor, topo, micro * L_stage * per_layer_calls)
        add("tp", "reduce_scatter", full_tensor, topo, micro * L_stage * per_layer_calls)
    if cp > 1:
        topo = group_topology(topology, cp, tp)
        kv_bytes = ACT_BYTES * 2 * micro_batch * seq * kv_dim / (tp if not model.mla else 1)  # keys and values, gathered
        calls = micro * L_stage
        attn_layer = attention_s / (micro * L_stage)
        hide = calls * attn_layer if cp_comm == "p2p" else 0.0  # all_gather: attention waits for the keys and values
        add("cp", "allgather", kv_bytes, topo, calls * (2 + (1 if full else 0)), hide=hide)
        add("cp", "reduce_scatter", kv_bytes, topo, calls)
    if ep > 1:
        topo = group_topology(topology, ep, tp)  # context and data folded: ep next to tp (Megatron-Core)
        routed = ACT_BYTES * tokens_mb / tp * model.top_k * h  # tokens this GPU sends out to experts
        busiest = min(L_stage, model.moe_layers)  # the expert layers of the stage that sets the pace (at most)
        add("ep", "alltoall", routed, topo, micro * busiest * 2 * (2 + (1 if full else 0)))
    if pp > 1:
        topo = group_topology(topology, 2, tp * cp * dp)
        boundary = full_tensor / tp
        add("pp", "sendrecv", boundary, topo, 2 * (pp - 1) * vp)
        time["bubble"] = compute * bubble_over_ideal(pipeline_schedule, pp, micro, chunks=vp, forward=fwd_share,
                                                     backward=1 - fwd_share, weight=fwd_share)  # W: a forward's matmuls
    if dp * cp > 1:
        topo = group_topology(topology, dp * cp, tp)
        params = dense + (experts if ep == 1 else 0)  # with ep > 1, experts are reduced over their own group below
        last_bwd = mb_compute * (1 - fwd_share)
        first_fwd = mb_compute * fwd_share
        if zero >= 3:
            # each layer's whole weights gathered (nccl-tests' size: the gathered buffer), forward and backward
            # (and again to recompute), its gradients reduce-scattered, while the layer before it computes
            layer = params / L_stage
            add("dp", "allgather", WEIGHT_BYTES * layer, topo, micro * L_stage * (2 + (1 if full else 0)),
                hide=compute * 2 / 3)
            add("dp", "reduce_scatter", grad_bytes * layer, topo, micro * L_stage, hide=compute / 3)
        else:
            gbytes = grad_bytes * params
            buckets = max(1, math.ceil(params / BUCKET_PARAMS))
            if zero == 0:
                add("dp", "allreduce", gbytes / buckets, topo, buckets, hide=last_bwd)
            elif zero == 2:
                # gradients kept only as shards: each micro-batch's reduce-scattered as its backward makes them
                # (PyTorch FSDP's no_sync: without a sync a micro-batch, "the full model gradients (instead of
                # gradient shards)" accumulate), on their own stream while the micro-batches after it compute:
                # hidden behind the step's compute from the first backward on
                add("dp", "reduce_scatter", gbytes / buckets, topo, micro * buckets, hide=compute - first_fwd)
                add("dp", "allgather", WEIGHT_BYTES * params / buckets, topo, buckets, hide=first_fwd)
            else:
                add("dp", "reduce_scatter", gbytes / buckets, topo, buckets, hide=last_bwd)
                add("dp", "allgather", WEIGHT_BYTES * params / buckets, topo, buckets, hide=first_fwd)
        if ep > 1 and expert_shard > 1:
            etopo = group_topology(topology, expert_shard, tp * ep)
            ebytes = grad_bytes * experts
            buckets = max(1, math.ceil(experts / BUCKET_PARAMS))
            add("dp", "allreduce" if zero == 0 else "reduce_scatter", ebytes / buckets, etopo, buckets,
                hide=max(0.0, last_bwd - hidden.get("dp", 0.0)))
    local = (dense / (shard if zero >= 1 else 1) + experts / (expert_shard if zero >= 1 else 1))
    state = OPTIMIZER_STATE[optimizer_dtype]
    time["optimizer"] = local * (ADAM_TRAFFIC - 2 * OPTIMIZER_BYTES + 2 * state) / gpu.hbm
    notes.append(f"attention's rate: {attention_source}")
    if selective and flash:
        notes.append("selective recomputation runs the attention's forward again in the backward (Megatron-Core "
                     "checkpoints the core attention); FlashAttention stores no scores, so it saves no memory here")
    if tp > m.gpus_per_node:
        notes.append(f"tp={tp} spans nodes: its collectives cross the network on every layer")
    planned = Plan(model, topology.name, m.gpu, gpus,
                {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vp": vp, "dp": dp, "zero": zero, "micro_batch": micro_batch,
                 "global_batch": global_batch, "seq": seq, "precision": precision, "recompute": recompute,
                 "attention": attention, "schedule": schedule, "grad_reduce_in_fp32": grad_reduce_in_fp32,
                 "precision_aware_optimizer": precision_aware_optimizer, "offload_layers": offload_layers,
                 "optimizer_dtype": optimizer_dtype,
                 "ends_in_pipeline_split": ends_in_pipeline_split, "cross_entropy": cross_entropy, "cp_comm": cp_comm,
                 "micro_batches": micro},
                memory, gpu.memory, time, hidden, collectives, model.flops_per_token(seq), gpu.peak["bf16"], notes,
                compute_parts)
    if planned.mfu > 1:  # not a GPU beyond its peak: model FLOPs beyond those the GPU runs
        notes.append(f"MFU {planned.mfu:.1%} is over 100%: model FLOPs (PaLM's convention) count every attention "
                     "score, where causal FlashAttention computes only the unmasked half"
                     + (", and fp8 matmuls are held to bf16's peak" if fp8 else "")
                     + "; the work the GPU runs goes no faster than its peak")
    return planned


@dataclass
class Search:
    """The layouts :func:`search` tried: ``best``, the plans that fit, fastest first; ``rejected``, (layout, why)
    for those that do not fit or cannot be laid out."""

    best: list
    rejected: list
    considered: int

    def why_slower(self, plan: Plan) -> str:
        """What a plan loses to the best by: the two kinds of time it spends most more on, largest first; and
        where it spends less on a kind, the largest such saving (``"; saves ..."``), which is why the costs named
        can add up to more than the step times differ by."""
        best = self.best[0]
        extra = {k: plan.time.get(k, 0.0) - best.time.get(k, 0.0) for k in set(plan.time) | set(best.time)}
        floor = 0.005 * best.step_seconds
        worse = sorted(((v, k) for k, v in extra.items() if v > floor), reverse=True)
        if not worse:
            return "as fast as the best"
        said = ", ".join(f"{WHY_NAMES.get(k, k)} +{v:.3f} s" for v, k in worse[:2])
        better = min(((v, k) for k, v in extra.items() if v < -floor), default=None)
        return said + (f"; saves {WHY_NAMES.get(better[1], better[1])} {-better[0]:.3f} s" if better else "")

    def table(self, top: int = 10) -> str:
        lines = [f"{self.considered} layouts considered, {len(self.best)} fit (predicted, not measured)"]
        for i, p in enumerate(self.best[:top]):
            why = "" if i == 0 else f"  ({self.why_slower(p)})"
            lines.append(f"{i + 1:>3}. {p.layout_str():<52} {p.step_seconds:8.3f} s  "
                         f"{p.tokens_per_second_per_gpu:>9,.0f} tok/s/GPU  MFU {p.mfu:5.1%}  "
                         f"{p.memory_total / 2 ** 30:5.1f} GiB{why}")
        no_fit = [(layout, why) for layout, why in self.rejected if why.startswith("does not fit")]
        if no_fit:
            lines.append(f"{len(no_fit)} do not fit, e.g.:")
            lines += [f"     {_layout_str(layout):<52} {why}" for layout, why in no_fit[:3]]
        return "\n".join(lines)


# what each kind of a plan's time is called where a search says why a layout loses to the best
WHY_NAMES = {"tp": "exposed tensor-parallel time", "cp": "exposed context-parallel time",
             "ep": "exposed expert all-to-all", "pp": "pipeline sends", "dp": "exposed data-parallel time",
             "bubble": "pipeline bubble", "compute": "compute (recomputation, or uneven stages)",
             "optimizer": "optimizer update"}


def _one_of(key: str, value, choices) -> None:
    """A ValueError naming ``key``, its known values and ``value``, unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{key} must be one of {', '.join(map(repr, choices))}, got {value!r}")


def _layout_str(layout: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in layout.items() if v not in (None, 1) or k == "zero")


def _powers(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


SEARCH_VP = (1, 2, 4, 8)  # virtual stages a GPU the search tries. At 8 the bubble is an eighth of 1F1B's. The
#                          planner prices each chunk's sends and activations, not what else makes more chunks stop
#                          paying (smaller kernels, less to overlap a send with), so the search stops at 8
SEARCH_CP_TOKENS = 4096  # the fewest tokens of a sequence a context-parallel rank keeps in the search: fewer, and
#                          attention runs further below its published rates (which fall from 16k to 2k tokens) while
#                          the keys and values each rank receives stay nearly the same
SEARCH_SOFTWARE = ("attention", "schedule", "cross_entropy", "cp_comm")  # plan()'s keywords a search passes on unchanged
SEARCH_RECIPE = ("grad_reduce_in_fp32", "precision_aware_optimizer", "offload_layers", "ends_in_pipeline_split",
                 "optimizer_dtype")
#                 Megatron-Core's memory settings, passed on unchanged too


def search_choices(model, topology, seq: int, attention: str = "flash") -> dict:
    """The values :func:`search` tries for each layout keyword of ``model`` on ``topology`` at ``seq`` tokens with
    ``attention``'s kernel (with two rules across them: vp > 1 only where pp > 1, ZeRO-3 only where pp = 1).
    Selective recomputation only where attention is unfused: FlashAttention stores no scores, so there it would
    only run the attention's forward again."""
    model, m = _model(model), _machine(topology)
    return {
        "tp": [t for t in _powers(2 * m.gpus_per_node) if model.heads % t == 0],
        "pp": [p for p in _powers(64) if p <= model.layers],
        "cp": [c for c in _powers(32) if c == 1 or seq // c >= SEARCH_CP_TOKENS],
        "ep": [e for e in _powers(model.experts) if model.experts % e == 0] if model.moe else [1],
        "vp": list(SEARCH_VP),
        "zero": [0, 1, 2, 3],
        "micro_batch": [1, 2, 4],
        "recompute": [None, "full"] + (["selective"] if attention == "unfused" else []),
    }


def search(model, topology, *, global_batch: int, seq: int, precision: str = "bf16", top: int | None = None,
           **fixed) -> Search:
    """The layouts of ``model`` on ``topology`` for ``global_batch`` sequences of ``seq`` tokens, ranked by
    predicted step time: tensor parallelism up to twice a node, pipeline stages up to 64 (each GPU's stage in one
    chunk, or interleaved as 2, 4 or 8 virtual stages: :data:`SEARCH_VP`), context parallelism up to 32 while each
    rank keeps at least :data:`SEARCH_CP_TOKENS` tokens of a sequence, expert parallelism for a mixture of experts,
    ZeRO 0, 1, 2 and 3, micro-batches of 1, 2 and 4, full recomputation or none (and selective, where attention is
    unfused): :func:`search_choices`. Any keyword of :func:`plan` given (``tp=8``) is held fixed. The software's
    choices (``attention``, ``schedule``, ``cross_entropy``, ``cp_comm``) and the recipe's memory settings
    (:data:`SEARCH_RECIPE`) go to every plan as given. ``top``: keep that many plans (all by default)."""
    model = _model(model)
    m = _machine(topology)
    gpus = m.nodes * m.gpus_per_node
    software = {k: fixed.pop(k) for k in SEARCH_SOFTWARE + SEARCH_RECIPE if k in fixed}
    for key in ("grad_reduce_in_fp32", "precision_aware_optimizer", "ends_in_pipeline_split"):
        if key in software and not isinstance(software[key], bool):  # as plan() checks it, once, not in every layout
            raise ValueError(f"{key} must be True or False, got {software[key]!r}")
    _one_of("optimizer_dtype", software.get("optimizer_dtype", "fp32"), OPTIMIZER_STATE)
    if "offload_layers" in software:
        software["offload_layers"] = _whole("offload_layers", software["offload_layers"], minimum=0)
    if software.get("attention", "flash") not in ATTENTION:
        raise ValueError(f"attention must be 'flash', 'fa2', 'fa1' or 'unfused', got {software['attention']!r}")
    if software.get("attention") in OWN_RATES:
        _own_rates(software["attention"], m.gpu)
    if software.get("schedule", "1f1b") not in SCHEDULES:
        raise ValueError(f"unknown pipeline schedule {software['schedule']!r}; known: {', '.join(SCHEDULES)}")
    _one_of("cross_entropy", software.get("cross_entropy", "unfused"), CROSS_ENTROPY_TRAFFIC)
    _one_of("cp_comm", software.get("cp_comm", "p2p"), CP_COMM)
    known = {"tp", "pp", "cp", "ep", "vp", "zero", "micro_batch", "recompute"}
    unknown = set(fixed) - known
    if unknown:
        raise ValueError(f"unknown layout keyword(s) {', '.join(sorted(unknown))}; known: "
                         f"{', '.join(sorted(known | set(SEARCH_SOFTWARE) | set(SEARCH_RECIPE)))}")
    choices = search_choices(model, topology, seq, software.get("attention", "flash"))
    for key, value in fixed.items():
        choices[key] = [value]
    plans, rejected, considered = [], [], 0
    for tp in choices["tp"]:
        for pp in choices["pp"]:
            for cp in choices["cp"]:
                if gpus % (tp * pp * cp):
                    continue
                for ep in choices["ep"]:
                    for vp in choices["vp"]:
                        if vp > 1 and pp == 1:
                            continue
                        for zero in choices["zero"]:
                            if zero == 3 and pp > 1:
                                continue  # FSDP with pipeline stages is rare and gathers per micro-batch
                            for mb in choices["micro_batch"]:
                                for rc in choices["recompute"]:
                                    layout = {"tp": tp, "pp": pp, "cp": cp, "ep": ep, "vp": vp, "zero": zero,
                                              "micro_batch": mb, "recompute": rc}
                                    considered += 1
                                    try:
                                        p = plan(model, topology, global_batch=global_batch, seq=seq,
                                                 precision=precision, **layout, **software)
                                    except ValueError as err:
                                        rejected.append((layout, str(err)))
                                        continue
                                    if p.fits:
                                        plans.append(p)
                                    else:
                                        rejected.append((layout, f"does not fit: {p.memory_total / 2 ** 30:.1f} GiB "
                                                                 f"of {p.capacity / 2 ** 30:.0f} GiB"))
    plans.sort(key=lambda p: p.step_seconds)
    return Search(plans[:top] if top else plans, rejected, considered)
