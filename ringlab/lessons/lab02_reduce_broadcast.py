"""Lab 02, reduce and broadcast: the pipelined chain broadcast measured against segment counts, on this
machine and on an emulated one (:func:`measure_chain`, :func:`pipelining`), its time (exercise), and the
lab's quiz."""
from __future__ import annotations

import math
from contextlib import nullcontext

import numpy as np

from ..algorithms import build
from ..lab.exercises import compare, exercise
from ..lab.findings import Finding
from ..lab.quiz import Question, Quiz
from ..predict.costmodel import best_segments, predict
from ..predict.fitting import fit_schedules
from ..topology import from_spec, uniform

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


# --- what the lab measures ------------------------------------------------------------------------------

# The lab's emulated machine: 100 MB/s each way per rank and 2 ms a message, so that for 4 MiB over 4 ranks the best
# segment count, near sqrt((n-2) K / (alpha B)) = 6.5, falls inside the grid with room on both sides (too few segments
# leave the pipeline empty, too many pay 2 ms each). It runs in virtual time with this CPU's work counted as the CPU
# time it took (compute="cpu"): a chain step's only work is the copy that lands its segment, a few percent of the
# step at most, so the emulated machine's times are its links' whatever else this machine is doing.
MACHINE = "uniform:0.1:2000"
SEGMENTS = (1, 2, 4, 8, 16, 32, 64)
PAYS = 0.8  # pipelining pays when the best segment count takes at most 80% of the time of one segment


