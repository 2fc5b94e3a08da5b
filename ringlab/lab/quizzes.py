"""Every lab's quiz (:data:`QUIZZES`): each expected answer computed by ringlab from the stated inputs.

Answers come from the schedules (``rl.traffic``, the steps of a build), the cost model (``rl.predict``
on ``rl.topology.uniform`` or a preset), the bus factors, the formulas the labs' exercises check, the
published data set (named in the worked answer), or this machine (lab 00). The data model and the
checker are in :mod:`ringlab.lab.quiz`.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..algorithms import build
from ..predict.costmodel import best_segments, busbw, predict
from ..simulate import traffic
from ..topology import pcie_bandwidth, uniform
from ..topology.presets import ENCODING, NVLINK2, PCIE3_X16
from .quiz import Question

GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10


def _join(items) -> str:
    items = [str(i) for i in items]
    return " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]


# --- lab 00: your machine ------------------------------------------------------------------------------

def _pcie_gbytes(generation, lanes):
    return pcie_bandwidth(generation, lanes) / 1e9


def _cores():
    from ..mpi.launch import cores

    return cores()


def _cores_verdict():
    n = _cores()
    return {"verdict": f"The labs run up to 4 ranks, so here they share {n} core{'s' * (n > 1)}: a waiting rank "
                       "yields its core, but every timing includes the operating system's scheduler." if n < 4 else
                       f"A lab's 4 ranks each get a core of their own (of {n})."}


def _gpu_links(preset, gpu):
    """{peer: NVLinks between ``gpu`` and peer} on a DGX-1 preset (NVLink 2.0 links of NVLINK2 each)."""
    from ..topology import preset as load_preset

    out = {}
    for link in load_preset(preset).links:
        if link.kind == "nvlink" and f"gpu{gpu}" in (link.a, link.b):
            peer = int((link.b if link.a == f"gpu{gpu}" else link.a)[3:])
            out[peer] = round(link.bandwidth / NVLINK2)
    return out


def _nvlinks_between(preset, a, b):
    return _gpu_links(preset, a).get(b, 0)


def _dgx1_links(preset, a, b):
    links = _gpu_links(preset, a)
    return {"singles": _join(sorted(p for p, k in links.items() if k == 1)),
            "doubles": _join(sorted(p for p, k in links.items() if k == 2)),
            "unlinked": _join([p for p in range(8) if p != a and p not in links]), "per_link": NVLINK2 / 1e9,
            "total": sum(links.values()),
            "mark": f"the line between them is wider and marked x{links[b]}" if links.get(b, 0) > 1 else
                    "a plain line joins them" if b in links else "no line joins them"}


def _h100_peer(name):
    from ..measure import published
    from ..topology import preset

    peer = published.peer_matrix(name, "unidirectional_enabled")
    peak = preset("hgx-h100-8").peer_bandwidth_matrix()
    off = ~np.eye(len(peer), dtype=bool)
    return peer[off], peak[off], published.load(name).label


def _h100_fraction(name):
    peer, peak, _ = _h100_peer(name)
    return float(np.median(peer / peak))


def _h100_numbers(name):
    peer, peak, label = _h100_peer(name)
    return {"median": float(np.median(peer)) / 1e9, "peak": float(peak[0]) / 1e9, "label": label}


LAB00 = [
    Question(
        "A GPU sits in a x16 slot that is wired as x{lanes}, on PCIe {generation}.0. How many GB/s can it copy "
        "each way?",
        _pcie_gbytes, given=dict(generation=4, lanes=8), unit="GB/s",
        derived=lambda generation, lanes: {"rate": ENCODING[generation][0], "useful": ENCODING[generation][1],
                                           "x16": _pcie_gbytes(generation, 16)},
        worked="{rate:g} GT/s per lane x {useful:.4f} useful bits per bit sent x {lanes} lanes / 8 bits per byte "
               "= {answer:.3f} GB/s each way, half the {x16:.3f} GB/s of all 16 lanes (ringlab's "
               "`pcie_bandwidth({generation}, {lanes})`). NVML reports the width a link trained at "
               "(`facts[\"gpus\"]` from `rl.topology.discover()`): x8 where you expected x16 is worth a look.",
        hint="transfer rate (GT/s per lane) x encoding efficiency x lanes / 8 bits per byte; PCIe 4.0 runs "
             "16 GT/s per lane with 128b/130b encoding."),
    Question(
        "How many cores may this notebook's process run on? Read it from the line \"ranks and cores\" that "
        "`doctor` printed at the top of the lab.",
        _cores, unit="cores", rel_tol=0, derived=_cores_verdict,
        worked="`doctor` counted {answer}: the cores this process may run on (its CPU affinity), read on this "
               "machine when the check ran. {verdict}",
        hint="the first cell printed doctor's report; the line that starts with \"ranks and cores:\" gives the "
             "count."),
    Question(
        "In the picture of the DGX-1 (V100), how many NVLinks join GPU {a} and GPU {b}?",
        _nvlinks_between, given=dict(preset="dgx1-v100", a=0, b=3), unit="links", rel_tol=0, derived=_dgx1_links,
        worked="{answer}: {mark} (ringlab's `{preset}` preset, from published figures). GPU {a} has {total} "
               "NVLinks in all: two each to GPUs {doubles}, one each to GPUs "
               "{singles}, and none to GPUs {unlinked}, whose copies go through PCIe switches and the CPUs. At "
               "{per_link:g} GB/s each way per NVLink 2.0 link, the pair {a}-{b} has {answer} x {per_link:g} GB/s.",
        hint="look for the lines marked x2 in the DGX-1 figure; a plain line is one link."),
    Question(
        "In the heatmap of the eight H100s (published, P2P on), what fraction of the NVLink peak does the median "
        "GPU pair reach? Answer with a fraction between 0 and 1.",
        _h100_fraction, given=dict(name="B03_kr_h100x8_hgx_p2p"), rel_tol=0.05, derived=_h100_numbers,
        worked="The median pair copied {median:.0f} GB/s against a peak of {peak:.0f} GB/s (the NVLink peak of "
               "the `hgx-h100-8` preset): {answer:.2f}, as the cell under the heatmap prints ({label}).",
        hint="hover over the heatmap, or read the line printed under it: it gives the median pair as a percentage "
             "of the NVLink peak (write 50% as 0.5)."),
]


# --- lab 01: moving bytes ------------------------------------------------------------------------------

def _one_message(nbytes, alpha, bandwidth):
    """The cost model's time for one message between two ranks (a direct broadcast from rank 0 to rank 1)."""
    return predict(build("broadcast.direct", 2), nbytes, uniform(2, bandwidth=bandwidth, latency=alpha)).seconds


