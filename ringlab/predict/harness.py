"""What a benchmark adds to NCCL's own time: how nccl-tests and PyTorch's all_reduce_bench.py time a call.

A published busbw is NCCL's time as a benchmark measured it, and two ways of measuring add time of
their own at small sizes, where NCCL's call takes microseconds:

- nccl-tests driving several GPUs from one thread (``-g 8``): every iteration launches one kernel per
  GPU, one after another, so an iteration lasts at least as long as those launches take, however
  fast the GPUs are. NVIDIA's maintainers name this as the cause of high small-size times with
  ``-g`` (nccl-tests#333: "the CUDA latency overheads of single process jobs"); the report there
  measured 22 us at small sizes with ``-g 4`` on B200, 5.5 us a GPU driven, :data:`LAUNCH_PER_GPU`.
  One process per GPU (``-g 1``, MPI) pays no such floor: NCCL's model already holds its launch. A group of
  sends and receives (alltoall, sendrecv) is one kernel a GPU too, and pays the same floor.
- PyTorch's all_reduce_bench.py as published (stas00/ml-engineering at 744d01e): one
  ``dist.all_reduce`` timed between two CUDA events after a barrier, so the host's time to issue the
  call through torch.distributed, 20-30 us by the script's own account (its later docstring, at
  0cc3de5), passes on the GPU between the two events: :data:`TORCH_HOST_OVERHEAD` is added to
  every call.

Both are figures from those sources, not fitted to the sweeps they are held to.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

LAUNCH_PER_GPU = 22e-6 / 4       # nccl-tests#333: -g 4, 22 us at small sizes (one thread drives the four GPUs)
TORCH_HOST_OVERHEAD = 25e-6      # all_reduce_bench.py: "PyTorch's per-call host overhead of some 20-30us"
SOURCES = {"nccl-tests": "NVIDIA/nccl-tests#333 (small-size time with -g 4; a maintainer's reply)",
           "all_reduce_bench.py": "stas00/ml-engineering network/benchmarks/all_reduce_bench.py (744d01e, 0cc3de5)"}


@dataclass(frozen=True)
class Harness:
    """How a benchmark timed the calls: ``floor`` (s) no call is measured below, ``added`` (s) on every call;
    ``tool`` the benchmark, ``gpus_per_process`` the GPUs one of its threads drove (nccl-tests' ``-g``)."""

    name: str
    floor: float = 0.0
    added: float = 0.0
    tool: str = "nccl-tests"
    gpus_per_process: int = 1

    def seconds(self, nccl_seconds: float) -> float:
        """The time the benchmark reports for a call NCCL completes in ``nccl_seconds``."""
        return max(nccl_seconds, self.floor) + self.added


def harness(tool: str = "nccl-tests", gpus_per_process: int = 1) -> Harness:
    """The benchmark of ``tool`` (nccl-tests, rccl-tests, all_reduce_bench.py) run with ``gpus_per_process``
    GPUs driven by one thread (nccl-tests' ``-g``)."""
    if tool in ("nccl-tests", "rccl-tests"):
        if gpus_per_process < 1:
            raise ValueError(f"gpus_per_process must be >= 1, got {gpus_per_process}")
        if gpus_per_process == 1:
            return Harness(f"{tool}, one GPU a process", tool=tool)
        return Harness(f"{tool} -g {gpus_per_process}", floor=gpus_per_process * LAUNCH_PER_GPU, tool=tool,
                       gpus_per_process=gpus_per_process)
    if tool == "all_reduce_bench.py":
        return Harness(tool, added=TORCH_HOST_OVERHEAD, tool=tool)
    raise ValueError(f"unknown benchmark {tool!r}; known: nccl-tests, rccl-tests, all_reduce_bench.py")


def gpus_per_process(command: str | None, header: str | None = None) -> int:
    """GPUs one nccl-tests thread drives, from its command (``-g 8``, ``-g8``) or header (``nGpus 8``); 1 if
    neither says."""
    for text, pattern in ((command, r"(?:^|\s)-g\s*(\d+)"), (header, r"nGpus\s+(\d+)")):
        found = re.search(pattern, text or "")
        if found:
            return int(found.group(1))
    return 1
