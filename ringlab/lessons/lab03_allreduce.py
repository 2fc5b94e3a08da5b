"""Lab 03, allreduce: the ring's reduce-scatter rule and bus bandwidth derived rather than stated
(exercises), the ring against naive measured on this machine and on an emulated one (:func:`sweep_lesson`),
algbw against busbw over the ranks (:func:`busbw_over_ranks`, :func:`scaling_lesson`), and the lab's quiz.

nccl-tests reports two rates for every collective: algbw = size / time, and busbw = algbw x a
factor per collective. The factor is what the busiest rank's link carries, in units of the size,
when the collective runs its bandwidth-optimal algorithm: :data:`OPTIMAL` names the schedule for
each, and counting its bytes with :func:`ringlab.traffic` gives nccl-tests' factors
(:func:`bus_factor_from_traffic`, the lab's exercise).
"""
from __future__ import annotations

from ..algorithms import build
from ..lab.exercises import NotDoneYet, compare, exercise
from ..lab.findings import Finding
from ..lab.words import share
from ..lab.quiz import Question, Quiz
from ..measure.bench import in_machine_units
from ..measure.sweep import busiest_rank_bytes, busbw_by_size, describe_sweep, measured_crossover
from ..measure.units import format_bytes
from ..predict.fitting import fit_rows
from ..predict.costmodel import busbw, predict
from ..schedule import REDUCE, Schedule, Step, bus_factor, make_schedule, nccl_tests_size
from ..simulate import ScheduleError, check, traffic
from ..topology import from_spec, uniform

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
# The lab's emulated machine: 200 MB/s each way per rank and 0.5 ms a message, so that its sweep runs from
# latency-bound (at 64 KiB a ring step's 16 KiB chunk takes 0.08 ms on the link, beside 0.5 ms of latency) to
# bandwidth-bound (at 16 MiB, 21 ms beside it). It runs in virtual time with this CPU's work counted as the CPU
# time it took (compute="cpu", the default): a ring step's addition of its chunk takes a few percent of that step's
# link time, and naive's root adds n-1 whole buffers, so what the CPU adds is in the numbers, and stays small.
MACHINE = "uniform:0.2:500"
EMULATED_SIZES = [1 << k for k in range(16, 25, 2)]  # 64 KiB .. 16 MiB: its largest takes a quarter second there
AGREES = 0.2  # a measured ratio within 20% of what the byte counts give agrees with them
FLAT = 0.05  # busbw within 5% across rank counts stays flat
# For the rank counts: links of 200 MB/s with 20 us a message, so that at 4 MiB the 2(n-1) latencies of a ring
# stay under 2% of the call even on 16 ranks (busbw = B / (1 + alpha n B / K)): what busbw shows is the bytes on
# each link. compute="model" (OVER_RANKS_COMPUTE): this CPU's work never counts, and a reduction costs nothing on
# these links (no reduce rate given), so 16 ranks sharing 2 cores time the links alone, as the cost model prices
# them; with compute="cpu" each rank's additions would add their CPU time, a few percent at every rank count.
OVER_RANKS = "uniform:0.2:20"
OVER_RANKS_COMPUTE = "model"
RANKS = (2, 4, 8, 16)

# the bandwidth-optimal schedule of each collective, whose traffic nccl-tests' factor describes
OPTIMAL = {"allreduce": ("allreduce.ring", {}), "reduce_scatter": ("reduce_scatter.ring", {}),
           "allgather": ("allgather.ring", {}), "broadcast": ("broadcast.chain", {"segments": 64}),
           "reduce": ("reduce.chain", {"segments": 64}), "alltoall": ("alltoall.pairwise", {})}


def bandwidth_optimal(kind: str, nranks: int) -> Schedule:
    """The schedule of collective ``kind`` on ``nranks`` ranks that moves the fewest bytes per link."""
    if kind not in OPTIMAL:
        raise ValueError(f"no bandwidth-optimal schedule for {kind!r}; known: {', '.join(OPTIMAL)}")
    name, options = OPTIMAL[kind]
    return build(name, nranks, **options)


def bus_factor_from_traffic(kind: str, nranks: int, nbytes: int = 1 << 20) -> float:
    """Bytes the busiest rank receives in the bandwidth-optimal schedule, over nccl-tests' size."""
    schedule = bandwidth_optimal(kind, nranks)
    return max(traffic(schedule, nbytes)["received"]) / nccl_tests_size(kind, nranks, nbytes)


