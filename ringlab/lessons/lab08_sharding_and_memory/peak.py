"""Lab 08's measured peak: the most memory a whole training step (forward and backward) holds, without and with full
recomputation, measured by the operating system, beside what autograd keeps for the backward pass.

How it is measured: Linux's resident high-water mark of the process (``VmHWM`` in ``/proc/self/status``), reset just
before the step (writing 5 to ``/proc/self/clear_refs``, Linux 4.0 and later), less the resident memory at that
moment. Each way runs in a fresh Python process of its own, one thread, with glibc told to map every allocation of
64 KiB or more on its own (``MALLOC_MMAP_THRESHOLD_``), so that a freed tensor leaves resident memory at once and the
mark is what the step held at its fullest, not what an earlier cell left in the allocator's free lists. One step
warms up first: a process's first step reached 9% more keeping every activation and 91% more recomputing than the
steps after it (here, 2026-12-01; most likely what torch makes on first use); the next ones are measured and agree
within a few pages (a second warm-up step changed nothing, and cost a quarter of the measurement's time).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...lab.findings import Finding
from ...lab.words import plural
from ...measure.units import format_bytes

# Big enough that activations dwarf the allocator's small change (tens of MiB a layer), small enough that a step
# takes a second or two on one core: 4 layers, 1024 tokens x 2 sequences, hidden 128, 4 heads. In fp32, not bf16 like
# the smaller stack of recompute.py: the peak is about bytes, not 16-bit ones, and most CPUs have no bf16 arithmetic
# (AVX-512 BF16 or AMX), where torch computes it slowly: on an AVX2-only AMD EPYC (here, 2026-12-02) a step of this
# stack took 12 s in bf16 against 2.3 s in fp32, and of the bf16 stack this measured before (hidden 256, 8 heads)
# 36 s, so that the lab's cell took minutes.
SHAPE = dict(layers=4, seq=1024, batch=2, hidden=128, heads=4, dtype="float32")
DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
WARMUP, STEPS = 1, 2
MMAP_THRESHOLD = 64 * 1024  # bytes: glibc maps allocations of this size and more on their own, unmapped when freed
AGREE = 0.10  # the measured cut "is" the counted one within this share
STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
TIMEOUT = 300  # s for one way's process


def _status(key: str) -> int:
    return int(re.search(rf"{key}:\s+(\d+) kB", STATUS.read_text()).group(1)) * 1024


def step_peak(shape: dict = SHAPE, recompute: bool = False, warmup: int = WARMUP, steps: int = STEPS) -> dict:
    """In this process: a forward and backward of lab 08's stack of ``shape`` (``recompute``: each layer under
    ``torch.utils.checkpoint``), ``warmup`` times, then ``steps`` times measuring the resident high-water mark each
    step reached above the resident memory it started from (bytes); and what autograd kept for the backward pass,
    layer by layer (:func:`~.recompute.kept_by_layer`), and the parameters' bytes."""
    import torch

    from ...train.task import one_thread
    from .recompute import _forward, kept_by_layer, make_stack

    dtype = shape.get("dtype", SHAPE["dtype"])
    stack = make_stack(shape["layers"], shape["hidden"], shape["heads"], dtype=dtype)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape["seq"], shape["batch"], shape["hidden"], generator=gen).to(getattr(torch, dtype))
    x.requires_grad_()
    peaks = []
    with one_thread():
        for i in range(warmup + steps):
            for p in stack.parameters():
                p.grad = None  # the step allocates its gradients, as the first step of a run does
            x.grad = None
            gc.collect()
            CLEAR_REFS.write_text("5")
            start = _status("VmRSS")
            _forward(stack, x, recompute).float().pow(2).mean().backward()
            if i >= warmup:
                peaks.append(_status("VmHWM") - start)
    return {"recompute": recompute, "peaks": peaks, "kept": kept_by_layer(stack, x, recompute),
            "parameters": sum(p.numel() * p.element_size() for p in stack.parameters())}


def _one_way(shape: dict, recompute: bool) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(MMAP_THRESHOLD), OMP_NUM_THREADS="1")
    args = [sys.executable, "-m", __name__, "--json", json.dumps(shape)] + (["--recompute"] if recompute else [])
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"measuring a step's peak ({'with' if recompute else 'without'} recomputation) failed:\n"
                           + done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_peak(shape: dict = SHAPE) -> dict:
    """The step's measured peak without and with full recomputation (:func:`step_peak`, each way in a process of its
    own, the two side by side), and what autograd kept each way. Needs Linux (``/proc/self/clear_refs``)."""
    if not CLEAR_REFS.exists():
        raise RuntimeError("measuring a step's peak reads Linux's resident high-water mark (/proc/self/clear_refs and "
                           "VmHWM); this machine has no /proc. The rest of the lab runs without it.")
    shape = {"dtype": SHAPE["dtype"], **shape}
    if shape["dtype"] not in DTYPE_NAMES:
        raise ValueError(f"the stack's dtype is one of {', '.join(DTYPE_NAMES)}; got {shape['dtype']!r}")
    with ThreadPoolExecutor(2) as pool:
        keep, again = pool.map(lambda recompute: _one_way(shape, recompute), (False, True))
    return {"shape": dict(shape), "keep": keep, "recompute": again}


