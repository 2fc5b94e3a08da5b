"""Timing loops the benchmarks that time PyTorch work share (layer_vs_plan, loss_vs_plan, attention_vs_published)."""
from __future__ import annotations

import time


def seconds_each(fn, device: str, iters: int, warmup: int = 3) -> float:
    """Seconds a call of ``fn``, after ``warmup`` calls: CUDA events around ``iters`` calls on a GPU, the host's clock
    on the CPU."""
    import torch

    for _ in range(warmup):
        fn()
    if device != "cuda":
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t0) / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def graphed_seconds(fn, iters: int, warmup: int = 3, before_capture=None) -> float:
    """Seconds a call of ``fn`` on the GPU with the host taken out: warmed up on a side stream (as PyTorch asks before
    a capture), ``before_capture()`` if given, captured once as a CUDA graph, then replayed ``iters`` times between
    CUDA events. A forward's backward must be in the same graph: autograd runs it on its forward's stream."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    if before_capture is not None:
        before_capture()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return seconds_each(graph.replay, "cuda", iters, warmup)
