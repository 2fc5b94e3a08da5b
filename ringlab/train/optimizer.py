"""A Horovod-style DistributedOptimizer: wrap any torch optimizer, and gradients are averaged over
the MPI ranks with ringlab's own allreduce before every step.

Gradients are fused into buckets of about ``bucket_bytes`` (tensor fusion): each bucket is one
flat torch tensor whose memory numpy (or cupy) sees through DLPack, with no copy, and the
parameters' ``.grad`` are views into it. With ``overlap=True`` a bucket's allreduce starts on a
communication thread as soon as its last gradient has been accumulated (gradients arrive last
layer first), while the backward pass goes on with the layers before it. With ``trace=True`` it records
when each gradient became ready and when each bucket was averaged (:meth:`DistributedOptimizer.trace_records`).
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


TRACE_DTYPE = np.dtype([("kind", "U9"), ("name", "U64"), ("bucket", "i4"), ("rank", "i4"), ("step", "i4"),
                        ("start", "f8"), ("end", "f8"), ("bytes", "i8"), ("issued", "f8"), ("waited", "f8")])


class _Tracer:
    """The rows of :meth:`DistributedOptimizer.trace_records`, on one clock from a barrier."""

    def __init__(self, comm):
        comm.Barrier()
        self.origin, self.rank = time.perf_counter(), comm.Get_rank()
        self.rows, self.step = [], 0
        self.mark = 0.0  # the latest backward start, gradient hook or step end: where the next backward row starts

    def clock(self) -> float:
        return time.perf_counter() - self.origin

    def backward(self, name: str, bucket: int, nbytes: int) -> None:
        now = self.clock()
        self.rows.append(("backward", name, bucket, self.rank, self.step, self.mark, now, nbytes, np.nan, 0.0))
        self.mark = now

    def allreduce(self, bucket: "_Bucket", waited: float) -> None:
        self.rows.append(("allreduce", f"bucket {bucket.index}", bucket.index, self.rank, self.step, bucket.started,
                          bucket.ended, bucket.array.nbytes, bucket.issued, waited))


class _Bucket:
    def __init__(self, index: int, params: list, names: list[str], device, dtype):
        self.index, self.params, self.names = index, params, names
        sizes = [p.numel() for p in params]
        self.offsets = np.concatenate(([0], np.cumsum(sizes))).astype(int)
        self.flat = torch.zeros(int(self.offsets[-1]), device=device, dtype=dtype)
        self.array = _array(self.flat)
        self.gradients_ready = self.averaged = None  # events, on a GPU (see _GpuOrder)
        self.seen = [0] * len(params)  # backward passes accumulated into each gradient since the last step
        self.queued = False            # handed to the communication thread this step
        self.issued = self.started = self.ended = np.nan  # trace clock: handed over, allreduce began, ended
        self.ready = threading.Event()  # set: the thread may reduce it
        self.done = threading.Event()   # set: reduced

    def view(self, i: int) -> torch.Tensor:
        return self.flat[self.offsets[i]:self.offsets[i + 1]].view_as(self.params[i])


class DistributedOptimizer:
    """Average gradients over ranks with ringlab's allreduce, then let ``optimizer`` step.

    ``named_parameters`` as in Horovod (``model.named_parameters()``); initial parameters are
    broadcast from rank 0 at construction, after the ranks have checked that their models have the
    same parameters. ``algorithm`` and ``transport`` go to :func:`ringlab.allreduce`. ``trace=True``
    records every gradient's arrival and every bucket's allreduce (:meth:`trace_records`); off, it
    costs nothing.

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
                 broadcast_initial: bool = True, backward_passes_per_step: int = 1, trace: bool = False):
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
        self._names = {id(p): name for name, p in named}
        self.buckets = self._fuse([p for _, p in reversed(named)], bucket_bytes)  # gradients come last layer first
        self._gpu = {b.flat.device: _GpuOrder(b.flat.device) for b in self.buckets if is_device_array(b.array)}
        self.comm_seconds = 0.0
        self._syncing = True
        self._closed = False
        self._error: BaseException | None = None
        self._thread = None
        self._tracer = _Tracer(self.comm) if trace else None
        if overlap:
            self._thread = threading.Thread(target=self._communicate, daemon=True, name="ringlab-allreduce")
            self._thread.start()
        if overlap or trace:
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
        out = [_Bucket(index, group, [self._names[id(p)] for p in group], group[0].device, group[0].dtype)
               for index, group in enumerate(buckets)]
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

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``; when tracing, the first gradient's row starts when this backward pass did
        (after ``loss.backward()`` alone it starts where the previous step ended: the forward pass included)."""
        if self._tracer is not None and loss.requires_grad:
            loss.register_hook(self._backward_began)
        loss.backward()

    def _backward_began(self, grad):
        self._tracer.mark = self._tracer.clock()

    def trace_records(self) -> np.ndarray:
        """What ``trace=True`` recorded, one row per gradient and per bucket's allreduce of every step.

        A numpy structured array (:data:`TRACE_DTYPE`), seconds on one clock from a barrier at
        construction. ``kind`` "backward": parameter ``name``'s gradient arrived at ``end`` (its hook), its
        backward ran from the previous hook (or the start of the backward pass, see :meth:`backward`) at
        ``start``; ``bytes`` of gradient, going into ``bucket``. ``kind`` "allreduce": bucket ``bucket``
        of ``bytes`` was handed to communication at ``issued`` (its last gradient's hook with overlap,
        in ``step()`` without), averaged from ``start`` to ``end``, and ``step()`` waited ``waited``
        seconds for it. On a GPU these are host times: ``end`` is when the host-driven allreduce returned,
        with its last kernels perhaps still queued on the communication stream.
        """
        if self._tracer is None:
            raise ValueError("DistributedOptimizer: nothing traced; construct it with trace=True")
        return np.array(self._tracer.rows, dtype=TRACE_DTYPE)

    def _make_hook(self, bucket: _Bucket, i: int):
        def ready(param):
            if self._tracer is not None:
                self._tracer.backward(bucket.names[i], bucket.index, param.numel() * param.element_size())
            if not self.overlap:
                return
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
        if self._tracer is not None:
            bucket.issued = self._tracer.clock()
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

        if self._tracer is not None:
            bucket.started = self._tracer.clock()
        order = self._gpu.get(bucket.flat.device)
        if order is None:
            allreduce_bucket()
        else:
            if bucket.gradients_ready is None:  # reduced without overlap: the gradients are complete now
                bucket.gradients_ready = order.gradients_ready()
            order.reduce(bucket, allreduce_bucket)
        if self._tracer is not None:
            bucket.ended = self._tracer.clock()

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
            waiting = time.perf_counter()
            if not self.overlap:
                if self._tracer is not None:
                    bucket.issued = self._tracer.clock()
                self._reduce(bucket)
            else:
                if not bucket.queued:
                    self._send(bucket)
                bucket.done.wait()
            if self._tracer is not None:
                self._tracer.allreduce(bucket, time.perf_counter() - waiting)
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
        if self._tracer is not None:
            self._tracer.step += 1
            self._tracer.mark = self._tracer.clock()
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
