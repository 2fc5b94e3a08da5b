"""Lab 10's symmetric memory: one-shot and two-shot allreduce, measured on this machine against the ring and MPI's
own allreduce from 8 B to 1 MiB, with what the schedules count (steps, bytes read, bytes added), what NCCL's model
of its symmetric kernels predicts for 8 H100s, and where PyTorch's SymmetricMemory switches (published).

On ranks of one node ``allreduce.oneshot`` and ``allreduce.twoshot`` run through a shared MPI window
(:mod:`ringlab.mpi.symmetric`): a rank leaves its data in its own slot and the others read it there, waiting on a
counter instead of a message. The ring and MPI's own allreduce send messages. Everything measured here is CPU
processes on this machine; the published and predicted figures are GPUs', and say so.

Run as ``python -m`` under mpiexec, this module is the job :func:`measure_symmetric` starts (:func:`_main`).
"""
from __future__ import annotations

import math

import numpy as np

from ...algorithms import build
from ...lab.findings import Finding
from ...lab.words import and_join
from ...measure.sweep import measured_crossover
from ...measure.units import format_bytes
from ...predict import predict, predict_nccl
from ...schedule import REDUCE, chunk_bounds
from ...simulate import traffic
from ...topology import preset

ALGORITHMS = ("mpi", "oneshot", "twoshot", "ring")  # as ``ringlab bench -a`` names them
SYMMETRIC = ("oneshot", "twoshot")
NAMES = {"mpi": "MPI's own", "oneshot": "one-shot", "twoshot": "two-shot", "ring": "ring"}
NRANKS = 2
SMALLEST, LARGEST = 8, 1 << 20  # 8 B .. 1 MiB, every power of two: 1 MiB is the window's default room a rank
# Each (algorithm, size) is timed in PASSES bursts spread over the run, a burst the median of ITERS calls (each from a
# barrier) after WARMUP; its time is the lowest burst median. About a second in all on a quiet machine; on a busy
# one no pass starts past BUDGET_S seconds once MIN_PASSES are done.
PASSES, MIN_PASSES, ITERS, WARMUP, BUDGET_S = 20, 5, 10, 2, 30
EDGE = 3  # the smallest and the largest sizes compared as groups: three of each, by their geometric mean
TABLE_SIZES = (8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20)  # the rows the table shows (the figure shows all)
COUNTED_RANKS = (2, 8)  # this lab's ranks, and the GPUs of one HGX node
PREDICTED_MACHINE = "hgx-h100-8"  # where the predictions are made: 8 H100s on NVSwitch
# Published (PyTorch, torch/csrc/distributed/c10d/symm_mem/intra_node_comm.cu): the sizes up to which its
# intra-node allreduce runs one-shot, then two-shot; above them, NCCL.
PYTORCH_ONE_SHOT_BYTES = 256 << 10  # kOneShotThreshBytes
PYTORCH_TWO_SHOT_BYTES = 10 << 20   # kTwoShotThreshBytes


def counted_rows(ranks=COUNTED_RANKS, nbytes: int = 1 << 20) -> list[dict]:
    """What each schedule costs a rank, counted from ringlab's schedules: its steps (synchronisations), and the
    bytes it reads from its peers and adds into its own, as multiples of the buffer (rows per ranks, algorithm)."""
    rows = []
    for n in ranks:
        for name in ("oneshot", "twoshot", "ring"):
            schedule = build(f"allreduce.{name}", n)
            chunk = np.diff(chunk_bounds(nbytes, schedule.nchunks))
            added = np.zeros(n)
            for step in schedule.steps:
                adds = step.op == REDUCE
                np.add.at(added, step.dst[adds], chunk[step.chunk[adds]])
            rows.append({"ranks": n, "algorithm": NAMES[name], "steps": len(schedule.steps),
                         "read": max(traffic(schedule, nbytes)["received"]) / nbytes, "added": added.max() / nbytes})
    return rows


