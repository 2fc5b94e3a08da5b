"""When it hangs or crawls (lab 07): a rank that never comes, a straggler, the settings and links to check.

- :func:`run_on_ranks` runs one of the lab's mistakes (:data:`MISTAKES`) as a real MPI job and returns
  what each rank's ringlab said; :func:`predicted_timeouts` works out the same StepTimeout messages from
  the schedule alone, and :func:`describe_timeouts` reads back who waited for whom;
- :func:`straggler_traces` records a traced ring allreduce with and without one rank :func:`slowed`, on
  this machine or on an emulated one (:func:`measure_straggler` does it inside a running job);
  :func:`describe_straggler` says from a Trace which rank the others waited for, and how long, and
  :func:`straggler_lesson` what both machines showed, beside the cost model and the lockstep model;
  :func:`model_trace` builds such a Trace from a lockstep model (the exercises' cases);
- :func:`check_culprit`, :func:`check_straggler`: the lab's exercises.

What to check on a GPU machine (NCCL's settings, P2P, links) is in :mod:`ringlab.lessons.lab07_hangs_and_crawls.checklist`.

    python -m mpi4py -m ringlab.lessons.lab07_hangs_and_crawls.diagnose MODE FOLDER    # one rank of a mistake (run_on_ranks does this)
"""
from __future__ import annotations

import os
import pickle
import re
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from ...lab.exercises import exercise
from ...lab.findings import Finding
from ...lab.words import and_join

# What each of the lab's mistakes does on its ranks: (what the text says, ranks it needs)
MISTAKES = {
    "skip": "rank 2 never calls rl.allreduce; ringlab's argument check notices",
    "skip-unchecked": "rank 2 never calls rl.allreduce, and the ranks do not compare arguments (agree=False), as NCCL does not",
    "sizes": "rank 1 passes 11 elements where the others pass 10",
}
ABSENT = 2           # the rank that never comes in "skip" and "skip-unchecked"
TIMEOUT_S = 1.0      # the lab's StepTimeout: a step that waits longer raises
ELEMENTS = 30        # the mistakes' buffers: small, so every message is sent eagerly
# The straggler's emulated machine: 5 MB/s links with 1 ms latency, where a step of the traced ring (a 64 KiB
# chunk) takes about 14 ms of link time, of the order of the straggler's 20 ms pause, so that the timeline shows
# both. In virtual time with this CPU's work counted as CPU time (compute="cpu"), a step's only work is adding
# its 64 KiB chunk, tens of microseconds: the call is the links' and the pauses' time, however busy this machine.
STRAGGLER_MACHINE = "uniform:0.005:1000"
PACE_TOLERANCE = 0.25   # the slowed call within 25% of the lockstep model counts as paced by the straggler
LINK_TOLERANCE = 1.5    # the call without a straggler within 1.5x of the links' predicted time counts as link-bound


def _not_done(text: str):
    from ...lab.exercises import NotDoneYet

    return NotDoneYet(text)


# --- 1. a rank that never comes, or comes with another size ---------------------------------------------

def run_on_ranks(mode: str, nranks: int = 4, timeout: float = 60) -> dict[int, str]:
    """Run mistake ``mode`` (see :data:`MISTAKES`) on ``nranks`` real MPI ranks; {rank: what it said}.
    A rank that never called has no entry."""
    from ...cluster.launch import run_mpi

    if mode not in MISTAKES:
        raise ValueError(f"no mistake {mode!r}; there are: {', '.join(MISTAKES)}")
    if not 3 <= nranks <= 8:
        raise ValueError(f"the mistakes need 3 to 8 ranks (rank {ABSENT} stays away), got {nranks}")
    with tempfile.TemporaryDirectory(prefix="ringlab-diagnose-") as folder:
        done = run_mpi(nranks, ["-m", "ringlab.lessons.lab07_hangs_and_crawls.diagnose", mode, folder], timeout=timeout)
        said = {int(p.stem.split("-")[1]): p.read_text().strip() for p in Path(folder).glob("rank-*.txt")}
    if not said:
        raise RuntimeError(f"no rank of the {mode!r} job said anything; its errors:\n{done.stderr[-2000:]}")
    return dict(sorted(said.items()))


