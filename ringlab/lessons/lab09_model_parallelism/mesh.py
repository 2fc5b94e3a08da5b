"""Lab 09's mesh: a 2 x 2 mesh (data x tensor) of 4 ranks on the links of two nodes of a preset, the tensor
groups inside the nodes or across them, predicted and measured on emulated links; the same mesh at a real model's
size (Llama 3 70B, Megatron's four allreduces a layer), predicted by NCCL's model; the exercise on its groups."""
from __future__ import annotations

import statistics


from ...algorithms import build
from ...lab.exercises import exercise
from ...lab.findings import Finding
from ...predict import predict, predict_nccl
from ...topology import cluster, preset, uniform
from ...train.planner import GRAD_BYTES

MACHINE = "ib-2x8-h100"
PLACEMENT = (0, 1, 8, 9)  # world rank -> the preset's GPU: two GPUs of each of its two nodes
# The H100s' own links at full speed, in virtual time with compute="model": this CPU's work never counts (a laptop's
# CPU is no H100, and its forward and backward would outweigh microseconds of NVLink a thousandfold), so a step is
# its collectives alone, each message taking its links' time, as the cost model prices them. The stack's own
# arithmetic (6 x parameters x tokens a step) is not modelled: nothing calls rl.emulate's elapse for it.
SCALE = 1.0
COMPUTE = "model"
TOKENS, HIDDEN, BLOCKS = 4096, 8, 2  # a data rank's batch (256 KiB of activations), a narrow width (little compute), blocks
FASTER = 1.5  # one mapping's step at least 1.5x the other's: the mapping matters
CLOSE = 0.3  # measured within 30% of the prediction

# Llama 3 70B as Meta publishes it: hidden_size 8192, intermediate_size 28672, num_hidden_layers 80,
# num_attention_heads 64, num_key_value_heads 8, vocab_size 128256 (meta-llama/Meta-Llama-3-70B, config.json)
LLAMA3_70B = {"name": "Llama 3 70B", "hidden": 8192, "ffn": 28672, "layers": 80, "heads": 64, "kv_heads": 8,
              "vocab": 128256}
# Megatron's transformer layer: attention split by heads and the MLP, each one allreduce forward and one backward
# (Shoeybi et al. 2019, Figure 4: "4 total communication operations in the forward and backward pass")
ALLREDUCES_A_LAYER = 4
SAME_ORDER = 3  # one group's bytes within 3x of the other's: bytes alone do not pick the mapping
MICRO_BATCH = 4096  # tokens a data rank's micro-batch at Llama 3 70B's size


def group_machine(topology, gpus, scale: float = SCALE) -> tuple[str, float, float]:
    """(SPEC for rl.emulate, bytes/s, seconds): the links a group of the preset's GPUs talks over, as a uniform machine
    (``scale`` times slower, when not 1)."""
    from ...train.tensor import group_link

    bandwidth, latency = group_link(topology, list(gpus))
    slower = "" if scale == 1 else f"@{scale:g}"
    return f"uniform:{bandwidth / 1e9:.6g}:{latency * 1e6:.6g}{slower}", bandwidth, latency


def _predicted(counter, steps: int, nranks: int, bandwidth: float, latency: float) -> float:
    """Seconds the counted allreduces of one step take on a uniform machine of these links (cost model)."""
    links = uniform(nranks, bandwidth=bandwidth, latency=latency)
    return sum(count / steps * predict(build("allreduce.ring", nranks), key[1], links).seconds
               for key, count in counter.items() if isinstance(key, tuple))


def measure_mappings(comm=None, steps: int = 2, machine: str = MACHINE, placement=PLACEMENT, scale: float = SCALE,
                     compute: str = COMPUTE):
    """Train the mesh a few steps with each mapping on emulated links, in virtual time with a call's own work
    counted as ``compute`` says (``"model"``: this CPU's never counts), this machine's wall time beside; rows (on
    every rank), one per mapping."""
    import torch
    from mpi4py import MPI

    from ...train.task import one_thread

    comm = MPI.COMM_WORLD if comm is None else comm
    if comm.Get_size() != len(placement):
        raise ValueError(f"the mesh lesson runs on {len(placement)} ranks, not {comm.Get_size()}")
    topology = preset(machine)
    gen = torch.Generator().manual_seed(7)
    rows = []
    with one_thread():  # a rank's share of a core
        for inner in (True, False):
            rows.append(_one_mapping(comm, inner, topology, placement, scale, steps, gen, machine, compute))
    return rows


