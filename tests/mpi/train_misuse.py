"""The DistributedOptimizer and the parameter server under misuse and unusual models, against torch
DDP where there is a right answer. Run under mpiexec: ``train_misuse.py MODE OUT``; rank 0 writes
what every rank saw to OUT as JSON."""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from ringlab.cluster.launch import torch_process_group
from ringlab.train import DistributedOptimizer, ParameterServer
from ringlab.train.task import CLASSES, batches, make_data, make_model, weights

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode, out = sys.argv[1], sys.argv[2]
x, y, _, _ = make_data(3000)
batch = batches(x, y, size, 16)
loss_fn = torch.nn.CrossEntropyLoss()
STEPS, MICRO, LR = 12, 2, 0.05
seen = {}


def outcome(call) -> str:
    try:
        call()
    except (ValueError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"
    return "ok"


def micro(step: int, k: int):
    """Micro-batch k of this rank's batch of a step."""
    inputs, targets = batch(rank, step)
    half = len(inputs) // MICRO
    return inputs[k * half:(k + 1) * half], targets[k * half:(k + 1) * half]


def ddp_accumulated(model) -> np.ndarray:
    with torch_process_group(comm):
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        sgd = torch.optim.SGD(ddp.parameters(), lr=LR)
        for step in range(STEPS):
            sgd.zero_grad()
            with ddp.no_sync():
                loss_fn(ddp(micro(step, 0)[0]), micro(step, 0)[1]).backward()
            loss_fn(ddp(micro(step, 1)[0]), micro(step, 1)[1]).backward()
            sgd.step()
        del ddp, sgd
    return weights(model)


class Branchy(torch.nn.Module):
    """The task's model, with one more layer that only some ranks use in some steps."""

    def __init__(self):
        super().__init__()
        self.body = make_model(seed=0)
        torch.manual_seed(1)
        self.extra = torch.nn.Linear(CLASSES, CLASSES)

    def forward(self, inputs, use_extra: bool = False):
        out = self.body(inputs)
        return self.extra(out) if use_extra else out


def uses_extra(step: int) -> bool:
    return rank == 0 and step % 2 == 0


if mode == "accumulate":
    for how in ("no_sync", "passes"):
        model = make_model(seed=0)
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                                   bucket_bytes=2 << 10, backward_passes_per_step=MICRO if how == "passes" else 1)
        for step in range(STEPS):
            opt.zero_grad()
            if how == "no_sync":
                with opt.no_sync():
                    loss_fn(model(micro(step, 0)[0]), micro(step, 0)[1]).backward()
            else:
                loss_fn(model(micro(step, 0)[0]), micro(step, 0)[1]).backward()
            loss_fn(model(micro(step, 1)[0]), micro(step, 1)[1]).backward()
            opt.step()
        opt.close()
        seen[how] = weights(model).tolist()
    seen["ddp"] = ddp_accumulated(make_model(seed=0)).tolist()
    model = make_model(seed=0)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters())

    def twice():
        opt.zero_grad()
        loss_fn(model(micro(0, 0)[0]), micro(0, 0)[1]).backward()
        loss_fn(model(micro(0, 1)[0]), micro(0, 1)[1]).backward()
    seen["twice without no_sync"] = outcome(twice)
    opt.step()
    opt.close()
    seen["step after close"] = outcome(opt.step)
elif mode == "unused":
    model = Branchy()
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(), bucket_bytes=1 << 10)
    for step in range(STEPS):
        opt.zero_grad()
        inputs, targets = batch(rank, step)
        loss_fn(model(inputs, uses_extra(step)), targets).backward()
        opt.step()
    opt.close()
    seen["ringlab"] = weights(model).tolist()
    reference = Branchy()
    with torch_process_group(comm):
        ddp = torch.nn.parallel.DistributedDataParallel(reference, find_unused_parameters=True)
        sgd = torch.optim.SGD(ddp.parameters(), lr=LR)
        for step in range(STEPS):
            sgd.zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(ddp(inputs, uses_extra(step)), targets).backward()
            sgd.step()
        del ddp, sgd
    seen["ddp"] = weights(reference).tolist()
elif mode == "models":
    model = Branchy() if rank == 1 else make_model(seed=0)
    seen["optimizer, another model on rank 1"] = outcome(
        lambda: DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters()))
    seen["parameter server, another model on rank 1"] = outcome(lambda: ParameterServer(model, servers=1))
    ps = ParameterServer(Branchy(), servers=1, mode="sync", lr=LR)

    def without_extra(worker, step):
        return batch(worker, step)
    record = ps.run(4, without_extra, lambda logits, targets: loss_fn(logits, targets))
    seen["parameter server, a parameter without gradient"] = "ok" if all(np.isfinite(weights(ps.model))) else "NaN"
else:
    raise SystemExit(f"unknown mode {mode!r}")

everyone = comm.gather(seen, root=0)
if rank == 0:
    with open(out, "w") as fh:
        json.dump(everyone, fh)
