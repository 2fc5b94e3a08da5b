"""One transformer layer's forward and backward, timed on this machine's GPU at the shapes of published runs, held
against the planner's compute time for that layer.

    python benchmarks/layer_vs_plan.py [--shapes megatroncore-1.7b,mpt-7b,...] [--iters 20] [--json OUT]

Why. The planner (``rl.plan``) predicts Megatron-Core's 1.7B and 7.1B runs and MPT-7B on H100 1.26-1.31x faster
than they ran, while the same models on A100 and the large models on H100 are within 20%; no published figure
prices why (see ``benchmarks/plan_vs_published.py``). This measures, on a real GPU, the two candidates:

- **a small layer reaching a smaller share of the planner's rate**: each shape's measured time over the
  planner's (over 1: slower than planned, as ``plan_vs_published.py``'s ratios over 1 are), side by side, from the
  1.7B's (hidden 2048) to GPT-3 175B's (hidden 12288, split 8 ways);
- **the host's share**: the same layer replayed as a CUDA graph (no Python, no launches) against eager PyTorch,
  and the host's time to enqueue one step. An eager step no longer than its graph is not host-bound.

The layer is plain PyTorch in bf16 (``LayerNorm`` or ``RMSNorm``, one QKV projection, ``scaled_dot_product_attention``
causal, the output projection, the feed-forward, residual adds; no dropout, no bias), split over ``tp`` GPUs as
Megatron-LM splits it (heads and the feed-forward; the norms are timed on all the tokens, a slight over-count).
Its tensor-parallel collectives are not timed: only the compute the planner calls ``compute``. ``--attention fa2``
(the default) runs PyTorch's FlashAttention-2 kernel and has the planner price it at FlashAttention-2's published
rates; ``--attention cudnn`` runs cuDNN's fused attention, priced at cuDNN's published rates (the planner's default).

Its parts are timed alone too, as the planner prices them apart (the matrix products; attention; the rest), each
replayed as a CUDA graph. On an H200 (2026-11-30, ``results/attention_and_layer_issue52.txt``) the whole layer took
0.97-1.00 of the plan at the three over-predicted runs' shapes and 1.06-1.09 at the others', with cuDNN's attention
(priced at the share of its rate measured at each call's heads): those runs' shortfall is not in a layer's GPU work.

Everything printed is measured here, in this run, except the column the planner predicts (from published
figures). On a machine without a GPU it runs on the CPU to show that it works, and says the numbers are the CPU's:
they are not a GPU's and say nothing about the planner. ``--json`` writes the rows with their provenance (GPU,
driver, CUDA, cuDNN, torch, ringlab's commit, date, command) for ``results/``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))
from gpu_timing import graphed_seconds, seconds_each  # noqa: E402  (beside this script)


@dataclass(frozen=True)
class Shape:
    """One layer of a published run's model, as one GPU of its tensor-parallel group computes it."""

    name: str
    hidden: int
    heads: int
    ffn: int
    seq: int
    micro_batch: int
    kv_heads: int | None = None
    gated: bool = False
    tp: int = 1
    run: str = ""        # the published run whose layer this is (ringlab/data/training_runs.json), if any

    @property
    def tokens(self) -> int:
        return self.seq * self.micro_batch


# The layers of the runs the planner over-predicts, and of runs it predicts within 20%, for contrast.
SHAPES = {s.name: s for s in (
    Shape("megatroncore-1.7b", 2048, 16, 8192, 4096, 1, run="megatroncore2024-gpt-1.7b-h100"),
    Shape("megatroncore-7.1b", 4096, 32, 16384, 4096, 1, tp=2, run="megatroncore2024-gpt-7.1b-h100"),
    Shape("mpt-7b", 4096, 32, 16384, 2048, 6, run="mpt-7b-h100-8-bf16"),
    Shape("llama3.1-8b", 4096, 32, 14336, 8192, 1, kv_heads=8, gated=True, run="dgxc2411-llama3.1-8b-h100-8-bf16"),
    Shape("megatroncore-70b", 8192, 64, 32768, 4096, 1, tp=8, run="megatroncore2024-gpt-70b-h100"),
    Shape("gpt3-175b", 12288, 96, 49152, 2048, 1, tp=8, run="dgxc2504-gpt3-175b-h100-128-bf16"),
    Shape("tiny", 128, 4, 512, 128, 2),   # a smoke test anywhere, the CPU included: no run's layer
)}
DEFAULT_SHAPES = "megatroncore-1.7b,megatroncore-7.1b,mpt-7b,llama3.1-8b,megatroncore-70b,gpt3-175b"
GPU_NAMES = (("GB200", "gb200"), ("B200", "b200"), ("H200", "h200"), ("H100", "h100"), ("A100", "a100"))