def scaling_rows(alpha: float, bandwidth: float, ranks=(2, 4, 8), sizes=tuple(1 << k for k in range(12, 29, 2)),
                 algorithm: str = "allreduce.ring") -> list[dict]:
    """Predicted (cost model, uniform network at ``alpha`` and ``bandwidth``) algbw and busbw of
    ``algorithm`` over ``ranks`` and ``sizes``: rows of ranks, bytes, seconds, algbw_Bps, busbw_Bps."""
    kind = algorithm.split(".", 1)[0]
    rows = []
    for n in ranks:
        schedule, network = build(algorithm, n), uniform(n, bandwidth=bandwidth, latency=alpha)
        for nbytes in sizes:
            seconds = predict(schedule, int(nbytes), network).seconds
            algbw = nbytes / seconds
            rows.append({"ranks": n, "bytes": int(nbytes), "seconds": seconds, "algbw_Bps": algbw,
                         "busbw_Bps": algbw * bus_factor(kind, n)})
    return rows


def links_of(machine: str, nranks: int) -> tuple[float, float]:
    """(alpha, bandwidth) of one message between two ranks of an emulated uniform ``machine``, in its own units
    (a run ``@SCALE`` times slower takes ``SCALE`` times as long)."""
    topology, _ = from_spec(machine, nranks)
    return topology.channel_latency[list(topology.route(0, 1))].sum(), topology.channel_rate[0]


def sweep_lesson(raw: dict, emulated: dict, cores: int) -> Finding:
    """The ring against naive on this machine and on the emulated one (``ringlab.measure.bench.run`` results
    with ring, naive and, on this machine, mpi), in sentences from the numbers: this machine's read back as it
    is, the emulated one's against the byte counts and the links it ran on."""
    n = raw["ranks"]
    raw_fits = {name: fit_rows(raw["rows"], name, n) for name in ("ring", "naive")}
    said = [f"On this machine ({n} ranks on {cores} cores):", describe_sweep(raw["rows"], raw_fits, n, cores)]
    rows, m = in_machine_units(emulated), emulated["ranks"]
    cross = measured_crossover(rows, "naive", "ring")
    ring, naive = busbw_by_size(rows, "ring"), busbw_by_size(rows, "naive")
    top = max(set(ring) & set(naive))
    ratio, counted = ring[top] / naive[top], busiest_rank_bytes("naive", m) / busiest_rank_bytes("ring", m)
    topology, scale = from_spec(emulated["emulation"]["spec"], m)
    times = {name: {k: predict(build(f"allreduce.{name}", m), k, topology, itemsize=4).seconds for k in sorted(ring)}
             for name in ("ring", "naive")}
    expected = times["naive"][top] / times["ring"][top]
    ahead = [k for k in sorted(ring) if times["ring"][k] < times["naive"][k]]
    ahead_from = None  # the smallest size from which the model puts the ring ahead at every larger size
    for k in sorted(ring, reverse=True):
        if k not in ahead:
            break
        ahead_from = k
    agrees = abs(ratio / expected - 1) <= AGREES
    fitted = fit_rows(rows, "ring", m)
    alpha, bandwidth = links_of(emulated["emulation"]["spec"], m)
    recovered = abs(fitted.bandwidth / bandwidth - 1) <= 0.25
    passes = (f"overtakes naive at {format_bytes(cross.size)}" if cross.within else
              "is ahead of naive at every size measured" if cross.size is not None else
              f"is not ahead of naive at {format_bytes(top)}")
    wall = next((r.get("wall_time_s") for r in rows if r["algorithm"] == "ring" and r["bytes"] == top), None)
    said += [f"On the emulated machine ({emulated['emulation']['label']}, {m} ranks; times in virtual time, its links' "
             f"times with this CPU's additions counted as the CPU time they took): the ring {passes}; the cost model "
             "puts it " + ("ahead at every size too" if ahead_from == min(ring) else
                           f"ahead from {format_bytes(ahead_from)} up" if ahead_from is not None else
                           "behind at the largest size")
             + (" (on these links naive's root pays a latency for each of its n-1 messages in and n-1 out, as many as "
                "the ring's 2(n-1) steps, and carries more bytes)" if ahead_from == min(ring) else "")
             + f". At {format_bytes(top)} the ring's busbw was {ratio:.2f}x naive's. The busiest ranks' bytes differ "
             f"{counted:.2f}x (n/2), and on these full-duplex links the ring sends and receives at once while naive's "
             f"root first only receives, then only sends: the cost model predicts {expected:.2f}x for these links. "
             + (f"Measured within {AGREES:.0%} of it: the ring behaves as bandwidth-optimal once links set the pace."
                if agrees else f"Measured more than {AGREES:.0%} from it: something besides the links (this "
                "machine's own work per step, the root's additions) sets the pace there.")
             + (f" That {format_bytes(top)} ring took {ring_time(rows, top) * 1e3:.1f} ms on the emulated machine; "
                f"this machine took {wall * 1e3:.1f} ms of wall time to run it." if wall else ""),
             f"Fitted to the emulated ring's times: alpha {fitted.alpha * 1e3:.2f} ms and {fitted.bandwidth / 1e6:.0f} "
             f"MB/s, against links of {alpha * 1e3:.2f} ms and {bandwidth / 1e6:.0f} MB/s (the fit misses its worst "
             f"measurement by {share(fitted.worst_residual)}): " + (
                 "it recovers the links' bandwidth." if recovered else "it does not recover the links' bandwidth.")]
    observed = [f"the ring {'overtakes' if measured_crossover(raw['rows']).size is not None else 'does not overtake'} "
                "naive on this machine"]
    conclusions = [f"the ring {'stays ahead of' if cross.size is not None else 'does not stay ahead of'} naive at large "
                   "sizes on the emulated machine", f"the ring's advantage {'matches' if agrees else 'does not match'} the "
                   "prediction on the emulated machine", f"the fit {'recovers' if recovered else 'does not recover'} the "
                   "emulated links' bandwidth"]
    return Finding("\n".join(said), tuple(conclusions), tuple(observed))