def _balance_kb(alpha, bandwidth):
    """The size (kB) whose transfer time equals its latency, read off the cost model's per-step terms."""
    step = predict(build("broadcast.direct", 2), 1, uniform(2, bandwidth=bandwidth, latency=alpha)).steps
    return float(step["latency"].sum() / step["transfer"].sum()) / 1e3


def _staged_ratio(nbytes, alpha, link, copy):
    from .exercises import _message_time, _staged_time

    return _staged_time(nbytes, alpha, link, copy) / _message_time(nbytes, alpha, link)


def _staged_parts(nbytes, alpha, link, copy):
    from .exercises import _message_time

    return {"direct_ms": _message_time(nbytes, alpha, link) * 1e3, "copies_ms": 2 * nbytes / copy * 1e3,
            "link_GBps": link / 1e9, "mib": nbytes / MiB}


def _p2p_ratio(name):
    from ..measure import published

    off, on = published.peer_rows(name, "", peak_on_Bps=1.0, peak_off_Bps=1.0)
    return on["Bps"] / off["Bps"]


def _p2p_numbers(name):
    from ..measure import published

    off, on = published.peer_rows(name, "", peak_on_Bps=1.0, peak_off_Bps=1.0)
    return {"on": on["Bps"] / 1e9, "off": off["Bps"] / 1e9, "label": published.load(name).label}