def _one_mapping(comm, inner: bool, topology, placement, scale: float, steps: int, gen, machine: str,
                 compute: str) -> dict:
    import torch

    from ...mpi.emulate import emulate, now, synchronize, wall
    from ...train.mesh import MeshTrainer, make_stack
    from ...train.tensor import device_mesh

    from mpi4py import MPI

    if True:
        mesh = device_mesh(comm, 2, 2, tensor_inner=inner)
        mine = [next(g for g in groups if comm.Get_rank() in g) for groups in (mesh.tensor_groups, mesh.data_groups)]
        (t_spec, t_bw, t_lat), (d_spec, d_bw, d_lat) = (group_machine(topology, [placement[r] for r in g], scale)
                                                        for g in mine)
        trainer = MeshTrainer(make_stack(hidden=HIDDEN, blocks=BLOCKS), mesh, tensor_machine=t_spec, data_machine=d_spec)
        x = torch.randn(TOKENS, 16, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 8, (TOKENS,), generator=gen)
        trainer.step(x, y)  # warm-up
        trainer.tensor_sent.clear()
        trainer.data_sent.clear()
        seconds, walls = [], []
        # one virtual clock through the step; each group's collectives on its own links, in blocks of the trainer's
        # that count a call's work as this one does
        with emulate(d_spec, compute=compute):
            for _ in range(steps):
                synchronize(comm)  # every rank's clock set to the latest, at no cost
                start, began = now(), wall()
                trainer.step(x, y)
                synchronize(comm)
                seconds.append(now() - start)
                walls.append(wall() - began)
        row = {
            "mapping": "tensor inside nodes" if inner else "tensor across nodes",
            "tensor_gpus": [[placement[r] for r in g] for g in mesh.tensor_groups],
            "data_gpus": [[placement[r] for r in g] for g in mesh.data_groups],
            "tensor_link": t_spec, "data_link": d_spec,
            "tensor_bytes": trainer.tensor_sent["allreduce"] / steps, "data_bytes": trainer.data_sent["allreduce"] / steps,
            "tensor_calls": sum(c for k, c in trainer.tensor_sent.items() if isinstance(k, tuple)) / steps,
            "predicted_tensor_s": _predicted(trainer.tensor_sent, steps, 2, t_bw, t_lat),
            "predicted_data_s": _predicted(trainer.data_sent, steps, 2, d_bw, d_lat),
            "measured_s": statistics.median(seconds) / scale, "scale": scale, "machine": machine, "compute": compute,
            "hidden": HIDDEN, "tokens": TOKENS, "tensor": mesh.tensor.Get_size(),
            "wall_s": comm.allreduce(statistics.median(walls), op=MPI.MAX)}
        row["predicted_s"] = row["predicted_tensor_s"] + row["predicted_data_s"]
        mesh.free()
    return row


