"""A Horovod-style DistributedOptimizer: wrap any torch optimizer, and gradients are averaged over
the MPI ranks with ringlab's own allreduce, on a communicator of its own.

Gradients are fused into buckets of about ``bucket_bytes`` (tensor fusion): each bucket is one
flat torch tensor whose memory numpy (or cupy) sees through DLPack, with no copy, and the
parameters' ``.grad`` are views into it. With ``overlap=True`` a bucket's allreduce starts on a
communication thread as soon as its last gradient has been accumulated (gradients arrive last
layer first), while the backward pass goes on with the layers before it.

The gradient contract is DDP's: when ``backward()`` returns, every gradient the optimizer steps is
averaged over the ranks (the end of the backward pass waits for the last buckets), so clipping or
reading them between ``backward()`` and ``step()`` sees the final numbers. Inside ``no_sync()``, or
before the last of ``backward_passes_per_step`` passes, they are this rank's own, as with DDP.
Horovod's way of saying the same (``synchronize()`` before touching them) still works and costs
nothing; ``skip_synchronize()`` is refused, since there is nothing left to skip.

With ``trace=True`` it records when each gradient became ready and when each bucket was averaged
(:meth:`DistributedOptimizer.trace_records`).

On an emulated machine (``rl.emulate`` or ``RINGLAB_EMULATE``) every thread keeps virtual time
(:mod:`ringlab.mpi.emulate`): the main thread's clock runs with the backward pass's compute, and the
communication thread's with the allreduces, as a GPU's communication stream runs beside its compute. A bucket
handed over carries the main thread's time; the communication thread starts it no sooner, and the end of the
backward pass waits until the time the communication thread finished it (waiting costs no CPU: an Event).
The optimizer's own bookkeeping (its hooks, its checks) is not counted, as a collective's is not; the division
of the averaged gradients is, as the arithmetic it is (compute="cpu": its CPU time; "model": nothing, as the
cost model prices it). ``comm_seconds`` and the trace read :func:`ringlab.mpi.emulate.now`: virtual time
there, ``time.perf_counter`` on this machine.
"""
from __future__ import annotations

import contextlib
import json
import threading

import numpy as np
import torch

from ..mpi import emulate, private
from ..mpi.collectives import allreduce, broadcast
from ..mpi.deadlines import DEFAULT, StepTimeout, seconds
from ..mpi.devices import is_device_array
from .agreement import agree_on, agree_on_parameters, option_problems, parameter_groups, stepped_parameters
from .buckets import TRACE_DTYPE, Bucket, GpuOrder, Tracer, array_of

__all__ = ["DistributedOptimizer", "broadcast_parameters", "agree_on_parameters", "TRACE_DTYPE"]


def broadcast_parameters(params, root: int = 0, comm=None, timeout=DEFAULT) -> None:
    """Copy every tensor of ``params`` (``model.named_parameters()`` pairs or a ``state_dict()``) from ``root``."""
    items = params.items() if isinstance(params, dict) else params
    for _, tensor in sorted(items, key=lambda item: item[0]):  # the same order on every rank
        with torch.no_grad():
            data = tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor
            flat = data.reshape(-1).contiguous()
            broadcast(array_of(flat), root=root, algorithm="tree", comm=comm, in_place=True, timeout=timeout)
            if flat.data_ptr() != data.data_ptr():
                data.copy_(flat.view_as(data))