def shapes_from(text: str) -> list[Shape]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        raise SystemExit(f"layer_vs_plan: unknown shape(s) {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(SHAPES)}")
    return [SHAPES[n] for n in names]


def make_layer(shape: Shape, dtype, device):
    """The layer as one of ``shape.tp`` GPUs holds it (plain PyTorch modules)."""
    from torch import nn
    from torch.nn import functional as F

    head_dim = shape.hidden // shape.heads
    heads, kv = shape.heads // shape.tp, (shape.kv_heads or shape.heads) // shape.tp
    ffn = shape.ffn // shape.tp
    norm = nn.RMSNorm if shape.gated else nn.LayerNorm

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = norm(shape.hidden), norm(shape.hidden)
            self.qkv = nn.Linear(shape.hidden, (heads + 2 * kv) * head_dim, bias=False)
            self.proj = nn.Linear(heads * head_dim, shape.hidden, bias=False)
            self.up = nn.Linear(shape.hidden, (2 if shape.gated else 1) * ffn, bias=False)
            self.down = nn.Linear(ffn, shape.hidden, bias=False)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split([heads * head_dim, kv * head_dim, kv * head_dim], dim=-1)
            q, k, v = (t.view(b, s, -1, head_dim).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, heads * head_dim))
            u = self.up(self.norm2(x))
            if shape.gated:
                gate, u = u.chunk(2, dim=-1)
                u = F.silu(gate) * u
            else:
                u = F.gelu(u)
            return x + self.down(u)

    return Layer().to(device=device, dtype=dtype)


def layer_params(shape: Shape) -> int:
    """The weights of the layer timed (one GPU's share), from the shape alone."""
    head_dim = shape.hidden // shape.heads
    heads, kv = shape.heads // shape.tp, (shape.kv_heads or shape.heads) // shape.tp
    ffn = shape.ffn // shape.tp
    h = shape.hidden
    return (h * (heads + 2 * kv) * head_dim + heads * head_dim * h + h * (2 if shape.gated else 1) * ffn + ffn * h
            + (2 if shape.gated else 4) * h)   # the norms: a weight each (RMSNorm), a weight and a bias (LayerNorm)


def planned_seconds(shape: Shape, gpu: str, kernel: str = "fa2") -> tuple[float, str, dict]:
    """The planner's compute seconds for this layer's forward and backward on one GPU of ``gpu``, its
    attention's pricing, and the seconds split as the planner splits them (matmul, attention, elementwise): a
    one-layer model of the shape with a one-word vocabulary (no embedding or loss to speak of), ``tp`` GPUs, one
    micro-batch."""
    from ringlab.topology.machines import cluster
    from ringlab.train.planner import FA2_RATES, plan
    from ringlab.train.transformer import Transformer

    model = Transformer(1, shape.hidden, shape.heads, shape.ffn, 1, kv_heads=shape.kv_heads, gated=shape.gated,
                        name=shape.name)
    attention = "fa2" if kernel == "fa2" and gpu in FA2_RATES else "flash"
    p = plan(model, cluster(gpu, 1, shape.tp), tp=shape.tp, micro_batch=shape.micro_batch,
             global_batch=shape.micro_batch, seq=shape.seq, attention=attention)
    return p.time["compute"], attention, p.compute_parts


