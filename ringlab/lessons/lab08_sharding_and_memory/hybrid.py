"""Lab 08's hybrid sharding (PyTorch FSDP's HYBRID_SHARD, "HSDP"; ZeRO++'s hpZ keeps the weights' all-gather
inside a node the same way): ZeRO stage 3 inside a node, whole replicas across the nodes. Built from ringlab's
reduce-scatter, allgather and allreduce on two sub-communicators, checked against plain data parallelism on simulated
nodes, and predicted for Llama 3 on nodes of H100s by NCCL's model against data parallelism and ZeRO-3 over every GPU
(issue 51).

A step: each unit's gradient is reduce-scattered over the node's g GPUs (rank r of the node gets the node's sum of
piece r), then piece r is allreduced across the m nodes between the ranks that hold piece r (the replica group),
and the parameters are allgathered inside the node only. Only that allreduce leaves a node: 2(m-1)/m of a 1/g piece
a GPU, where ZeRO-3 over every rank sends three rings' worth, (N-1)/N of the whole model each, over the network.
"""
from __future__ import annotations

import math

import numpy as np

from ...algorithms import build
from ...lab.findings import Finding
from ...lab.words import plural
from ...predict import predict_nccl
from ...schedule import chunk_bounds
from ...train.zero import ZeroOptimizer, sent_bytes
from .sharding import H100_MEMORY, optimizers, small_model, train_small_model

TOLERANCE = 1e-9  # largest relative difference from data parallelism's weights allowed (float64; sums in another order)
MODELS = ("llama3-8b", "llama3-70b")
NODES, GPUS_PER_NODE, GPU = 4, 8, "h100"
HYBRID_VARIANTS = ("data parallel", "ZeRO-3 over all GPUs", "hybrid sharding")
FASTER = 1.1  # one variant's collectives at least 10% quicker than another's: clearly quicker
FORMULA = "2(m-1)/m x 8 Psi/g (float64 gradients)"  # bytes a rank sends to other nodes a step, m nodes of g GPUs