def ring_time(rows: list[dict], nbytes: int) -> float:
    """The ring's time at ``nbytes`` in sweep ``rows``."""
    return next(r["time_s"] for r in rows if r["algorithm"] == "ring" and r["bytes"] == nbytes)


def busbw_over_ranks(machine: str = OVER_RANKS, ranks=RANKS, nbytes: int = 4 * MiB, iters: int = 5,
                     compute: str = OVER_RANKS_COMPUTE) -> list[dict]:
    """The ring allreduce of ``nbytes`` measured on the emulated ``machine`` at each rank count, one MPI job each
    (``ringlab bench --emulate --emulate-compute``), in virtual time with a call's own work counted as ``compute``
    says: rows of ranks, bytes, compute, and time_s, algbw_Bps and busbw_Bps in the emulated machine's units (the
    virtual time / its scale), with ``measured_s`` (the virtual time) and ``wall_time_s`` (what this machine took
    a call)."""
    import json
    import tempfile
    from pathlib import Path

    from ..cluster.launch import run_mpi

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for n in ranks:
            out = Path(folder) / f"{n}.json"
            done = run_mpi(n, ["-m", "ringlab", "bench", "-a", "ring", "-b", str(nbytes), "-e", str(nbytes), "--iters",
                               str(iters), "-w", "1", "--emulate", machine, "--emulate-compute", compute, "--json",
                               str(out)], timeout=600)
            if done.returncode != 0:
                raise RuntimeError(f"the {n}-rank run failed:\n{done.stderr[-2000:]}")
            rows += [dict(r, ranks=n, compute=compute) for r in in_machine_units(json.loads(out.read_text()))]
    return rows


