"""A Horovod-style DistributedOptimizer: wrap any torch optimizer, and gradients are averaged over
the MPI ranks with ringlab's own allreduce before every step.

Gradients are fused into buckets of about ``bucket_bytes`` (tensor fusion): each bucket is one
flat torch tensor whose memory numpy (or cupy) sees through DLPack, with no copy, and the
parameters' ``.grad`` are views into it. With ``overlap=True`` a bucket's allreduce starts on a
communication thread as soon as its last gradient has been accumulated (gradients arrive last
layer first), while the backward pass goes on with the layers before it.
"""
from __future__ import annotations

import contextlib
import hashlib
import threading
import time

import numpy as np
import torch

from ..mpi.collectives import allreduce, broadcast, check_agreement
from ..mpi.devices import is_device_array
from ..schedule import check_count


def _array(tensor: torch.Tensor):
    """The same memory as a numpy array (CPU) or cupy array (GPU), through DLPack: no copy."""
    if tensor.is_cuda:
        import cupy
        return cupy.from_dlpack(tensor)
    return np.from_dlpack(tensor.detach())


def _torch_stream(device):
    """torch's current stream on ``device`` (where backward and step() run), as a cupy stream."""
    import cupy

    return cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream, device.index)


class _GpuOrder:
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
        return _torch_stream(self.device).record()

    def reduce(self, bucket, allreduce_bucket) -> None:
        """On the communication thread: wait for the gradients, reduce and divide, mark the end."""
        with self.cp.cuda.Device(self.device.index), self.stream:
            self.stream.wait_event(bucket.gradients_ready)
            allreduce_bucket()
            bucket.averaged = self.stream.record()

    def before_step(self, bucket) -> None:
        """On torch's side: the optimizer's kernels wait until the averages are in."""
        _torch_stream(self.device).wait_event(bucket.averaged)


def broadcast_parameters(params, root: int = 0, comm=None) -> None:
    """Copy every tensor of ``params`` (``model.named_parameters()`` pairs or a ``state_dict()``) from ``root``."""
    items = params.items() if isinstance(params, dict) else params
    for _, tensor in sorted(items, key=lambda item: item[0]):  # the same order on every rank
        with torch.no_grad():
            data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
            flat = data.reshape(-1).contiguous()
            broadcast(_array(flat), root=root, algorithm="tree", comm=comm, in_place=True)
            if flat.data_ptr() != data.data_ptr():
                data.copy_(flat.view_as(data))


class _Bucket:
    def __init__(self, index: int, params: list, device, dtype):
        self.index, self.params = index, params
        sizes = [p.numel() for p in params]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(int)
        self.flat = torch.zeros(int(self.offsets[-1]), device=device, dtype=dtype)
        self.array = _array(self.flat)
        self.gradients_ready = self.averaged = None  # events, on a GPU (see _GpuOrder)
        self.seen = [0] * len(params)  # backward passes accumulated into each gradient since the last step
        self.queued = False            # handed to the communication thread this step
        self.ready = threading.Event()  # set: the thread may reduce it
        self.done = threading.Event()   # set: reduced

    def view(self, i: int) -> torch.Tensor:
        return self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(self.params[i])