LAB01 = [
    Question(
        "A link has latency alpha = {alpha_us:g} us and bandwidth B = {gbps:g} GB/s. How many microseconds does "
        "one message of 1 MiB take?",
        lambda alpha_us, gbps, nbytes: _one_message(nbytes, alpha_us * 1e-6, gbps * 1e9) * 1e6,
        given=dict(alpha_us=2.0, gbps=10.0, nbytes=MiB), unit="us",
        derived=lambda alpha_us, gbps, nbytes: {"transfer": nbytes / (gbps * 1e9) * 1e6},
        worked="alpha + K/B = {alpha_us:g} us + {nbytes} B / {gbps:g} GB/s = {alpha_us:g} + {transfer:.2f} = "
               "{answer:.2f} us (ringlab's cost model, one message between two ranks). At this size the latency "
               "is a small part; at 8 bytes it would be nearly all of it.",
        hint="t = alpha + K/B, with K in bytes (1 MiB = 2**20 bytes) and B in bytes per second (1 GB/s = 1e9)."),
    Question(
        "Same kind of link, alpha = {alpha_us:g} us and B = {gbps:g} GB/s ({gbits:g} Gbit/s). At what message size, in "
        "kB (1000 bytes), is half the time latency and half transfer?",
        lambda alpha_us, gbps: _balance_kb(alpha_us * 1e-6, gbps * 1e9), given=dict(alpha_us=5.0, gbps=12.5),
        unit="kB", derived=lambda alpha_us, gbps: {"gbits": gbps * 8},
        worked="Solve alpha = K/B: K = alpha x B = {alpha_us:g}e-6 s x {gbps:g}e9 B/s = {answer:g} kB (the cost "
               "model's latency and transfer terms are equal there). Messages much smaller are latency-bound: "
               "sending them faster needs fewer messages, not more bandwidth.",
        hint="the latency term alpha equals the transfer term K/B when K = alpha x B; then divide bytes by 1000."),
    Question(
        "A {mib:g} MiB message between two GPUs is staged through host memory: copied out at {copy_gbps:g} GB/s, "
        "sent over a PCIe 3.0 x16 link (alpha = {alpha_us:g} us), copied in at {copy_gbps:g} GB/s, one after the "
        "other. How many times as long does it take as the same message sent directly?",
        lambda mib, alpha_us, copy_gbps: _staged_ratio(mib * MiB, alpha_us * 1e-6, PCIE3_X16, copy_gbps * 1e9),
        given=dict(mib=16, alpha_us=2.0, copy_gbps=10.0), unit="times",
        derived=lambda mib, alpha_us, copy_gbps: _staged_parts(mib * MiB, alpha_us * 1e-6, PCIE3_X16, copy_gbps * 1e9),
        worked="Direct: alpha + K/link = {direct_ms:.3f} ms over the {link_GBps:.3f} GB/s of PCIe 3.0 x16. Staged "
               "adds two copies, 2K/copy rate = {copies_ms:.3f} ms: ({direct_ms:.3f} + {copies_ms:.3f}) / "
               "{direct_ms:.3f} = {answer:.2f}x (the formula of exercise 2). GPUDirect peer access and CUDA-aware "
               "MPI exist to remove those copies.",
        hint="staged = alpha + K/link + 2K/copy; direct = alpha + K/link; PCIe 3.0 x16 carries {link_GBps:.3f} GB/s "
             "each way (lab 00's arithmetic)."),
    Question(
        "In the printout of the published peer copies, how many times faster is a copy between two H100s of the "
        "NVSwitch box with peer access on than with it off (median over GPU pairs)?",
        _p2p_ratio, given=dict(name="B03_kr_h100x8_hgx_p2p"), unit="times", rel_tol=0.05, derived=_p2p_numbers,
        worked="{on:.1f} GB/s with P2P on against {off:.1f} GB/s with it off: {answer:.1f}x. With peer access off each "
               "copy goes through host memory over the GPUs' PCIe links; on, it crosses NVLink and NVSwitch "
               "directly ({label}).",
        hint="the printed line for \"8x H100 SXM, NVSwitch\" ends with on/off; or divide its P2P-on rate by its "
             "P2P-off rate."),
]