def _on_rank(mode: str, folder: str) -> None:
    """One rank of mistake ``mode``: call rl.allreduce (or not), write what ringlab said to FOLDER/rank-N.txt."""
    import ringlab as rl
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    def say(text: str) -> None:
        # written whole, then renamed into place: rank 0 ends the job as soon as it counts every rank's file, and a
        # file it counts while it is still being written would be read empty
        part = Path(folder, f".rank-{rank}.part")
        part.write_text(text + "\n")
        os.replace(part, Path(folder, f"rank-{rank}.txt"))

    if mode == "sizes":
        try:
            rl.allreduce(np.ones(ELEMENTS // 3 + (rank == 1)), "ring", timeout=30)  # 10 elements, 11 on rank 1
        except ValueError as err:
            say(str(err))
        return
    if rank != ABSENT:
        try:
            rl.allreduce(np.ones(ELEMENTS), "ring", timeout=TIMEOUT_S, agree=(mode == "skip"))
        except rl.StepTimeout as err:
            say(str(err))
    if rank == 0:  # ends the job once every rank that called has written: the others wait for nobody
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(list(Path(folder).glob("rank-*.txt"))) < comm.Get_size() - 1:
            time.sleep(0.05)
        comm.Abort(0)
    time.sleep(60)


def predicted_timeouts(nranks: int, absent: int, algorithm: str = "allreduce.ring", elements: int = ELEMENTS,
                       timeout: float = TIMEOUT_S) -> dict[int, str]:
    """The StepTimeout each present rank raises when rank ``absent`` never calls (and the ranks do not
    compare arguments first), worked out from the ranks' plans: a rank starts step s once its step s-1 is
    done, posting that step's sends, which complete at once (small messages are sent eagerly); a receive
    completes once its sender has started that step. {rank: message} for every rank that gets stuck."""
    from ...algorithms import build
    from ...mpi.plan import compile_plan

    if not 0 <= absent < nranks:
        raise ValueError(f"the absent rank must be one of 0..{nranks - 1}, got {absent}")
    schedule = build(algorithm, nranks)
    plans = [compile_plan(schedule, r, elements, 8) for r in range(nranks)]
    nsteps = len(schedule.steps)
    started = [-1 if r == absent else 0 for r in range(nranks)]  # the step each rank is in (its sends posted)

    def waits_on(r):
        step = plans[r].steps[started[r]]
        return step, next((m for m in step.recvs if started[m.peer] < step.index), None)

    moved = True
    while moved:
        moved = False
        for r in range(nranks):
            if r != absent and started[r] < nsteps and waits_on(r)[1] is None:
                started[r] += 1
                moved = True
    stuck = {r: waits_on(r) for r in range(nranks) if r != absent and started[r] < nsteps}
    out = {}
    for r, (step, m) in sorted(stuck.items()):
        label = f" ({step.label})" if step.label else ""
        out[r] = (f"rank {r}: step {step.index}{label} did not finish within {timeout:g} s: "
                  f"still waiting to receive chunk {m.first} from rank {m.peer}")
    return out


_WAITING = re.compile(r"^rank (\d+): step (\d+).*from rank (\d+)$")
_MISSING = re.compile(r"^rank (\d+): rl\.\w+: ranks? ([\d, ]+) did not call it")
_DISAGREE = re.compile(r"^(rl\.\w+): the ranks disagree \((.*)\)$")


def read_timeouts(messages: dict[int, str]) -> dict[int, tuple[int | None, list[int]]]:
    """{rank: (the step it was stuck at, or None in the argument check; the ranks it waited for)} from
    ringlab's StepTimeout messages."""
    out = {}
    for rank, text in messages.items():
        waiting, missing = _WAITING.match(text), _MISSING.match(text)
        if waiting:
            out[rank] = (int(waiting.group(2)), [int(waiting.group(3))])
        elif missing:
            out[rank] = (None, [int(q) for q in missing.group(2).split(",")])
        else:
            raise ValueError(f"rank {rank}'s message is not a StepTimeout of ringlab: {text!r}")
    return out


def describe_timeouts(messages: dict[int, str], nranks: int) -> str:
    """Who waited for whom, and which rank never came, worded from the messages of one job."""
    if not messages:
        raise ValueError("no messages: every rank finished, or none of them wrote")
    agreed = {m.group(1): m.group(2) for m in map(_DISAGREE.match, messages.values()) if m}
    if agreed:
        if len(set(messages.values())) != 1:
            raise ValueError("some ranks disagree about the arguments and some do not: these are two jobs")
        what, detail = next(iter(agreed.items()))
        return (f"All {len(messages)} ranks raised the same error before any data moved: {what} was called with "
                f"different arguments ({detail}). Nobody waits: the job can stop at once.")
    read = read_timeouts(messages)
    silent = [r for r in range(nranks) if r not in messages]
    named = sorted({q for _, waited in read.values() for q in waited})
    if all(step is None for step, _ in read.values()):
        return (f"Ranks {and_join(sorted(read))} each waited in the argument check for rank{'s' * (len(named) > 1)} "
                f"{and_join(named)}, which never called: the message names the rank that never came.")
    chain = "; ".join(f"rank {r} at step {step} waited for rank {q[0]}" for r, (step, q) in
                      sorted(read.items(), key=lambda item: item[1][0]))
    first = min(read.values(), key=lambda v: v[0])[1][0]
    verdict = (f"Rank {first} is named at the earliest step and said nothing itself: it never came; "
               "every other rank waits for a neighbour that waits in turn." if first in silent else
               f"The earliest wait is for rank {first}, which itself timed out: look further back.")
    return f"{chain}. {verdict}"




def _culprit(messages):
    """The reference answer: the rank named at the earliest step (which timed out on no one)."""
    read = read_timeouts(messages)
    return min(read.values(), key=lambda v: (v[0] is not None, v[0] or 0))[1][0]


@exercise(_culprit, "answer")
def check_culprit(culprit):
    """``culprit(messages)``: the rank that never called, from the StepTimeouts of the ranks that did (the
    ranks compared no arguments), for rings of 3 to 8 ranks and every absent rank."""
    for n in (4, 3, 5, 8):
        for absent in range(n):
            messages = predicted_timeouts(n, absent)
            got = culprit(messages)
            if got is None and n == 4 and absent == 0:
                raise _not_done("culprit returned None")
            if got != absent:
                shown = "\n  ".join(messages.values())
                raise AssertionError(f"with {n} ranks, for these messages\n  {shown}\nculprit returned {got!r}; the "
                                     f"rank that never came is {absent}.\nHint: each rank names the rank it waits "
                                     "for, which may itself be waiting; the one named at the earliest step wrote "
                                     "nothing.")
    print("Correct: for every ring of 3 to 8 ranks and every absent rank, you name the one that never came.")


# --- 2. a straggler, from a trace --------------------------------------------------------------------------

def slowed(seconds: float):
    """While inside, this rank pauses ``seconds`` before each step of ringlab's collectives, as a rank on a
    slower link or a busier GPU is late at every step (the delay is injected; everything else is measured). On
    this machine it sleeps; on an emulated machine the pause is added to its virtual clock."""
    from ...mpi.emulate import straggling

    return straggling(seconds)


def straggler_traces(nranks: int = 4, slow_rank: int = 2, pause: float = 0.02, elements: int = 1 << 16,
                     timeout: float = 60, machine: str | None = None) -> dict[str, object]:
    """A ring allreduce traced on ``nranks`` real MPI ranks, first as it is, then with ``slow_rank`` pausing
    ``pause`` seconds before each step: {"as it is": Trace, "slowed": Trace} (rank 0's, with every rank's rows).
    With ``machine`` (an emulation SPEC such as :data:`STRAGGLER_MACHINE`) both run on that emulated machine's
    links (``rl.emulate``), in virtual time: each message takes its links' time on the ranks' clocks, the pause is
    on the straggler's clock (nobody sleeps), and each Trace's ``wall_s`` is what this machine took for the call
    (the slowest rank's; on this machine, where the pause is slept, it is the trace's own time)."""
    from ...algorithms import build
    from ...mpi.run import Trace
    from ...cluster.launch import run_mpi

    if not 0 <= slow_rank < nranks:
        raise ValueError(f"the slow rank must be one of 0..{nranks - 1}, got {slow_rank}")
    if machine is not None:
        from ... import topology

        topology.from_spec(machine, nranks)  # a bad SPEC is said here, not by every rank of the job
    with tempfile.TemporaryDirectory(prefix="ringlab-diagnose-") as folder:
        args = ["-m", "ringlab.lessons.lab07_hangs_and_crawls.diagnose", "straggler", folder, str(slow_rank),
                repr(pause), str(elements), machine or ""]
        done = run_mpi(nranks, args, timeout=timeout)
        path = Path(folder, "traces.pickle")
        if not path.exists():
            raise RuntimeError(f"the traced job wrote no traces; its errors:\n{done.stderr[-2000:]}")
        saved = pickle.loads(path.read_bytes())
    schedule = build("allreduce.ring", nranks)
    out = {}
    for name, (rows, clock, itemsize, wall) in saved.items():
        out[name] = Trace(rows, schedule, clock, itemsize)
        out[name].wall_s = wall
    return out


def measure_straggler(comm=None, slow_rank: int = 2, pause: float = 0.02, elements: int = 1 << 16,
                      machine: str | None = None) -> dict | None:
    """On every rank of ``comm`` (default: MPI's world) at once: :func:`straggler_traces`'s two traced ring
    allreduces, in this job. Rank 0 gets {"as it is": Trace, "slowed": Trace}, each with ``wall_s``, the seconds
    this machine took for the call (the slowest rank's); the other ranks None."""
    import ringlab as rl
    from mpi4py import MPI

    from ...mpi.emulate import synchronize

    comm = MPI.COMM_WORLD if comm is None else comm
    x = np.ones(elements, np.float32)
    traces = {}
    with rl.emulate(machine) if machine else nullcontext():
        rl.allreduce(x, "ring", comm=comm)  # warm-up: plans compiled, buffers made
        for name, mine in (("as it is", 0.0), ("slowed", pause if comm.Get_rank() == slow_rank else 0.0)):
            synchronize(comm)  # a barrier (on an emulated machine, one that costs no virtual time)
            began = time.perf_counter()
            with slowed(mine):
                _, traces[name] = rl.allreduce(x, "ring", comm=comm, trace=True, timeout=30)
            traces[name].wall_s = comm.allreduce(time.perf_counter() - began, op=MPI.MAX)
    return traces if comm.Get_rank() == 0 else None


def _trace_on_rank(folder: str, slow_rank: int, pause: float, elements: int, machine: str) -> None:
    traces = measure_straggler(None, slow_rank, pause, elements, machine or None)
    if traces is not None:
        saved = {name: (t.records.tolist(), t.clock, t.itemsize, t.wall_s) for name, t in traces.items()}
        Path(folder, "traces.pickle").write_bytes(pickle.dumps(saved))  # a Schedule does not pickle: rows only


def step_gaps(trace) -> np.ndarray:
    """Seconds each rank spent outside its transfers before each step: [rank, step], from a Trace (the gap
    between the end of its previous step and the start of this one; before step 0, from the trace's start)."""
    rows, nsteps, nranks = trace.records, len(trace.schedule.steps), trace.schedule.nranks
    start, end = np.full((nranks, nsteps), np.nan), np.full((nranks, nsteps), np.nan)
    for r in range(nranks):
        for s in range(nsteps):
            mine = rows[(rows["rank"] == r) & (rows["step"] == s)]
            if len(mine):
                start[r, s], end[r, s] = mine["start"].min(), mine["end"].max()
    if np.isnan(start).all():
        raise ValueError("the trace has no rows: rank 0's trace holds every rank's, the others only their own")
    previous = np.concatenate([np.zeros((nranks, 1)), end[:, :-1]], axis=1)
    for r in range(nranks):  # a step in which this rank moves nothing: carry its last end forward
        for s in range(1, nsteps):
            if np.isnan(previous[r, s]):
                previous[r, s] = previous[r, s - 1]
    return np.nan_to_num(np.clip(start - previous, 0, None))


def receive_waits(trace) -> np.ndarray:
    """Seconds each rank spent in receives, per rank (the receives of one step overlap: their union)."""
    rows, out = trace.records, np.zeros(trace.schedule.nranks)
    for r in range(len(out)):
        for s in range(len(trace.schedule.steps)):
            mine = rows[(rows["rank"] == r) & (rows["step"] == s) & (rows["side"] == "recv")]
            if len(mine):
                out[r] += mine["end"].max() - mine["start"].min()
    return out


def describe_straggler(trace, stands_out: float = 3.0) -> str:
    """Which rank the others waited for and how long, worded from a Trace: the rank that spent the most
    time outside its transfers is named when it spent ``stands_out`` times the next most (and over 1 ms)."""
    gaps = step_gaps(trace).sum(axis=1)
    waits = receive_waits(trace)
    order = np.argsort(gaps)[::-1]
    top, second = int(order[0]), float(gaps[order[1]]) if len(order) > 1 else 0.0
    total = float(trace.records["end"].max())
    if gaps[top] <= 1e-3 or gaps[top] < stands_out * second:
        return (f"No rank stands out: the most any rank spent between its steps, outside its transfers, was "
                f"{gaps[top] * 1e3:.2f} ms (rank {top}), the next most {second * 1e3:.2f} ms; the whole call took "
                f"{total * 1e3:.2f} ms.")
    others = [int(r) for r in np.argsort(waits)[::-1] if r != top]
    waited = ", ".join(f"rank {r} {waits[r] * 1e3:.1f} ms" for r in others)
    rows = trace.records
    receivers = {int(r) for r in rows["rank"][(rows["side"] == "recv") & (rows["peer"] == top)]}
    first = others[0]
    after = {}  # each rank's next in line: the rank that receives from it
    for r, p in zip(rows["rank"][rows["side"] == "recv"], rows["peer"][rows["side"] == "recv"]):
        after.setdefault(int(p), int(r))
    chain, rank = [], after.get(first)
    while rank is not None and rank not in (top, first) and rank not in chain and waits[rank] > 0.1 * waits[first]:
        chain.append(rank)  # the ranks after it that waited in their receives in turn (a tenth of its wait or more)
        rank = after.get(rank)
    then = (f", and {'rank' if len(chain) == 1 else 'ranks'} {and_join([str(r) for r in chain])} after it in turn"
            if chain else "")
    why = (f"rank {first}, which receives from rank {top}, waited longest{then}: a ring moves at the pace of its "
           "slowest rank" if first in receivers else
           f"rank {first} waited longest, though it receives nothing from rank {top}")
    return (f"Rank {top} is the straggler: it spent {gaps[top] * 1e3:.1f} ms between its steps, outside any "
            f"transfer, " + (f"against {second * 1e3:.2f} ms at most for any other rank" if round(second * 1e3, 2) > 0
                             else "and no other rank spent any" if second <= 0 else
                             "against under 0.01 ms at most for any other rank")
            + f". Time in receives: {waited}; rank "
            f"{top} itself {waits[top] * 1e3:.1f} ms. The call took {total * 1e3:.1f} ms; {why}."
            + _blocked_sends(trace, top))


def straggler_lesson(raw: dict, emulated: dict, slow_rank: int = 2, pause: float = 0.02,
                     machine: str = STRAGGLER_MACHINE) -> Finding:
    """The straggler as this machine showed it (``raw``: :func:`straggler_traces`'s two traces) and on the
    emulated ``machine`` (``emulated``: the same two, run with ``machine=``), beside the cost model's time for
    the call and the lockstep model's (:func:`model_trace`) for the call with ``slow_rank`` pausing ``pause``
    before each step: what each showed, worded from the traces."""
    from ... import topology
    from ...predict import predict

    plain, late = emulated["as it is"], emulated["slowed"]
    schedule, nranks = plain.schedule, plain.schedule.nranks
    nbytes = sum(dict(zip(plain.records["chunk"].tolist(), plain.records["nbytes"].tolist())).values())  # the buffer
    links, _ = topology.from_spec(machine, nranks)
    predicted = predict(schedule, nbytes, links, itemsize=plain.itemsize).seconds
    steps = len(schedule.steps)
    lockstep = float(model_trace(nranks, slow_rank, pause, predicted / steps, nbytes=nbytes).records["end"].max())
    took = {name: float(trace.records["end"].max()) for name, trace in emulated.items()}
    ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
    named = {where: _straggler(traces["slowed"]) == slow_rank and describe_straggler(traces["slowed"]).startswith(
        f"Rank {slow_rank} is the straggler") for where, traces in (("raw", raw), ("emulated", emulated))}
    link_bound = took["as it is"] <= LINK_TOLERANCE * predicted
    paced = abs(took["slowed"] / lockstep - 1) <= PACE_TOLERANCE
    said = [f"On this machine, with rank {slow_rank} pausing {ms(pause)} before each step: "
            f"{describe_straggler(raw['slowed'])}",
            f"On the emulated {machine} (virtual time: each message takes its links' time on the ranks' clocks, "
            f"and the pause is on rank {slow_rank}'s clock, nobody sleeping), as it is: the call took "
            f"{ms(took['as it is'])}, against {ms(predicted)} predicted for its {steps} steps on those links by "
            f"rl.predict ({took['as it is'] / predicted:.2f}x"
            + ("; the rest is this CPU's additions, counted as the CPU time they took)." if took["as it is"] > predicted
               else ")."),
            f"With rank {slow_rank} pausing: {describe_straggler(late)}",
            f"The lockstep model (each step waits for its slowest rank) predicts {ms(lockstep)} for that call: "
            f"{ms(predicted)} of links plus {steps} pauses of {ms(pause)}. Measured: {ms(took['slowed'])} "
            f"({took['slowed'] / lockstep:.2f}x the model): "
            + ("the straggler set the pace, adding its pause to every step of every rank."
               if paced else f"further from the model than {PACE_TOLERANCE:.0%}, so the pace was not the "
                             "straggler's alone here.")]
    walls = [getattr(emulated[name], "wall_s", None) for name in ("as it is", "slowed")]
    if None not in walls:
        said.append(f"Those are the emulated machine's times. This machine took {ms(walls[0])} of wall time to run the "
                    f"call as it is and {ms(walls[1])} with the straggler: the links' time and the {steps} pauses are "
                    "virtual, so neither is waited for here.")
    conclusions = [
        "the straggler is named on the emulated machine" if named["emulated"] else
        "the straggler is not named on the emulated machine",
        "the call is link-bound on the emulated machine" if link_bound else
        "the call is not link-bound on the emulated machine",
        "the straggler sets the pace on the emulated machine, as the lockstep model predicts" if paced else
        "the straggler's pace differs from the lockstep model on the emulated machine"]
    observations = ["the straggler is named on this machine" if named["raw"] else
                    "the straggler is not named on this machine"]
    return Finding("\n\n".join(said), tuple(conclusions), tuple(observations))


def _blocked_sends(trace, straggler: int) -> str:
    """A sentence on the longest send to the straggler, when it waited: took over 1 ms more than the quickest send of
    the call (what a send takes when its receiver is ready: on an emulated machine every send takes its link's time,
    and none waits); and one on each rank whose sends waited behind a receiver held in a send of its own."""
    every = trace.records[trace.records["side"] == "send"]
    if not len(every):
        return ""
    took = every["end"] - every["start"]
    quickest = float(took.min())
    to_it = every["peer"] == straggler
    if not to_it.any():
        return ""
    longest = every[to_it][int(np.argmax(took[to_it]))]
    slowest = float(took[to_it].max())
    if slowest - quickest <= 1e-3:
        return ""
    said = (f" The longest send to rank {straggler}, rank {int(longest['rank'])}'s {int(longest['nbytes']) >> 10} KiB "
            f"at step {int(longest['step'])}, took {slowest * 1e3:.1f} ms, where the quickest send of the call took "
            f"{quickest * 1e3:.2f} ms: it could not complete before rank {straggler} posted the receive. Past MPI's "
            "eager limit a message is not buffered but waits for its receiver (the rendezvous protocol), and rank "
            f"{straggler} posts its receive only after its pause: the sender waits for the straggler too, in its send.")
    waited = lambda r: float(took[every["rank"] == r].max(initial=0.0)) - quickest  # noqa: E731
    chained = sorted({(int(r), int(p)) for r, p in zip(every["rank"], every["peer"])
                      if p != straggler and r != straggler and waited(r) > 1e-3 and waited(p) > 1e-3})
    onward = dict(chained)  # in a ring each rank sends to one other
    blocked_by_it = {int(r) for r, p, t in zip(every["rank"], every["peer"], took)
                     if p == straggler and t - quickest > 1e-3}  # ranks whose sends to the straggler waited
    for sender, receiver in chained:
        path = [sender, receiver]
        while path[-1] in onward and onward[path[-1]] not in path:
            path.append(onward[path[-1]])
        way = (f" from rank {straggler} to " + " to ".join(f"rank {r}" for r in reversed(path))
               if path[-1] in blocked_by_it else "")
        said += (f" Rank {sender}'s sends to rank {receiver} waited up to {(waited(sender) + quickest) * 1e3:.1f} ms "
                 f"as well: rank {receiver}, held in a send of its own, posts its next receive late, and the wait "
                 f"passes back along the ring{way}.")
    return said


def model_trace(nranks: int, slow_rank: int | None = None, pause: float = 0.02, transfer: float = 1e-4,
                algorithm: str = "allreduce.ring", nbytes: int = 1 << 16):
    """A Trace from a lockstep model, not a measurement: each rank pauses (``pause`` seconds for
    ``slow_rank``, none for the others) before each step, then posts its sends; a send takes ``transfer``
    seconds, a receive ends ``transfer`` after both its ends have started the step."""
    from ...algorithms import build
    from ...mpi.run import Trace

    schedule = build(algorithm, nranks)
    ends, rows = np.zeros(nranks), []
    for index, step in enumerate(schedule.steps):
        starts = ends + np.array([pause if r == slow_rank else 0.0 for r in range(nranks)])
        new_ends = starts.copy()
        for t in step:
            sent, got = starts[t.src] + transfer, max(starts[t.src], starts[t.dst]) + transfer
            size = nbytes // schedule.nchunks
            rows.append((t.src, index, t.dst, t.chunk, size, "send", starts[t.src], sent))
            rows.append((t.dst, index, t.src, t.chunk, size, "recv", starts[t.dst], got))
            new_ends[t.src], new_ends[t.dst] = max(new_ends[t.src], sent), max(new_ends[t.dst], got)
        ends = new_ends
    return Trace(rows, schedule, clock="model (lockstep, not measured)", itemsize=4)


def _straggler(trace):
    """The reference answer: the rank that spent the most time outside its transfers."""
    return int(np.argmax(step_gaps(trace).sum(axis=1)))


@exercise(_straggler, "answer")
def check_straggler(straggler):
    """``straggler(trace)``: the slowed rank, on traces of the lockstep model for 3 to 8 ranks."""
    for n, slow in ((4, 2), (4, 0), (3, 1), (5, 4), (8, 3)):
        got = straggler(model_trace(n, slow))
        if got is None and (n, slow) == (4, 2):
            raise _not_done("straggler returned None")
        if got != slow:
            raise AssertionError(f"on a ring of {n} ranks in which rank {slow} pauses before every step, straggler "
                                 f"returned {got!r}.\nHint: the ranks after the straggler wait longest in their "
                                 "receives; the straggler itself waits for nobody, yet starts each step late: "
                                 "look at the time between a rank's steps (ringlab.lessons.lab07_hangs_and_crawls.diagnose.step_gaps).")
    print("Correct: you find the slowed rank from the gaps between its steps, not from who waited longest.")


if __name__ == "__main__":  # one rank of a job that run_on_ranks or straggler_traces started
    if len(sys.argv) >= 3 and sys.argv[1] in MISTAKES:
        _on_rank(sys.argv[1], sys.argv[2])
    elif len(sys.argv) == 7 and sys.argv[1] == "straggler":
        _trace_on_rank(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        sys.exit("usage: python -m mpi4py -m ringlab.lessons.lab07_hangs_and_crawls.diagnose MODE FOLDER (MODE: "
                 + ", ".join(MISTAKES) + ") | straggler FOLDER SLOW_RANK PAUSE ELEMENTS MACHINE (MACHINE: an emulation SPEC, or '' for none)")