COUNTED_COLUMNS = {"ranks": "ranks", "algorithm": "algorithm", "steps (each a wait)": "steps",
                   "bytes read a rank (x buffer)": ("read", ".2f"), "bytes added a rank (x buffer)": ("added", ".2f")}


def measure_symmetric(nranks: int = NRANKS, smallest: int = SMALLEST, largest: int = LARGEST, passes: int = PASSES,
                      iters: int = ITERS, warmup: int = WARMUP, budget: float = BUDGET_S,
                      timeout: float = 300) -> dict:
    """MPI's own allreduce, one-shot, two-shot and the ring on ``nranks`` ranks of this machine (one MPI job),
    float32 sums of ``smallest`` to ``largest`` bytes (every power of two), each checked against MPI's Allreduce
    before and after. Each (algorithm, size) is timed in ``passes`` bursts spread over the whole run: a burst is
    ``warmup`` calls, then the median of ``iters`` calls, each from a barrier (the slowest rank's time); its time
    is the lowest burst median. This machine is shared, and someone else's work spoils a burst, rarely every one.
    Once ``MIN_PASSES`` are done, no pass starts past ``budget`` seconds. Returns ``ranks, cores, passes`` (those
    run), ``iters, warmup, window_bytes, wall_s`` and ``rows`` (``algorithm, bytes, time_s, burst_s``)."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from ...cluster.launch import run_mpi

    if not (isinstance(smallest, int) and isinstance(largest, int) and 4 <= smallest < largest):
        raise ValueError(f"need 4 <= smallest < largest bytes (whole float32s), got {smallest!r} and {largest!r}")
    for name, value in (("passes", passes), ("iters", iters)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "symmetric.json"
        arguments = json.dumps({"smallest": smallest, "largest": largest, "passes": passes, "iters": iters,
                                "warmup": warmup, "budget": budget, "out": str(out)})
        try:
            done = run_mpi(nranks, ["-m", __name__, arguments], timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the measurement on {nranks} ranks took longer than {timeout:g} s and was ended; try "
                               "fewer passes or a smaller largest size") from None
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"the measurement on {nranks} ranks failed (exit status {done.returncode}):\n"
                               f"{(done.stdout + done.stderr)[-3000:]}")
        return json.loads(out.read_text())


def measure_here(smallest: int, largest: int, passes: int, iters: int, warmup: int, budget: float, comm=None) -> dict:
    """Call on every rank: :func:`measure_symmetric`'s measurement on ``comm`` (COMM_WORLD); every rank returns it."""
    import time

    from mpi4py import MPI

    from ...measure.timing import time_collective
    from ...mpi.devices import cores
    from ...mpi.symmetric import capacity

    comm = MPI.COMM_WORLD if comm is None else comm
    rank, began = comm.Get_rank(), time.monotonic()
    sizes, nbytes = [], smallest
    while nbytes <= largest:
        sizes.append(nbytes)
        nbytes *= 2
    calls = {}
    for nbytes in sizes:
        x = np.random.default_rng(rank * 7919 + nbytes).uniform(-1, 1, nbytes // 4).astype(np.float32)
        out, want = np.empty_like(x), np.empty_like(x)
        comm.Allreduce(x, want)
        for algorithm in ALGORITHMS:
            calls[(algorithm, nbytes)] = (_call(algorithm, x, out, comm), out, want)

    def check(when: str) -> None:
        for (algorithm, nbytes), (call, out, want) in calls.items():
            call()
            wrong = comm.allreduce(int((~np.isclose(out, want, rtol=1e-5, atol=1e-6)).sum()))
            if wrong:
                raise AssertionError(f"{NAMES[algorithm]} at {format_bytes(nbytes)} {when}: {wrong} elements differ "
                                     "from MPI's Allreduce")

    check("before timing")
    bursts: dict[tuple[str, int], list[float]] = {key: [] for key in calls}
    done = 0
    for done in range(1, passes + 1):
        for nbytes in sizes:
            order = ALGORITHMS[done % len(ALGORITHMS):] + ALGORITHMS[:done % len(ALGORITHMS)]  # no one always first
            for algorithm in order:
                call = calls[(algorithm, nbytes)][0]
                bursts[(algorithm, nbytes)].append(time_collective(call, comm, warmup=warmup, iters=iters))
        if done >= min(MIN_PASSES, passes) and comm.bcast(time.monotonic() - began > budget):
            break
    check("after timing")
    rows = [{"algorithm": a, "bytes": k, "time_s": min(t), "burst_s": t} for (a, k), t in bursts.items()]
    return {"ranks": comm.Get_size(), "cores": cores(), "passes": done, "iters": iters, "warmup": warmup,
            "window_bytes": capacity(), "wall_s": time.monotonic() - began, "rows": rows}


def _call(algorithm: str, x, out, comm):
    """One allreduce of ``x`` into ``out`` (allocated once, as ``ringlab bench`` times them): MPI's or ringlab's."""
    if algorithm == "mpi":
        return lambda: comm.Allreduce(x, out)
    from ...mpi.collectives import allreduce

    return lambda: allreduce(x, algorithm, comm=comm, agree=False, out=out)


def _main(arguments: str) -> None:
    """The MPI job :func:`measure_symmetric` starts: every rank measures, rank 0 writes the result."""
    import json

    from mpi4py import MPI

    asked = json.loads(arguments)
    result = measure_here(asked["smallest"], asked["largest"], asked["passes"], asked["iters"], asked["warmup"],
                          asked["budget"])
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(asked["out"], "w") as fh:
            json.dump(result, fh)


def _times(result: dict) -> dict[str, dict[int, float]]:
    """{algorithm: {bytes: seconds}}."""
    times: dict[str, dict[int, float]] = {}
    for r in result["rows"]:
        times.setdefault(r["algorithm"], {})[r["bytes"]] = r["time_s"]
    return times


def symmetric_rows(result: dict, sizes=None) -> list[dict]:
    """One row per size of ``sizes`` that was measured (by default :data:`TABLE_SIZES` and every size that
    :func:`symmetric_lesson`'s words name, :func:`named_sizes`): each algorithm's time, and which was fastest."""
    times = _times(result)
    sizes = set(TABLE_SIZES) | named_sizes(result) if sizes is None else set(sizes)
    rows = []
    for nbytes in sorted(set.intersection(*(set(t) for t in times.values()))):
        if nbytes not in sizes:
            continue
        here = {a: times[a][nbytes] for a in ALGORITHMS}
        rows.append({"size": format_bytes(nbytes), **{f"{a}_s": t for a, t in here.items()},
                     "fastest": NAMES[min(here, key=here.get)]})
    return rows


SYMMETRIC_COLUMNS = {"size": "size", "MPI's own (us)": "mpi_s", "one-shot (us)": "oneshot_s",
                     "two-shot (us)": "twoshot_s", "ring (us)": "ring_s", "fastest": "fastest"}


def _crossover(times: dict, first: str, second: str):
    """Where ``second`` overtakes ``first`` and stays ahead to the largest size (``measure.sweep``'s rule)."""
    rows = [{"algorithm": a, "bytes": k, "busbw_Bps": k / t} for a in (first, second) for k, t in times[a].items()]
    return measured_crossover(rows, first, second)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us"


def _faster(a: float, b: float) -> str:
    """'2.1x faster than', '1.3x slower than' or 'as fast as' (where both print alike): time ``a`` against ``b``."""
    if _us(a) == _us(b):
        return "as fast as"
    return f"{b / a:.1f}x faster than" if a < b else f"{a / b:.1f}x slower than"


def _x(ratio: float) -> str:
    """A ratio to one decimal ('1.3x'), or to two significant digits where one decimal would print a positive one as
    '0.0x' (a ring a thousand times faster on a busy machine: '0.00024x')."""
    if ratio >= 0.05 or ratio <= 0:
        return f"{ratio:.1f}x"
    return f"{ratio:.{1 - math.floor(math.log10(ratio))}f}x"


def _span(part: list[int]) -> str:
    """Sizes in words: 'from 8 B to 32 B', or 'at 8 B' where the part is one size (a sweep of two sizes)."""
    return (f"at {format_bytes(part[0])}" if len(part) == 1 else
            f"from {format_bytes(part[0])} to {format_bytes(part[-1])}")


def _ahead(a: float, b: float) -> bool:
    """Time ``a`` less than ``b`` as the words print them: two times that print alike are a tie, not a lead."""
    return a < b and _us(a) != _us(b)


def _mean_ratio(times: dict, top: str, bottom: str, sizes) -> float:
    """The geometric mean over ``sizes`` of ``top``'s time over ``bottom``'s."""
    return math.exp(sum(math.log(times[top][k] / times[bottom][k]) for k in sizes) / len(sizes))


def _runs(sizes: list[int], ahead) -> list[tuple[int, int]]:
    """The runs of consecutive ``sizes`` where ``ahead(size)`` holds, as (first, last)."""
    runs: list[list[int]] = []
    for i, k in enumerate(sizes):
        if ahead(k):
            if runs and runs[-1][1] == sizes[i - 1]:
                runs[-1][1] = k
            else:
                runs.append([k, k])
    return [(a, b) for a, b in runs]


def _ranges(runs: list[tuple[int, int]], largest: int) -> str:
    """Runs of sizes in words: 'at 512 B', 'from 4 KiB to 64 KiB', 'from 256 KiB up' (a run to ``largest``)."""
    return and_join([f"at {format_bytes(a)}" if a == b else f"from {format_bytes(a)} up" if b == largest else
                     f"from {format_bytes(a)} to {format_bytes(b)}" for a, b in runs])


def _led(times: dict, sizes: list[int], ahead: str, behind: str) -> tuple[str, set[int]]:
    """Where ``ahead`` took less time than ``behind``, every size measured: 'at every size', 'at no size', 'from 512 B
    up, except at 1 KiB', or the runs ('at 512 B and from 4 KiB up'); and the sizes those words name."""
    wins = _runs(sizes, lambda k: times[ahead][k] < times[behind][k])
    if not wins:
        return "at no size measured", set()
    if wins == [(sizes[0], sizes[-1])]:
        return "at every size measured", set()
    first = wins[0][0]
    missed = [k for k in sizes if k > first and not times[ahead][k] < times[behind][k]]
    if wins[-1][1] == sizes[-1] and len(missed) <= 3:
        return (f"from {format_bytes(first)} up" + (f", except at {and_join(map(format_bytes, missed))}" if missed
                                                    else ""), {first, *missed})
    return _ranges(wins, sizes[-1]), {k for run in wins for k in run}


def named_sizes(result: dict) -> set[int]:
    """The sizes :func:`symmetric_lesson`'s words name, so that a table of :func:`symmetric_rows` can show them."""
    times = _times(result)
    sizes = sorted(set.intersection(*(set(times[a]) for a in ALGORITHMS)))
    ends = max(1, min(EDGE, len(sizes) // 2))
    named = {sizes[0], sizes[-1], sizes[ends - 1], sizes[-ends]}
    times["best"] = {k: min(times["oneshot"][k], times["twoshot"][k]) for k in sizes}
    split = _crossover(times, "oneshot", "twoshot")
    if split.within:
        named.add(split.size)
        named |= {k for run in _runs([k for k in sizes if k < split.size],
                                     lambda k: times["twoshot"][k] < times["oneshot"][k]) for k in run}
    named |= {k for k in sizes if times["ring"][k] < times["best"][k]}
    return named | _led(times, sizes, "best", "mpi")[1]


def symmetric_lesson(result: dict) -> Finding:
    """The measurement in sentences computed from its numbers: who is fastest at the smallest size and why, how
    two-shot gains on one-shot as the size grows (and where it overtakes, beside PyTorch's published switch), the
    ring and MPI's own against the faster of the two. The conclusions compare ratios of about 1.3x or more, or
    geometric means over several sizes, so that they hold from run to run; where exactly one line crosses another
    is an observation, free to move with a busy machine's numbers."""
    times, n = _times(result), result["ranks"]
    sizes = sorted(set.intersection(*(set(times[a]) for a in ALGORITHMS)))
    small, large = sizes[0], sizes[-1]
    ends = max(1, min(EDGE, len(sizes) // 2))
    low, high = sizes[:ends], sizes[-ends:]
    first = {a: times[a][small] for a in ALGORITHMS}
    us = _us
    steps = {name: len(build(f"allreduce.{name}", n).steps) for name in ("oneshot", "twoshot", "ring")}
    times["best"] = {k: min(times["oneshot"][k], times["twoshot"][k]) for k in sizes}
    fastest = min(first, key=first.get)
    tied = [a for a in ALGORITHMS if us(first[a]) == us(first[fastest])]  # a busy machine's times can print alike
    shared = " (more ranks than cores: the times include the scheduler)" if n > result["cores"] else ""
    said = [f"Measured on this machine: {n} ranks on {result['cores']} cores{shared}, float32 sums of "
            f"{format_bytes(small)} to {format_bytes(large)}, each time the lowest median of {result['passes']} "
            f"bursts of {result['iters']} calls spread over the run (each call from a barrier), every result checked "
            "against MPI's Allreduce" + (f"; calls above the window's {format_bytes(result['window_bytes'])} a rank "
                                         "went through it in rounds" if large > result["window_bytes"] else "") + "."]

    one_vs_ring, one_vs_two = _ahead(first["oneshot"], first["ring"]), _ahead(first["oneshot"], first["twoshot"])
    text = (f"At {format_bytes(small)} " + (f"{NAMES[fastest]} was the fastest" if len(tied) == 1 else
                                             f"{and_join([NAMES[a] for a in tied])} were the fastest, alike")
            + f" ({us(first[fastest])}). One-shot took "
            f"{us(first['oneshot'])}, {_faster(first['oneshot'], first['ring'])} the ring's {us(first['ring'])}")
    text += (f": one synchronisation against the ring's 2(n-1) = {steps['ring']} steps, each an MPI message to send, "
             "match and copy." if one_vs_ring else
             f", though it synchronises once against the ring's 2(n-1) = {steps['ring']} steps: something other than "
             "the count of steps set the pace here.")
    text += (f" Two-shot took {us(first['twoshot'])}: {_faster(first['twoshot'], first['ring'])} the ring"
             + (f", though on {n} ranks it synchronises as many times as the ring takes steps (a flag in shared "
                "memory costs less than a message)" if steps["twoshot"] == steps["ring"]
                and _ahead(first["twoshot"], first["ring"]) else "")
             + f", and {_faster(first['twoshot'], first['oneshot'])} one-shot"
             + (", whose single synchronisation it doubles." if one_vs_two else "."))
    if tied == ["mpi"]:
        text += (f" MPI's own call is C inside MPICH, with none of ringlab's Python around it: one-shot took "
                 f"{first['oneshot'] / first['mpi']:.1f}x its time.")
    said.append(text)

    before, after = (_mean_ratio(times, "twoshot", "oneshot", part) for part in (low, high))
    gains = float(f"{after:.2f}") < float(f"{before:.2f}")  # as printed: 1.00x then 1.00x is no gain
    means = " (geometric means)" if len(low) > 1 else ""
    split = _crossover(times, "oneshot", "twoshot")
    text = (f"As messages grow two-shot {'gains on' if gains else 'does not gain on'} one-shot: it took "
            f"{before:.2f}x one-shot's time {_span(low)} and {after:.2f}x {_span(high)}{means}. "
            f"One-shot has every rank add {n - 1} whole buffer{'s' * (n > 2)} of its peers into its own, two-shot only "
            f"its 1/{n} chunk of each (then it copies the others' finished chunks), at the price of a second "
            "synchronisation. ")
    if split.within:
        earlier = _runs([k for k in sizes if k < split.size], lambda k: times["twoshot"][k] < times["oneshot"][k])
        text += (f"Here two-shot overtook one-shot at {format_bytes(split.size)} and stayed ahead up to "
                 f"{format_bytes(large)}" + (f" (below that it was also ahead {_ranges(earlier, large)})" if earlier
                                             else "") + ".")
    elif split.size is not None:
        text += "Here two-shot was ahead of one-shot at every size measured."
    else:
        text += f"Here two-shot was not ahead of one-shot at {format_bytes(large)}."
    if split.size is not None:
        where = ("below" if split.size < PYTORCH_ONE_SHOT_BYTES else "at" if split.size == PYTORCH_ONE_SHOT_BYTES
                 else "above")
        text += (f" PyTorch's SymmetricMemory switches from one-shot to two-shot above "
                 f"{format_bytes(PYTORCH_ONE_SHOT_BYTES)} (and to NCCL above {format_bytes(PYTORCH_TWO_SHOT_BYTES)}; "
                 f"published, thresholds set for GPUs on NVLink): this machine's switch came {where} it.")
    said.append(text)

    ring_over = _mean_ratio(times, "ring", "best", sizes)
    ring_wins = [k for k in sizes if times["ring"][k] < times["best"][k]]
    text = (f"Over all {len(sizes)} sizes the ring took {_x(ring_over)} the time of the faster of one-shot and "
            "two-shot (geometric mean); " + (f"it was ahead of both at {len(ring_wins)} of them ("
                                             + ", ".join(format_bytes(k) for k in ring_wins) + ")."
                                             if ring_wins else "it was ahead of both at none of them."))
    if steps["twoshot"] == steps["ring"]:
        text += (f" On {n} ranks it takes as many steps as two-shot and reads as many bytes a rank (2(n-1)/n of the "
                 "buffer), but each of its steps is a message through MPI, not a read of a peer's memory.")
    text += (" The ring needs nothing but a link to each neighbour, so it runs across nodes, where no rank can read "
             "another's memory; one-shot and two-shot need every peer's buffer at hand: one node.")
    said.append(text)

    mpi_over = _mean_ratio(times, "mpi", "best", high)
    led, _ = _led(times, sizes, "best", "mpi")
    where = _span(high)
    text = (f"{where[0].upper() + where[1:]} MPI's own allreduce took {_x(mpi_over)} the time of the faster of one-shot "
            f"and two-shot{' (geometric mean)' if len(high) > 1 else ''}. Of all {len(sizes)} sizes, the pair took less time than MPI's own {led}"
            + ("" if not times["mpi"][large] < times["best"][large] or led == "at no size measured" else
               f"; at {format_bytes(large)} MPI's own was ahead") + ".")
    said.append(text)

    conclusions = (
        f"one-shot {'is' if one_vs_ring else 'is not'} faster than the ring at the smallest size",
        f"one-shot {'is' if one_vs_two else 'is not'} faster than two-shot at the smallest size",
        f"two-shot {'gains' if gains else 'does not gain'} on one-shot as messages grow",
        f"the ring is {'slower' if ring_over > 1 else 'not slower'} than one-shot or two-shot across the sizes",
        f"one-shot or two-shot {'beats' if mpi_over > 1 else 'does not beat'} MPI's own at the largest sizes")
    observations = (f"{NAMES[fastest]} is the fastest at the smallest size" if len(tied) == 1 else
                    f"{and_join([NAMES[a] for a in tied])} tie as the fastest at the smallest size",
                    f"two-shot overtakes one-shot at {format_bytes(split.size)}" if split.within else
                    "two-shot does not overtake one-shot within the sizes measured",
                    f"the ring is ahead of both at {len(ring_wins)} sizes")
    return Finding("\n".join(said), conclusions, observations)


def predicted_rows(machine: str = PREDICTED_MACHINE, sizes=TABLE_SIZES) -> list[dict]:
    """On ``machine``'s GPUs (a preset), float32: one-shot and two-shot as NCCL's model of its symmetric kernels
    prices them (``rl.predict``, :mod:`ringlab.predict.symmetric`), and what NCCL's tuner picks without symmetric
    memory (``rl.predict_nccl``), by size. All predicted."""
    topology = preset(machine)
    n = topology.nranks
    rows = []
    for nbytes in sizes:
        one, two = (predict(build(f"allreduce.{name}", n), nbytes, topology, itemsize=4) for name in SYMMETRIC)
        usual = predict_nccl("allreduce", nbytes, topology)
        rows.append({"machine": machine, "ranks": n, "size": format_bytes(nbytes), "bytes": nbytes,
                     "oneshot_s": one.seconds, "twoshot_s": two.seconds, "usual": f"{usual.algorithm}/{usual.protocol}",
                     "usual_s": usual.seconds})
    return rows


PREDICTED_COLUMNS = {"size": "size", "one-shot (us)": "oneshot_s", "two-shot (us)": "twoshot_s",
                     "without symmetric memory (us)": "usual_s", "NCCL's pick there": "usual"}


def describe_predicted(rows: list[dict]) -> str:
    """The predictions in words: one-shot against NCCL's usual kernels at the smallest size, and where NCCL's own
    pick moves from one-shot to two-shot on 2 and on this machine's GPUs."""
    from ...predict.symmetric import crossover

    topology = preset(rows[0]["machine"])
    arch, n = topology.machine.arch, rows[0]["ranks"]
    first = rows[0]
    switch = {count: crossover(count, arch) for count in sorted({2, n})}
    return (f"Predicted for {n} GPUs of {first['machine']} ({arch}): at {first['size']} one-shot takes "
            f"{first['oneshot_s'] * 1e6:.1f} us, two-shot {first['twoshot_s'] * 1e6:.1f} us and NCCL without "
            f"symmetric memory ({first['usual']}) {first['usual_s'] * 1e6:.1f} us, "
            f"{first['usual_s'] / first['oneshot_s']:.1f}x one-shot's time. NCCL's pick between its symmetric kernels "
            "moves from one-shot to two-shot at " + " and ".join(f"{format_bytes(k)} on {c} GPUs"
                                                                    for c, k in switch.items())
            + ": the more GPUs, the more whole buffers one-shot reads and adds, and the sooner two-shot pays.")


def symmetric_plot(result: dict):
    """Time per call against size, log-log, one line per algorithm (measured on this machine)."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    fig = go.Figure()
    for i, (algorithm, by) in enumerate(_times(result).items()):
        sizes = sorted(by)
        fig.add_scatter(x=sizes, y=[by[k] * 1e6 for k in sizes], mode="lines+markers", name=NAMES[algorithm],
                        marker_color=qualitative.Plotly[i], hoverinfo="text",
                        hovertext=[f"{NAMES[algorithm]}: {format_bytes(k)}, {by[k] * 1e6:.3g} µs" for k in sizes])
    fig.update_layout(title=f"measured on this machine: allreduce on {result['ranks']} ranks, time per call (lowest "
                            f"median of {result['passes']} bursts)",
                      xaxis=dict(type="log", title="message size per rank (bytes)"),
                      yaxis=dict(type="log", title="time per call (µs)"), legend=dict(orientation="h", y=-0.2))
    from ...viz.axes import finish_log_axes

    return finish_log_axes(fig)  # decades labelled in full, minor ticks bare, ranged to the data


if __name__ == "__main__":
    import sys

    _main(sys.argv[1])
