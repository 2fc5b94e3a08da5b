"""The output layer and Megatron-LM's unfused cross entropy, timed on this machine's GPU at the shapes of published
runs, held against what the planner prices them at.

    python benchmarks/loss_vs_plan.py [--shapes megatroncore-1.7b,...] [--iters 20] [--json OUT]

Why. The runs the planner over-predicts most are Megatron-Core's small models, whose vocabulary (131,072) is large
against their hidden size (2048, 4096): there the loss over the logits is a tenth of the planned step. The planner
prices that loss by the bytes Megatron-LM's code moves a logit (``CROSS_ENTROPY_TRAFFIC["unfused"]``, 52, read from
``megatron/core/tensor_parallel/cross_entropy.py`` at 937571cf, Megatron-Core r0.8) at a fused kernel's share of
the GPU's memory rate (``ELEMENTWISE_SHARE``), and the output layer's matrix products as every other. This runs
that same code (its operations copied below, one GPU's share of the vocabulary: the all-reduces over tensor-parallel
ranks are left out) with the logits' matrix product before it, forward and backward, and prints each part's time
against the planner's. A device-to-device copy gives the GPU's memory rate measured here, to say what share of it
the loss's bytes reached.

Everything printed is measured here except the "planned" columns (the planner's prices, from published figures).
On a machine without a GPU it runs on the CPU to show that it works, and says its numbers are the CPU's.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent.parent))
from gpu_timing import seconds_each  # noqa: E402  (beside this script)


@dataclass(frozen=True)
class Shape:
    """One GPU's output layer and loss in a published run: tokens a micro-batch, hidden size, and its share of the
    vocabulary (the vocabulary over tp)."""

    name: str
    tokens: int
    hidden: int
    vocab: int
    tp: int = 1
    run: str = ""

    @property
    def vocab_per_gpu(self) -> int:
        return self.vocab // self.tp


SHAPES = {s.name: s for s in (
    Shape("megatroncore-1.7b", 4096, 2048, 131072, run="megatroncore2024-gpt-1.7b-h100"),
    Shape("megatroncore-7.1b", 4096, 4096, 131072, tp=2, run="megatroncore2024-gpt-7.1b-h100"),
    Shape("megatroncore-70b", 4096, 8192, 131072, tp=8, run="megatroncore2024-gpt-70b-h100"),
    Shape("tiny", 256, 128, 1000),
)}
DEFAULT_SHAPES = "megatroncore-1.7b,megatroncore-7.1b,megatroncore-70b"
GPU_NAMES = (("GB200", "gb200"), ("B200", "b200"), ("H200", "h200"), ("H100", "h100"), ("A100", "a100"))


def megatron_cross_entropy():
    """Megatron-LM's ``_VocabParallelCrossEntropy`` (megatron/core/tensor_parallel/cross_entropy.py at 937571cf) on
    one GPU holding the whole vocabulary share: the same operations in the same order, the all-reduces over tensor-
    parallel ranks left out (vocab_start_index 0), no label smoothing."""
    import torch

    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, vocab_parallel_logits, target):
            vocab_parallel_logits = vocab_parallel_logits.float()                      # calculate_logits_max
            logits_max = torch.max(vocab_parallel_logits, dim=-1)[0]
            vocab_start_index, vocab_end_index = 0, vocab_parallel_logits.size(-1)
            vocab_parallel_logits -= logits_max.unsqueeze(dim=-1)                      # calculate_predicted_logits
            target_mask = (target < vocab_start_index) | (target >= vocab_end_index)
            masked_target = target.clone() - vocab_start_index
            masked_target[target_mask] = 0
            partition_vocab_size = vocab_parallel_logits.size()[-1]
            logits_2d = vocab_parallel_logits.view(-1, partition_vocab_size)
            masked_target_1d = masked_target.view(-1)
            arange_1d = torch.arange(start=0, end=logits_2d.size()[0], device=logits_2d.device)
            predicted_logits_1d = logits_2d[arange_1d, masked_target_1d]
            predicted_logits_1d = predicted_logits_1d.clone().contiguous()
            predicted_logits = predicted_logits_1d.view_as(target)
            predicted_logits[target_mask] = 0.0
            exp_logits = vocab_parallel_logits
            torch.exp(vocab_parallel_logits, out=exp_logits)
            sum_exp_logits = exp_logits.sum(dim=-1)
            loss = torch.log(sum_exp_logits) - predicted_logits                      # calculate_cross_entropy_loss
            exp_logits.div_(sum_exp_logits.unsqueeze(dim=-1))
            ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            softmax, target_mask, masked_target_1d = ctx.saved_tensors
            grad_input = softmax                                                      # prepare_gradient_calculation_
            partition_vocab_size = softmax.size()[-1]                                 # operands
            grad_2d = grad_input.view(-1, partition_vocab_size)
            arange_1d = torch.arange(start=0, end=grad_2d.size()[0], device=grad_2d.device)
            softmax_update = 1.0 - target_mask.view(-1).float()
            grad_2d[arange_1d, masked_target_1d] -= softmax_update                    # calculate_gradients
            grad_input.mul_(grad_output.unsqueeze(dim=-1))
            return grad_input, None

    return CrossEntropy.apply


def planned(shape: Shape, gpu: str) -> dict:
    """The planner's seconds for this GPU's output layer (its three matrix products) and for the unfused loss."""
    from ringlab.train.planner import CROSS_ENTROPY_TRAFFIC, ELEMENTWISE_SHARE, Compute

    c = Compute.of(gpu)
    return {"head": 6 * shape.hidden * shape.vocab_per_gpu * shape.tokens / c.matmul["bf16"],
            "loss": CROSS_ENTROPY_TRAFFIC["unfused"] * shape.vocab_per_gpu * shape.tokens / (c.hbm * ELEMENTWISE_SHARE),
            "loss_bytes": CROSS_ENTROPY_TRAFFIC["unfused"] * shape.vocab_per_gpu * shape.tokens,
            "hbm": c.hbm, "elementwise_share": ELEMENTWISE_SHARE}


def time_shape(shape: Shape, device: str, iters: int) -> dict:
    """Seconds of: the logits' matrix product forward and backward (bf16, its input and weight gradients); the loss
    forward and backward on those logits; and both together, as a training step runs them."""
    import torch

    torch.manual_seed(0)
    dtype = torch.bfloat16
    x = torch.randn(shape.tokens, 1, shape.hidden, device=device, dtype=dtype, requires_grad=True)
    w = (torch.randn(shape.vocab_per_gpu, shape.hidden, device=device, dtype=dtype) * 0.02).requires_grad_()
    target = torch.randint(0, shape.vocab_per_gpu, (shape.tokens, 1), device=device)
    loss_fn = megatron_cross_entropy()
    logits = torch.nn.functional.linear(x, w).detach()
    g_logits = torch.randn_like(logits)

    def head():
        torch.autograd.grad(torch.nn.functional.linear(x, w), (x, w), g_logits)

    def loss():
        z = logits.clone().requires_grad_()   # the loss writes into its fp32 copy, never into z
        loss_fn(z, target).sum().backward()

    def both():
        loss_fn(torch.nn.functional.linear(x, w), target).sum().backward()

    clone = seconds_each(lambda: logits.clone(), device, iters)   # the clone loss() adds, taken back out
    out = {"head": seconds_each(head, device, iters), "loss": seconds_each(loss, device, iters) - clone,
           "both": seconds_each(both, device, iters)}
    # the gradient is the softmax less one at the target, times the incoming gradient: check it once
    z = logits[:8].float().clone().requires_grad_()
    loss_fn(z.clone(), target[:8]).sum().backward()
    want = torch.softmax(logits[:8].float(), dim=-1)
    want.view(-1, want.shape[-1])[torch.arange(8 * 1, device=device), target[:8].view(-1)] -= 1
    assert torch.allclose(z.grad, want, atol=1e-5), "the copied loss's gradient is not softmax - onehot"
    return out


def copy_rate(device: str, nbytes: int = 2 << 30, iters: int = 10) -> float:
    """Bytes a second a device-to-device copy moves here (read and written counted)."""
    import torch

    a = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    return 2 * a.numel() / seconds_each(lambda: b.copy_(a), device, iters)


def gpu_key(name: str) -> str | None:
    for part, key in GPU_NAMES:
        if part in name:
            return key
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="The output layer and Megatron-LM's unfused cross entropy timed on "
                                                 "this GPU at published runs' shapes, against the planner's prices")
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma-separated, of: {', '.join(SHAPES)} "
                        f"(default {DEFAULT_SHAPES})")
    parser.add_argument("--iters", type=int, default=20, help="timed calls a part (default 20)")
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--gpu", help="ringlab's name for the GPU the planner prices (default: from the GPU's name; "
                        "h100 on the CPU)")
    parser.add_argument("--json", metavar="OUT", help="write the rows and their provenance")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown or not names:
        parser.error(f"unknown shape(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(SHAPES)}")
    if args.iters < 1:
        parser.error(f"--iters must be at least 1, got {args.iters}")
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no GPU")
    gpu = args.gpu or (gpu_key(torch.cuda.get_device_name()) if device == "cuda" else "h100")
    from ringlab.train.planner import compute_data
    if gpu not in compute_data():
        parser.error(f"the planner has no figures for GPU {gpu!r}; name one with --gpu: {', '.join(compute_data())}")
    from ringlab.measure.machine import ringlab_source

    info = {"gpu": torch.cuda.get_device_name() if device == "cuda" else "none: the CPU", "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "ringlab_commit": ringlab_source()["commit"],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python benchmarks/loss_vs_plan.py", *(argv if argv is not None else sys.argv[1:])])}
    info["copy_Bps"] = copy_rate(device, nbytes=(2 << 30) if device == "cuda" else (64 << 20))
    print("# measured: " + ", ".join(f"{k} {v}" for k, v in info.items() if k != "copy_Bps"))
    if device == "cpu":
        print("# no GPU: these are the CPU's times, shown to prove the script runs; they say nothing about the planner")
    rows = []
    prices = planned(SHAPES["tiny"], gpu)
    print(f"# a device copy here moves {info['copy_Bps'] / 1e12:.2f} TB/s (read and written); the planner prices "
          f"element-wise work on {gpu} at {prices['hbm'] * prices['elementwise_share'] / 1e12:.2f} TB/s")
    print(f"{'shape':18s} {'tokens':>6s} {'vocab/gpu':>9s} {'head ms':>8s} {'planned':>8s} {'ratio':>6s} "
          f"{'loss ms':>8s} {'planned':>8s} {'ratio':>6s} {'loss TB/s':>9s} {'both ms':>8s}")
    for name in names:
        shape, plan = SHAPES[name], planned(SHAPES[name], gpu)
        t = time_shape(shape, device, args.iters)
        rate = plan["loss_bytes"] / t["loss"]
        row = {"shape": name, "run": shape.run, "tokens": shape.tokens, "hidden": shape.hidden,
               "vocab_per_gpu": shape.vocab_per_gpu, "head_s": t["head"], "loss_s": t["loss"], "both_s": t["both"],
               "planned_head_s": plan["head"], "planned_loss_s": plan["loss"],
               "loss_Bps_at_52_bytes": rate}
        rows.append(row)
        print(f"{name:18s} {shape.tokens:6d} {shape.vocab_per_gpu:9d} {t['head'] * 1e3:8.3f} {plan['head'] * 1e3:8.3f} "
              f"{t['head'] / plan['head']:6.2f} {t['loss'] * 1e3:8.3f} {plan['loss'] * 1e3:8.3f} "
              f"{t['loss'] / plan['loss']:6.2f} {rate / 1e12:9.2f} {t['both'] * 1e3:8.3f}")
        if device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"provenance": info, "planner_gpu": gpu, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