def scaling_lesson(measured: list[dict], machine: str = OVER_RANKS) -> Finding:
    """algbw and busbw of the ring over rank counts, measured on the emulated ``machine`` (``busbw_over_ranks``,
    in that machine's units) beside the cost model's prediction for the same links, in sentences from the numbers."""
    last = sorted(measured, key=lambda r: r["ranks"])
    first, final = last[0], last[-1]
    spread = max(r["busbw_Bps"] for r in last) / min(r["busbw_Bps"] for r in last) - 1
    alpha, bandwidth = links_of(machine, final["ranks"])
    predicted = {r["ranks"]: r for r in scaling_rows(alpha, bandwidth, ranks=[r["ranks"] for r in last],
                                                     sizes=(final["bytes"],))}
    flat = spread <= FLAT
    slower = f", run {from_spec(machine)[1]:g}x slower, in its units" if "@" in machine else ""
    compute = first.get("compute")
    counted = {"model": "; compute='model': this CPU's work never counts, so the times are the links' alone",
               "cpu": "; compute='cpu': each rank's additions count as the CPU time they took"}.get(compute, "")
    text = (f"Measured on the emulated machine ({machine.split('@')[0]}{slower}, in virtual time{counted}) at "
            f"{format_bytes(final['bytes'])}: from {first['ranks']} to "
            f"{final['ranks']} ranks algbw went from {first['algbw_Bps'] / 1e6:.0f} to {final['algbw_Bps'] / 1e6:.0f} "
            f"MB/s, because each rank's link carries 2(n-1)/n of the buffer; busbw went "
            + ", ".join(f"{r['busbw_Bps'] / 1e6:.0f} MB/s at {r['ranks']}" for r in last) +
            " (predicted for the same links: " + ", ".join(f"{predicted[r['ranks']]['busbw_Bps'] / 1e6:.0f}"
                                                            for r in last) +
            f"), within {spread:.1%} of each other: " + (
                f"busbw stays near the link's {bandwidth / 1e6:.0f} MB/s whatever n is." if flat else
                f"more than the {FLAT:.0%} a flat line allows: the 2(n-1) steps' latency, or this machine's own work "
                "per step, weighs at this size."))
    walls = [r for r in last if r.get("wall_time_s")]
    if walls:
        text += (" This machine took " + ", ".join(f"{r['wall_time_s'] * 1e3:.0f} ms" for r in walls) + " of wall "
                 "time a call at " + ", ".join(str(r["ranks"]) for r in walls) + " ranks to run them: its own "
                 "cores' work, shared by more ranks, which the virtual clocks leave out.")
    return Finding(text, (f"busbw {'stays flat' if flat else 'does not stay flat'} across ranks on the emulated "
                          "machine", "algbw falls as ranks are added" if final["algbw_Bps"] < first["algbw_Bps"]
                          else "algbw does not fall as ranks are added"))


# --- the exercises --------------------------------------------------------------------------------------

def _send_chunk(j, i, n):
    return (j - i) % n

def ring_with_rule(rule, nranks: int):
    """A ring allreduce whose reduce-scatter sends chunk ``rule(j, i, n)`` from rank j at step i,
    followed by the textbook allgather (rank j sends chunk (j-i+1) mod n)."""
    steps = []
    for i in range(nranks - 1):
        chunks = []
        for j in range(nranks):
            chunk = rule(j, i, nranks)
            if chunk is None and i == 0 and j == 0:
                raise NotDoneYet("send_chunk returned None")
            if isinstance(chunk, bool) or not isinstance(chunk, int):
                raise AssertionError(f"send_chunk({j}, {i}, {nranks}) returned {chunk!r}; it must return an int")
            if not 0 <= chunk < nranks:
                raise AssertionError(f"send_chunk({j}, {i}, {nranks}) returned {chunk}, but chunks are 0..{nranks - 1} "
                                     "(hint: % n keeps an index in range)")
            chunks.append(chunk)
        steps.append(Step.columns(list(range(nranks)), [(j + 1) % nranks for j in range(nranks)], chunks, REDUCE,
                                  "reduce-scatter"))
    steps += build("allreduce.ring", nranks).steps[nranks - 1:]  # the textbook allgather
    return make_schedule("allreduce", nranks, nranks, steps, name="your ring")

@exercise(_send_chunk, "rule")
def check_reduce_scatter_rule(rule, sizes=(2, 3, 4, 5, 8)):
    """Build a ring with ``rule`` for 2, 3, 4, 5 and 8 ranks and put each through the checker."""
    for n in sizes:
        try:
            check(ring_with_rule(rule, n))
        except ScheduleError as err:
            raise AssertionError(
                f"with {n} ranks your rule does not give an allreduce. The checker says:\n  {err}\n"
                "Hint: at step 0 rank j sends its own chunk j; each step after that it passes on the chunk "
                "it has just added into, which came from rank j-1.") from None
    print(f"Correct: with {', '.join(map(str, sizes))} ranks every rank ends with every chunk complete.")

def _bus_factor(kind, n):
    return bus_factor_from_traffic(kind, n)

