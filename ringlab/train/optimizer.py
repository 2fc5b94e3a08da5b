"""A Horovod-style DistributedOptimizer: wrap any torch optimizer, and gradients are averaged over
the MPI ranks with ringlab's own allreduce before every step.

Gradients are fused into buckets of about ``bucket_bytes`` (tensor fusion): each bucket is one
flat torch tensor whose memory numpy (or cupy) sees through DLPack, with no copy, and the
parameters' ``.grad`` are views into it. With ``overlap=True`` a bucket's allreduce starts on a
communication thread as soon as its last gradient has been accumulated (gradients arrive last
layer first), while the backward pass goes on with the layers before it.
"""
from __future__ import annotations

import queue
import threading
import time

import numpy as np
import torch

from ..mpi.collectives import allreduce, broadcast


def _array(tensor: torch.Tensor):
    """The same memory as a numpy array (CPU) or cupy array (GPU), through DLPack: no copy."""
    if tensor.is_cuda:
        import cupy
        return cupy.from_dlpack(tensor)
    return np.from_dlpack(tensor.detach())


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
    def __init__(self, params: list, device, dtype):
        self.params = params
        sizes = [p.numel() for p in params]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(int)
        self.flat = torch.zeros(int(self.offsets[-1]), device=device, dtype=dtype)
        self.array = _array(self.flat)
        self.pending = len(params)
        self.done = threading.Event()

    def view(self, i: int) -> torch.Tensor:
        return self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(self.params[i])


class DistributedOptimizer:
    """Average gradients over ranks with ringlab's allreduce, then let ``optimizer`` step.

    ``named_parameters`` as in Horovod (``model.named_parameters()``); initial parameters are
    broadcast from rank 0 at construction. ``algorithm`` and ``transport`` go to
    :func:`ringlab.allreduce`. ``comm_seconds`` accumulates the time :meth:`step` spent waiting
    for communication, for per-step breakdowns.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, named_parameters, algorithm="ring", comm=None,
                 transport: str = "auto", bucket_bytes: int = 4 << 20, overlap: bool = True,
                 broadcast_initial: bool = True):
        from mpi4py import MPI

        self.optimizer, self.algorithm, self.transport, self.overlap = optimizer, algorithm, transport, overlap
        self.comm = MPI.COMM_WORLD if comm is None else comm
        named = [(name, p) for name, p in named_parameters if p.requires_grad]
        if not named:
            raise ValueError("DistributedOptimizer: no parameters that require gradients")
        if broadcast_initial:
            broadcast_parameters(named, root=0, comm=self.comm)
        self.buckets = self._fuse([p for _, p in reversed(named)], bucket_bytes)  # gradients come last layer first
        self.comm_seconds = 0.0
        self._queue: queue.Queue = queue.Queue()
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
        out = [_Bucket(group, group[0].device, group[0].dtype) for group in buckets]
        for bucket in out:
            for i, p in enumerate(bucket.params):
                p.grad = bucket.view(i)  # autograd accumulates into the bucket: no copy
        return out

    def _make_hook(self, bucket: _Bucket, i: int):
        def ready(param):
            self._adopt(bucket, i)
            bucket.pending -= 1
            if bucket.pending == 0:
                self._queue.put(bucket)
        return ready

    def _adopt(self, bucket: _Bucket, i: int) -> None:
        """Make sure the gradient lives in the bucket (autograd may have given it new memory)."""
        p, view = bucket.params[i], bucket.view(i)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(p.grad if p.grad is not None else torch.zeros_like(view))
            p.grad = view

    def _reduce(self, bucket: _Bucket) -> None:
        if bucket.flat.is_cuda:
            torch.cuda.current_stream(bucket.flat.device).synchronize()  # this thread's device may differ
        allreduce(bucket.array, self.algorithm, comm=self.comm, transport=self.transport, in_place=True,
                  agree=False)
        bucket.flat.div_(self.comm.Get_size())

    def _communicate(self) -> None:
        while True:
            bucket = self._queue.get()
            if bucket is None:
                return
            try:
                self._reduce(bucket)
            except BaseException as err:  # surfaces in step(), on the main thread
                self._error = err
            finally:
                bucket.done.set()

    def synchronize(self) -> None:
        """Wait until every bucket has been averaged over the ranks."""
        start = time.perf_counter()
        for bucket in self.buckets:
            if self.overlap:
                if bucket.pending:  # some parameter got no gradient this step: send the bucket anyway
                    for i in range(len(bucket.params)):
                        self._adopt(bucket, i)
                    bucket.pending = 0
                    self._queue.put(bucket)
                bucket.done.wait()
            else:
                for i in range(len(bucket.params)):
                    self._adopt(bucket, i)
                self._reduce(bucket)
        self.comm_seconds += time.perf_counter() - start
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def step(self, closure=None):
        """Average the gradients, then step the wrapped optimizer; get ready for the next backward."""
        self.synchronize()
        result = self.optimizer.step(closure)
        for bucket in self.buckets:
            bucket.pending = len(bucket.params)
            bucket.done.clear()
        return result

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the fused gradient buckets (never None: the gradients live in the buckets)."""
        for bucket in self.buckets:
            bucket.flat.zero_()

    def close(self) -> None:
        """Stop the communication thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def __getattr__(self, name):  # param_groups, state, state_dict ... of the wrapped optimizer
        return getattr(self.optimizer, name)