def flops(shape: Shape) -> float:
    """Model FLOPs of the layer's forward and backward on one GPU (6 a weight a token; causal attention counted
    half, 3x its forward), to report a rate beside each time."""
    head_dim = shape.hidden // shape.heads
    attention = 2 * 2 * shape.seq * head_dim * (shape.heads // shape.tp) / 2   # QK^T and PV, causal half, a token
    return shape.tokens * (6 * (layer_params(shape) - (2 if shape.gated else 4) * shape.hidden) + 3 * attention)


def time_layer(shape: Shape, device: str, iters: int, warmup: int = 3, kernel: str = "fa2") -> dict:
    """Seconds of one forward and backward: eager (CUDA events around ``iters`` steps), the host's time to enqueue
    one step, and the same step replayed as a CUDA graph (GPU only); on a GPU, attention by ``kernel``'s backend
    only ("fa2": PyTorch's FlashAttention-2; "cudnn": cuDNN's), so that an unavailable one is an error, not a
    silent fallback."""
    if device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = SDPBackend.FLASH_ATTENTION if kernel == "fa2" else SDPBackend.CUDNN_ATTENTION
        with sdpa_kernel(backend):
            return _time_layer(shape, device, iters, warmup)
    return _time_layer(shape, device, iters, warmup)


def _time_parts(shape: Shape, device: str, iters: int, warmup: int) -> dict:
    """The layer's parts alone, forward and backward, as the planner prices them apart: its four
    matrix products (each weight's forward, input gradient and weight gradient) and its attention kernel."""
    import torch
    from torch.nn import functional as F

    dtype = torch.bfloat16
    head_dim = shape.hidden // shape.heads
    heads, kv = shape.heads // shape.tp, (shape.kv_heads or shape.heads) // shape.tp
    ffn, h, n = shape.ffn // shape.tp, shape.hidden, shape.tokens
    linears = [(h, (heads + 2 * kv) * head_dim), (heads * head_dim, h), (h, (2 if shape.gated else 1) * ffn), (ffn, h)]
    weights = [(torch.randn(o, i, device=device, dtype=dtype) * 0.02).requires_grad_() for i, o in linears]
    inputs = [torch.randn(n, i, device=device, dtype=dtype, requires_grad=True) for i, _ in linears]
    grads = [torch.randn(n, o, device=device, dtype=dtype) for _, o in linears]
    q = torch.randn(shape.micro_batch, heads, shape.seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    k, v = (torch.randn(shape.micro_batch, kv, shape.seq, head_dim, device=device, dtype=dtype, requires_grad=True)
            for _ in range(2))
    attn_grad = torch.randn_like(q)

    def matmuls():
        for w, x, g in zip(weights, inputs, grads):
            torch.autograd.grad(F.linear(x, w), (x, w), g)

    def attention():
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads),
                            (q, k, v), attn_grad)

    def timed(fn):
        return graphed_seconds(fn, iters, warmup) if device == "cuda" else seconds_each(fn, device, iters, warmup)

    return {"matmul": timed(matmuls), "attention": timed(attention)}


def _time_layer(shape: Shape, device: str, iters: int, warmup: int) -> dict:
    import torch

    dtype = torch.bfloat16
    torch.manual_seed(0)
    layer = make_layer(shape, dtype, device)
    assert sum(p.numel() for p in layer.parameters()) == layer_params(shape)
    x = torch.randn(shape.micro_batch, shape.seq, shape.hidden, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)

    def step():
        layer(x).backward(grad)

    for _ in range(warmup):
        step()
    out = {}
    if device == "cuda":
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        host = 0.0
        start.record()
        for _ in range(iters):
            t0 = time.perf_counter()
            step()
            host += time.perf_counter() - t0
        end.record()
        torch.cuda.synchronize()
        out["eager"] = start.elapsed_time(end) / 1e3 / iters
        out["host"] = host / iters
        def fresh_gradients():  # the captured backward allocates its gradients from the graph's pool
            layer.zero_grad(set_to_none=True)
            x.grad = None

        out["graph"] = graphed_seconds(step, iters, warmup, before_capture=fresh_gradients)
    else:
        out["eager"] = seconds_each(step, device, iters, 0)
        out["host"] = out["eager"]
        out["graph"] = None
    out.update(_time_parts(shape, device, iters, warmup))
    return out


def square_matmul_rate(n: int = 8192, iters: int = 20) -> float:
    """FLOP/s of one n x n x n bf16 matrix product on this GPU (random data, after warm-up): the rate the planner's
    published matmul figure stands for, measured here."""
    import torch

    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return 2 * n ** 3 / seconds_each(lambda: a @ b, "cuda", iters)