@exercise(_bus_factor, "factor")
def check_bus_factor(bus_factor):
    """``bus_factor(kind, n)``: counted from the traffic of the collective's bandwidth-optimal schedule,
    compared with the factors nccl-tests defines (``ringlab.schedule.BUS_FACTORS``)."""
    from ..schedule import bus_factor as nccl_tests

    cases = [dict(kind=kind, n=n) for kind in ("allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
                                                "alltoall") for n in (2, 3, 4, 8)]
    compare(bus_factor, "bus_factor", cases, lambda kind, n: nccl_tests(kind, n),
             "take the most bytes any rank receives (rl.traffic(schedule, nbytes)['received']) and divide by the "
             "size nccl-tests prints: one rank's buffer, nbytes, except for alltoall, where it is nbytes / n.",
             rel_tol=1e-3, unit="(nccl-tests' factor)")
    print("Correct: the bytes on the busiest link, over the size, give nccl-tests' factors for all six collectives.")


# --- the quiz -------------------------------------------------------------------------------------------

def _ring_sent_gib(n, gib):
    return max(traffic(build("allreduce.ring", n), int(gib * GiB))["sent"]) / GiB


def _naive_root_mib(n, mib):
    return traffic(build("allreduce.naive", n), mib * MiB)["received"][0] / MiB


def _ring_chunk(n, rank, step):
    return next(int(t.chunk) for t in build("allreduce.ring", n).steps[step] if t.src == rank)


def _busbw_gbps(n, mib, ms):
    return busbw("allreduce", n, mib * MiB, ms * 1e-3) / 1e9


QUIZ = Quiz("03", [
    Question(
        "A ring allreduce of a {gib:g} GiB buffer on {n} ranks: how many GiB does each rank send?",
        _ring_sent_gib, given=dict(n=8, gib=1.0), unit="GiB",
        derived=lambda n, gib: {"steps": 2 * (n - 1), "naive": _naive_root_mib(n, int(gib * 1024)) / 1024},
        worked="{steps} steps (reduce-scatter, then allgather), each sending one chunk of K/n: 2(n-1)/n x K = "
               "{answer:.3f} GiB, counted from ringlab's schedule. However many ranks, it stays under 2K; the naive "
               "root receives {naive:g} GiB.",
        hint="2(n-1) steps of one chunk each, and a chunk is K/n."),
    Question(
        "A naive allreduce (reduce to rank 0, then broadcast) of {mib} MiB on {n} ranks: how many MiB does the root "
        "receive?",
        _naive_root_mib, given=dict(n=16, mib=256), unit="MiB",
        derived=lambda n, mib: {"ring": max(traffic(build("allreduce.ring", n), mib * MiB)["received"]) / MiB},
        worked="Every other rank sends it the whole buffer: (n-1) x K = {answer:g} MiB, and it sends as much back. "
               "A ring rank receives {ring:g} MiB for the same allreduce.",
        hint="every rank but the root sends the root its whole buffer."),
    Question(
        "Ring allreduce on {n} ranks: at step i = {step} of the reduce-scatter, which chunk does rank j = {rank} send "
        "to rank {next_rank}?",
        _ring_chunk, given=dict(n=5, rank=1, step=3), rel_tol=0,
        derived=lambda n, rank, step: {"next_rank": (rank + 1) % n},
        worked="(j - i) mod n = ({rank} - {step}) mod {n} = {answer}, read from ringlab's `allreduce.ring` schedule: "
               "at "
               "step 0 a rank sends its own chunk, and each step after it passes on the chunk it has just added into.",
        hint="exercise 1's rule: chunk (j - i) mod n; Python's % gives a result from 0 to n-1."),
    Question(
        "nccl-tests reports an allreduce of {mib} MiB on {n} GPUs taking {ms:g} ms. What bus bandwidth does it print, "
        "in GB/s (1e9 bytes/s)?",
        _busbw_gbps, given=dict(n=8, mib=256, ms=20.0), unit="GB/s",
        derived=lambda n, mib, ms: {"algbw": mib * MiB / (ms * 1e-3) / 1e9, "factor": 2 * (n - 1) / n},
        worked="algbw = size / time = {algbw:.2f} GB/s; busbw = algbw x 2(n-1)/n = {algbw:.2f} x {factor:g} = "
               "{answer:.2f} GB/s: what each GPU's link carried per second, comparable across rank counts.",
        hint="algbw = bytes / seconds (1 MiB = 2**20 bytes); busbw multiplies it by 2(n-1)/n for allreduce."),
])