class DistributedOptimizer:
    """Average gradients over ranks with ringlab's allreduce, then let ``optimizer`` step.

    ``named_parameters`` as in Horovod (``model.named_parameters()``); initial parameters are
    broadcast from rank 0 at construction, after the ranks have checked that their models have the
    same parameters. ``algorithm`` and ``transport`` go to :func:`ringlab.allreduce`.

    Buckets are reduced in the same order on every rank. A parameter that got no gradient in a
    step (unused by this rank's forward pass) is reduced with the gradient it holds, zero after
    ``zero_grad()``, as DDP's ``find_unused_parameters`` does. To accumulate gradients over several
    backward passes, run all but the last inside ``with opt.no_sync():`` (as with DDP), or give
    ``backward_passes_per_step=k`` (as with Horovod); a second backward pass into gradients already
    sent is an error, not a wrong average. ``comm_seconds`` accumulates the time :meth:`step` spent
    waiting for communication.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, named_parameters, algorithm="ring", comm=None,
                 transport: str = "auto", bucket_bytes: int = 4 << 20, overlap: bool = True,
                 broadcast_initial: bool = True, backward_passes_per_step: int = 1):
        from mpi4py import MPI

        self.optimizer, self.algorithm, self.transport, self.overlap = optimizer, algorithm, transport, overlap
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.passes = check_count("backward_passes_per_step", backward_passes_per_step)
        named = [(name, p) for name, p in named_parameters if p.requires_grad]
        agree_on_parameters(self.comm, "DistributedOptimizer", named)
        if not named:
            raise ValueError("DistributedOptimizer: no parameters that require gradients")
        if broadcast_initial:
            broadcast_parameters(named, root=0, comm=self.comm)
        self.buckets = self._fuse([p for _, p in reversed(named)], bucket_bytes)  # gradients come last layer first
        self._gpu = {b.flat.device: _GpuOrder(b.flat.device) for b in self.buckets if is_device_array(b.array)}
        self.comm_seconds = 0.0
        self._syncing = True
        self._closed = False
        self._error: BaseException | None = None
        self._thread = None
        if overlap:
            self._thread = threading.Thread(target=self._communicate, daemon=True, name="ringlab-allreduce")
            self._thread.start()
            for bucket in self.buckets:
                for i, p in enumerate(bucket.params):
                    p.register_post_accumulate_grad_hook(self._make_hook(bucket, i))

    def _fuse(self, params, bucket_bytes: int) -> list[_Bucket]:
        buckets, current, size = [], [], 0
        for p in params:
            if current and (size + p.numel() * p.element_size() > bucket_bytes or p.dtype != current[0].dtype
                            or p.device != current[0].device):
                buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += p.numel() * p.element_size()
        if current:
            buckets.append(current)
        out = [_Bucket(index, group, group[0].device, group[0].dtype) for index, group in enumerate(buckets)]
        for bucket in out:
            for i, p in enumerate(bucket.params):
                p.grad = bucket.view(i)  # autograd accumulates into the bucket: no copy
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside this block only accumulate gradients; the first one after it sends them."""
        self._syncing = False
        try:
            yield
        finally:
            self._syncing = True

    def _make_hook(self, bucket: _Bucket, i: int):
        def ready(param):
            self._adopt(bucket, i)
            if not self._syncing:
                return
            if bucket.queued:
                raise RuntimeError(
                    "DistributedOptimizer: a backward pass added to gradients that are already being averaged "
                    "over the ranks; call step() first, or accumulate with `with opt.no_sync():` around all but "
                    "the last backward pass (or backward_passes_per_step=k)")
            bucket.seen[i] += 1
            if min(bucket.seen) >= self.passes:
                self._send(bucket)
        return ready

    def _send(self, bucket: _Bucket) -> None:
        if bucket.flat.device in self._gpu:
            bucket.gradients_ready = self._gpu[bucket.flat.device].gradients_ready()
        bucket.queued = True
        bucket.ready.set()

    def _adopt(self, bucket: _Bucket, i: int) -> None:
        """Make sure the gradient lives in the bucket (autograd may have given it new memory)."""
        p, view = bucket.params[i], bucket.view(i)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(p.grad if p.grad is not None else torch.zeros_like(view))
            p.grad = view

    def _reduce(self, bucket: _Bucket) -> None:
        def allreduce_bucket():
            allreduce(bucket.array, self.algorithm, comm=self.comm, transport=self.transport, in_place=True,
                      agree=False)
            bucket.array /= self.comm.Get_size()

        order = self._gpu.get(bucket.flat.device)
        if order is None:
            allreduce_bucket()
        else:
            if bucket.gradients_ready is None:  # reduced without overlap: the gradients are complete now
                bucket.gradients_ready = order.gradients_ready()
            order.reduce(bucket, allreduce_bucket)

    def _communicate(self) -> None:
        """The communication thread: reduce the buckets in index order, step after step."""
        while True:
            for bucket in self.buckets:
                bucket.ready.wait()
                bucket.ready.clear()
                if self._closed:
                    return
                try:
                    self._reduce(bucket)
                except BaseException as err:  # surfaces in step(), on the main thread
                    self._error = err
                finally:
                    bucket.done.set()

    def synchronize(self) -> None:
        """Wait until every bucket has been averaged over the ranks."""
        if self._closed:
            raise RuntimeError("DistributedOptimizer: step() or synchronize() after close()")
        start = time.perf_counter()
        for bucket in self.buckets:
            for i in range(len(bucket.params)):
                self._adopt(bucket, i)  # parameters unused in this step keep the gradient they hold
            if not self.overlap:
                self._reduce(bucket)
                continue
            if not bucket.queued:
                self._send(bucket)
            bucket.done.wait()
        for bucket in self.buckets:
            if bucket.averaged is not None:
                self._gpu[bucket.flat.device].before_step(bucket)
                bucket.gradients_ready = bucket.averaged = None
        self.comm_seconds += time.perf_counter() - start
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def step(self, closure=None):
        """Average the gradients, then step the wrapped optimizer; get ready for the next backward."""
        self.synchronize()
        result = self.optimizer.step(closure)
        for bucket in self.buckets:
            bucket.seen = [0] * len(bucket.params)
            bucket.queued = False
            bucket.done.clear()
        return result

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the fused gradient buckets (never None: the gradients live in the buckets)."""
        for bucket in self.buckets:
            bucket.flat.zero_()

    def close(self) -> None:
        """Stop the communication thread; the optimizer cannot step afterwards."""
        self._closed = True
        if self._thread is not None:
            for bucket in self.buckets:
                bucket.ready.set()
            self._thread.join(timeout=10)
            self._thread = None

    def __getattr__(self, name):  # param_groups, state, state_dict ... of the wrapped optimizer
        return getattr(self.optimizer, name)


def agree_on_parameters(comm, what: str, named) -> None:
    """Every rank checks that all ranks hold the same parameters (names, shapes, dtypes, in order);
    a different model anywhere is the same ValueError everywhere, not a hang or a mixed-up sum."""
    shapes = [(name, list(p.shape), str(p.dtype)) for name, p in named]
    check_agreement(comm, what, {"parameters": len(shapes),
                       "names, shapes and dtypes": hashlib.sha256(repr(shapes).encode()).hexdigest()[:16]}, timeout=None)
