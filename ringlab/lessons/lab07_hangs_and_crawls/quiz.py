"""Lab 07's quiz: each expected answer computed by ringlab from the stated inputs."""
from __future__ import annotations

from ...lab.quiz import Question, Quiz

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def _stuck_messages(nranks, absent):
    from .diagnose import predicted_timeouts

    return predicted_timeouts(nranks, absent)


def _culprit_of(nranks, absent):
    from .diagnose import _culprit

    return _culprit(_stuck_messages(nranks, absent))


def _messages_fields(nranks, absent):
    from .diagnose import read_timeouts

    said = _stuck_messages(nranks, absent)
    first = min(read_timeouts(said).items(), key=lambda item: item[1][0])
    return {"messages": "\n".join(said.values()), "silent": [r for r in range(nranks) if r not in said][0],
            "first_rank": first[0], "first_step": first[1][0]}


def _p2p_on_over_off():
    from .checklist import p2p_rows

    rows = p2p_rows()
    by = {}
    for r in rows:
        by.setdefault("on" if "P2P on" in r["algorithm"] else "off", {})[r["bytes"]] = r["busbw_Bps"]
    size = max(set(by["on"]) & set(by["off"]))
    return by["on"][size] / by["off"][size]


def _p2p_fields():
    from .checklist import describe_p2p, p2p_rows

    return {"said": describe_p2p(p2p_rows())}


def _physical_gpu(topo, visible, rank, ranks_per_node):
    from ...measure import published
    from .checklist import rank_links

    return rank_links(published.load(topo).data["codes"], visible, ranks_per_node)[rank]["gpu"]


def _longest_receiver(nranks, slow_rank):
    from .diagnose import model_trace, receive_waits

    return int(receive_waits(model_trace(nranks, slow_rank=slow_rank)).argmax())


def _waits_fields(nranks, slow_rank):
    from .diagnose import model_trace, receive_waits, step_gaps

    trace = model_trace(nranks, slow_rank=slow_rank)
    waits = receive_waits(trace)
    return {"longest_ms": waits.max() * 1e3, "own_ms": waits[slow_rank] * 1e3,
            "gap_rank": int(step_gaps(trace).sum(axis=1).argmax())}


QUIZ = Quiz("07", [
    Question(
        "A ring allreduce on {nranks} ranks, without the argument check, hangs; these are the StepTimeouts the ranks "
        "print. Which rank never called?",
        _culprit_of, given=dict(nranks=6, absent=4), rel_tol=0, derived=_messages_fields,
        exhibit="{messages}",
        worked="Rank {answer}: rank {first_rank} is stuck at the earliest step ({first_step}), waiting for rank "
               "{answer}, which printed nothing itself. Every other rank waits for a neighbour that is waiting in "
               "turn. (The messages are predicted by ringlab from the schedule, `predicted_timeouts`, in the form the "
               "lab's real ranks print them.)",
        hint="the message names the rank each one waits for; find the rank stuck at the earliest step."),
    Question(
        "Read the published P2P off/on sweeps of the 8x RTX 4090 box: at the largest size both printed, how many "
        "times the busbw with peer access off did the run with it on reach?",
        _p2p_on_over_off, unit="times", rel_tol=0.05, derived=_p2p_fields,
        worked="{answer:.2f}x. {said} Published measurements (sweeps A10 and A11 of ringlab's data set); turning P2P "
               "off to make a hang go away costs that much bandwidth on this box.",
        hint="the sentence under the figure gives both busbw values at the largest size; divide on by off."),
    Question(
        "With `CUDA_VISIBLE_DEVICES={visible}` and {ranks_per_node} ranks on the node, which physical GPU does local "
        "rank {rank} drive?",
        _physical_gpu, given=dict(topo="D02_chlc_rtx4090x8_topo", visible="2,3,6,7", rank=2, ranks_per_node=4),
        rel_tol=0,
        derived=lambda topo, visible, rank, ranks_per_node: {"count": len(visible.split(",")),
                                                         "device": rank % len(visible.split(",")),
                                                         "last": len(visible.split(",")) - 1},
        worked="The process sees devices 0-{last}, which are physical GPUs {visible} in that order; rank {rank} binds "
               "device {rank} mod {count} = {device}: physical GPU {answer} (ringlab's `rank_links`, `bind_device`'s "
               "rule). `nvidia-smi topo -m` speaks of physical GPUs.",
        hint="local rank mod (number of visible GPUs) picks a position in the CUDA_VISIBLE_DEVICES list."),
    Question(
        "In ringlab's lockstep model of a ring on {nranks} ranks where rank {slow_rank} pauses before each step "
        "(`model_trace({nranks}, slow_rank={slow_rank})`), which rank spends longest waiting to receive?",
        _longest_receiver, given=dict(nranks=4, slow_rank=1), rel_tol=0, derived=_waits_fields,
        worked="Rank {answer}, the one after the straggler: {longest_ms:.1f} ms in receives, against {own_ms:.1f} ms "
               "for rank {slow_rank} itself. The straggler is the rank with time between its steps (`step_gaps` "
               "names rank {gap_rank}), not the one that waits longest.",
        hint="a rank waits for the rank before it in the ring: who receives from the straggler?"),
])
