"""The trainers' contract on real ranks, one case per mode (argv[1]), against MPI's own Allreduce of the
gradients (or torch DDP) where there is a right answer, otherwise the same clear error on every rank.
Run under mpiexec: ``train_contract.py MODE OUT``; rank 0 writes what every rank saw to OUT as JSON."""
import json
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import ringlab as rl
from ringlab.cluster.launch import torch_process_group
from ringlab.train import DistributedOptimizer, ParameterServer
from ringlab.train.task import CLASSES, FEATURES, batches, make_data, make_model, weights

torch.set_num_threads(1)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode, out = sys.argv[1], sys.argv[2]
x, y, _, _ = make_data(3000)
batch = batches(x, y, size, 16)
loss_fn = torch.nn.CrossEntropyLoss()
STEPS, LR = 10, 0.05
seen = {}


def outcome(call) -> str:
    try:
        call()
    except (ValueError, RuntimeError, TimeoutError) as err:
        return f"{type(err).__name__}: {err}"
    return "ok"


def mpi_average(model) -> None:
    """The reference: every gradient averaged with MPI's own Allreduce."""
    for p in model.parameters():
        if p.grad is not None:
            comm.Allreduce(MPI.IN_PLACE, p.grad.numpy())
            p.grad /= size


def relative(a, b) -> float:
    return float(np.abs(a - b).max() / np.abs(b).max())


def same_on_every_rank(w) -> bool:
    return all(np.array_equal(w, other) for other in comm.allgather(w))


