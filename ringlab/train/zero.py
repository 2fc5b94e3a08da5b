"""Sharded data parallelism (ZeRO, and FSDP's full sharding) on ringlab's own reduce-scatter and allgather.

Plain data parallelism keeps on every rank all the parameters, all their gradients and all the optimizer's
state, and averages the gradients with an allreduce. ZeRO (Rajbhandari et al., 2020) keeps on each rank a
piece of them: every parameter is cut into n near-equal pieces (``numpy.array_split``'s rule, ringlab's
chunks, so no count need divide by n) and rank r keeps piece r of

- stage 1, the optimizer's state: ``step()`` reduce-scatters every gradient (rank r gets the sum of its
  piece), the optimizer updates piece r alone, and an allgather brings every rank the updated pieces;
- stage 2, also the gradients: each gradient is reduce-scattered the moment backward has produced it (a
  post-accumulate-grad hook) and the full gradient is freed;
- stage 3, also the parameters (FSDP's full sharding): a module's parameters are allgathered just before
  its forward and freed after it, gathered again just before its backward (a hook on its output's
  gradient) and freed once their gradients are reduce-scattered.

A ring reduce-scatter and a ring allgather each send (n-1)/n of the buffer from every rank, so stages 1 and
2 send what a ring allreduce sends (the paper's 2 Psi) and stage 3 half as much again (3 Psi).
:meth:`ZeroOptimizer.memory` measures what a rank holds from its tensors; :func:`zero_memory` and
:func:`zero_traffic` are the paper's formulas. Every rank must give every parameter a gradient each step.

At stage 3, ``prefetch=True`` is FSDP's prefetching (``forward_prefetch`` and ``BACKWARD_PRE``): every collective
runs on a communication thread, as DistributedOptimizer's overlap runs its allreduces, and unit i+1's allgather
is handed to it when unit i's forward begins (unit i-1's when unit i's backward begins), so that it runs while
unit i computes; the reduce-scatters go the same way, in the order they are handed over, and ``step()`` waits for
them. The next unit is the next in ``model.modules()`` order (a Sequential's order of execution). The price: two
units' full parameters are held at once. On an emulated machine the thread keeps its own virtual clock: a
collective starts no sooner than it was handed over, and whoever waits for it goes on no sooner than it ended.
:attr:`ZeroOptimizer.peak_parameters` is the most parameter bytes held at once during the last step.
"""
from __future__ import annotations

import queue
import threading
from collections import Counter
from functools import lru_cache

import torch

from ..algorithms import build
from ..mpi import emulate, private
from ..mpi.deadlines import DEFAULT, seconds
from ..mpi.collectives import execute
from ..schedule import chunk_bounds
from ..simulate import traffic
from .optimizer import agree_on_parameters, broadcast_parameters

STAGES = (1, 2, 3)
KINDS = ("parameters", "gradients", "optimizer_state")


def as_array(tensor: torch.Tensor):
    """The tensor's memory as a numpy (CPU) or cupy (GPU) array: no copy."""
    data = tensor.detach()
    if data.is_cuda:
        import cupy
        return cupy.from_dlpack(data)
    return data.numpy()


@lru_cache(maxsize=256)
def sent_bytes(name: str, nranks: int, nbytes: int, itemsize: int) -> tuple[int, ...]:
    """Bytes each rank sends when schedule ``name`` runs on ``nbytes`` (counted from the schedule)."""
    return tuple(traffic(build(name, nranks), nbytes, itemsize)["sent"])


def zero_memory(nparams: int, nranks: int, stage: int, param_bytes: float = 2, grad_bytes: float = 2,
                state_bytes: float = 12) -> dict[str, float]:
    """Bytes per rank by the ZeRO paper's formulas (stage 0: plain data parallelism); the defaults are its
    mixed-precision Adam (2 + 2 + K Psi, K = 12)."""
    if stage not in (0, *STAGES) or isinstance(stage, bool):
        raise ValueError(f"stage must be 0 (plain data parallelism), 1, 2 or 3, got {stage!r}")
    if nranks < 1 or nparams < 0:
        raise ValueError(f"need nranks >= 1 and nparams >= 0, got {nranks} and {nparams}")
    share = [1.0] * 3
    for k in range(stage):  # stage 1 shards the state, 2 the gradients too, 3 the parameters too
        share[2 - k] = 1 / nranks
    return dict(zip(KINDS, (nparams * param_bytes * share[0], nparams * grad_bytes * share[1],
                            nparams * state_bytes * share[2])))