# --- lab 02: reduce and broadcast ----------------------------------------------------------------------

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


LAB02 = [
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
]


# --- lab 03: allreduce ---------------------------------------------------------------------------------

def _ring_sent_gib(n, gib):
    return max(traffic(build("allreduce.ring", n), int(gib * GiB))["sent"]) / GiB


def _naive_root_mib(n, mib):
    return traffic(build("allreduce.naive", n), mib * MiB)["received"][0] / MiB


def _ring_chunk(n, rank, step):
    return next(int(t.chunk) for t in build("allreduce.ring", n).steps[step] if t.src == rank)


def _busbw_gbps(n, mib, ms):
    return busbw("allreduce", n, mib * MiB, ms * 1e-3) / 1e9


LAB03 = [
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
]


# --- lab 04: parameter servers -------------------------------------------------------------------------

def _server_receives_gb(n, servers, mb):
    return traffic(build("allreduce.ps", n, servers=servers), mb * 10**6)["received"][0] / 1e9


def _server_over_ring(n, mb):
    return _server_receives_gb(n, 1, mb) / (max(traffic(build("allreduce.ring", n), mb * 10**6)["received"]) / 1e9)


def _stalest_worker(pushes):
    from .staleness import by_worker

    return max(by_worker(pushes).items(), key=lambda item: item[1]["mean"])[0]


def _staleness_means(pushes):
    from .staleness import by_worker

    return {"means": ", ".join(f"worker {w} {v['mean']:.1f}" for w, v in by_worker(pushes).items())}


LAB04 = [
    Question(
        "`allreduce.ps` with one server (rank 0, which also works) on {n} ranks, and {mb} MB of gradients per "
        "rank: how many GB does the server receive each step?",
        _server_receives_gb, given=dict(n=16, servers=1, mb=100), unit="GB",
        worked="Each of the other {n} - 1 ranks pushes its whole buffer: (n-1) x K = {answer:g} GB a step, counted "
               "from "
               "ringlab's schedule, and as much goes back out. It grows with every worker added.",
        hint="every rank but the server pushes all of its K bytes to the server."),
    Question(
        "The same {n} ranks and {mb} MB with the parameters split into M = {servers} shards (ranks 0-{last} serve one "
        "each): how many GB does server rank 0 receive each step?",
        _server_receives_gb, given=dict(n=16, servers=4, mb=100), unit="GB",
        derived=lambda n, servers, mb: {"last": servers - 1, "single": _server_receives_gb(n, 1, mb)},
        worked="As a server it receives its shard K/M from the other n-1 ranks, (n-1)K/M; as a worker it also "
               "receives the M-1 shards it does not serve, (M-1)K/M: ({n}-1+{servers}-1) x {mb}/{servers} MB = "
               "{answer:g} GB, against {single:g} GB with a single server (exercise 1's count).",
        hint="(n-1)K/M as a server plus (M-1)K/M as a worker."),
    Question(
        "On {n} ranks, how many times more bytes does a single parameter server receive each step than a rank of "
        "a ring allreduce of the same buffer?",
        _server_over_ring, given=dict(n=16, mb=100), unit="times",
        worked="(n-1)K against 2(n-1)/n x K: n/2 = {answer:g} times, from both schedules' traffic. The server's link "
               "is the bottleneck, and it grows with the number of workers; the ring's does not.",
        hint="divide (n-1)K by 2(n-1)K/n."),
    Question(
        "Read the staleness plot of your asynchronous run above: which worker's pushes had the highest mean "
        "staleness?",
        _stalest_worker, measured=("pushes",), rel_tol=0, derived=_staleness_means,
        worked="Worker {answer}, from the pushes your server recorded (mean staleness: {means}). Whether that is the "
               "straggler depends on the run: its pushes are stale while the fast workers run and fresh once it "
               "runs alone (the sentences under the plot say which happened here).",
        hint="in the first plot, compare the workers' mean staleness (or `ringlab.lab.staleness.by_worker(pushes)`)."),
]


