"""Predicting what you cannot run: the alpha-beta cost model, fitted to measurements, and ring search.

- ``costmodel``: :func:`predict`, a schedule's time on a topology step by step (with links shared),
  the best segment count, the crossover size of two algorithms, what-if tables over presets;
- ``compact``: the same prediction from a registered schedule's compact steps, for 100,000 ranks, on the
  arithmetic of ``segments`` (sums and maxima over runs of steps);
- ``fitting``: alpha, bandwidth and the reduction rate fitted to measured times, and a measured
  Trace set against the prediction step by step;
- ``rings``: the ring order whose slowest link is fastest, as NCCL searches for it;
- ``protocols``: NCCL's LL, LL128 and Simple as latency and rate terms (``predict(..., protocol=)``);
- ``nvls``: allreduce added up inside NVSwitch, NCCL's NVLS, as a labelled closed form;
- ``symmetric``: one-shot and two-shot allreduce as NCCL prices its symmetric-memory kernels (a kernel's base
  latency plus its bytes over a bandwidth) and picks between them; ``predict`` uses it for
  ``allreduce.oneshot`` and ``allreduce.twoshot`` on one host of GPUs all joined by NVLink;
- ``nccl``: :func:`predict_nccl`, NCCL's own model of its algorithms (ring on every rail, Tree, NVLS,
  NVLSTree, CollNet, PAT) and protocols on a topology, and its tuner's choice; ``tuning``: NCCL's
  constants it rests on; ``channels``: how many of its channels (thread blocks) NCCL runs a call on, fewer for
  small ones; ``harness``: what nccl-tests and PyTorch's benchmark add to a call;
- ``versus``: those predictions beside a measured sweep, size by size;
- ``dataparallel``: a training step as compute then a ring allreduce of the gradients, and the
  speed-up over ranks that follows;
- ``pipeline``: GPipe's schedule built from its dependencies, its bubble (n-1)/(m+n-1), and the
  bytes a pipeline stage boundary carries against a data-parallel allreduce.

``rl.predict`` is the function :func:`predict`; the package itself is reached with
``from ringlab.predict import ...``.
"""
from .costmodel import Prediction, best_segments, crossover, predict, predict_alltoallv, whatif
from .fitting import Fit, compare_trace, fit, fit_schedules
from .nccl import NcclPrediction, predict_nccl
from .nvls import nvls_allreduce, nvls_busbw
from .protocols import PROTOCOLS
from .rings import best_ring, ring_report
from .symmetric import symmetric_seconds

__all__ = ["predict", "predict_alltoallv", "Prediction", "best_segments", "crossover", "whatif", "fit", "fit_schedules", "Fit",
           "compare_trace", "best_ring", "ring_report", "nvls_allreduce", "nvls_busbw", "PROTOCOLS", "predict_nccl",
           "NcclPrediction", "symmetric_seconds"]