def mapping_lesson(rows: list[dict]) -> Finding:
    """What the two mappings' rows say: which is faster, by how much against the prediction, who carries the bytes."""
    good, bad = sorted(rows, key=lambda r: r["mapping"] != "tensor inside nodes")
    said, conclusions = [], []
    for r in (good, bad):
        said.append(f"{r['mapping'].capitalize()} (tensor groups on GPUs {r['tensor_gpus']}, data groups on "
                    f"{r['data_gpus']}): {r['measured_s'] * 1e6:.1f} us a step measured on the emulated links, in "
                    f"virtual time, {r['predicted_s'] * 1e6:.1f} us predicted for its collectives "
                    f"({r['predicted_tensor_s'] * 1e6:.1f} tensor, {r['predicted_data_s'] * 1e6:.1f} data).")
    ratio, predicted_ratio = bad["measured_s"] / good["measured_s"], bad["predicted_s"] / good["predicted_s"]
    share = good["tensor_bytes"] / (good["tensor_bytes"] + good["data_bytes"])
    said.append(f"Each rank sends {good['tensor_bytes'] / 2**20:.2f} MiB a step in its tensor group "  # as the table
                f"({good['tensor_calls']:.0f} allreduces of activations) and {good['data_bytes'] / 2**20:.3f} MiB in "
                f"its data group (one allreduce of its gradients): {share:.0%} of its bytes are the tensor group's. "
                f"Putting the tensor groups across the nodes made a step {ratio:.1f}x as long (predicted "
                f"{predicted_ratio:.1f}x).")
    if all(k in good for k in ("hidden", "tokens", "tensor")):
        h, n, t = good["hidden"], good["tokens"], good["tensor"]
        per_block = n * t / (4 * h)  # 2 allreduces of n x h activations against 8 h^2 / t weights' gradients
        said.append(f"Why: a block here is {h} wide and a data rank has {n} tokens, so a block's two allreduces carry "
                    f"2 x {n} x {h} activations and its gradients 8 x {h}^2 / {t} weights, "
                    + (f"{per_block:.0f}x fewer: the activations outweigh the gradients because the width is small "
                       "beside the tokens. The next section does it at a real model's width." if per_block > 1 else
                       f"{1 / per_block:.1f}x as many: at this width the gradients outweigh the activations."))
    conclusions.append("the tensor group carries most of the bytes" if share > 0.5 else
                       "the data group carries most of the bytes")
    conclusions.append("the tensor-inside-nodes mapping is faster on the emulated machine" if ratio >= FASTER else
                       "the two mappings take about as long on the emulated machine" if ratio > 1 / FASTER else
                       "the tensor-across-nodes mapping is faster on the emulated machine")
    close = all(abs(r["measured_s"] / r["predicted_s"] - 1) <= CLOSE for r in rows)
    conclusions.append("the measured steps match the predictions on the emulated machine" if close else
                       "the measured steps do not match the predictions on the emulated machine")
    worst = max(abs(r["measured_s"] / r["predicted_s"] - 1) for r in rows)
    modelled = all(r.get("compute") == "model" for r in rows)
    above = all(r["measured_s"] >= r["predicted_s"] for r in rows)  # a step below its collectives has no "rest"
    within = f"within {worst:.1%}" if round(worst * 1000) > 0 else "within 0.05%"  # 0.0% would say they are equal
    said.append(f"The measured steps are {within} of the predicted collectives: "
                + ("with compute='model' this CPU's work never counts, so a step is its collectives alone, timed "
                   "message by message on the links, an independent check of the cost model's sum." if modelled and close
                   else "the rest is this CPU's work (compute, Python), counted as the CPU time it took."
                   if close and above else
                   "this CPU's work (compute, Python), counted as the CPU time it took, is small beside the links."
                   if close else
                   f"more than {CLOSE:.0%} apart, though with compute='model' this CPU's work never counts: the "
                   "emulated links and the cost model disagree here." if modelled else
                   f"more than {CLOSE:.0%} apart, so this CPU's work is not small beside the emulated links."
                   if above else
                   f"more than {CLOSE:.0%} apart, and not by this CPU's work: a step shorter than its predicted "
                   "collectives leaves it no time, so the emulated links and the cost model disagree here."))
    if all(r.get("wall_s") for r in rows):
        said.append(f"This machine took {good['wall_s'] * 1e3:.1f} and {bad['wall_s'] * 1e3:.1f} ms of wall time a "
                    "step to run them: the H100s' microseconds are virtual.")
    return Finding(" ".join(said), tuple(conclusions))


def _mesh_groups(world, data, tensor, tensor_inner):
    from ...train.tensor import mesh_groups
    return mesh_groups(world, data, tensor, tensor_inner)


@exercise(_mesh_groups, "mesh_groups")
def check_mesh_groups(mesh_groups):
    """Compare the learner's ``mesh_groups(world, data, tensor, tensor_inner)`` with ringlab's."""
    for world, data, tensor in ((4, 2, 2), (8, 2, 4), (16, 2, 8), (6, 3, 2)):
        for inner in (True, False):
            got, want = mesh_groups(world, data, tensor, inner), _mesh_groups(world, data, tensor, inner)
            if got is None:
                from ...lab.exercises import NotDoneYet
                raise NotDoneYet("mesh_groups returned None")
            if [[list(group) for group in groups] for groups in got] != [list(groups) for groups in want]:
                raise AssertionError(
                    f"mesh_groups({world}, {data}, {tensor}, tensor_inner={inner}) returned {got}; expected {want}.\n"
                    "Hint: with tensor_inner, rank d*tensor + t sits at (d, t): a tensor group is a run of "
                    "`tensor` consecutive ranks; otherwise rank t*data + d does, and the data groups are the runs.")
    print("Correct: your tensor and data groups are ringlab's, for both mappings.")


