"""Sequence parallelism (Megatron-LM's): a transformer layer split over t ranks so that no activation is whole on
every rank, with the same bytes on the wire as tensor parallelism.

Tensor parallelism (Shoeybi et al. 2019; :mod:`ringlab.train.tensor`) splits attention by heads and the MLP by
its hidden features, so those regions hold h/t of the features on each rank. But the LayerNorms, the dropouts
and the residual additions between them are not split: every rank computes them on the whole sequence and
keeps their activations for backward, t copies of the same numbers. Korthikanti et al. 2022 ("Reducing
Activation Recomputation in Large Transformer Models", arXiv 2205.05198, section 4.2.2) split those regions
along the sequence instead: each rank holds s/t of the tokens there. The conjugate pairs around each split
region change (the 2022 paper's names):

- tensor parallelism: ``f`` before a column-parallel layer (identity forward, allreduce backward) and ``f-bar``
  after a row-parallel one (allreduce forward, identity backward; the 2019 paper's ``g``);
- sequence parallelism: ``g``, an all-gather along the sequence before the column-parallel layer
  (reduce-scatter backward), and ``g-bar``, a reduce-scatter along the sequence after the row-parallel one
  (all-gather backward).

A ring allreduce *is* a reduce-scatter followed by an all-gather (``rl.build("allreduce.ring", t)``'s two
phases), so each allreduce of tensor parallelism is replaced by one reduce-scatter and one all-gather of the
same buffer: the same bytes, (t-1)/t of it each, while the LayerNorm and dropout activations shrink t-fold.
Megatron also keeps only this rank's s/t of the column-parallel layer's input and gathers it again in
backward (``regather``), so those inputs shrink too, for one more all-gather per layer input in backward,
which Megatron overlaps with the gradient's computation. The replicated parameters (LayerNorms, the
row-parallel biases) see only this rank's tokens in the sequence-parallel regions: their gradients are summed
over the ranks (:meth:`ParallelLayer.sum_replicated_gradients`), as Megatron's finalize_model_grads does.

Every collective is one of ringlab's schedules (``reduce_scatter.ring``, ``allgather.ring``,
``allreduce.ring``), run by ``rl.execute`` on MPI ranks (:class:`CommGroup`) or, for tests and lessons on one
process, by ringlab's simulator on ranks that are threads (:class:`SimulatedRanks`). ``sent`` counts the bytes
this rank sends, by collective. :func:`saved_activations` measures what autograd keeps, by region.
"""
from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager

import numpy as np
import torch

from ..algorithms import build
from ..schedule import chunk_bounds
from ..simulate import simulate
from .zero import as_array, sent_bytes


class CommGroup:
    """The ranks of an MPI communicator, for the layers below: ``run(name, tensor)`` runs a registered schedule
    (``rl.execute``), ``alltoall(tensor)`` is ``rl.alltoall``; ``sent`` counts this rank's bytes by collective."""

    def __init__(self, comm):
        self.comm, self.nranks, self.rank, self.sent = comm, comm.Get_size(), comm.Get_rank(), Counter()

    def _array(self, tensor: torch.Tensor):
        return as_array(tensor.contiguous())

    def run(self, name: str, tensor: torch.Tensor, key: str | None = None) -> torch.Tensor:
        from ..mpi.collectives import execute

        array = self._array(tensor)
        self.sent[key or name.split(".")[0]] += sent_bytes(name, self.nranks, array.nbytes, array.itemsize)[self.rank]
        return torch.as_tensor(execute(name, array, comm=self.comm), device=tensor.device).view(tensor.shape)

    def alltoall(self, tensor: torch.Tensor) -> torch.Tensor:
        from ..mpi.collectives import alltoall

        array = self._array(tensor)
        self.sent["alltoall"] += sent_bytes("alltoall.pairwise", self.nranks, array.nbytes * self.nranks,
                                            array.itemsize)[self.rank]
        return torch.as_tensor(alltoall(array, comm=self.comm), device=tensor.device)


