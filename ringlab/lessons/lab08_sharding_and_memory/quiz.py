"""Lab 08's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

from ...lab.quiz import Question, Quiz

GB = 1e9


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


def _first_fit(psi, n, capacity_gb):
    """The lowest ZeRO stage at which each GPU's model states fit in ``capacity_gb``, by the paper's formulas."""
    from ...train.zero import zero_memory

    return next((STAGES[s] for s in range(4) if sum(zero_memory(psi, n, s).values()) / GB <= capacity_gb),
                "none")


def _fit_fields(psi, n, capacity_gb):
    from ...train.zero import zero_memory

    return {f"gb{s}": sum(zero_memory(psi, n, s).values()) / GB for s in range(4)}


STAGES = ("data parallel", "stage 1", "stage 2", "stage 3")


def _hybrid_across_gb(psi, nodes, gpus, itemsize):
    """Bytes a GPU sends to other nodes a step under hybrid sharding, counted from ringlab's ring schedule: its fp16
    gradient piece allreduced across the nodes."""
    from .hybrid import across_bytes

    return across_bytes("allreduce.ring", nodes, 1, -(-int(psi * itemsize) // gpus)) / GB


def _hybrid_fields(psi, nodes, gpus, itemsize):
    from .hybrid import across_bytes

    n, nbytes = nodes * gpus, int(psi * itemsize)
    zero3 = (across_bytes("reduce_scatter.ring", n, gpus, nbytes) + 2 * across_bytes("allgather.ring", n, gpus, nbytes))
    return {"piece": nbytes / gpus / GB, "n": n, "zero3": zero3 / GB}


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
        "A model of {psi:.3g} parameters, mixed-precision Adam (2 + 2 + 12 bytes a parameter), on {n} GPUs of "
        "{capacity_gb} GB. Leaving activations aside, what is the least sharding under which each GPU's model "
        "states fit?",
        _first_fit, given=dict(psi=20e9, n=8, capacity_gb=80), derived=_fit_fields, choices=STAGES,
        worked="By the paper's formulas a GPU holds {gb0:.0f} GB under data parallelism, {gb1:.1f} GB at stage 1, "
               "{gb2:.1f} GB at stage 2 and {gb3:.0f} GB at stage 3: the first under {capacity_gb} GB is {answer}.",
        hint="Work out 2 Psi + 2 Psi + 12 Psi with the optimizer state, then the gradients, then the parameters "
             "divided by N, and stop at the first that fits."),
    Question(
        "Hybrid sharding (ZeRO-3 inside each node, whole replicas across the nodes) of a model of {psi:.3g} parameters "
        "in fp16 ({itemsize} bytes) on {nodes} nodes of {gpus} GPUs. How many GB does each GPU send to other nodes in "
        "one training step on ring collectives?",
        _hybrid_across_gb, given=dict(psi=8e9, nodes=4, gpus=8, itemsize=2), derived=_hybrid_fields, unit="GB",
        worked="The all-gathers and the reduce-scatter stay inside the node; only each gradient piece, {piece:.1f} GB "
               "(the model over {gpus} GPUs), is allreduced across the {nodes} nodes, and a ring allreduce sends "
               "2(m-1)/m of it: {answer:.2f} GB. ZeRO-3 over all {n} GPUs would send {zero3:.2f} GB a GPU to other "
               "nodes (three rings over the whole model, counted from their schedules).",
        hint="Which of the step's collectives leave the node? Only one, on a piece of size Psi x {itemsize} / {gpus}, "
             "over {nodes} ranks."),
])