def hybrid_groups(comm):
    """This rank's node group and replica group, from the nodes ringlab sees (hosts, or ``RINGLAB_RANKS_PER_NODE``):
    lab 09's data x tensor mesh with the "tensor" groups inside the nodes (:func:`ringlab.train.tensor.device_mesh`),
    so ``.tensor`` is the node and ``.data`` the ranks of other nodes that hold the same piece."""
    from ...mpi.nodes import ranks_per_node
    from ...train.tensor import device_mesh

    per_node = ranks_per_node(comm)
    if comm.Get_size() % per_node:
        raise ValueError(f"hybrid sharding needs nodes of equal size: {comm.Get_size()} ranks in nodes of {per_node}")
    return device_mesh(comm, comm.Get_size() // per_node, per_node, tensor_inner=True)


class HybridShardOptimizer(ZeroOptimizer):
    """ZeRO stage 3 over ``node``'s ranks, replicated over ``replicas`` (the ranks of other nodes holding the same
    pieces): each piece's gradient, reduce-scattered inside the node, is allreduced across the nodes before the
    update. ``across`` counts the bytes this rank sent to other nodes (from the schedules)."""

    def __init__(self, optimizer, model, node, replicas):
        from ...train.optimizer import broadcast_parameters

        named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        broadcast_parameters(named, root=0, comm=replicas)  # every node starts from the first node's weights
        self.replicas, self.across = replicas, 0
        super().__init__(optimizer, model, stage=3, comm=node)

    def _reduce_scatter(self, i: int, grads) -> None:
        import torch

        u, piece = self.units[i], self.pieces[i]
        summed = self._run("reduce_scatter.ring", grads)  # inside the node: rank r holds the node's sum of piece r
        mine, nodes = summed[u.lo:u.hi], self.replicas.Get_size()
        if nodes > 1:  # across the nodes, between the holders of piece r
            from ...mpi.collectives import execute

            self.across += sent_bytes("allreduce.ring", nodes, mine.nbytes, mine.itemsize)[self.replicas.Get_rank()]
            mine = execute("allreduce.ring", mine, comm=self.replicas)
        mine = torch.as_tensor(mine, device=grads.device) / (self.nranks * nodes)
        piece.grad = mine if piece.grad is None else piece.grad + mine


def hybrid_against_data_parallel(comm=None, steps: int = 3, make_model=small_model) -> list[dict]:
    """Hybrid sharding and plain data parallelism train ``make_model()`` ``steps`` steps with SGD and with Adam on the
    nodes ringlab sees; per optimizer, on every rank: the largest relative difference of the weights, and the bytes a
    rank sent to other nodes a step (mean over ranks), beside what the formula 2(m-1)/m x 8 Psi/g says (float64
    gradients, Psi parameters)."""
    from mpi4py import MPI

    from ...train import DistributedOptimizer

    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()
    mesh = hybrid_groups(comm)
    nodes, per_node = mesh.data.Get_size(), mesh.tensor.Get_size()

    def train(wrap, make):
        weights, opt = train_small_model(wrap, make, rank, steps, make_model)
        return weights, getattr(opt, "across", 0) / steps

    rows = []
    nparams = sum(p.numel() for p in make_model().parameters())
    for name, make in optimizers():
        plain, _ = train(lambda m, o: DistributedOptimizer(o, m.named_parameters(), overlap=False, comm=comm), make)
        mine, across = train(lambda m, o: HybridShardOptimizer(o, m, mesh.tensor, mesh.data), make)
        difference = float((mine - plain).abs().max() / plain.abs().max())
        rows.append({"optimizer": name, "layout": f"{plural(nodes, 'node')} x {plural(per_node, 'GPU')}",
                     "difference": comm.allreduce(difference, op=MPI.MAX),
                     "across": comm.allreduce(across) / comm.Get_size(),
                     "formula": 2 * (nodes - 1) / nodes * nparams * 8 / per_node})
    mesh.free()
    return rows


def hybrid_check_sentence(rows: list[dict]) -> str:
    """Whether hybrid sharding trained as data parallelism did, within :data:`TOLERANCE`, and what crossed nodes."""
    worst = max(r["difference"] for r in rows)
    # on one node the formula sends nothing across, and so does the rank: 0 B, the formula's
    off = max(abs(r["across"] / r["formula"] - 1) if r["formula"] else 0.0 if r["across"] == 0 else math.inf
              for r in rows)
    return (f"On {rows[0]['layout']}, simulated, hybrid sharding's weights were within {worst:.1e} of data "
            f"parallelism's (relative), " + ("inside" if worst <= TOLERANCE else "outside")
            + f" the tolerance of {TOLERANCE:g} (float64, its sums added in another order). A rank sent "
            f"{rows[0]['across']:,.0f} B a step to other nodes, "
            + (f"the formula's {FORMULA}." if off <= 1e-9 else f"{off:.1%} off the formula's {FORMULA}."
               if math.isfinite(off) else f"where the formula's {FORMULA} sends none."))


def across_bytes(name: str, nranks: int, per_node: int, nbytes: int) -> float:
    """Bytes that leave a node when schedule ``name`` runs on ``nbytes`` over ``nranks`` ranks in nodes of
    ``per_node`` consecutive ranks, per GPU (a node's total over its GPUs, the mean over nodes): counted from the
    schedule, as a ring's chunks cross the nodes' boundaries (NCCL spreads the same bytes over a node's NICs)."""
    schedule = build(name, nranks)
    chunk = np.diff(chunk_bounds(nbytes, schedule.nchunks))
    crossing = sum(int(chunk[s.chunk][s.src // per_node != s.dst // per_node].sum()) for s in schedule.steps)
    return crossing / nranks


def hybrid_at_scale(models=MODELS, nodes: int = NODES, gpus_per_node: int = GPUS_PER_NODE, gpu: str = GPU,
                    nic_gbps: float = 400) -> list[dict]:
    """Predicted per GPU for each model in mixed precision with Adam (K = 12) on ``nodes`` x ``gpus_per_node``:
    memory by the ZeRO paper's formulas, bytes that leave the node a step (counted from ring schedules), and the time
    of a step's collectives by NCCL's model (fp16, each over the whole model in one call), across nodes and inside."""
    from ...topology import cluster
    from ...train.transformer import Transformer
    from ...train.zero import zero_memory

    n, g = nodes * gpus_per_node, gpus_per_node
    world = cluster(gpu, nodes, gpus_per_node, nic_gbps=nic_gbps)
    node = cluster(gpu, 1, gpus_per_node)
    rail = cluster(gpu, nodes, 1, nic_gbps=nic_gbps)  # one GPU of each node on its own NIC: a replica group's rail
    rows = []
    for name in models:
        model = Transformer.preset(name)
        psi, size = model.params, int(2 * model.params)
        piece = math.ceil(size / g)
        layouts = {  # variant: (calls across nodes, calls inside a node, GPUs it shards over)
            "data parallel": ([("allreduce", size, world)], [], 1),
            "ZeRO-3 over all GPUs": ([("reduce_scatter", size, world)] + [("allgather", size, world)] * 2, [], n),
            "hybrid sharding": ([("allreduce", piece, rail)],
                                [("reduce_scatter", size, node)] + [("allgather", size, node)] * 2, g)}
        for variant, (across, inside, shards) in layouts.items():
            memory = sum(zero_memory(psi, shards, 0 if shards == 1 else 3).values())
            times = [[predict_nccl(c, b, t).seconds for c, b, t in calls] for calls in (across, inside)]
            crossing = sum(across_bytes(f"{c}.ring", t.nranks, 1 if t is rail else g, b) for c, b, t in across)
            rows.append({"model": name, "params": psi, "machine": f"{nodes}x{g} {gpu.upper()}", "nodes": nodes,
                         "gpus_per_node": g, "nic_gbps": nic_gbps, "variant": variant, "memory": memory,
                         "gb": memory / 1e9, "fits": memory <= H100_MEMORY, "across": crossing,
                         "across_gb": crossing / 1e9, "across_s": sum(times[0]), "inside_s": sum(times[1]),
                         "comm_s": sum(times[0]) + sum(times[1])})
    return rows


def across_formula(variant: str, psi: float, nodes: int, gpus_per_node: int, itemsize: int = 2) -> float:
    """Bytes a GPU sends to other nodes a step, on rings: 2(N-1)/N of the model over g for data parallelism, 3(N-1)/N
    for ZeRO-3 over all N, 2(m-1)/m for hybrid sharding."""
    n, m, g = nodes * gpus_per_node, nodes, gpus_per_node
    share = {"data parallel": 2 * (n - 1) / n, "ZeRO-3 over all GPUs": 3 * (n - 1) / n,
             "hybrid sharding": 2 * (m - 1) / m}[variant]
    return share * psi * itemsize / g


def describe_hybrid(rows: list[dict]) -> Finding:
    """Model by model and NIC by NIC (the table beside it holds the numbers): which layout that fits has the quickest
    collectives, and whether the bytes hybrid sharding keeps off the network are time saved, all by the rows."""
    said, conclusions = [], []
    for key in dict.fromkeys((r["model"], r["machine"], r["nic_gbps"]) for r in rows):
        mine = {r["variant"]: r for r in rows if (r["model"], r["machine"], r["nic_gbps"]) == key}
        dp, z3, hy = (mine[v] for v in HYBRID_VARIANTS)
        said.append(f"{key[0]} ({hy['params'] / 1e9:.1f}B parameters), {hy['nic_gbps']:g} Gbit/s a NIC")
        fitting = sorted((r for r in (dp, z3, hy) if r["fits"]), key=lambda r: r["comm_s"])
        if not fitting:
            verdict = "none of the three fits"
        elif len(fitting) == 1:
            verdict = f"only {fitting[0]['variant']} fits"
        elif fitting[1]["comm_s"] >= FASTER * fitting[0]["comm_s"]:
            verdict = f"of those that fit, {fitting[0]['variant']} has the quickest collectives"
        else:
            verdict = f"of those that fit, {fitting[0]['variant']} and {fitting[1]['variant']} take about as long"
        said[-1] += f": {verdict}" + (f" ({fitting[0]['comm_s'] * 1e3:.0f} ms)." if fitting else ".")
        conclusions.append(f"{key[0]} at {key[2]:g} Gbit/s: {verdict}")
        versus = hy["comm_s"] / z3["comm_s"]
        if hy["inside_s"] > hy["across_s"]:
            part = (f"the collectives inside the node take more ({hy['inside_s'] * 1e3:.0f} ms) than its allreduce "
                    f"across the nodes ({hy['across_s'] * 1e3:.0f}): here the network is not its slow part")
        else:
            part = (f"the allreduce across the nodes takes the most ({hy['across_s'] * 1e3:.0f} ms, against "
                    f"{hy['inside_s'] * 1e3:.0f} inside the node): the network is its slow part")
        said[-1] += (f" Hybrid sharding sends {hy['across'] / z3['across']:.2f}x ZeRO-3's bytes to other nodes; of its "
                     f"{hy['comm_s'] * 1e3:.0f} ms, {part}; its collectives take {versus:.2f}x "
                     "as long as ZeRO-3's, so the bytes it keeps off the network are "
                     + ("time saved." if versus < 1 else "not time saved."))
    return Finding("\n".join(said), tuple(conclusions))


CHECK_COLUMNS = {"optimizer": "optimizer", "layout (simulated nodes)": "layout",
                 "largest difference from data parallelism (relative)": ("difference", ".1e"),
                 "sent to other nodes a step (B)": ("across", ",.0f"), "2(m-1)/m x 8 Psi/g (B)": ("formula", ",.0f")}
HYBRID_COLUMNS = {"model": "model", "machine": "machine", "NIC (Gbit/s)": ("nic_gbps", "g"), "variant": "variant",
                  "memory a GPU (GB)": ("gb", ".1f"), "fits in 80 GB": "fits",
                  "to other nodes a GPU (GB)": ("across_gb", ".2f"), "across nodes (ms)": "across_s",
                  "inside a node (ms)": "inside_s", "collectives a step (ms)": "comm_s"}
