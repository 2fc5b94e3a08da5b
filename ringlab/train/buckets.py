"""What the DistributedOptimizer is made of: buckets of fused gradients, the order of GPU work between
torch's stream and the communication stream, and the trace of every gradient and every bucket's allreduce."""
from __future__ import annotations

import threading
import time

import numpy as np
import torch

from ..mpi import emulate


def array_of(tensor: torch.Tensor):
    """The same memory as a numpy array (CPU) or cupy array (GPU), through DLPack: no copy."""
    if tensor.is_cuda:
        import cupy
        return cupy.from_dlpack(tensor)
    return np.from_dlpack(tensor.detach())


def torch_stream(device):
    """torch's current stream on ``device`` (where backward and step() run), as a cupy stream."""
    import cupy

    return cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream, device.index)


class GpuOrder:
    """The order of GPU work between torch's stream and the communication stream, kept with events
    (no stream or device is drained while backward runs, so overlap stays):

    - when a bucket's last gradient is accumulated, an event is recorded on torch's stream; the
      communication stream waits for it before the allreduce reads the gradients (reading them
      earlier would average half-written gradients: silently wrong);
    - the allreduce and the division run on the communication stream, a non-blocking cupy stream
      of its own, and an event is recorded after them;
    - ``step()`` makes torch's stream wait for that event before the optimizer reads the averages.
    """

    def __init__(self, device):
        import cupy

        self.cp, self.device = cupy, device
        with cupy.cuda.Device(device.index):
            self.stream = cupy.cuda.Stream(non_blocking=True)

    def gradients_ready(self):
        """On the backward side: mark the point on torch's stream where the gradients are complete."""
        return torch_stream(self.device).record()

    def reduce(self, bucket, allreduce_bucket) -> None:
        """On the communication thread: wait for the gradients, reduce and divide, mark the end."""
        with self.cp.cuda.Device(self.device.index), self.stream:
            self.stream.wait_event(bucket.gradients_ready)
            allreduce_bucket()
            bucket.averaged = self.stream.record()

    def before_step(self, bucket) -> None:
        """On torch's side: the optimizer's kernels wait until the averages are in."""
        torch_stream(self.device).wait_event(bucket.averaged)


TRACE_DTYPE = np.dtype([("kind", "U9"), ("name", "U64"), ("bucket", "i4"), ("rank", "i4"), ("step", "i4"),
                        ("start", "f8"), ("end", "f8"), ("bytes", "i8"), ("issued", "f8"), ("waited", "f8")])


class Tracer:
    """The rows of :meth:`ringlab.train.DistributedOptimizer.trace_records`, on one clock from a barrier: on an
    emulated machine (in force when the tracer is made) each thread's virtual clock, from clocks set alike
    (:func:`ringlab.mpi.emulate.synchronize`); else this machine's ``time.perf_counter``."""

    def __init__(self, comm, limit: float | None = None):
        self.virtual = emulate.current() is not None
        if self.virtual:
            emulate.synchronize(comm, limit)
        else:
            comm.Barrier()
        self.origin, self.rank = self._now(), comm.Get_rank()
        self.rows, self.step = [], 0
        self.mark = 0.0  # the latest backward start, gradient hook or step end: where the next backward row starts

    def _now(self) -> float:
        return emulate.clock().now() if self.virtual else time.perf_counter()

    def clock(self) -> float:
        return self._now() - self.origin

    def backward(self, name: str, bucket: int, nbytes: int) -> None:
        now = self.clock()
        self.rows.append(("backward", name, bucket, self.rank, self.step, self.mark, now, nbytes, np.nan, 0.0))
        self.mark = now

    def allreduce(self, bucket: "Bucket", waited: float) -> None:
        self.rows.append(("allreduce", f"bucket {bucket.index}", bucket.index, self.rank, self.step, bucket.started,
                          bucket.ended, bucket.array.nbytes, bucket.issued, waited))


class Bucket:
    """Parameters whose gradients live fused in one flat tensor (``flat``; ``array``: the same memory in numpy or cupy)."""

    def __init__(self, index: int, params: list, names: list[str], device, dtype):
        self.index, self.params, self.names = index, params, names
        sizes = [p.numel() for p in params]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(int)
        self.flat = torch.zeros(int(self.offsets[-1]), device=device, dtype=dtype)
        self.array = array_of(self.flat)
        self.gradients_ready = self.averaged = None  # events, on a GPU (see GpuOrder)
        self.seen = [0] * len(params)  # backward passes accumulated into each gradient since the last step
        self.queued = False            # handed to the communication thread this step
        self.issued = self.started = self.ended = np.nan  # trace clock: handed over, allreduce began, ended
        self.handed = self.finished = 0.0  # emulate.now(): handed to communication, averaged (for virtual time)
        self.ready = threading.Event()  # set: the thread may reduce it
        self.pending = False            # handed over and not yet taken by the thread (close() wakes it too)
        self.done = threading.Event()   # set: reduced

    def view(self, i: int) -> torch.Tensor:
        return self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(self.params[i])
