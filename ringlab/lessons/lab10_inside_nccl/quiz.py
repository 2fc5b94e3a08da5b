"""Lab 10's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

import math

from ...lab.quiz import Question, Quiz

MiB = 1 << 20


def _channels(arch, links, link_gbps):
    """``comm->nChannels`` on one NVSwitch node, as NCCL's ring search gives it (``ringlab.predict.channels``)."""
    from ...predict.channels import communicator_channels

    return communicator_channels(arch, links * link_gbps)


def _channel_fields(arch, links, link_gbps):
    from ...predict.channels import SPEEDS_INTRA, graph_channels, search

    port = links * link_gbps
    count, speed = search(arch, port)
    first, second = SPEEDS_INTRA[arch][:2]
    return {"port": port, "count": count, "speed": speed, "graph": graph_channels(arch, port), "first": first,
            "second": second, "at_first": int(port // first), "at_second": int(port // second),
            "fastest": 4 * int(port // first)}


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


QUIZ = Quiz("10", [
    Question(
        "One board of 8 H800s: each GPU has {links} NVLinks into the NVSwitches, which NCCL rates at {link_gbps} GB/s "
        "each (SM90_NVLINK_BW). How many channels does NCCL's ring search give the communicator?",
        _channels, given=dict(arch="hopper", links=8, link_gbps=20.6), derived=_channel_fields, rel_tol=0,
        worked="The port is {links} x {link_gbps} = {port:.1f} GB/s. The search keeps the speed whose channels carry "
               "the most: {count} channels of {speed:.0f} GB/s ({port:.1f} GB/s holds {at_first} of {first:.0f} "
               "or {at_second} of {second:.0f}); "
               "ncclTopoDupChannels doubles them to {graph} and ncclTopoPostset doubles them again: {answer}, as "
               "NCCL_DEBUG=INFO printed on such a board (\"16 coll channels\", nccl#892). Not the fastest speed "
               "that fits, which would give {at_first}, doubled twice to {fastest}.",
        hint="Try each of Hopper's speeds (60, 50, 40, 30 GB/s, ...), count how many fit in the port, keep the speed "
             "whose channels carry the most, then double twice."),
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
