"""DistributedOptimizer in virtual time: argv = out.json compute.

compute="model": a stack of LAYERS square linear layers whose compute is modelled (each layer's forward
elapses FORWARD seconds, its backward BACKWARD seconds before its gradients are ready), one bucket a layer, on
uniform links where one bucket's ring allreduce takes about BACKWARD: with overlap a step should take
LAYERS x (FORWARD + BACKWARD) + one bucket's allreduce, without it LAYERS x (FORWARD + BACKWARD + allreduce).

compute="cpu": lab 06's wide MLP, its compute this thread's CPU time: one rank's step timed without
communication first, then uniform links on which the gradients' allreduce takes half of that.

Rank 0 writes, overlap off and on, the median step (virtual time, every step from clocks set alike), its
median wall time and comm_seconds a step, with what the links take per bucket (rl.predict)."""
import json
import sys

import numpy as np
import torch
from mpi4py import MPI

import ringlab as rl
from ringlab.mpi import emulate
from ringlab.train import DistributedOptimizer
from ringlab.train.overlap import gradient_bytes, make_wide_model
from ringlab.train.task import batches, make_data

comm = MPI.COMM_WORLD
out, compute = sys.argv[1], sys.argv[2]
rank, n = comm.Get_rank(), comm.Get_size()
torch.set_num_threads(1)  # one thread's CPU time is all of a rank's compute
STEPS, WARMUP = 8, 2
LAYERS, WIDTH, FORWARD, BACKWARD = 4, 128, 0.1, 0.2  # modelled: 0.1 s forward, 0.2 s backward a layer


def modelled_layers():
    """LAYERS linear layers whose forward and backward take FORWARD and BACKWARD seconds on the virtual clock."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    for layer in model:
        def timed(module, inputs, output):
            emulate.elapse(FORWARD)
            output.register_hook(lambda grad: emulate.elapse(BACKWARD))  # before this layer's gradients
        layer.register_forward_hook(timed)
    return model


if compute == "model":
    make = modelled_layers
    inputs = torch.randn(8, WIDTH)

    def batch(rank, step):
        return inputs, None

    def loss_fn(output, _):
        return output.square().mean()

    layer_bytes = (WIDTH * WIDTH + WIDTH) * 4
    allreduce = BACKWARD  # one bucket on the links: about one layer's backward
else:
    def make():
        return make_wide_model(256, 4)

    x, y, _, _ = make_data()
    batch, loss_fn = batches(x, y, n, 256), torch.nn.CrossEntropyLoss()


def steps(runs: list) -> list:
    """Train every (optimizer, model) of ``runs`` a step in turn (each round starting with the next one, so that
    what else the machine does falls on all alike); per run, its timed steps' (virtual, wall, comm) seconds."""
    timed = [[] for _ in runs]
    for step in range(WARMUP + STEPS):
        for i in [(step + k) % len(runs) for k in range(len(runs))]:
            opt, model = runs[i]
            emulate.synchronize(comm)
            began, wall, comm_before = emulate.now(), emulate.wall(), getattr(opt, "comm_seconds", 0.0)
            opt.zero_grad()
            inputs, targets = batch(rank, step)
            loss_fn(model(inputs), targets).backward()
            opt.step()
            if step >= WARMUP:
                timed[i].append((emulate.now() - began, emulate.wall() - wall,
                                 getattr(opt, "comm_seconds", 0.0) - comm_before))
    return [np.array(rows) for rows in timed]


model = make()
nbytes = gradient_bytes(model)
if compute == "cpu":  # one rank's compute, on links that cost nothing, then links on which averaging takes half
    with rl.emulate(rl.topology.uniform(n, bandwidth=1e15, latency=0.0)):
        alone = steps([(torch.optim.SGD(model.parameters(), lr=0.01), model)])[0]
    layer_bytes, allreduce = nbytes // 4, max(comm.allgather(float(np.median(alone[:, 0])))) / 2 / 4
links = rl.topology.uniform(n, bandwidth=2 * (n - 1) / n * layer_bytes / allreduce, latency=10e-6)
rows, runs = {}, []
with rl.emulate(links, compute=compute):
    for overlap in (False, True):
        model = make()
        runs.append((DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), model.named_parameters(),
                                          bucket_bytes=layer_bytes, overlap=overlap), model))
    for overlap, (opt, _), timed in zip((False, True), runs, steps(runs)):
        rows[str(overlap)] = {name: max(comm.allgather(float(np.median(timed[:, i]))))
                              for i, name in enumerate(("step_s", "wall_s", "comm_s"))}
        rows[str(overlap)]["buckets"] = len(opt.buckets)
        opt.close()
if rank == 0:
    bucket = rl.predict(rl.build("allreduce.ring", n), layer_bytes, links, itemsize=4).seconds
    with open(out, "w") as fh:
        json.dump({"compute": compute, "ranks": n, "layers": LAYERS, "forward": FORWARD, "backward": BACKWARD,
                   "bucket_allreduce": bucket, "rows": rows}, fh)