def provenance(argv, device: str) -> dict:
    import torch

    from ringlab.measure.machine import ringlab_source

    source = ringlab_source()  # the commit (RINGLAB_COMMIT names it for a copy without git) and whether it differs
    info = {"torch": torch.__version__, "python": platform.python_version(),
            "ringlab_commit": source["commit"] or "unknown", "ringlab_dirty": source["dirty"],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python benchmarks/layer_vs_plan.py", *(argv if argv is not None else sys.argv[1:])])}
    if device == "cuda":
        info.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda,
                    cudnn=str(torch.backends.cudnn.version()))
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,power.limit,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True)
        if smi.returncode == 0:
            info["nvidia_smi"] = smi.stdout.strip().splitlines()[0]
    else:
        info["gpu"] = f"none: the CPU ({platform.processor() or platform.machine()})"
    return info


def gpu_key(name: str) -> str | None:
    """ringlab's name for a GPU torch names (``NVIDIA H100 80GB HBM3`` -> ``h100``), None if it has none."""
    for part, key in GPU_NAMES:
        if part in name:
            return key
    return None


def arguments(argv=None):
    parser = argparse.ArgumentParser(
        description="Time one transformer layer's forward and backward on this GPU at published runs' shapes, "
                    "against the planner's compute time for it (measured here, except the planner's column).")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated, of: {', '.join(SHAPES)} "
                                                                 f"(default: all but tiny)")
    parser.add_argument("--iters", type=int, default=20, help="timed steps a shape (default 20)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto",
                        help="auto: the GPU if there is one, else the CPU (which proves only that this runs)")
    parser.add_argument("--gpu", help="ringlab's name for the GPU the planner prices (default: from the GPU's "
                                      "name; h100 on the CPU)")
    parser.add_argument("--attention", choices=["fa2", "cudnn"], default="fa2",
                        help="the attention kernel run on the GPU and priced by the planner: fa2 (PyTorch's "
                             "FlashAttention-2, at its published rates; the default) or cudnn (cuDNN's)")
    parser.add_argument("--json", metavar="OUT", help="write the rows and their provenance")
    args = parser.parse_args(argv)
    if args.iters < 1:
        parser.error(f"--iters must be at least 1, got {args.iters}")
    return args