def split_against_whole(comm=None) -> list[dict]:
    """An MLP (10 hidden features, which 4 ranks do not divide) split over every rank of ``comm`` against the whole
    one: the largest relative difference of the output and of each gradient, on every rank."""
    import torch
    from mpi4py import MPI

    from ...train.tensor import split_mlp

    comm = MPI.COMM_WORLD if comm is None else comm
    torch.manual_seed(3)
    mlp = torch.nn.Sequential(torch.nn.Linear(5, 10), torch.nn.GELU(), torch.nn.Linear(10, 5)).double()
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    mlp(x).pow(2).sum().backward()
    mine = x.detach().clone().requires_grad_(True)
    split = split_mlp(mlp, comm)
    out = split(mine)
    out.pow(2).sum().backward()
    (lo, hi), (clo, chi) = split[0].rows, split[2].columns
    pairs = {"output": (out, mlp(x)), "input's gradient": (mine.grad, x.grad),
             "first layer's rows (gradient)": (split[0].weight.grad, mlp[0].weight.grad[lo:hi]),
             "second layer's columns (gradient)": (split[2].weight.grad, mlp[2].weight.grad[:, clo:chi])}
    return [{"what": what, "hidden features here": hi - lo,
             "difference": comm.allreduce(float((a - b).detach().abs().max() / b.detach().abs().max()), op=MPI.MAX)}
            for what, (a, b) in pairs.items()]


MAPPING_COLUMNS = {"mapping": "mapping", "tensor groups (GPUs)": "tensor_gpus", "tensor links": "tensor_link",
                   "data links": "data_link", "tensor MiB a step": ("tensor_mib", ".2f"),
                   "data MiB a step": ("data_mib", ".3f"), "measured step, virtual (us)": "measured_s",
                   "predicted collectives (us)": "predicted_s", "this machine's step, wall (ms)": "wall_s"}


def mapping_rows(rows: list[dict]) -> list[dict]:
    """The rows with their bytes in MiB, for the table."""
    return [{**r, "tensor_mib": r["tensor_bytes"] / 2**20, "data_mib": r["data_bytes"] / 2**20} for r in rows]


def layer_params(model: dict = LLAMA3_70B) -> int:
    """Weights of one transformer layer: q and o (h x h), k and v (h x h/heads x kv_heads), SwiGLU's three ffn x h."""
    h = model["hidden"]
    kv = h * model["kv_heads"] // model["heads"]
    return 2 * h * h + 2 * h * kv + 3 * h * model["ffn"]


def group_bytes(model: dict = LLAMA3_70B, tokens: int = MICRO_BATCH, tensor: int = 8, value_bytes: int = 2,
                grad_bytes: int = GRAD_BYTES) -> dict:
    """What a GPU's two groups allreduce with Megatron's tensor parallelism, in bytes: in its tensor group, a
    micro-batch's 4 allreduces a layer of ``tokens`` x hidden activations of ``value_bytes`` (bf16: 2); in its data
    group, once a step, its gradients (1/``tensor`` of the weights: the layers', the embedding's and the output
    layer's) of ``grad_bytes`` each (4: Megatron-LM reduces a bf16 model's gradients in fp32, as the planner counts)."""
    h, layers = model["hidden"], model["layers"]
    activation = tokens * h * value_bytes
    calls = ALLREDUCES_A_LAYER * layers
    weights = layers * layer_params(model) + 2 * model["vocab"] * h  # the layers, the embedding and the output layer
    gradients = weights // tensor * grad_bytes
    return {"weights": weights, "activation_bytes": activation, "tensor_calls": calls,
            "tensor_bytes": calls * activation, "data_bytes": gradients, "value_bytes": value_bytes,
            "grad_bytes": grad_bytes}