class Pair(torch.nn.Module):
    """An encoder and a decoder, each trained by its own optimizer, with one backward pass through both."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.encoder = torch.nn.Sequential(torch.nn.Linear(FEATURES, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32))
        self.decoder = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(32, 48), torch.nn.ReLU(),
                                           torch.nn.Linear(48, CLASSES))

    def forward(self, inputs):
        return self.decoder(self.encoder(inputs))


if mode == "two-optimizers":
    # an encoder and a decoder, one optimizer each, one backward pass (their buckets overlap in time); and a
    # GAN-like alternation: two models stepped in turns; both against MPI's Allreduce of the gradients
    for how in ("ringlab", "mpi"):
        model = Pair()
        sgd_e = torch.optim.SGD(model.encoder.parameters(), lr=LR, momentum=0.9)
        sgd_d = torch.optim.SGD(model.decoder.parameters(), lr=LR, momentum=0.9)
        if how == "ringlab":
            opt_e = DistributedOptimizer(sgd_e, model.encoder.named_parameters(), bucket_bytes=1 << 10)
            opt_d = DistributedOptimizer(sgd_d, model.decoder.named_parameters(), bucket_bytes=1 << 10)
        for step in range(STEPS):
            (opt_e if how == "ringlab" else sgd_e).zero_grad()
            (opt_d if how == "ringlab" else sgd_d).zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(model(inputs), targets).backward()
            if how == "mpi":
                mpi_average(model)
            (opt_e if how == "ringlab" else sgd_e).step()
            (opt_d if how == "ringlab" else sgd_d).step()
        if how == "ringlab":
            opt_e.close()
            opt_d.close()
        seen[f"encoder-decoder, {how}"] = weights(model).tolist()
    for how in ("ringlab", "mpi"):
        generator, critic = make_model(seed=1), make_model(seed=2)
        sgd_g, sgd_c = torch.optim.SGD(generator.parameters(), lr=LR), torch.optim.SGD(critic.parameters(), lr=LR)
        opts = (sgd_g, sgd_c)
        if how == "ringlab":
            opts = (DistributedOptimizer(sgd_g, generator.named_parameters(), bucket_bytes=1 << 10),
                    DistributedOptimizer(sgd_c, critic.named_parameters(), bucket_bytes=1 << 10))
        for step in range(STEPS):
            for model, opt in ((critic, opts[1]), (generator, opts[0])):
                opt.zero_grad()
                inputs, targets = batch(rank, step)
                loss_fn(model(inputs), targets).backward()
                if how == "mpi":
                    mpi_average(model)
                opt.step()
        if how == "ringlab":
            for opt in opts:
                opt.close()
        seen[f"gan, {how}"] = np.concatenate([weights(generator), weights(critic)]).tolist()
elif mode == "between-backward-and-step":
    # the DDP idioms: a logging allreduce of the loss, and gradient clipping, between backward() and step()
    logged_wrong = 0
    for how in ("ringlab", "ddp"):
        model = make_model(seed=0)
        if how == "ringlab":
            opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                                       bucket_bytes=2 << 10)
            for step in range(STEPS):
                opt.zero_grad()
                inputs, targets = batch(rank, step)
                loss = loss_fn(model(inputs), targets)
                loss.backward()
                value = np.array([loss.item()])
                logged = rl.allreduce(value)  # the most common way to log the global loss
                logged_wrong += not np.array_equal(logged, comm.allreduce(value))
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
            opt.close()
        else:
            with torch_process_group(comm):
                ddp = torch.nn.parallel.DistributedDataParallel(model)
                sgd = torch.optim.SGD(ddp.parameters(), lr=LR)
                for step in range(STEPS):
                    sgd.zero_grad()
                    inputs, targets = batch(rank, step)
                    loss_fn(ddp(inputs), targets).backward()
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                    sgd.step()
                del ddp, sgd
        seen[how] = weights(model).tolist()
    seen["logged losses wrong"] = logged_wrong
    model = make_model(seed=0)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters())
    seen["skip_synchronize"] = outcome(lambda: opt.skip_synchronize().__enter__())
    opt.close()
elif mode == "user-messages":
    # a pickled message and an any-source receive of the user's pending on COMM_WORLD while the optimizer runs
    other, source = (rank + 1) % size, (rank - 1) % size
    for how in ("ringlab", "mpi"):
        model = make_model(seed=0)
        sgd = torch.optim.SGD(model.parameters(), lr=LR)
        opt = DistributedOptimizer(sgd, model.named_parameters(), bucket_bytes=1 << 10) if how == "ringlab" else sgd
        intact = 0
        for step in range(STEPS):
            held = np.full(3000, -1.0)
            if step % 2:  # pending: a receive that would take any message it could
                anything = comm.Irecv(held, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
            else:  # pending: a pickled message, not yet received
                pickled = comm.isend({"step": step, "from": rank}, dest=other, tag=11)
            opt.zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(model(inputs), targets).backward()
            if how == "mpi":
                mpi_average(model)
            opt.step()
            if step % 2:
                comm.Send(np.full(3000, float(step)), dest=other, tag=12)
                anything.Wait()
                intact += bool((held == step).all())
            else:
                intact += comm.recv(source=source, tag=11) == {"step": step, "from": source}
                pickled.wait()
        if how == "ringlab":
            opt.close()
        seen[how] = weights(model).tolist()
        seen[f"user messages intact, {how}"] = intact
elif mode == "param-groups":
    # a parameter given to the optimizer but named nowhere is averaged; a group added later, or a parameter
    # unfrozen later, is an error at the next step, on every rank
    for how in ("ringlab", "mpi"):
        model = make_model(seed=0)
        last = list(model.parameters())[-1]
        sgd = torch.optim.SGD([p for p in model.parameters() if p is not last], lr=LR)
        sgd.add_param_group({"params": [last], "lr": LR / 2})
        named = [(n, p) for n, p in model.named_parameters() if p is not last]  # the last one is not named
        opt = DistributedOptimizer(sgd, named, bucket_bytes=1 << 10) if how == "ringlab" else sgd
        for step in range(STEPS):
            opt.zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(model(inputs), targets).backward()
            if how == "mpi":
                mpi_average(model)
            opt.step()
        if how == "ringlab":
            opt.close()
        seen[f"unnamed parameter, {how}"] = weights(model).tolist()
    model, extra = make_model(seed=0), torch.nn.Linear(CLASSES, CLASSES)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters())
    opt.add_param_group({"params": list(extra.parameters())})

    def one_step():
        opt.zero_grad()
        inputs, targets = batch(rank, 0)
        loss_fn(extra(model(inputs)), targets).backward()
        opt.step()
    seen["a group added later"] = outcome(one_step)
    opt.close()
    model = make_model(seed=0)
    first = list(model.parameters())[0]
    first.requires_grad_(False)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters())
    first.requires_grad_(True)
    seen["unfrozen later"] = outcome(lambda: (loss_fn(model(batch(rank, 0)[0]), batch(rank, 0)[1]).backward(),
                                              opt.step()))
    opt.close()
    # after a step that failed on every rank alike, close() ends the communication thread on every rank: each
    # reduces the buckets its backward pass handed over (the other ranks wait in those allreduces), and no thread
    # is left running (one that stopped at close() left the others' threads waiting, past close()'s join)
    ended = []
    for trial in range(5):
        model, extra = make_model(seed=trial), torch.nn.Linear(CLASSES, CLASSES)
        opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                                   bucket_bytes=1 << 8)
        opt.add_param_group({"params": list(extra.parameters())})
        inputs, targets = batch(rank, trial)
        outcome(lambda: (loss_fn(extra(model(inputs)), targets).backward(), opt.step()))
        thread = opt._thread
        opt.close()
        ended.append(not thread.is_alive())
    seen["threads ended at close"] = ended
elif mode == "options":
    # ranks that build a trainer with different options: the same ValueError everywhere, before any work
    model = make_model(seed=0)
    cases = {"trace": dict(trace=rank == 0), "bucket_bytes": dict(bucket_bytes=1 << (10 + rank)),
             "overlap": dict(overlap=rank != 1), "lr": dict(lr=0.1 if rank == 0 else 0.2),
             "bucket_bytes=0": dict(bucket_bytes=0 if rank == size - 1 else 1024)}
    for name, options in cases.items():
        lr = options.pop("lr", LR)
        seen[f"optimizer, {name}"] = outcome(lambda: DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=lr), model.named_parameters(), **options).close())
    seen["server, mode"] = outcome(lambda: ParameterServer(model, mode="sync" if rank else "async").close())
    seen["server, lr=nan"] = outcome(lambda: ParameterServer(model, lr=float("nan")))
    server = ParameterServer(model, servers=1, lr=LR)
    seen["server, steps"] = outcome(lambda: server.run(3 + (rank == size - 1), batch, loss_fn))
    seen["server, after"] = outcome(lambda: server.run(2, batch, loss_fn))
    server.close()
elif mode == "steps":
    # one rank steps once more than the others: every rank gets an error, within the deadline, and then
    # the optimizer refuses to go on
    model = make_model(seed=0)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR), model.named_parameters(),
                               bucket_bytes=1 << 10, timeout=3)
    start = time.monotonic()
    said = []
    for step in range(4 + (rank == 0)):
        def one():
            opt.zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(model(inputs), targets).backward()
            opt.step()
        said.append(outcome(one))
        if said[-1] != "ok":
            break
    if rank != 0:  # the others go on to the next thing: a logging allreduce, which rank 0 reaches late
        said.append(outcome(lambda: rl.allreduce(np.ones(3), timeout=20)))
    else:
        said.append(outcome(lambda: rl.allreduce(np.ones(3), timeout=20)))
    seen["said"] = said
    seen["seconds"] = time.monotonic() - start
    seen["after"] = outcome(opt.step)
    opt.close()
elif mode == "server-failed":
    # a worker's own code fails in the middle of a run: every rank's run fails (the others by their deadline),
    # and then the server refuses to run again, on every rank, before anything is sent
    model = make_model(seed=0)
    server = ParameterServer(model, servers=1, lr=LR, timeout=3)

    def failing(worker, step):
        if rank == size - 1 and step == 1:
            raise RuntimeError("this worker's batch failed")
        return batch(worker, step)
    seen["failed run"] = outcome(lambda: server.run(3, failing, loss_fn))
    start = time.monotonic()
    seen["again"] = outcome(lambda: server.run(2, batch, loss_fn))
    seen["again seconds"] = time.monotonic() - start
    server.close()
    seen["allreduce after"] = outcome(lambda: rl.allreduce(np.ones(3), timeout=20))
else:
    raise SystemExit(f"unknown mode {mode!r}")

everyone = comm.gather(seen, root=0)
if rank == 0:
    with open(out, "w") as fh:
        json.dump(everyone, fh)
