"""cuDNN's fused attention, timed on this GPU at the shape its published rates were measured at, and with fewer
heads: does a smaller attention call reach the rate the planner takes from the published figure?

    python benchmarks/attention_vs_published.py [--seqs 2048,4096,8192] [--heads 8,16,32,64,128] [--json OUT]

Why. ``rl.plan`` prices attention on Hopper at cuDNN 9.19's published rates (``ringlab/data/kernel_rates.json``,
ids ``cudnn919-h200-*``: cudnn-frontend's ``benchmark_single_sdpa.py`` on an H200, batch 1, 64 query heads and 8
key/value heads, head dim 128, causal), at whatever size a run's call has. A run split over tensor-parallel GPUs
calls attention with fewer heads (Megatron-Core 70B at tp=8: 8 query heads a GPU). This times, through PyTorch's
cuDNN backend, the forward and the backward apart, each replayed as a CUDA graph (no host time), at the published
shape first (the row to hold against the published figure: the same library on the same kind of GPU), then at
fewer and more heads, and prints each rate and its share of the published-shape rate measured here.

FLOPs are counted as the published benchmark counts them (causal: the lower triangle, s(s+1)/2 scores; forward 2
matrix products of head dim, backward 2.5x the forward). Everything printed is measured here except the column
"published". Needs a GPU with cuDNN's attention (PyTorch's ``SDPBackend.CUDNN_ATTENTION``).
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))
from gpu_timing import graphed_seconds  # noqa: E402  (beside this script)

HEAD_DIM = 128
PUBLISHED_HEADS, PUBLISHED_KV = 64, 8   # the published benchmark's query and key/value heads (GQA 8:1)


def flops_forward(heads: int, seq: int, batch: int = 1) -> float:
    """The published benchmark's count: 2 matrix products over the causal triangle, per head."""
    return batch * heads * seq * (seq + 1) / 2 * 2 * 2 * HEAD_DIM


def published(seq: int) -> tuple[float | None, float | None]:
    """cuDNN 9.19's published forward and backward TFLOP/s on H200 at ``seq`` (None where none is published)."""
    from ringlab.train.planner import kernel_rates

    rates = kernel_rates()
    return tuple((rates.get(f"cudnn919-h200-{d}-causal-s{seq}") or {}).get("value") for d in ("fwd", "bwd"))


def time_attention(heads: int, seq: int, iters: int, kv_ratio: int = PUBLISHED_HEADS // PUBLISHED_KV,
                   batch: int = 1) -> tuple[float, float]:
    """Seconds of one causal forward and of one backward through cuDNN's attention: the forward, and the forward
    with its backward, each replayed as a CUDA graph; the backward is their difference."""
    import torch
    from torch.nn import functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kv = max(1, heads // kv_ratio)
    dtype = torch.bfloat16
    q = torch.randn(batch, heads, seq, HEAD_DIM, device="cuda", dtype=dtype, requires_grad=True)
    k, v = (torch.randn(batch, kv, seq, HEAD_DIM, device="cuda", dtype=dtype, requires_grad=True) for _ in range(2))
    grad = torch.randn_like(q)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != heads)

        def both():  # the backward in its forward's graph (see graphed_seconds)
            torch.autograd.grad(forward(), (q, k, v), grad)

        fwd = graphed_seconds(forward, iters)
        return fwd, graphed_seconds(both, iters) - fwd


def numbers(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"attention_vs_published: --{what} takes whole numbers separated by commas, got {text!r}")
    if not values or min(values) < 1:
        raise SystemExit(f"attention_vs_published: --{what} needs numbers of at least 1, got {text!r}")
    return values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="cuDNN attention's forward and backward rates on this GPU, at the "
                                                 "published benchmark's shape and at fewer heads (measured here)")
    parser.add_argument("--seqs", default="2048,4096,8192", help="sequence lengths (default 2048,4096,8192)")
    parser.add_argument("--heads", default="8,16,32,64,128", help="query heads a call (default 8,16,32,64,128; "
                        "key/value heads an eighth, at least 1, as in the published benchmark)")
    parser.add_argument("--iters", type=int, default=20, help="graph replays timed a case (default 20)")
    parser.add_argument("--json", metavar="OUT", help="write the rows and their provenance")
    args = parser.parse_args(argv)
    seqs, heads = numbers(args.seqs, "seqs"), numbers(args.heads, "heads")
    if args.iters < 1:
        parser.error(f"--iters must be at least 1, got {args.iters}")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("attention_vs_published: needs a GPU (torch sees none); cuDNN's attention runs only there")
    from ringlab.measure.machine import ringlab_source

    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": str(torch.backends.cudnn.version()), "python": platform.python_version(),
            "ringlab_commit": ringlab_source()["commit"],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python benchmarks/attention_vs_published.py", *(argv if argv is not None
                                                                                 else sys.argv[1:])])}
    print("# measured: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print("# published: cuDNN 9.19 on an H200, batch 1, 64 query / 8 key-value heads (ringlab/data/kernel_rates.json)")
    print(f"{'seq':>6s} {'heads':>6s} {'fwd ms':>8s} {'fwd TF/s':>9s} {'published':>9s} {'bwd ms':>8s} "
          f"{'bwd TF/s':>9s} {'published':>9s} {'fwd+bwd share of 64 heads here':>31s}")
    rows = []
    for seq in seqs:
        base = None
        for h in sorted(set(heads) | {PUBLISHED_HEADS}, key=lambda x: (x != PUBLISHED_HEADS, x)):
            try:
                fwd, bwd = time_attention(h, seq, args.iters)
            except RuntimeError as err:
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                print(f"{seq:6d} {h:6d} not run: {first}")
                rows.append({"seq": seq, "heads": h, "error": first})
                continue
            f = flops_forward(h, seq)
            rate_f, rate_b, rate_fb = f / fwd / 1e12, 2.5 * f / bwd / 1e12, 3.5 * f / (fwd + bwd) / 1e12
            if h == PUBLISHED_HEADS:
                base = rate_fb
            pub_f, pub_b = published(seq) if h == PUBLISHED_HEADS else (None, None)
            share = rate_fb / base if base else None
            rows.append({"seq": seq, "heads": h, "kv_heads": max(1, h // 8), "fwd_s": fwd, "bwd_s": bwd,
                         "fwd_tflops": rate_f, "bwd_tflops": rate_b, "fwd_bwd_tflops": rate_fb,
                         "published_fwd_tflops": pub_f, "published_bwd_tflops": pub_b,
                         "share_of_64_heads": share})
            show = lambda v: f"{v:9.0f}" if v else f"{'-':>9s}"  # noqa: E731
            print(f"{seq:6d} {h:6d} {fwd * 1e3:8.3f} {rate_f:9.0f} {show(pub_f)} {bwd * 1e3:8.3f} {rate_b:9.0f} "
                  f"{show(pub_b)} {share if share else float('nan'):31.2f}")
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"provenance": info, "rows": rows}, indent=1))
    return 1 if all("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