def megatron_mesh(model: dict = LLAMA3_70B, tokens: int = MICRO_BATCH, tensor: int = 8, data: int = 8,
                  micro_batches: int = 16, value_bytes: int = 2, gpu: str = "h100") -> dict:
    """A ``data`` x ``tensor`` mesh of 8-GPU nodes training ``model`` with Megatron's tensor parallelism, predicted
    by NCCL's model: per micro-batch of ``tokens`` a data rank, the tensor group's 4 allreduces a layer of tokens x
    hidden activations (each blocks the next layer); per step of ``micro_batches``, the data group's one allreduce of
    a rank's gradients (1/tensor of the model). Both mappings: tensor group inside a node and data group across nodes
    (one GPU a node, on its own rail), and the other way round."""
    counted = group_bytes(model, tokens, tensor, value_bytes)
    activation, calls, gradients = counted["activation_bytes"], counted["tensor_calls"], counted["data_bytes"]
    inside = lambda n: cluster(gpu, 1, gpus_per_node=n)
    across = lambda n: cluster(gpu, n, gpus_per_node=1)
    rows = []
    for name, t_on, d_on in (("tensor inside nodes", inside(tensor), across(data)),
                             ("tensor across nodes", across(tensor), inside(data))):
        call = predict_nccl("allreduce", activation, t_on)
        grads = predict_nccl("allreduce", gradients, d_on)
        rows.append({"mapping": name, "tensor_algorithm": f"{call.algorithm}/{call.protocol}",
                     "tensor_call_s": call.seconds, "micro_batch_s": calls * call.seconds,
                     "tensor_step_s": micro_batches * calls * call.seconds,
                     "data_algorithm": f"{grads.algorithm}/{grads.protocol}", "data_step_s": grads.seconds})
    return {"model": model["name"], "hidden": model["hidden"], "layers": model["layers"], "tokens": tokens,
            "tensor": tensor, "data": data, "micro_batches": micro_batches, **counted, "rows": rows}


def megatron_lesson(result: dict) -> Finding:
    """What the mesh at a real model's size says: how the groups' bytes compare, how often the tensor group's
    collectives block, and which mapping keeps the blocking short (all predicted)."""
    r = result
    good, bad = sorted(r["rows"], key=lambda row: row["mapping"] != "tensor inside nodes")
    ratio = r["tensor_bytes"] / r["data_bytes"]
    said = [f"{r['model']} ({r['weights'] / 1e9:.1f}B weights, {r['hidden']} wide, {r['layers']} layers) on a "
            f"mesh of {r['data'] * r['tensor']} H100s (data {r['data']} x tensor {r['tensor']}), {r['tokens']} tokens "
            "a micro-batch: every layer's tensor "
            f"group runs {ALLREDUCES_A_LAYER} allreduces of {r['activation_bytes'] / 2**20:.0f} MiB (attention and "
            f"MLP, forward and backward), {r['tensor_calls']} a micro-batch, {r['tensor_bytes'] / 2**30:.0f} GiB; the "
            f"data group one allreduce a step of a rank's {r['data_bytes'] / 2**30:.1f} GiB of gradients ("
            f"{r['grad_bytes']} bytes each: Megatron-LM reduces a bf16 model's gradients in fp32). A "
            f"micro-batch's tensor bytes are {ratio:.2f}x the data group's step, "]
    if 1 / SAME_ORDER <= ratio <= SAME_ORDER:
        bytes_say = "of the same order: bytes alone do not say which group needs NVLink"
    else:
        bytes_say = f"the {'tensor' if ratio > 1 else 'data'} group carries most of the bytes"
    said[-1] += bytes_say + "."
    slower = bad["micro_batch_s"] / good["micro_batch_s"]
    said.append(f"What differs is how often they wait: each tensor allreduce's sum is the next layer's input, so a "
                f"micro-batch waits for all {r['tensor_calls']}, in series with its compute (Megatron's plain form), "
                "while the data group's one allreduce a step can overlap the last micro-batch's backward pass (lab "
                f"06's buckets). NCCL's model prices the tensor group's at {good['micro_batch_s'] * 1e3:.0f} ms a micro-batch inside a node "
                f"({good['tensor_algorithm']}) and {bad['micro_batch_s'] * 1e3:.0f} ms across nodes "
                f"({bad['tensor_algorithm']}, one network card a GPU), {slower:.1f}x, on every micro-batch: "
                f"{good['tensor_step_s']:.1f} s against {bad['tensor_step_s']:.1f} s of blocking in a step of "
                f"{r['micro_batches']} micro-batches. The data group's allreduce takes {good['data_step_s']:.2f} s across nodes "
                f"({good['data_algorithm']}) and {bad['data_step_s']:.2f} s inside a node ({bad['data_algorithm']}), "
                "once a step.")
    blocking_inside = good["tensor_step_s"] < bad["tensor_step_s"]
    serial_inside = good["tensor_step_s"] + good["data_step_s"] < bad["tensor_step_s"] + bad["data_step_s"]
    conclusions = (bytes_say,
                   "the tensor group inside the nodes blocks less" if blocking_inside else
                   "the tensor group across the nodes blocks less",
                   "tensor inside the nodes is faster even with nothing overlapped" if serial_inside else
                   "with nothing overlapped, tensor across the nodes is faster")
    said.append(("So the tensor group belongs on a node's NVLink" if blocking_inside else
                 "Here the tensor group blocks less across the nodes")
                + (", and that mapping is the faster one even if the data group's allreduce overlapped nothing."
                   if serial_inside == blocking_inside else
                   ", though with nothing overlapped the other mapping would be faster."))
    return Finding(" ".join(said), conclusions)


