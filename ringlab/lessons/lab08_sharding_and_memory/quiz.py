"""Lab 08's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

import math

from ...lab.quiz import Question, Quiz

GB, MiB = 1e9, 1 << 20


def _zero_gb(psi, n, stage, k):
    from ...train.zero import zero_memory

    return sum(zero_memory(psi, n, stage, state_bytes=k).values()) / GB


def _zero_fields(psi, n, stage, k):
    from ...train.zero import zero_memory

    parts = zero_memory(psi, n, stage, state_bytes=k)
    return {"p": parts["parameters"] / GB, "g": parts["gradients"] / GB, "s": parts["optimizer_state"] / GB,
            "whole": psi * (4 + k) / GB}


def _stage3_gb(psi, n, itemsize):
    """Bytes a rank sends a step at stage 3, counted from ringlab's ring schedules (two allgathers, a reduce-scatter)."""
    from ...train.zero import sent_bytes

    nbytes = int(psi * itemsize)
    per_rank = [2 * sent_bytes("allgather.ring", n, nbytes, itemsize)[r] + sent_bytes("reduce_scatter.ring", n, nbytes,
                itemsize)[r] for r in range(n)]
    return sum(per_rank) / n / GB


def _tp_mib(batch, sequence, hidden, itemsize, t):
    """What one GPU sends in the ring allreduce of one block's activations, counted from ringlab's schedule."""
    from ...algorithms import build
    from ...simulate import traffic

    nbytes = batch * sequence * hidden * itemsize
    return traffic(build("allreduce.ring", t), nbytes, itemsize)["sent"][0] / MiB


def _nccl_pick(machine, nbytes):
    from ...predict import predict_nccl
    from ...topology import preset

    return predict_nccl("allreduce", nbytes, preset(machine)).algorithm


def _nccl_fields(machine, nbytes):
    from ...predict import predict_nccl
    from ...topology import preset

    topology = preset(machine)
    times = {a: predict_nccl("allreduce", nbytes, topology, algorithm=a).seconds * 1e6 for a in ("ring", "tree", "nvlstree")}
    return {"ring_us": times["ring"], "tree_us": times["tree"], "nvlstree_us": times["nvlstree"],
            "mib": nbytes / MiB}


def _pat_steps(nodes):
    from ...algorithms import build

    return len(build("allgather.pat", nodes).steps)


QUIZ = Quiz("08", [
    Question(
        "A model of {psi:.3g} parameters trains with mixed-precision Adam (2 bytes of parameter, 2 of gradient and "
        "K = {k} of optimizer state a parameter) under ZeRO stage {stage} on {n} GPUs. How many GB does each GPU hold?",
        _zero_gb, given=dict(psi=13e9, n=16, stage=2, k=12), derived=_zero_fields, unit="GB",
        worked="Stage {stage} shards the optimizer state and the gradients, not the parameters: {p:.1f} GB of "
               "parameters + ({g:.2f} + {s:.2f}) GB of gradients and state, {answer:.1f} GB in all (the paper's "
               "2 Psi + (2 + K) Psi / N; unsharded, {whole:.0f} GB).",
        hint="2 Psi bytes of parameters stay whole; the gradients' 2 Psi and the state's K Psi divide by N."),
    Question(
        "ZeRO stage 3 on {n} GPUs, a model of {psi:.3g} parameters in fp16 ({itemsize} bytes). How many GB does each GPU "
        "send in one training step on ring collectives?",
        _stage3_gb, given=dict(psi=1e9, n=8, itemsize=2), unit="GB",
        worked="An allgather before forward, another before backward, a reduce-scatter of the gradients: 3 x (n-1)/n "
               "of the {itemsize}-byte model, {answer:.2f} GB (the paper's 3 Psi as n grows; plain data parallelism "
               "sends 2/3 of it).",
        hint="Each ring reduce-scatter or allgather sends (n-1)/n of the buffer from every rank; stage 3 runs three."),
    Question(
        "Tensor parallelism over {t} GPUs: a block's activations are {batch} sequences x {sequence} tokens x {hidden} "
        "features in fp16. How many MiB does each GPU send in one ring allreduce of them?",
        _tp_mib, given=dict(batch=8, sequence=2048, hidden=4096, itemsize=2, t=8), unit="MiB",
        derived=lambda batch, sequence, hidden, itemsize, t: {"buffer": batch * sequence * hidden * itemsize / MiB},
        worked="The buffer is {batch} x {sequence} x {hidden} x {itemsize} bytes = {buffer:.0f} MiB, and a ring allreduce sends "
               "2(t-1)/t of it from every GPU: {answer:.0f} MiB, twice per block (forward and backward), every step. "
               "That is why the tensor dimension goes on NVLink.",
        hint="2(n-1)/n of the buffer, with the buffer batch x sequence x hidden x 2 bytes."),
    Question(
        "Which algorithm does NCCL's model pick for an allreduce of {mib:.0f} MiB on {machine}?",
        _nccl_pick, given=dict(machine="ib-2x8-h100", nbytes=64 << 20), derived=_nccl_fields,
        choices=("ring", "tree", "nvls", "nvlstree", "pat"),
        worked="{answer}: the model predicts {nvlstree_us:.0f} us for NVLSTree, {ring_us:.0f} for the ring and "
               "{tree_us:.0f} for the tree; NVLS needs a fabric that reduces to span nodes, and PAT runs only "
               "all-gather and reduce-scatter with one GPU a node.",
        hint="Across nodes, with switches that add inside each node: `rl.predict_nccl(\"allreduce\", nbytes, "
             "rl.topology.preset(machine))`."),
    Question(
        "How many steps does PAT's all-gather take over {nodes} nodes of one GPU each (a ring takes {nodes} - 1)?",
        _pat_steps, given=dict(nodes=1000), rel_tol=0, derived=lambda nodes: {"log": math.log2(nodes)},
        worked="One step per distance 512, 256, ..., 1: ceil(log2 {nodes}) = {answer} (log2 {nodes} = {log:.2f}), "
               "counted from `rl.build(\"allgather.pat\", {nodes})`.",
        hint="Each step doubles how many ranks hold each block."),
])