def main(argv=None) -> int:
    import torch

    args = arguments(argv)
    shapes = shapes_from(args.shapes)
    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("layer_vs_plan: --device cuda, but torch sees no GPU")
    gpu = args.gpu or (gpu_key(torch.cuda.get_device_name()) if device == "cuda" else "h100")
    if gpu is None:
        raise SystemExit(f"layer_vs_plan: ringlab has no figures for {torch.cuda.get_device_name()!r}; "
                         f"name one the planner knows with --gpu")
    from ringlab.train.planner import compute_data
    if gpu not in compute_data():
        raise SystemExit(f"layer_vs_plan: the planner has no figures for GPU {gpu!r}; known: "
                         f"{', '.join(compute_data())}")
    info = provenance(argv, device)
    print("# measured: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    if device == "cpu":
        print("# no GPU: these are the CPU's times, shown to prove the script runs; they are not a GPU's and the "
              "ratios below say nothing about the planner")
    if device == "cuda":
        from ringlab.train.planner import Compute, compute_data
        rate = square_matmul_rate()
        info["square_matmul_tflops"] = rate / 1e12
        print(f"# an 8192x8192x8192 bf16 matrix product here: {rate / 1e12:.0f} TFLOP/s (measured); published best "
              f"for {gpu}: {compute_data()[gpu]['matmul_tflops_bf16']:.0f}, and the planner prices a layer's "
              f"products at {Compute.of(gpu).matmul['bf16'] / 1e12:.0f}")
    print(f"# planned: rl.plan's compute for the same layer on one {gpu} (published figures; predicted, not "
          f"measured); attention run and priced as {args.attention}")
    header = (f"{'shape':20s} {'tp':>3s} {'tokens':>7s} {'eager ms':>9s} {'graph ms':>9s} {'host ms':>8s} "
              f"{'planned ms':>10s} {'TFLOP/s':>8s} {'measured/planned':>16s}")
    print(header)
    rows = []
    for shape in shapes:
        planned, attention, planned_parts = planned_seconds(shape, gpu, args.attention)
        try:
            measured = time_layer(shape, device, args.iters, kernel=args.attention)
        except RuntimeError as err:  # a kernel this GPU or this torch does not have for the shape: said, not hidden
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            print(f"{shape.name:20s} {shape.tp:3d} {shape.tokens:7d} not run: {first}")
            rows.append({"shape": shape.name, "run": shape.run, "hidden": shape.hidden, "tp": shape.tp,
                         "tokens": shape.tokens, "planned_s": planned, "planned_attention": attention,
                         "error": first})
            if device == "cuda":
                torch.cuda.empty_cache()
            continue
        best = measured["graph"] or measured["eager"]
        row = {"shape": shape.name, "run": shape.run, "hidden": shape.hidden, "tp": shape.tp, "tokens": shape.tokens,
               "eager_s": measured["eager"], "graph_s": measured["graph"], "host_s": measured["host"],
               "planned_s": planned, "planned_attention": attention, "tflops": flops(shape) / best / 1e12,
               "measured_over_planned": best / planned,
               "host_bound": measured["graph"] is not None and measured["eager"] > 1.05 * measured["graph"],
               "planned_parts_s": planned_parts}
        if "matmul" in measured:
            row["parts_s"] = {"matmul": measured["matmul"], "attention": measured["attention"],
                              "rest": best - measured["matmul"] - measured["attention"]}
        rows.append(row)
        graph = f"{measured['graph'] * 1e3:9.3f}" if measured["graph"] else f"{'-':>9s}"
        print(f"{shape.name:20s} {shape.tp:3d} {shape.tokens:7d} {measured['eager'] * 1e3:9.3f} {graph} "
              f"{measured['host'] * 1e3:8.3f} {planned * 1e3:10.3f} {row['tflops']:8.1f} "
              f"{row['measured_over_planned']:16.2f}")
    parted = [r for r in rows if "parts_s" in r]
    if parted:
        print("\nthe same step in parts, measured alone (ms; on a GPU each replayed as a CUDA graph) against the "
              "planner's split of it; the rest is the graphed step less the two parts (norms, activations, residual "
              "adds: the planner's elementwise)")
        print(f"{'shape':20s} {'matmul':>8s} {'planned':>8s} {'ratio':>6s} {'attention':>9s} {'planned':>8s} "
              f"{'ratio':>6s} {'rest':>8s} {'planned':>8s}")
        for r in parted:
            m, p = r["parts_s"], r["planned_parts_s"]
            print(f"{r['shape']:20s} {m['matmul'] * 1e3:8.3f} {p['matmul'] * 1e3:8.3f} "
                  f"{m['matmul'] / p['matmul']:6.2f} {m['attention'] * 1e3:9.3f} {p['attention'] * 1e3:8.3f} "
                  f"{m['attention'] / p['attention']:6.2f} {m['rest'] * 1e3:8.3f} {p['elementwise'] * 1e3:8.3f}")
    if device == "cuda":
        small = [r for r in rows if r["hidden"] <= 4096 and "error" not in r]
        large = [r for r in rows if r["hidden"] > 4096 and "error" not in r]
        if small and large:
            s = sum(r["measured_over_planned"] for r in small) / len(small)
            big = sum(r["measured_over_planned"] for r in large) / len(large)
            print(f"\nmeasured/planned (graphed; over 1: slower than planned), hidden <= 4096: {s:.2f} on average; "
                  f"hidden > 4096: {big:.2f}. "
                  + ("The small layers fall further short of the plan." if s > big * 1.05 else
                     "The small layers do not fall further short of the plan than the large ones."))
        bound = [r["shape"] for r in rows if r.get("host_bound")]
        print("eager steps slower than their graphs by over 5% (the host's share shows): "
              + (", ".join(bound) if bound else "none"))
    if args.json:
        Path(args.json).write_text(json.dumps({"provenance": info, "planner_gpu": gpu, "rows": rows}, indent=1))
    return 1 if all("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