# --- lab 05: scaling -----------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _ring_prediction(n, mib, alpha_us, gbps) -> tuple[float, float]:
    """(seconds of latency, seconds in all) of the cost model's ring allreduce on a uniform network."""
    network = uniform(n, bandwidth=gbps * 1e9, latency=alpha_us * 1e-6)
    prediction = predict(build("allreduce.ring", n), mib * MiB, network)
    return float(prediction.steps["latency"].sum()), prediction.seconds


def _ring_ms(n, mib, alpha_us, gbps):
    return _ring_prediction(n, mib, alpha_us, gbps)[1] * 1e3


def _ring_latency_share(n, mib, alpha_us, gbps):
    latency, seconds = _ring_prediction(n, mib, alpha_us, gbps)
    return latency / seconds


TREE_NAMES = {"tree": "binomial tree", "dbtree": "double binary tree", "ring": "ring"}


def _fastest_at(preset, nbytes):
    from .predictions import trees_against_ring

    rows = trees_against_ring(preset, [nbytes])["predicted"]
    return TREE_NAMES[max(rows, key=lambda r: r["busbw_Bps"])["algorithm"]]


def _busbws_at(preset, nbytes):
    from .predictions import trees_against_ring

    rows = trees_against_ring(preset, [nbytes])["predicted"]
    n = trees_against_ring(preset, [nbytes])["nranks"]
    return {"busbws": ", ".join(f"{TREE_NAMES[r['algorithm']]} {r['busbw_Bps'] / 1e6:.0f} MB/s" for r in rows),
            "tree_steps": len(build("allreduce.tree", n).steps), "ring_steps": len(build("allreduce.ring", n).steps)}


def _nvls_over_ring(preset):
    from ..predict.nvls import EFFICIENCY, LATENCY, nvls_allreduce, port_rate
    from ..topology import preset as load_preset

    machine = load_preset(preset)
    nbytes = GiB
    nvls_bytes = (nvls_allreduce(nbytes, machine) - LATENCY) * port_rate(machine) * EFFICIENCY  # K(n+1)/n
    ring_bytes = max(traffic(build("allreduce.ring", machine.nranks), nbytes)["sent"])  # 2K(n-1)/n
    return ring_bytes / nvls_bytes


def _nvls_fields(preset):
    from ..topology import preset as load_preset

    n = load_preset(preset).nranks
    return {"n": n, "top": 2 * (n - 1), "bottom": n + 1}