class SimulatedRanks:
    """``nranks`` ranks as threads of this process: :meth:`run` calls ``work(group)`` on each, with a group
    whose collectives hand every rank's buffer to ringlab's simulator (``rl.simulate``) at once. The same
    schedules as on MPI ranks, and the same bytes counted, with no MPI."""

    def __init__(self, nranks: int, timeout: float = 60):
        if isinstance(nranks, bool) or not isinstance(nranks, int) or nranks < 1:
            raise ValueError(f"nranks must be a whole number >= 1, got {nranks!r}")
        self.nranks, self.timeout = nranks, timeout
        self._buffers, self._results = [None] * nranks, None

    def _collective(self, rank: int, name: str, array: np.ndarray) -> np.ndarray:
        self._buffers[rank] = array
        self._barrier.wait()
        if rank == 0:
            self._results = simulate(build(name, self.nranks), [b.reshape(-1) for b in self._buffers])
        self._barrier.wait()  # nobody writes the next call's buffer before rank 0 has simulated this one
        return np.asarray(self._results[rank]).reshape(array.shape).copy()

    def run(self, work) -> list:
        """``work(group)`` on every simulated rank; the list of what each returned (an error on any is raised)."""
        results, errors = [None] * self.nranks, [None] * self.nranks
        self._barrier = threading.Barrier(self.nranks, timeout=self.timeout)  # a fresh one: a failed run breaks it

        def one(rank):
            try:
                results[rank] = work(_SimulatedGroup(self, rank))
            except BaseException as error:  # the others would wait for this rank forever
                errors[rank] = error
                self._barrier.abort()

        threads = [threading.Thread(target=one, args=(rank,)) for rank in range(self.nranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)),
                     next((e for e in errors if e is not None), None))
        if first is not None:
            raise first
        return results


class _SimulatedGroup(CommGroup):
    def __init__(self, ranks: SimulatedRanks, rank: int):
        self.ranks, self.nranks, self.rank, self.sent = ranks, ranks.nranks, rank, Counter()

    def _array(self, tensor: torch.Tensor):
        return tensor.detach().contiguous().cpu().numpy()

    def run(self, name: str, tensor: torch.Tensor, key: str | None = None) -> torch.Tensor:
        array = self._array(tensor)
        self.sent[key or name.split(".")[0]] += sent_bytes(name, self.nranks, array.nbytes, array.itemsize)[self.rank]
        return torch.as_tensor(self.ranks._collective(self.rank, name, array), device=tensor.device)

    def alltoall(self, tensor: torch.Tensor) -> torch.Tensor:
        array = self._array(tensor)
        n = self.nranks
        self.sent["alltoall"] += sent_bytes("alltoall.pairwise", n, array.nbytes * n, array.itemsize)[self.rank]
        work = np.zeros((n, *array.shape), dtype=array.dtype)  # work[s, d]: the block rank s sends rank d
        work[self.rank] = array
        done = self.ranks._collective(self.rank, "alltoall.pairwise", work)
        return torch.as_tensor(done[:, self.rank].copy(), device=tensor.device)


# Megatron's conjugate pairs, each a collective one way and its transpose the other
def _my_rows(full: torch.Tensor, group) -> torch.Tensor:
    per = full.shape[0] // group.nranks
    return full[group.rank * per:(group.rank + 1) * per]


def _all_gather(shard: torch.Tensor, group, key: str = "allgather") -> torch.Tensor:
    """Every rank's s/t rows, stacked along the sequence (ringlab's ring all-gather)."""
    full = shard.new_zeros((shard.shape[0] * group.nranks, *shard.shape[1:]))
    _my_rows(full, group).copy_(shard)
    return group.run("allgather.ring", full, key)


def _reduce_scatter(full: torch.Tensor, group) -> torch.Tensor:
    """This rank's s/t rows of the sum over the ranks (ringlab's ring reduce-scatter)."""
    return _my_rows(group.run("reduce_scatter.ring", full), group).clone()