class DistributedOptimizer:
    """Average gradients over ranks with ringlab's allreduce, then let ``optimizer`` step.

    The parameters averaged are those of ``optimizer``'s param groups that require a gradient;
    ``named_parameters`` (``model.named_parameters()``, as in Horovod) names them. Adding a param
    group, or freezing or unfreezing a parameter, afterwards is an error at the next step: build a
    new DistributedOptimizer then. At construction every rank checks that all ranks have the same
    parameters and options (``bucket_bytes``, ``overlap``, ``trace``, the optimizer's type and
    hyperparameters...), then rank 0's initial parameters are broadcast. ``algorithm`` and
    ``transport`` go to :func:`ringlab.allreduce`; every wait has a deadline (``timeout``, as there).

    Buckets are reduced in the same order on every rank, each after an agreement that carries the
    number of the call, so ranks that step a different number of times get an error, not a mixed-up
    average; after any failure in communication the optimizer refuses to go on (build a new one: it
    broadcasts rank 0's parameters again). A parameter that got no gradient in a step (unused by this
    rank's forward pass) is reduced with the gradient it holds, zero after ``zero_grad()``, as DDP's
    ``find_unused_parameters`` does. To accumulate gradients over several backward passes, run all but
    the last inside ``with opt.no_sync():`` (as with DDP), or give ``backward_passes_per_step=k`` (as
    with Horovod); a second backward pass into gradients already sent is an error, not a wrong average.
    ``comm_seconds`` accumulates the time spent waiting for communication at the end of backward passes
    (virtual time on an emulated machine).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, named_parameters, algorithm="ring", comm=None,
                 transport: str = "auto", bucket_bytes: int = 4 << 20, overlap: bool = True,
                 broadcast_initial: bool = True, backward_passes_per_step: int = 1, trace: bool = False,
                 timeout=DEFAULT):
        from mpi4py import MPI

        from ..schedule import check_count

        self.optimizer, self.algorithm, self.transport, self.overlap = optimizer, algorithm, transport, overlap
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.timeout, self.trace = timeout, trace
        problems = option_problems(bucket_bytes, overlap, trace, broadcast_initial, timeout)
        try:
            self.passes = check_count("backward_passes_per_step", backward_passes_per_step)
        except ValueError as err:
            problems.append(str(err))
            self.passes = 1
        named = stepped_parameters(optimizer, named_parameters)
        if not named:
            problems.append("no parameters that require gradients in the optimizer's param groups")
        with emulate.inside():  # setting up is not the emulated machine's compute
            self._comm = private.duplicate(self.comm, "DistributedOptimizer", timeout)  # collective: every rank comes
        label = algorithm if isinstance(algorithm, str) else getattr(algorithm, "name", repr(algorithm))
        hyper = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
        options = {"algorithm": label, "transport": transport, "bucket_bytes": bucket_bytes, "overlap": overlap,
                   "trace": trace, "broadcast_initial": broadcast_initial, "passes": backward_passes_per_step,
                   "optimizer": type(optimizer).__name__, "hyperparameters": json.dumps(hyper, default=str)}
        try:
            agree_on(self._comm, "DistributedOptimizer", named, options, problems, timeout)
            if broadcast_initial:
                broadcast_parameters(named, root=0, comm=self._comm, timeout=timeout)
        except BaseException:
            private.release(self._comm)
            raise
        self._names = {id(p): name for name, p in named}
        self._groups = parameter_groups(optimizer)
        self.buckets = self._fuse([p for _, p in reversed(named)], bucket_bytes)  # gradients come last layer first
        self._gpu = {b.flat.device: GpuOrder(b.flat.device) for b in self.buckets if is_device_array(b.array)}
        self.comm_seconds, self.steps = 0.0, 0  # steps taken
        self._syncing, self._closed, self._final = True, False, False
        self._passes_done, self._callback_queued = 0, False
        self._error: BaseException | None = None   # raised by the communication thread, surfaces in the main one
        self._broken: str | None = None            # why the optimizer refuses to go on
        self._tracer = Tracer(self._comm, seconds(timeout)) if trace else None
        self._first_call = private.state(self._comm).calls  # the same on every rank: steps are counted from it
        self._thread = None
        if overlap:
            self._thread = threading.Thread(target=self._communicate, daemon=True, name="ringlab-allreduce")
            self._thread.start()
        for bucket in self.buckets:
            for i, p in enumerate(bucket.params):
                p.register_post_accumulate_grad_hook(self._make_hook(bucket, i))

    def _fuse(self, params, bucket_bytes: int) -> list[Bucket]:
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
        out = [Bucket(index, group, [self._names[id(p)] for p in group], group[0].device, group[0].dtype)
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

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Horovod's way to step without averaging again: refused, since gradients are final after backward()."""
        raise RuntimeError("DistributedOptimizer follows DDP's contract: gradients are averaged by the time backward() "
                           "returns, so there is nothing to synchronize or to skip; clip or read them right after "
                           "backward() and call step()")
        yield  # pragma: no cover

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
        at the end of the backward pass without), averaged from ``start`` to ``end``, and the end of the
        backward pass waited ``waited`` seconds for it. On a GPU these are host times: ``end`` is when the
        host-driven allreduce returned, with its last kernels perhaps still queued on the communication stream.
        """
        if self._tracer is None:
            raise ValueError("DistributedOptimizer: nothing traced; construct it with trace=True")
        return np.array(self._tracer.rows, dtype=TRACE_DTYPE)

    def _refuse_if_broken(self) -> None:
        if self._closed:
            raise RuntimeError("DistributedOptimizer: step() or synchronize() after close()")
        if self._broken is not None:
            raise RuntimeError(f"DistributedOptimizer: an earlier step failed ({self._broken}), so its ranks may be "
                               "out of step; it refuses to go on. Build a new DistributedOptimizer: it broadcasts "
                               "rank 0's parameters again")

    def _make_hook(self, bucket: Bucket, i: int):
        def ready(param):
            with emulate.inside():  # on an emulated machine, the optimizer's bookkeeping is not compute
                arrived(param)

        def arrived(param):
            if self._closed:
                return
            if self._tracer is not None:
                self._tracer.backward(bucket.names[i], bucket.index, param.numel() * param.element_size())
            if not self._callback_queued:  # DDP's contract: the end of this backward pass finishes the averaging
                try:
                    torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)
                    self._callback_queued = True
                except RuntimeError:  # not inside a backward pass (a hook called by hand): step() averages
                    pass
            if bucket.queued:
                self._callback_queued = False  # the pass ends here: its callback will not run
                raise RuntimeError(
                    "DistributedOptimizer: a backward pass added to gradients that are already being averaged "
                    "over the ranks; call step() first, or accumulate with `with opt.no_sync():` around all but "
                    "the last backward pass (or backward_passes_per_step=k)")
            self._adopt(bucket, i)
            if not self._syncing:
                return
            bucket.seen[i] += 1
            if self.overlap and min(bucket.seen) >= self.passes:
                self._send(bucket)
        return ready

    def _backward_done(self) -> None:
        """At the end of a backward pass: once it is the last one of the step, every bucket is averaged."""
        self._callback_queued = False
        if self._syncing:
            self._passes_done += 1
            if self._passes_done >= self.passes:
                self.synchronize()

    def _send(self, bucket: Bucket) -> None:
        bucket.handed = emulate.now()  # on an emulated machine the communication thread starts it no sooner
        if self._tracer is not None:
            bucket.issued = self._tracer.clock()
        if bucket.flat.device in self._gpu:
            bucket.gradients_ready = self._gpu[bucket.flat.device].gradients_ready()
        bucket.queued = bucket.pending = True
        bucket.ready.set()

    def _adopt(self, bucket: Bucket, i: int) -> None:
        """Make sure the gradient lives in the bucket (autograd may have given it new memory)."""
        p, view = bucket.params[i], bucket.view(i)
        if p.grad is None or p.grad.data_ptr() != view.data_ptr():
            with torch.no_grad():
                view.copy_(p.grad if p.grad is not None else torch.zeros_like(view))
            p.grad = view

    def _reduce(self, bucket: Bucket) -> None:
        def allreduce_bucket():
            allreduce(bucket.array, self.algorithm, comm=self._comm, transport=self.transport, in_place=True,
                      timeout=self.timeout)
            _arithmetic(bucket.array.__itruediv__, self._comm.Get_size())  # the average, in place

        if emulate.current() is not None:  # not before the main thread handed it over (its own clock, if it did)
            emulate.clock().at_least(bucket.handed)
        if self._tracer is not None:
            bucket.started = self._tracer.clock()
        order = self._gpu.get(bucket.flat.device)
        try:
            if order is None:
                allreduce_bucket()
            else:
                if bucket.gradients_ready is None:  # reduced without overlap: the gradients are complete now
                    bucket.gradients_ready = order.gradients_ready()
                order.reduce(bucket, allreduce_bucket)
        except private.OutOfStep as err:
            steps = ", ".join(f"rank {r} at step {(c - self._first_call - 1) // len(self.buckets)}"
                              for r, c in enumerate(err.calls))
            raise RuntimeError(f"DistributedOptimizer: the ranks are at different steps ({steps}): a rank stepped "
                               "more or fewer times than the others, or an earlier step failed on some ranks only")
        except StepTimeout as err:
            raise StepTimeout(f"DistributedOptimizer, step {self.steps}, bucket {bucket.index}: {err}",
                              err.peers) from None
        if self._tracer is not None:
            bucket.ended = self._tracer.clock()

    def _communicate(self) -> None:
        """The communication thread: reduce the buckets in index order, step after step."""
        while True:
            for bucket in self.buckets:
                while not bucket.pending:  # woken by close(), or by a handover this loop has already taken
                    if self._closed:
                        return
                    bucket.ready.wait()
                    bucket.ready.clear()
                # a bucket handed over before close() is still reduced: every rank handed it over in the same
                # backward pass and waits in its allreduce for this rank's (after a step that failed on every
                # rank alike, stopping here left the others waiting out close()'s join)
                bucket.pending = False
                try:
                    if self._error is None:  # after a failure in this step, the rest is not sent
                        with emulate.inside():  # the allreduce's own times are on this thread's clock
                            self._reduce(bucket)
                except BaseException as err:  # surfaces at the end of the backward pass, on the main thread
                    self._error = err
                finally:
                    bucket.finished = emulate.now()  # this thread's clock: when the main thread may go on
                    bucket.done.set()

    def _check_parameters(self) -> None:
        if parameter_groups(self.optimizer) != self._groups:
            now = len(stepped_parameters(self.optimizer, []))
            raise RuntimeError(
                "DistributedOptimizer: the optimizer's parameters changed since it was built (a param group was "
                f"added, or a parameter frozen or unfrozen: {now} now require gradients, {len(self._names)} "
                "did): their gradients would not be averaged and the ranks would drift apart. Build a new "
                "DistributedOptimizer after changing them")

    def synchronize(self) -> None:
        """Wait until every bucket has been averaged over the ranks (the end of each last backward pass
        does it; after that this returns at once)."""
        self._refuse_if_broken()
        if self._final:
            return
        try:
            with emulate.inside():  # waiting and bookkeeping: not compute on an emulated machine
                self._check_parameters()
                self._average()
        except BaseException as err:
            self._broken = f"{type(err).__name__}: {err}"
            raise
        self._final = True

    def _average(self) -> None:
        start = emulate.now()
        limit = seconds(self.timeout)
        for bucket in self.buckets:
            waiting = emulate.now()
            if not bucket.queued:
                for i in range(len(bucket.params)):
                    self._adopt(bucket, i)  # parameters unused in this step keep the gradient they hold
            if not self.overlap:
                if self._tracer is not None:
                    bucket.issued = self._tracer.clock()
                bucket.queued = True
                if self._error is None:
                    try:
                        self._reduce(bucket)
                    except BaseException as err:
                        self._error = err
            else:
                if not bucket.queued:
                    self._send(bucket)
                if not bucket.done.wait(None if limit is None else limit * (len(self.buckets) + 1)):
                    raise RuntimeError(f"DistributedOptimizer: bucket {bucket.index}'s allreduce did not end within "
                                       "its deadline (the communication thread is stuck)")
                if emulate.current() is not None:  # the communication thread's clock when it finished
                    emulate.clock().at_least(bucket.finished)
            if self._tracer is not None:
                self._tracer.allreduce(bucket, emulate.now() - waiting)
        for bucket in self.buckets:
            if bucket.averaged is not None:
                self._gpu[bucket.flat.device].before_step(bucket)
                bucket.gradients_ready = bucket.averaged = None
        self.comm_seconds += emulate.now() - start
        if self._error is not None:
            raise self._error

    def step(self, closure=None):
        """Step the wrapped optimizer on the averaged gradients (averaging them now if no backward pass
        did); get ready for the next backward."""
        self.synchronize()
        result = self.optimizer.step(closure)
        for bucket in self.buckets:
            bucket.seen = [0] * len(bucket.params)
            bucket.queued = False
            bucket.done.clear()
        self._final, self._passes_done, self._callback_queued = False, 0, False
        self.steps += 1
        if self._tracer is not None:
            self._tracer.step += 1
            self._tracer.mark = self._tracer.clock()
        return result

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the fused gradient buckets (never None: the gradients live in the buckets)."""
        for bucket in self.buckets:
            bucket.flat.zero_()

    def close(self) -> None:
        """Stop the communication thread and free the optimizer's communicator; it cannot step afterwards."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            for bucket in self.buckets:
                bucket.ready.set()
            self._thread.join(timeout=10)
            self._thread = None
        private.release(self._comm)

    def __getattr__(self, name):  # param_groups, state, state_dict ... of the wrapped optimizer
        return getattr(self.optimizer, name)


def _arithmetic(function, *arguments) -> None:
    """``function(*arguments)``: arithmetic on the gradients. Inside the optimizer's bookkeeping on an emulated
    machine it still counts: its CPU time (compute="cpu"), or nothing (compute="model": the cost model prices
    no division)."""
    if emulate.current() is None:
        function(*arguments)
        return
    ticking = emulate.clock()
    ticking.work([(function, arguments)], None if ticking.cpu else 0.0)