LAB05 = [
    Question(
        "A ring allreduce of {mib} MiB on {n} ranks, every message costing alpha = {alpha_us:g} us plus bytes / B with "
        "B = {gbps:g} GB/s: how many milliseconds does it take (leave out the adds)?",
        _ring_ms, given=dict(n=8, mib=64, alpha_us=5.0, gbps=12.5), unit="ms",
        derived=lambda n, mib, alpha_us, gbps: {"steps": 2 * (n - 1), "chunk_ms": mib * MiB / n / (gbps * 1e9) * 1e3},
        worked="2(n-1)(alpha + K/(nB)): {steps} steps of {alpha_us:g} us + {chunk_ms:.3f} ms = {answer:.3f} ms "
               "(ringlab's cost model on a uniform network; exercise 1's formula).",
        hint="2(n-1) steps, each one alpha plus one chunk of K/n bytes at B."),
    Question(
        "The lab's prediction for {n} ranks: {mib} MiB per rank, B = {gbps:g} GB/s, alpha = {alpha_us:g} us. What "
        "fraction of the ring's time is latency? (A number between 0 and 1.)",
        _ring_latency_share, given=dict(n=1024, mib=64, alpha_us=5.0, gbps=12.5), rel_tol=0.02,
        derived=lambda n, mib, alpha_us, gbps: {"latency_ms": _ring_prediction(n, mib, alpha_us, gbps)[0] * 1e3,
                                                "total_ms": _ring_ms(n, mib, alpha_us, gbps)},
        worked="Latency: 2(n-1) alpha = {latency_ms:.2f} ms of {total_ms:.2f} ms, so {answer:.2f}. The bandwidth term "
               "hardly grows with n, the latency term grows as n: this is why NCCL's trees take over at scale.",
        hint="the latency part is 2(n-1) x alpha; divide it by the whole 2(n-1)(alpha + K/(nB))."),
    Question(
        "Read the tree-against-ring panel of the DGX-1 (V100): which algorithm does the cost model predict fastest "
        "for a {kib} KiB allreduce?",
        lambda preset, kib: _fastest_at(preset, kib * KiB), given=dict(preset="dgx1-v100", kib=1),
        choices=tuple(TREE_NAMES.values()), derived=lambda preset, kib: _busbws_at(preset, kib * KiB),
        worked="The {answer} (predicted busbw: {busbws}). At {kib} KiB every step is nearly all latency, so the "
               "fewest steps win: the binomial tree takes {tree_steps} steps of the whole buffer, the ring "
               "{ring_steps} steps of K/n.",
        hint="at the left edge of the DGX-1 panel, which line is highest? Fewer steps win while latency dominates."),
    Question(
        "On the 8-GPU H100 board (`hgx-h100-8`), how many times the ring's busbw ceiling can NVLS (reduction inside "
        "NVSwitch) reach, before NCCL's efficiency factor?",
        _nvls_over_ring, given=dict(preset="hgx-h100-8"), unit="times", derived=_nvls_fields,
        worked="A ring moves 2K(n-1)/n per GPU each way, NVLS K(n+1)/n: 2(n-1)/(n+1) = {top}/{bottom} = {answer:.3f} "
               "for n = {n}, from ringlab's ring schedule and its NVLS closed form (`ringlab.predict.nvls`).",
        hint="divide the ring's 2K(n-1)/n bytes per GPU by NVLS's K(n+1)/n, for n = {n}."),
]


# --- lab 06: data-parallel training --------------------------------------------------------------------

def _recipe_lr(nranks):
    from ..train.scaling import recipe

    return recipe(nranks)["lr"]


def _recipe_fields(nranks):
    from ..train.scaling import LR, PER_RANK

    return {"per_rank": PER_RANK, "base": LR, "batch": PER_RANK * nranks}


def _warmup_lr(base_lr, k, step, warmup):
    from .exercises import _scaled_lr

    return _scaled_lr(base_lr, k, step, warmup)


def _steps_for(samples, nranks):
    from ..train.scaling import steps_for

    return steps_for(samples, nranks)


def _steps_fields(samples, nranks):
    from ..train.scaling import PER_RANK

    return {"per_rank": PER_RANK, "batch": PER_RANK * nranks, "one_rank": _steps_for(samples, 1)}


def _bubble(stages, microbatches):
    """The idle share of a GPipe step, counted in the slots of ringlab's schedule (not the closed form)."""
    from ..predict.pipeline import idle_slots

    grid = _gpipe(stages, microbatches)
    return idle_slots(grid) / (stages * len(grid[0]))