class _Copy(torch.autograd.Function):
    """Tensor parallelism's f: the identity forward, an allreduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return ctx.group.run("allreduce.ring", grad), None


class _Sum(torch.autograd.Function):
    """Tensor parallelism's f-bar: an allreduce forward, the identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        return group.run("allreduce.ring", x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Scatter(torch.autograd.Function):
    """Sequence parallelism's g-bar: a reduce-scatter along the sequence forward, an all-gather backward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _reduce_scatter(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather(grad, ctx.group), None


class _GatherLinear(torch.autograd.Function):
    """Sequence parallelism's g and the column-parallel layer after it: all-gather the s/t rows, multiply; backward,
    reduce-scatter the input's gradient. With ``regather`` only the rows are kept, gathered again for the
    weight's gradient (Megatron's choice); otherwise the gathered input is kept."""

    @staticmethod
    def forward(ctx, shard, weight, bias, group, regather):
        full = _all_gather(shard, group)
        ctx.group, ctx.regather = group, regather
        ctx.save_for_backward(shard if regather else full)
        ctx.weight = weight  # a parameter, not an activation: kept by reference, as linear keeps it
        return torch.nn.functional.linear(full, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        (kept,) = ctx.saved_tensors
        grad_input = _reduce_scatter(grad @ ctx.weight, ctx.group)
        full = _all_gather(kept, ctx.group, "regather") if ctx.regather else kept
        grad_weight = grad.reshape(-1, grad.shape[-1]).T @ full.reshape(-1, full.shape[-1])
        return grad_input, grad_weight, grad.reshape(-1, grad.shape[-1]).sum(0), None, None


# where the saved tensors are made: the layer names its regions, saved_activations adds up by region (per
# thread: simulated ranks are threads)
_REGIONS = threading.local()


def _current_region() -> str:
    return getattr(_REGIONS, "stack", ["other"])[-1]


@contextmanager
def _region(name: str):
    stack = _REGIONS.__dict__.setdefault("stack", ["other"])
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()


def saved_activations(module: torch.nn.Module, run) -> Counter:
    """Bytes of the tensors autograd keeps for backward while ``run()`` computes, by the region of ``module``'s
    layer that made them (``norm``: LayerNorms, dropouts, residuals; ``column input``: the column-parallel
    layers' inputs; ``attention``, ``mlp``: the rest). Parameters are not counted; a tensor kept twice
    counts once. Measured with ``torch.autograd.graph.saved_tensors_hooks``."""
    parameters = {p.data_ptr() for p in module.parameters()}
    seen, sizes = set(), Counter()

    def pack(tensor):
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.stride())
        if tensor.data_ptr() not in parameters and key not in seen:
            seen.add(key)
            sizes[_current_region()] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        run()
    return sizes


def _dropout(x: torch.Tensor, p: float, seed: int, tokens: int, start: int = 0) -> torch.Tensor:
    """Dropout whose mask is drawn for the whole (tokens, b, h) activation from ``seed`` and cut to this rank's
    rows from ``start``: every split of the layer drops the same elements, so it equals the unsplit layer
    exactly. The mask kept for backward is a bool a element, as Megatron's (1 byte, against 2 for bf16)."""
    if p == 0:
        return x
    generator = torch.Generator().manual_seed(seed)
    keep = torch.rand((tokens, *x.shape[1:]), generator=generator, dtype=torch.float64) >= p
    keep = keep[start:start + x.shape[0]].clone().to(x.device)
    return torch.where(keep, x / (1 - p), torch.zeros((), dtype=x.dtype, device=x.device))


def attend(q, k, v, causal: bool) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v per head: q, k, v shaped (s, b, heads, d), the output (s, b, heads * d)."""
    q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # (b, heads, s, d)
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.permute(2, 0, 1, 3).reshape(out.shape[2], out.shape[0], -1)


class TransformerLayer(torch.nn.Module):
    """A pre-norm transformer layer on one rank, the reference: x + drop(attention(LN(x))), then
    + drop(MLP(LN(.))), on x shaped (sequence, batch, hidden) as Megatron lays it out. Causal by default."""

    def __init__(self, hidden: int = 8, heads: int = 2, ffn: int = 16, dropout: float = 0.0, causal: bool = True,
                 seed: int = 0):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"{hidden} hidden features do not split into {heads} heads")
        torch.manual_seed(seed)
        self.heads, self.dropout, self.causal = heads, dropout, causal
        self.norm1, self.norm2 = torch.nn.LayerNorm(hidden), torch.nn.LayerNorm(hidden)
        self.qkv, self.proj = torch.nn.Linear(hidden, 3 * hidden), torch.nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = torch.nn.Linear(hidden, ffn), torch.nn.Linear(ffn, hidden)

    def forward(self, x, seed: int = 0):
        s, b, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(s, b, 3, self.heads, h // self.heads).unbind(2)
        x = x + _dropout(self.proj(attend(q, k, v, self.causal)), self.dropout, seed, s)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))
        return x + _dropout(y, self.dropout, seed + 1, s)


class ParallelLayer(torch.nn.Module):
    """``layer`` split over the ranks of ``group`` (a :class:`CommGroup`, or a rank of :class:`SimulatedRanks`):
    attention by heads, the MLP by hidden features (tensor parallelism), and with ``sequence_parallel`` the
    LayerNorm, dropout and residual regions by the sequence (Megatron's sequence parallelism).

    Forward takes and returns the whole sequence (tensor parallelism) or this rank's s/t of it, rows
    rank * s/t onwards (sequence parallelism). ``group.sent`` counts the bytes this rank sends: ``allreduce``
    (tensor parallelism), ``allgather`` and ``reduce_scatter`` (sequence parallelism), ``regather`` (the input
    gathered again in backward), ``replicated`` (:meth:`sum_replicated_gradients`)."""

    def __init__(self, layer: TransformerLayer, group, sequence_parallel: bool = True, regather: bool = True):
        super().__init__()
        t, rank = group.nranks, group.rank
        if layer.heads % t:
            raise ValueError(f"{layer.heads} heads do not split over {t} ranks: give each rank the same number")
        if layer.fc1.out_features < t:
            raise ValueError(f"{layer.fc1.out_features} MLP features cannot be split over {t} ranks")
        self.group, self.sequence_parallel, self.regather = group, sequence_parallel, regather
        self.heads, self.dropout, self.causal = layer.heads // t, layer.dropout, layer.causal
        h, per = layer.qkv.in_features, layer.qkv.in_features // t  # this rank's heads: features [rank*per, +per)
        mine = slice(rank * per, (rank + 1) * per)
        rows = torch.cat([torch.arange(h)[mine] + part * h for part in range(3)])  # its q, k and v rows
        lo, hi = (int(i) for i in chunk_bounds(layer.fc1.out_features, t)[rank:rank + 2])

        def copy(tensor):
            return torch.nn.Parameter(tensor.detach().clone())

        self.norm1_weight, self.norm1_bias = copy(layer.norm1.weight), copy(layer.norm1.bias)
        self.norm2_weight, self.norm2_bias = copy(layer.norm2.weight), copy(layer.norm2.bias)
        self.eps = (layer.norm1.eps, layer.norm2.eps)
        self.qkv_weight, self.qkv_bias = copy(layer.qkv.weight[rows]), copy(layer.qkv.bias[rows])
        self.proj_weight, self.proj_bias = copy(layer.proj.weight[:, mine]), copy(layer.proj.bias)
        self.fc1_weight, self.fc1_bias = copy(layer.fc1.weight[lo:hi]), copy(layer.fc1.bias[lo:hi])
        self.fc2_weight, self.fc2_bias = copy(layer.fc2.weight[:, lo:hi]), copy(layer.fc2.bias)
        self.qkv_rows, self.proj_columns, self.ffn_rows = rows, mine, slice(lo, hi)

    def replicated(self) -> list[torch.nn.Parameter]:
        """The parameters every rank holds whole: the LayerNorms' and the row-parallel layers' biases."""
        return [self.norm1_weight, self.norm1_bias, self.norm2_weight, self.norm2_bias, self.proj_bias,
                self.fc2_bias]

    def sum_replicated_gradients(self) -> None:
        """Sequence parallelism: add up the replicated parameters' gradients over the ranks (each rank's covers
        its own tokens only); one allreduce of them all, counted as ``replicated``. Tensor parallelism: nothing
        to do, every rank's gradient is already whole."""
        if not self.sequence_parallel:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.replicated()]
        summed = self.group.run("allreduce.ring", torch.cat([g.reshape(-1) for g in grads]), "replicated")
        at = 0
        for p in self.replicated():
            p.grad = summed[at:at + p.numel()].view_as(p).clone()
            at += p.numel()

    def _column(self, x, weight, bias):
        """The column-parallel layer with what comes before it: g (all-gather) or f (identity, allreduce back)."""
        with _region("column input"):
            if self.sequence_parallel:
                return _GatherLinear.apply(x, weight, bias, self.group, self.regather)
            return torch.nn.functional.linear(_Copy.apply(x, self.group), weight, bias)

    def _row(self, x, weight, bias):
        """The row-parallel layer, then g-bar (reduce-scatter) or f-bar (allreduce); then the bias."""
        partial = torch.nn.functional.linear(x, weight)
        return (_Scatter if self.sequence_parallel else _Sum).apply(partial, self.group) + bias

    def forward(self, x, seed: int = 0):
        t = self.group.nranks
        tokens, start = (x.shape[0] * t, self.group.rank * x.shape[0]) if self.sequence_parallel else (x.shape[0], 0)
        with _region("norm"):
            normed = torch.nn.functional.layer_norm(x, x.shape[-1:], self.norm1_weight, self.norm1_bias, self.eps[0])
        with _region("attention"):
            qkv = self._column(normed, self.qkv_weight, self.qkv_bias)
            s, b = qkv.shape[:2]
            q, k, v = qkv.view(s, b, 3, self.heads, -1).unbind(2)
            attended = self._row(attend(q, k, v, self.causal), self.proj_weight, self.proj_bias)
        with _region("norm"):
            x = x + _dropout(attended, self.dropout, seed, tokens, start)
            normed = torch.nn.functional.layer_norm(x, x.shape[-1:], self.norm2_weight, self.norm2_bias, self.eps[1])
        with _region("mlp"):
            hidden = torch.nn.functional.gelu(self._column(normed, self.fc1_weight, self.fc1_bias))
            y = self._row(hidden, self.fc2_weight, self.fc2_bias)
        with _region("norm"):
            return x + _dropout(y, self.dropout, seed + 1, tokens, start)

    def scatter_input(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's rows of the whole sequence ``x`` (what forward takes with sequence parallelism)."""
        if self.sequence_parallel and x.shape[0] % self.group.nranks:
            raise ValueError(f"sequence parallelism cuts the sequence into {self.group.nranks} equal parts; "
                             f"{x.shape[0]} tokens do not divide by {self.group.nranks}")
        return _my_rows(x, self.group) if self.sequence_parallel else x


def layer_traffic(tokens: int, batch: int, hidden: int, nranks: int, itemsize: int = 2,
                  sequence_parallel: bool = True, regather: bool = True) -> Counter:
    """Bytes each rank sends for one layer's forward and backward, by collective, counted from ringlab's
    schedules as :class:`ParallelLayer` runs them (the replicated gradients' allreduce left out: it is per
    step, not per layer and micro-batch). Every collective moves one (tokens, batch, hidden) activation:
    tensor parallelism 4 allreduces; sequence parallelism 4 all-gathers and 4 reduce-scatters, the same
    bytes, and with ``regather`` 2 all-gathers more."""
    if sequence_parallel and tokens % nranks:
        raise ValueError(f"sequence parallelism cuts the sequence into {nranks} equal parts; {tokens} tokens do "
                         f"not divide by {nranks}")
    nbytes = tokens * batch * hidden * itemsize

    def one(name):
        return sent_bytes(name, nranks, nbytes, itemsize)[0]

    if not sequence_parallel:
        return Counter({"allreduce": 4 * one("allreduce.ring")})
    sent = Counter({"allgather": 2 * one("allgather.ring"), "reduce_scatter": 2 * one("reduce_scatter.ring")})
    sent["allgather"] += 2 * one("allgather.ring")  # backward: the reduce-scatters' transposes
    sent["reduce_scatter"] += 2 * one("reduce_scatter.ring")  # backward: the all-gathers' transposes
    if regather:
        sent["regather"] = 2 * one("allgather.ring")
    return sent


def megatron_activation_bytes(tokens: int, batch: int, hidden: int, heads: int, nranks: int = 1,
                              sequence_parallel: bool = False) -> float:
    """Activation bytes one transformer layer keeps per rank, by Korthikanti et al. 2022's formulas (section 4,
    16-bit activations, 1-byte dropout masks, no recomputation): s b h (34 + 5 a s / h) unsplit,
    s b h (10 + 24/t + 5 a s / (h t)) with tensor parallelism, s b h (34 + 5 a s / h) / t with sequence
    parallelism too. The 10 s b h that tensor parallelism leaves whole on every rank: the two LayerNorms' inputs
    (4), the two dropout masks after attention and after the MLP (2), the inputs of the QKV and first MLP
    layers (4); :func:`saved_activations` measures the same pieces in regions ``norm`` and ``column input``."""
    s, b, h, a, t = tokens, batch, hidden, heads, nranks
    if sequence_parallel:
        return s * b * h * (34 + 5 * a * s / h) / t
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