def group_bytes_lesson(result: dict, tokens: int, model: dict = LLAMA3_70B) -> Finding:
    """The two groups' bytes at ``tokens`` a micro-batch beside ``megatron_mesh``'s ``result`` (its own tokens), and
    what decides the mapping when they are of the same order: the tensor group's collectives block, the data group's
    overlap the backward pass (its blocking, predicted, from ``result``'s rows)."""
    r = result
    there = group_bytes(model, tokens, r["tensor"])
    ratios = {r["tokens"]: r["tensor_bytes"] / r["data_bytes"], tokens: there["tensor_bytes"] / there["data_bytes"]}
    said = [f"At {tokens} tokens a micro-batch a GPU's tensor group allreduces {there['tensor_bytes'] / 2**30:.0f} GiB "
            f"a micro-batch ({there['tensor_calls']} allreduces of {there['activation_bytes'] / 2**20:.0f} MiB) and its "
            f"data group {there['data_bytes'] / 2**30:.1f} GiB a step: {ratios[tokens]:.2f}x, against "
            f"{ratios[r['tokens']]:.2f}x at {r['tokens']} tokens."]
    t, d = r["tensor"], r["data"]
    sent = ratios[tokens] * ((t - 1) / t) / ((d - 1) / d)  # a ring sends 2(n-1)/n of what it allreduces
    said[-1] += (f" Both groups are rings of {t}, which send 2({t}-1)/{t} of what they allreduce, so what a GPU sends "
                 "compares the same way." if t == d else
                 f" A ring of n sends 2(n-1)/n of what it allreduces: with {t} in the tensor group and {d} in the data "
                 f"group, what a GPU sends compares as {sent:.2f}x.")
    same = all(1 / SAME_ORDER <= x <= SAME_ORDER for x in ratios.values())
    good, bad = sorted(r["rows"], key=lambda row: row["mapping"] != "tensor inside nodes")
    if same:
        said.append(f"Within {SAME_ORDER}x of each other either way: bytes alone do not say which group belongs on "
                    "NVLink. What does is when each group's collectives run. The tensor group's sit on the critical path "
                    f"of every layer of every micro-batch, {r['tensor_calls']} of them, each blocking the next layer; "
                    "the data group's one a step overlaps the backward pass. Predicted above at "
                    f"{r['tokens']} tokens, the tensor group blocks a micro-batch {good['micro_batch_s'] * 1e3:.0f} ms "
                    f"inside a node and {bad['micro_batch_s'] * 1e3:.0f} ms across nodes.")
        conclusions = ("the two groups' bytes are of the same order",
                       "the tensor group's collectives block and the data group's overlap")
    else:
        heavier = "tensor" if ratios[tokens] > 1 else "data"
        said.append(f"At {tokens} tokens the {heavier} group carries most of the bytes, more than {SAME_ORDER}x the "
                    "other's; the tensor group's collectives also block every layer of every micro-batch.")
        conclusions = (f"the {heavier} group carries most of the bytes",
                       "the tensor group's collectives block and the data group's overlap")
    return Finding(" ".join(said), conclusions)


MEGATRON_COLUMNS = {"mapping": "mapping", "tensor allreduce": "tensor_algorithm",
                    "one tensor allreduce (ms)": "tensor_call_s",
                    "tensor, a micro-batch (ms)": ("micro_batch_s", ".0f"),
                    "tensor, a step (s)": "tensor_step_s", "data allreduce": "data_algorithm",
                    "data, a step (s)": "data_step_s"}


def megatron_rows(result: dict) -> list[dict]:
    """The mesh's rows, one per mapping, for the table (its headers convert seconds to ms)."""
    return result["rows"]
