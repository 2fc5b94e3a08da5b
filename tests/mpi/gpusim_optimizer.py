"""The DistributedOptimizer's GPU path on the cupy stand-in, against its CPU path and numpy.

torch here has no CUDA, so the test plays torch's part on the stand-in: each bucket's memory is
seen as a stand-in device array (``array_of``), torch's stream is a stand-in stream (``torch_stream``)
on which "backward" writes each gradient asynchronously before its hook fires, and "the optimizer"
reads the averages on that stream after ``step()``. A missing event wait on either side reads
stale memory and the averages come out wrong. argv[1]: transport; argv[2] "overlap" or "no-overlap".
"""
import sys

import cupy as cp
import numpy as np
import torch
from mpi4py import MPI

from ringlab.mpi.devices import bind_device
from ringlab.train import buckets as buckets_module
from ringlab.train import optimizer as opt_module

comm = MPI.COMM_WORLD
rank, n = comm.Get_rank(), comm.Get_size()
transport, overlap = sys.argv[1], sys.argv[2] == "overlap"
bind_device(comm)
BACKWARD = cp.cuda.Stream(non_blocking=True)  # torch's stream, played by the stand-in


def device_view(tensor):
    """The tensor's memory as a stand-in device array (what cupy.from_dlpack gives on a GPU)."""
    host = tensor.detach().numpy()
    memory = cp.cuda.UnownedMemory(tensor.data_ptr(), host.nbytes, tensor, device_id=cp.cuda.Device().id)
    return cp.ndarray(host.shape, host.dtype, cp.cuda.MemoryPointer(memory, 0))


buckets_module.array_of = device_view
buckets_module.torch_stream = lambda device: BACKWARD


class GpuIndex:
    """The buckets' tensors are CPU tensors here: hand GpuOrder the index of this rank's GPU instead."""

    def __init__(self, index):
        self.index = index


real_init = buckets_module.GpuOrder.__init__
buckets_module.GpuOrder.__init__ = lambda self, device: real_init(self, GpuIndex(cp.cuda.Device().id))

model = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Linear(5, 3))
params = list(model.named_parameters())
opt = opt_module.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0), params, "ring",
                                      transport=transport, bucket_bytes=64, overlap=overlap)
assert opt._gpu, "the buckets should have taken the GPU path"


def gradients(step, r):
    rng = np.random.default_rng(1000 * step + r)
    return {name: rng.integers(-50, 50, p.shape).astype(np.float32) for name, p in params}


for step in range(3):
    mine = gradients(step, rank)
    want = {name: np.mean([gradients(step, r)[name] for r in range(n)], axis=0) for name, _ in params}
    for bucket in reversed(opt.buckets):  # as backward does: last layer first
        for i, p in enumerate(bucket.params):
            view = bucket.array[int(bucket.offsets[i]):int(bucket.offsets[i + 1])]
            value = mine[next(name for name, q in params if q is p)].reshape(-1)
            view.set(value, stream=BACKWARD)  # queued on "torch's" stream, like a backward kernel
            if overlap:
                for hook in p._post_accumulate_grad_hooks.values():
                    hook(p)
    opt.step()
    for name, p in params:
        bucket, i = next((b, b.params.index(p)) for b in opt.buckets if any(q is p for q in b.params))
        view = bucket.array[int(bucket.offsets[i]):int(bucket.offsets[i + 1])]
        got = view.get(stream=BACKWARD).reshape(p.shape)  # what the optimizer's kernels would read
        if not np.allclose(got, want[name], atol=1e-5):
            raise AssertionError(f"rank {rank}: step {step} {name}: got {got.reshape(-1)[:4]}, "
                                 f"want {want[name].reshape(-1)[:4]}")
opt.close()
if rank == 0:
    print(f"ok {n} ranks, transport {transport}, overlap {overlap}: GPU averages match numpy")