def measure_chain(comm, nbytes: int, segments=SEGMENTS, machine: str | None = None, iters: int = 5) -> dict:
    """On every rank of ``comm``: the chain broadcast of ``nbytes`` from rank 0 at each segment count, and the
    binomial tree, each the median of ``iters`` calls, on this machine or (``machine``, a SPEC) on emulated
    links, in virtual time, with this machine's own (wall) time per call beside (``chain_wall``, ``tree_wall``;
    on this machine the two are the same). Every rank returns the same dict."""
    from ..mpi.collectives import broadcast
    from ..mpi.emulate import emulate
    from ..measure.timing import time_collective

    x = np.ones(nbytes // 4, np.float32)
    chain, chain_wall, tree_wall = [], [], []
    with emulate(machine) if machine else nullcontext():
        for S in segments:
            chain.append(time_collective(lambda: broadcast(x, 0, "chain", segments=S, agree=False), comm, warmup=1,
                                         iters=iters, walls=chain_wall))
        tree = time_collective(lambda: broadcast(x, 0, "tree", agree=False), comm, warmup=1, iters=iters,
                               walls=tree_wall)
    return {"nbytes": x.nbytes, "nranks": comm.Get_size(), "segments": list(segments), "chain": chain, "tree": tree,
            "chain_wall": chain_wall or list(chain), "tree_wall": tree_wall[0] if tree_wall else tree,
            "machine": machine}


def predicted_chain(measured: dict) -> list[float]:
    """rl.predict's seconds for each segment count of an emulated ``measured`` run, on the same links (x scale)."""
    topology, scale = from_spec(measured["machine"], measured["nranks"])
    return [predict(build("broadcast.chain", measured["nranks"], segments=S), measured["nbytes"], topology,
                    itemsize=4).seconds * scale for S in measured["segments"]]


def pipelining(raw: dict, emulated: dict) -> Finding:
    """Whether splitting the buffer paid, on this machine and on the emulated one, in sentences worded from
    the two runs (``measure_chain``'s results) and the cost model's prediction for the emulated links."""
    said, observed, conclusions = [], [], []
    for where, run in (("this machine", raw), ("the emulated machine", emulated)):
        times = dict(zip(run["segments"], run["chain"]))
        best = min(times, key=times.get)
        pays = times[best] <= PAYS * times[1]
        said.append(f"On {where} ({run_machine(run)}, {run['nranks']} ranks, {run['nbytes'] / 2**20:g} MiB): one "
                    f"segment took {times[1] * 1e3:.1f} ms and the best, S = {best}, {times[best] * 1e3:.1f} ms" +
                    (f", {times[1] / times[best]:.1f}x faster: pipelining pays." if pays else
                     ", less than the 20% a pipeline must save to count: pipelining does not pay there."))
        (observed if run is raw else conclusions).append(f"pipelining {'pays' if pays else 'does not pay'} on {where}")
        if where == "this machine" and not pays:
            said.append("There the ranks copy through this machine's memory, and every extra segment adds a step of "
                        "Python, MPI and the scheduler that costs more than the copy it overlaps: the CPU, not a "
                        "link, sets those times, so this machine cannot show what pipelining is for. Links of known "
                        "speed can.")
    if "chain_wall" in emulated:
        walls = dict(zip(emulated["segments"], emulated["chain_wall"]))
        first, last = emulated["segments"][0], emulated["segments"][-1]
        said.append(f"Those times are the emulated machine's (virtual time: each message takes its links' time on the "
                    f"ranks' clocks, and only the CPU time that lands a segment counts besides); this machine took "
                    f"{walls[first] * 1e3:.1f} ms of wall time a call at S = {first} and {walls[last] * 1e3:.1f} ms at "
                    f"S = {last} to run them, no rank sleeping for a link: the wall time is this machine's own cost "
                    "per step (Python, MPI, ranks sharing cores), which the virtual clocks leave out.")
    predicted = predicted_chain(emulated)
    grid = emulated["segments"]
    want = grid[int(np.argmin(predicted))]
    got = grid[int(np.argmin(emulated["chain"]))]
    close = abs(grid.index(want) - grid.index(got)) <= 1
    said.append(f"The cost model, on the emulated links, predicts S = {want} best of these ({min(predicted) * 1e3:.1f} "
                f"ms); measured there, S = {got}: " + (
                    "the measurement finds the model's pipeline (within one step of the grid)." if close else
                    "more than one step of the grid apart, so something the model leaves out (this machine's own "
                    "work per step, counted as CPU time) shows."))
    conclusions.append("the emulated best S is the predicted one" if close else
                       "the emulated best S is not the predicted one")
    return Finding(" ".join(said), tuple(conclusions), tuple(observed))


def run_machine(run: dict) -> str:
    """How a measured run's machine reads: this machine, or the emulated one with its links."""
    if not run.get("machine"):
        return "measured on its own cores"
    topology, scale = from_spec(run["machine"], run["nranks"])
    return f"emulated links of {topology.name}" + (f", {scale:g}x slower" if scale != 1 else "") + ", virtual time"


def fit_chain(run: dict):
    """The alpha-beta fit of a chain sweep (``measure_chain``'s result), with its relative residuals."""
    return fit_schedules([build("broadcast.chain", run["nranks"], segments=S) for S in run["segments"]],
                         [run["nbytes"]] * len(run["segments"]), run["chain"])


def describe_emulated_fit(run: dict, fitted) -> str:
    """The alpha-beta fit of an emulated chain sweep set against the links it ran on, worded from both."""
    topology, scale = from_spec(run["machine"], run["nranks"])
    alpha, bandwidth = topology.channel_latency[list(topology.route(0, 1))].sum() * scale, topology.channel_rate[0] / scale
    if not np.isfinite(fitted.bandwidth):
        return (f"Fitted to the emulated run: alpha {fitted.alpha * 1e3:.2f} ms a step and no cost per byte, against "
                f"links of {alpha * 1e3:.2f} ms and {bandwidth / 1e6:.0f} MB/s: the fit does not recover the links "
                "here, so it has none to set beside them.")
    said = (f"Fitted to the emulated run: alpha {fitted.alpha * 1e3:.2f} ms a step and {fitted.bandwidth / 1e6:.0f} MB/s, "
            f"against links of {alpha * 1e3:.2f} ms and {bandwidth / 1e6:.0f} MB/s")
    same_rate = abs(fitted.bandwidth / bandwidth - 1) <= 0.15
    rate = ("the bandwidth is the links'" if same_rate else
            f"the bandwidth is {fitted.bandwidth / bandwidth:.2f}x the links'")
    if fitted.alpha > 1.15 * alpha:
        said += (f": {rate}, and the {(fitted.alpha - alpha) * 1e3:.2f} ms a step beyond the "
                 "links' latency is this machine's own work in a step, counted as the CPU time it took (the copy that "
                 "lands a segment).")
    elif fitted.alpha >= alpha / 1.15 and same_rate:
        said += ": the fit recovers the links."
    else:
        said += (f": {rate}, and the fitted alpha is {fitted.alpha / alpha:.2f}x the links' latency: the fit trades "
                 "one for the other over these few segment counts.")
    if fitted.usable:
        return said
    return said + f" It misses one measurement by {fitted.worst_residual:.0%}: too loose to use."


def fitted_chain_times(run: dict, fitted) -> list[float] | None:
    """The fitted model's seconds for each segment count of ``run``; None for a fit too loose to use."""
    if not fitted.usable:
        return None
    network = fitted.topology(run["nranks"])
    return [predict(build("broadcast.chain", run["nranks"], segments=S), run["nbytes"], network).seconds
            for S in run["segments"]]


# --- the exercise ---------------------------------------------------------------------------------------

def _chain_time(K, n, S, B):
    return K * (S + n - 2) / (S * B)


@exercise(_chain_time, "formula")
def check_chain_time(chain_time):
    """Compare ``chain_time(K, n, S, B)`` with the cost model's pipelined chain broadcast on a
    network with no latency (bandwidth B everywhere)."""
    def cost_model(K, n, S, B):
        return predict(build("broadcast.chain", n, segments=S), K, uniform(n, bandwidth=B, latency=0.0)).seconds

    cases = [dict(K=1 << 20, n=2, S=1, B=1e9), dict(K=1 << 20, n=4, S=4, B=1e9), dict(K=1 << 24, n=8, S=16, B=10e9),
             dict(K=1 << 26, n=16, S=64, B=25e9)]
    compare(chain_time, "chain_time", cases, cost_model,
             "the first segment needs n-1 steps to reach the last rank, and the other S-1 segments follow one "
             "step apart; each step moves one segment of K/S bytes at B bytes/s.")
    print("Correct: K(S+n-2)/(S B) matches the cost model.")


# --- the quiz -------------------------------------------------------------------------------------------

def _steps(name, nranks, **options):
    return len(build(name, nranks, **options).steps)


def _halving(n):
    left, seq = n, [n]
    while left > 1:
        left = math.ceil(left / 2)
        seq.append(left)
    return {"halving": " -> ".join(map(str, seq)), "chain": _steps("reduce.chain", n),
            "direct": _steps("reduce.direct", n)}


def _chain_ms(mib, n, S, gbps):
    return predict(build("broadcast.chain", n, segments=S), mib * MiB, uniform(n, bandwidth=gbps * 1e9,
                                                                             latency=0.0)).seconds * 1e3


def _best_segments(kib, n, alpha_us, gbps):
    return best_segments(n, kib * KiB, uniform(n, bandwidth=gbps * 1e9, latency=alpha_us * 1e-6))[0]


def _best_direction(small_kib, kib, n, alpha_us, gbps):
    small, big = _best_segments(small_kib, n, alpha_us, gbps), _best_segments(kib, n, alpha_us, gbps)
    return "up" if small > big else "down" if small < big else "same"


QUIZ = Quiz("02", [
    Question(
        "A binomial-tree reduce on {n} ranks: how many steps does it take?",
        lambda n: _steps("reduce.tree", n), given=dict(n=13), unit="steps", rel_tol=0, derived=_halving,
        worked="ceil(log2 {n}) = {answer}: each step halves the ranks that still hold a partial sum ({halving}), "
               "counted from ringlab's `reduce.tree` schedule. A direct reduce takes {direct} step but loads the "
               "root with {n} - 1 buffers; a chain takes {chain} steps.",
        hint="each step, half of the ranks still holding a partial sum send it to the other half: ceil(log2 n)."),
    Question(
        "A chain broadcast of {mib} MiB over {n} ranks, cut into S = {S} segments, on links of {gbps:g} GB/s with no "
        "latency. How many milliseconds does it take?",
        _chain_ms, given=dict(mib=64, n=8, S=16, gbps=10.0), unit="ms",
        derived=lambda mib, n, S, gbps: {"unsplit": _chain_ms(mib, n, 1, gbps),
                                         "limit": mib * MiB / (gbps * 1e9) * 1e3},
        worked="K(S+n-2)/(S B) = {mib} MiB x ({S}+{n}-2) / ({S} x {gbps:g} GB/s) = {answer:.2f} ms (ringlab's cost "
               "model). Unsplit (S = 1) it would be (n-1)K/B = {unsplit:.2f} ms; as S grows it tends to K/B = "
               "{limit:.2f} ms, whatever n is.",
        hint="the first segment takes n-1 steps to reach the last rank and the other S-1 follow one step apart: "
             "S+n-2 steps of K/S bytes each."),
    Question(
        "A chain broadcast of {kib} KiB over {n} ranks with alpha = {alpha_us:g} us per step and B = {gbps:g} GB/s: "
        "which segment count S is fastest?",
        _best_segments, given=dict(kib=4096, n=4, alpha_us=20.0, gbps=5.0), unit="segments", rel_tol=0.1,
        derived=lambda kib, n, alpha_us, gbps: {
            "root": math.sqrt((n - 2) * kib * KiB / (alpha_us * 1e-6 * gbps * 1e9))},
        worked="(n+S-2)(alpha + K/(S B)) is smallest near S = sqrt((n-2) K / (alpha B)) = {root:.2f}; trying every S, "
               "ringlab's cost model finds S = {answer} fastest. Fewer segments leave the pipeline empty for "
               "longer; more pay alpha more often than they save.",
        hint="minimise (n+S-2)(alpha + K/(S B)) over S: the minimum is near sqrt((n-2) K / (alpha B))."),
    Question(
        "Same chain and links, but the buffer shrinks from {kib} KiB to {small_kib} KiB. Does the best segment count "
        "go up, go down, or stay the same?",
        _best_direction, given=dict(small_kib=64, kib=4096, n=4, alpha_us=20.0, gbps=5.0),
        choices=("up", "down", "same"),
        derived=lambda small_kib, kib, n, alpha_us, gbps: {"small": _best_segments(small_kib, n, alpha_us, gbps),
                                                            "big": _best_segments(kib, n, alpha_us, gbps),
                                                            "shrink": kib / small_kib},
        worked="{answer}: the cost model's best S is {small} for {small_kib} KiB against {big} for {kib} KiB. Every "
               "segment adds the same alpha, while the transfer time it saves shrinks with K, so the best S grows "
               "as sqrt(K) and small buffers are best sent whole (the lab's exercise 2 asks you to measure it).",
        hint="in sqrt((n-2) K / (alpha B)), what happens when K shrinks {shrink:g} times?"),
])