def zero_traffic(nparams: int, nranks: int, stage: int, itemsize: int = 2) -> float:
    """Bytes each rank sends a step by the paper's table, on rings: 2(n-1)/n Psi for plain data parallelism
    and stages 1 and 2, 3(n-1)/n Psi for stage 3 (2 Psi and 3 Psi as n grows)."""
    if stage not in (0, *STAGES) or isinstance(stage, bool):
        raise ValueError(f"stage must be 0 (plain data parallelism), 1, 2 or 3, got {stage!r}")
    return (3 if stage == 3 else 2) * (nranks - 1) / nranks * nparams * itemsize


def held_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a storage shared by several counts once)."""
    seen = {}
    for t in tensors:
        if t is not None:
            storage = t.untyped_storage()
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
    return sum(seen.values())


def model_memory(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """What plain data parallelism holds on a rank, measured from the tensors: as :meth:`ZeroOptimizer.memory`."""
    params = [p for p in model.parameters()]
    return {"parameters": held_bytes(params), "gradients": held_bytes(p.grad for p in params),
            "optimizer_state": held_bytes(_state_tensors(optimizer))}


def _state_tensors(optimizer):
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


class _Unit:
    """The parameters one module owns, flattened into one buffer (FSDP's flat parameter): ``flat`` holds them
    all (the parameters are views into it), ``lo:hi`` is this rank's piece of it."""

    def __init__(self, module, params, nranks: int, rank: int):
        self.module, self.params = module, params
        self.numel = sum(p.numel() for p in params)
        self.lo, self.hi = (int(b) for b in chunk_bounds(self.numel, nranks)[rank:rank + 2])
        first = params[0]
        self.flat = torch.cat([p.detach().reshape(-1) for p in params]).to(first.device)
        at = 0
        for p in params:  # the parameters become views into the flat buffer
            p.data = self.flat[at:at + p.numel()].view_as(p)
            at += p.numel()
        self.ready = 0  # parameters whose gradient backward has produced this step
        self.pending = None  # with prefetch: the allgather handed to the communication thread, not yet waited for


class _Job:
    """A collective handed to the communication thread at this thread's time ``handed``; ``finished`` is the
    communication thread's time when it ended."""

    def __init__(self, run):
        self.run, self.handed, self.finished, self.error = run, emulate.now(), None, None
        self.done = threading.Event()


class ZeroOptimizer:
    """Shard ``optimizer``'s state (stage 1), also the gradients (2), also the parameters (3) of ``model``
    over the ranks of ``comm`` (see the module). The parameters each module owns are sharded together, as one
    flat buffer (FSDP's unit), so a step runs a few large collectives rather than one per tensor. ``optimizer``
    must be fresh (no state yet) and hold exactly the model's parameters that require gradients, those of one
    module in one param group. ``prefetch`` (stage 3 only): FSDP's prefetching, see the module."""

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, stage: int = 1, comm=None,
                 prefetch: bool = False):
        from mpi4py import MPI

        if isinstance(stage, bool) or stage not in STAGES:
            raise ValueError(f"stage must be 1 (optimizer state), 2 (and gradients) or 3 (and parameters), "
                             f"got {stage!r}")
        if not isinstance(prefetch, bool) or (prefetch and stage != 3):
            raise ValueError(f"prefetch is True or False, and True only at stage 3 (the only stage that gathers "
                             f"parameters before use), got prefetch={prefetch!r} at stage {stage}")
        self.optimizer, self.model, self.stage, self.prefetch = optimizer, model, stage, prefetch
        self.comm = MPI.COMM_WORLD if comm is None else comm
        self.nranks, self.rank = self.comm.Get_size(), self.comm.Get_rank()
        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        self._check(named)
        agree_on_parameters(self.comm, "ZeroOptimizer", named)
        broadcast_parameters(named, root=0, comm=self.comm)
        self.params = [p for _, p in named]
        wanted = {id(p) for p in self.params}
        self.units = [_Unit(m, own, self.nranks, self.rank) for m in model.modules()
                      if (own := [p for p in m.parameters(recurse=False) if id(p) in wanted])]
        self._unit_of = {id(p): u for u in self.units for p in u.params}
        self.pieces = [torch.nn.Parameter(u.flat[u.lo:u.hi].clone() if stage == 3 else u.flat[u.lo:u.hi])
                       for u in self.units]
        self._regroup()
        if stage == 1:  # the full gradients stay, as views into one flat buffer per unit
            for u in self.units:
                u.grads = torch.zeros_like(u.flat)
                self._point(u.params, u.grads, "grad")
        self.sent = Counter()  # bytes this rank sent in training, by collective (counted from the schedules)
        self.steps = 0
        self._hooks = []
        self._comm, self._jobs, self._thread, self._inflight = self.comm, None, None, []
        if prefetch:  # every collective on a communicator of its own, on a communication thread
            with emulate.inside():
                self._comm = private.duplicate(self.comm, "ZeroOptimizer", DEFAULT)
            self._jobs = queue.Queue()
            self._thread = threading.Thread(target=self._communicate, daemon=True, name="ringlab-zero")
            self._thread.start()
        if stage >= 2:
            self._hooks += [p.register_post_accumulate_grad_hook(self._gradient_ready) for p in self.params]
        if stage == 3:
            for u in self.units:
                _free(u.flat)
                self._hooks += [u.module.register_forward_pre_hook(lambda m, args, u=u: self._gather(u, then=1)),
                                u.module.register_forward_hook(lambda m, args, out, u=u: self._after(u, out))]
        self._peak = self.peak_parameters = self._parameter_bytes()

    def _check(self, named) -> None:
        if not named:
            raise ValueError("ZeroOptimizer: the model has no parameters that require gradients")
        mine = {id(p) for _, p in named}
        given = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self.optimizer.state:
            raise ValueError("ZeroOptimizer: give it a fresh optimizer (one that has not stepped): it keeps "
                             "state for this rank's pieces only")
        if len(given) != len({id(p) for p in given}) or {id(p) for p in given} != mine:
            raise ValueError("ZeroOptimizer: the optimizer must hold exactly the model's parameters that require "
                             "gradients, each once")
        group_of = {id(p): i for i, group in enumerate(self.optimizer.param_groups) for p in group["params"]}
        for module in self.model.modules():
            groups = {group_of[id(p)] for p in module.parameters(recurse=False) if id(p) in mine}
            if len(groups) > 1:
                raise ValueError(f"ZeroOptimizer: the parameters of one module ({type(module).__name__}) are sharded "
                                 "together, so they must be in one param group")
        for name, p in named:
            if not p.is_contiguous():
                raise ValueError(f"ZeroOptimizer: parameter {name} is not contiguous")

    def _regroup(self) -> None:
        """Each param group holds its modules' pieces instead of their parameters."""
        piece_of = {id(p): piece for u, piece in zip(self.units, self.pieces) for p in u.params}
        for group in self.optimizer.param_groups:
            pieces = []
            for p in group["params"]:
                if not any(piece_of[id(p)] is q for q in pieces):
                    pieces.append(piece_of[id(p)])
            group["params"] = pieces

    @staticmethod
    def _point(params, flat: torch.Tensor, what: str) -> None:
        at = 0
        for p in params:
            view = flat[at:at + p.numel()].view_as(p)
            if what == "grad":
                p.grad = view
            else:
                p.data = view
            at += p.numel()

    def _run(self, name: str, flat: torch.Tensor, in_place: bool = False, count: bool = True):
        array = as_array(flat)
        if count:
            self.sent[name.split(".")[0]] += sent_bytes(name, self.nranks, array.nbytes, array.itemsize)[self.rank]
        return execute(name, array, comm=self._comm, in_place=in_place)

    def _hand(self, run) -> _Job:
        """Prefetch: hand ``run`` (a collective) to the communication thread."""
        job = _Job(run)
        self._inflight.append(job)
        self._jobs.put(job)
        return job

    def _communicate(self) -> None:
        """The communication thread: run the collectives handed to it, in the order they came."""
        while (job := self._jobs.get()) is not None:
            with emulate.inside():  # the collective's own times are on this thread's clock
                if emulate.current() is not None:  # not before it was handed over
                    emulate.clock().at_least(job.handed)
                try:
                    job.run()
                except BaseException as err:  # surfaces on the main thread, which waits for it
                    job.error = err
                finally:
                    job.finished = emulate.now()
                    job.done.set()

    def _wait(self, job: _Job) -> None:
        """Wait for a collective handed over; on an emulated machine this thread goes on no sooner than it ended."""
        limit = seconds(DEFAULT)
        with emulate.inside():  # waiting is not compute
            if not job.done.wait(None if limit is None else 4 * limit):
                raise RuntimeError("ZeroOptimizer: a collective on the communication thread did not end within its "
                                   "deadline (the thread is stuck)")
            if emulate.current() is not None:
                emulate.clock().at_least(job.finished)
        if job in self._inflight:
            self._inflight.remove(job)
        if job.error is not None:
            raise job.error

    def _drain(self) -> None:
        while self._inflight:
            self._wait(self._inflight[0])

    def _parameter_bytes(self) -> int:
        return held_bytes(list(self.model.parameters()) + self.pieces)

    def _note_peak(self) -> None:
        with emulate.inside():  # bookkeeping: not compute on an emulated machine
            self._peak = max(self._peak, self._parameter_bytes())

    def _reduce_scatter(self, i: int, grads: torch.Tensor) -> None:
        """Sum unit i's flat gradient over the ranks; this rank's piece of the average goes to the piece's grad (with
        prefetch, on the communication thread: ``step()`` waits for it)."""
        u, piece = self.units[i], self.pieces[i]
        if self.prefetch:
            self._hand(lambda: self._scatter_into_piece(u, piece, grads))
            return
        self._scatter_into_piece(u, piece, grads)

    def _scatter_into_piece(self, u: _Unit, piece: torch.nn.Parameter, grads: torch.Tensor) -> None:
        summed = self._run("reduce_scatter.ring", grads)
        mine = torch.as_tensor(summed[u.lo:u.hi], device=grads.device) / self.nranks
        if self.stage == 1:  # the piece's gradient is its slice of the unit's full gradient, averaged
            u.grads[u.lo:u.hi] = mine
            piece.grad = u.grads[u.lo:u.hi]
        else:
            piece.grad = mine if piece.grad is None else piece.grad + mine

    def _adopt_gradients(self, u: _Unit) -> None:
        """Stage 1: gradients that are not views into the unit's buffer (set to None, or replaced) are copied in."""
        at = 0
        for p in u.params:
            view = u.grads[at:at + p.numel()].view_as(p)
            if p.grad is None:
                view.zero_()
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
            p.grad = view
            at += p.numel()

    def _flat_grads(self, u: _Unit) -> torch.Tensor:
        return torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in u.params])

    def _gradient_ready(self, p: torch.Tensor) -> None:
        """Stages 2 and 3: once every parameter of a unit has its gradient, reduce-scatter them and free them."""
        u = self._unit_of[id(p)]
        u.ready += 1
        if u.ready < len(u.params):
            return
        self._reduce_scatter(self.units.index(u), self._flat_grads(u))
        for q in u.params:
            q.grad = None
        u.ready = 0  # a second backward before step() reduces again, adding into the pieces' gradients
        if self.stage == 3:
            self._release(u)

    def _gather(self, u: _Unit, then: int = 0) -> None:
        """Stage 3: allgather unit ``u``'s full parameters unless they are held now; with prefetch, wait for them
        and hand over the allgather of the unit ``then`` places on (+1 in forward, -1 in backward)."""
        if not self.prefetch:
            if u.flat.untyped_storage().nbytes() == 0:
                self._gather_into(u, u.flat)
            return
        self._prefetch(u)
        if u.pending is not None:
            self._wait(u.pending)
            u.pending = None
        following = self.units.index(u) + then
        if then and 0 <= following < len(self.units):
            self._prefetch(self.units[following])

    def _prefetch(self, u: _Unit) -> None:
        """Hand over unit ``u``'s allgather unless its parameters are held or on their way: its full buffer is
        allocated now, on this thread, so the parameters held at once are counted where the program holds them."""
        if u.pending is None and u.flat.untyped_storage().nbytes() == 0:
            _allocate(u.flat)
            self._note_peak()
            u.pending = self._hand(lambda: u.flat.copy_(self._gathered(u)))

    def _gathered(self, u: _Unit, count: bool = True) -> torch.Tensor:
        """Unit ``u``'s full parameters, allgathered from the ranks' pieces into a new tensor."""
        i = self.units.index(u)
        work = torch.zeros(u.numel, dtype=u.flat.dtype, device=u.flat.device)  # not out: numpy would pin its storage
        work[u.lo:u.hi] = self.pieces[i].data
        gathered = self._run("allgather.ring", work, in_place=True, count=count)
        return torch.as_tensor(gathered, device=u.flat.device)

    def _gather_into(self, u: _Unit, out: torch.Tensor, count: bool = True) -> torch.Tensor:
        gathered = self._gathered(u, count=count)
        _allocate(out)
        if out is u.flat:
            self._note_peak()
        out.copy_(gathered)
        return out

    def _release(self, u: _Unit) -> None:
        """Free unit ``u``'s full parameters (after an allgather still writing into them, if one is)."""
        if u.pending is not None:
            self._wait(u.pending)
            u.pending = None
        _free(u.flat)

    def _after(self, u: _Unit, out) -> None:
        """Stage 3, after a module's forward: free its parameters, and gather them again before its backward."""
        self._release(u)
        outputs = [t for t in (out if isinstance(out, (tuple, list)) else (out,))
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if outputs:
            outputs[0].register_hook(lambda grad: self._gather(u, then=-1))

    def step(self, closure=None):
        """Average the gradients (reduce-scatter), update this rank's pieces, and (stages 1, 2) allgather them."""
        for i, u in enumerate(self.units):
            if self.stage == 1:
                self._adopt_gradients(u)
                self._reduce_scatter(i, u.grads)
            elif u.ready > 0:  # some parameter of it got no gradient this step: reduce what there is
                self._reduce_scatter(i, self._flat_grads(u))
                for q in u.params:
                    q.grad = None
            u.ready = 0
        self._drain()  # prefetch: every reduce-scatter handed over has ended
        self._note_peak()
        loss = self.optimizer.step(closure)
        if self.stage < 3:
            for u in self.units:
                self._run("allgather.ring", u.flat, in_place=True)
        self.steps += 1
        with emulate.inside():
            self.peak_parameters, self._peak = self._peak, self._parameter_bytes()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients: the full ones (zeroed in place at stage 1, whose views they are) and the pieces'."""
        for u in self.units:
            if self.stage == 1:
                u.grads.zero_()
            u.ready = 0
        for piece in self.pieces:
            if set_to_none or piece.grad is None or self.stage == 1:
                piece.grad = None
            else:
                piece.grad.zero_()

    def memory(self) -> dict[str, int]:
        """Bytes this rank holds now, measured from its tensors: "parameters", "gradients", "optimizer_state"."""
        return {"parameters": held_bytes(list(self.model.parameters()) + self.pieces),
                "gradients": held_bytes([p.grad for p in self.params] + [q.grad for q in self.pieces]),
                "optimizer_state": held_bytes(_state_tensors(self.optimizer))}

    def full_parameters(self) -> list[torch.Tensor]:
        """Every parameter in full, in ``model.parameters()`` order (stage 3: gathered, on every rank at once)."""
        if self.stage < 3:
            return [p.detach().clone() for p in self.model.parameters()]
        self._drain()
        full = {id(p): p.detach().clone() for p in self.model.parameters() if id(p) not in self._unit_of}  # frozen
        for u in self.units:
            flat = self._gather_into(u, torch.empty(u.numel, dtype=u.flat.dtype, device=u.flat.device), count=False)
            at = 0
            for p in u.params:
                full[id(p)] = flat[at:at + p.numel()].view_as(p).clone()
                at += p.numel()
        return [full[id(p)] for p in self.model.parameters()]

    def close(self) -> None:
        """Remove the hooks; at stage 3 gather the full parameters back into the model."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._thread is not None:
            self._drain()
            for u in self.units:
                u.pending = None
            self._jobs.put(None)
            self._thread.join(timeout=10)
            self._thread = None
        if self.stage == 3:
            for u in self.units:
                if u.flat.untyped_storage().nbytes() == 0:
                    self._gather_into(u, u.flat)
        if self._comm is not self.comm:
            private.release(self._comm)
            self._comm = self.comm

    def __getattr__(self, name):  # param_groups, state ... of the wrapped optimizer
        return getattr(self.optimizer, name)


def _free(tensor: torch.Tensor) -> None:
    """Give the tensor's memory back, keeping its shape (views of it see the memory again once reallocated)."""
    tensor.untyped_storage().resize_(0)


def _allocate(tensor: torch.Tensor) -> None:
    storage = tensor.untyped_storage()
    if storage.nbytes() != tensor.numel() * tensor.element_size():
        storage.resize_(tensor.numel() * tensor.element_size())