def _microbatches_for(stages, limit):
    """The fewest micro-batches whose counted bubble is under ``limit``."""
    m = 1
    while _bubble(stages, m) >= limit:
        m += 1
    return m


def _microbatches_fields(stages, limit):
    m = _microbatches_for(stages, limit)
    return {"bound": (stages - 1) * (1 / limit - 1), "at": _bubble(stages, m), "fewer": m - 1,
            "before": _bubble(stages, m - 1), "slots": len(_gpipe(stages, m)[0])}


def _gpipe(stages, microbatches):
    from ..predict.pipeline import gpipe_schedule

    return gpipe_schedule(stages, microbatches)


LAB06 = [
    Question(
        "The speed-up runs train with {base:g} learning rate per {per_rank} samples, and every rank takes {per_rank} "
        "samples a step. What learning rate does the {nranks}-rank run use?",
        _recipe_lr, given=dict(nranks=4), derived=_recipe_fields,
        worked="Its global batch is {nranks} x {per_rank} = {batch}, {nranks} times one rank's, so the linear scaling "
               "rule multiplies the learning rate by {nranks}: {answer:g} (ringlab's `recipe({nranks})`, the lr column "
               "of the table).",
        hint="k times the batch, k times the learning rate."),
    Question(
        "Linear scaling with warm-up: base learning rate {base_lr:g}, k = {k} ranks, warm-up over {warmup} steps. What "
        "is the learning rate at step {step}?",
        _warmup_lr, given=dict(base_lr=0.05, k=8, step=5, warmup=10), derived=lambda base_lr, k, step, warmup: {
            "target": base_lr * k},
        worked="It climbs in a straight line from {base_lr:g} at step 0 to k x {base_lr:g} = {target:g} at step "
               "{warmup}: {base_lr:g} x (1 + (k-1) x {step}/{warmup}) = {answer:g} (exercise 1's rule).",
        hint="base_lr x (1 + (k-1) x step / warmup) before the warm-up ends."),
    Question(
        "The speed-up runs all train on {samples} samples. How many steps does the {nranks}-rank run take?",
        _steps_for, given=dict(samples=38400, nranks=4), unit="steps", rel_tol=0, derived=_steps_fields,
        worked="Each step takes {per_rank} samples on each of {nranks} ranks, {batch} in all: {samples} / {batch} = "
               "{answer} steps, against {one_rank} on one rank (ringlab's `steps_for`). Same samples, fewer and "
               "larger steps, so the accuracies compare like with like.",
        hint="samples / (samples per rank per step x ranks)."),
    Question(
        "A model is cut into n = {stages} pipeline stages, in GPipe's schedule, every forward and backward pass one "
        "slot. How many micro-batches m per step does it take, at the fewest, to keep the bubble (the share of the "
        "step a stage is idle) under {limit:.0%}?",
        _microbatches_for, given=dict(stages=4, limit=0.1), unit="micro-batches", rel_tol=0,
        derived=_microbatches_fields,
        worked="(n-1)/(m+n-1) < {limit:g} when m > (n-1)(1/{limit:g} - 1) = {bound:g}: m = {answer}, whose step of "
               "{slots} slots is {at:.3f} idle; with {fewer} it is {before:.3f}. Counted in ringlab's GPipe "
               "schedule (`ringlab.predict.pipeline.gpipe_schedule`). The price: a stage keeps the activations of "
               "every micro-batch until its backward pass.",
        hint="solve (n-1)/(m+n-1) < {limit:g} for m (Exercise 3's formula), then take the next whole number."),
]


# --- lab 07: when it hangs or crawls -------------------------------------------------------------------

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
    from ..measure import published
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


LAB07 = [
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
]


QUIZZES = {"00": LAB00, "01": LAB01, "02": LAB02, "03": LAB03, "04": LAB04, "05": LAB05, "06": LAB06, "07": LAB07}