def peak_rows(result: dict) -> list[dict]:
    """Each way: the measured peak (the largest of the measured steps), the activations held for the backward at the
    peak by autograd's count (all layers' kept bytes; recomputing, all layers' inputs and one layer's activations
    brought back), and the rest: what the backward works with beyond them."""
    keep = result["keep"]
    rows = []
    for name, way in (("keep everything", keep), ("full recomputation", result["recompute"])):
        held = sum(way["kept"]) + (max(keep["kept"]) if way["recompute"] else 0)
        peak = max(way["peaks"])
        rows.append({"way": name, "peak": peak, "held": held, "rest": peak - held, "spread": peak - min(way["peaks"])})
    return rows


PEAK_COLUMNS = {"way": "way", "measured peak (MiB)": "peak", "activations held (MiB)": "held",
                "the rest (MiB)": "rest"}


def _dtype(shape: dict) -> str:
    """The stack's number format as the lab writes it ("fp32"); a shape that names none is measured in fp32."""
    dtype = shape.get("dtype", SHAPE["dtype"])
    return DTYPE_NAMES.get(dtype, dtype)


def peak_lesson(result: dict, agree: float = AGREE) -> Finding:
    """What the measured peaks say: how much recomputation cut the step's peak, whether that is the activations it
    stops keeping (autograd's count), and what the rest of the peak is."""
    keep, again = peak_rows(result)
    cut, counted = keep["peak"] - again["peak"], keep["held"] - again["held"]
    s = result["shape"]
    said = [f"A whole step of {plural(s['layers'], 'layer')} ({s['seq']} tokens x {s['batch']} sequences, hidden "
            f"{s['hidden']}, {_dtype(s)}), measured by the operating system: its peak was "
            f"{format_bytes(keep['peak'])} keeping every activation and {format_bytes(again['peak'])} recomputing, "
            f"{cut / keep['peak']:.0%} less." if cut > 0 else
            f"A whole step of {plural(s['layers'], 'layer')}, measured by the operating system: its peak was "
            f"{format_bytes(keep['peak'])} keeping every activation and {format_bytes(again['peak'])} recomputing: "
            "no less."]
    off = abs(cut / counted - 1) if counted > 0 else float("inf")
    matches = off <= agree
    # a stack of one layer: recomputing keeps its input and brings its activations back, no less than keeping them
    holds = (f"{format_bytes(counted)} less" if counted > 0 else "no less" if counted == 0 else
             f"{format_bytes(-counted)} more")
    said.append(f"Autograd's count says recomputing holds {holds} at the peak (every layer's "
                f"activations against every layer's input and one layer's activations, brought back for its "
                "backward); " + (
                    f"the measured cut is {format_bytes(cut)}, " +
                    (f"within {off:.1%} of it: the cut is the activations recomputation stops keeping." if matches else
                     f"{off:.0%} {'more' if cut > counted else 'less'} than that: the peak moved by other than the "
                     "activations counted." if counted > 0 else
                     "where the count expects none: the peak moved by other than the activations counted.")
                    if cut > 0 else
                    "the measured peak did not fall" + (f" but rose by {format_bytes(-cut)}" if cut < 0 else "") +
                    (": it did not follow the activations counted." if counted > 0 else ".")))
    rest = (keep["rest"], again["rest"])
    if min(rest) < 0:  # the operating system saw less than autograd holds: its mark missed part of the step
        below = "both" if max(rest) < 0 else "the one " + ("keeping every activation" if rest[0] < 0 else "recomputing")
        said.append(f"Autograd holds {format_bytes(keep['held'])} and {format_bytes(again['held'])} of activations at "
                    f"the peak, yet the measured peaks were {format_bytes(keep['peak'])} and "
                    f"{format_bytes(again['peak'])}: {below} below what autograd holds, so "
                    "the operating system's mark missed part of what the step held (memory already resident when it "
                    "began, or swapped out) and cannot say what the backward works with beyond the activations.")
    else:
        similar = abs(rest[0] - rest[1]) <= agree * max(rest)
        said.append(f"Beyond the activations held, each peak has {format_bytes(rest[0])} and {format_bytes(rest[1])} "
                    "more: the backward's own working memory (the gradients of a layer's activations and of its "
                    "weights as it computes them, the parameters' gradients, "
                    f"{format_bytes(result['keep']['parameters'])} in {_dtype(result['shape'])}), " +
                    ("about the same either way: recomputation changes what is kept, not what a layer's backward needs "
                     "while it runs." if similar else "not the same either way."))
    conclusions = ("recomputation cut the step's peak" if cut > 0 else "recomputation did not cut the step's peak",
                   "the measured cut is the activations counted" if matches else
                   "the measured cut is not the activations counted")
    return Finding(" ".join(said), conclusions)


def _main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="One way of lab 08's measured peak, printed as JSON (run by "
                                                 "measure_peak in a fresh process).")
    parser.add_argument("--json", default=json.dumps(SHAPE), help="the shape, as JSON (default: %(default)s)")
    parser.add_argument("--recompute", action="store_true", help="each layer under torch.utils.checkpoint")
    args = parser.parse_args(argv)
    print(json.dumps(step_peak(json.loads(args.json), args.recompute)))


if __name__ == "__main__":
    _main()
