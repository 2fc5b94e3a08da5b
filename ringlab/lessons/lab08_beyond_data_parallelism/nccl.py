"""Lab 08's NCCL: which algorithm and protocol NCCL's own model picks by size, ranks and machine, what each protocol
trades, channels, held against published sweeps that say what NCCL ran; PAT's steps; the exercise on the pick."""
from __future__ import annotations

import math

from ...lab.exercises import compare, exercise
from ...measure import published
from ...measure.units import format_bytes
from ...predict import predict_nccl
from ...predict import tuning as T
from ...topology import cluster, preset

SIZES = [1 << k for k in range(10, 34, 2)]  # 1 KiB .. 8 GiB
MACHINES = ("hgx-h100-8", "ib-2x8-h100", "ib-16x8-h100")
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")
CHANNEL_RATE = {"hopper": 20.6e9, "blackwell": 40.1e9}  # bytes/s one channel drives over NVLink (NCCL's topo.h, published)


def choice_rows(machines=MACHINES, collectives=COLLECTIVES, sizes=SIZES) -> list[dict]:
    """What NCCL's model picks for every (machine, collective, size), with its time and busbw (predicted)."""
    rows = []
    for name in machines:
        topology = preset(name)
        for collective in collectives:
            for nbytes in sizes:
                p = predict_nccl(collective, nbytes, topology)
                rows.append({"machine": name, "ranks": topology.nranks, "collective": collective, "bytes": nbytes,
                             "choice": f"{p.algorithm}/{p.protocol}", "seconds": p.seconds, "busbw_Bps": p.busbw})
    return rows


def switches(rows: list[dict]) -> list[dict]:
    """Where the choice changes as the size grows: one row per (machine, collective, new choice)."""
    out, last = [], {}
    for row in rows:
        key = (row["machine"], row["collective"])
        if key in last and last[key] != row["choice"]:
            out.append({"machine": row["machine"], "collective": row["collective"], "from": last[key],
                        "to": row["choice"], "at": row["bytes"]})
        last[key] = row["choice"]
    return out


def describe_choices(rows: list[dict]) -> str:
    """The switches in words, machine by machine."""
    lines = []
    for machine in dict.fromkeys(r["machine"] for r in rows):
        for collective in dict.fromkeys(r["collective"] for r in rows):
            mine = [r for r in rows if r["machine"] == machine and r["collective"] == collective]
            moves = [s for s in switches(mine)]
            steps = "; ".join(f"{s['to']} from {format_bytes(s['at'])}" for s in moves)
            lines.append(f"{machine} ({mine[0]['ranks']} GPUs), {collective}: {mine[0]['choice']} at "
                         f"{format_bytes(mine[0]['bytes'])}" + (f"; {steps}." if moves else ", at every size."))
    return "\n".join(lines)


def protocol_rows(machine: str = "hgx-h100-8", collective: str = "allreduce", algorithm: str = "ring",
                  sizes=SIZES) -> list[dict]:
    """Each protocol forced, ``algorithm`` fixed: its latency, bandwidth and time by size (NCCL's model)."""
    topology = preset(machine)
    rows = []
    for protocol in T.PROTOCOLS:
        for nbytes in sizes:
            p = predict_nccl(collective, nbytes, topology, algorithm=algorithm, protocol=protocol)
            rows.append({"protocol": protocol, "bytes": nbytes, "latency_s": p.latency, "algbw_Bps": p.algbw,
                         "seconds": p.seconds, "busbw_Bps": p.busbw, "machine": machine})
    return rows


def describe_protocols(rows: list[dict]) -> str:
    """Each protocol's latency and bandwidth, and the sizes each one is the fastest at."""
    by = {}
    for r in rows:
        by.setdefault(r["protocol"], []).append(r)
    said = [f"{proto}: {mine[0]['latency_s'] * 1e6:.1f} us a call, {mine[-1]['algbw_Bps'] / 1e9:.0f} GB/s of algbw"
            for proto, mine in by.items()]
    best = {}
    for nbytes in sorted({r["bytes"] for r in rows}):
        fastest = min((r for r in rows if r["bytes"] == nbytes), key=lambda r: r["seconds"])
        best.setdefault(fastest["protocol"], []).append(nbytes)
    wins = "; ".join(f"{p} from {format_bytes(s[0])} to {format_bytes(s[-1])}" for p, s in best.items())
    return (f"Ring {rows[0]['machine']} (NCCL's model): " + "; ".join(said) + f". Fastest: {wins}. LL stores 8 bytes "
            f"of which {T.LL_SHARE:.0%} is data (a flag with every 4), LL128 128-byte lines of which "
            f"{T.LL128_SHARE:.0%} is, Simple all of it behind a fence a chunk.")


def channels_needed(machine: str = "hgx-h100-8") -> dict:
    """How many channels (rings run side by side) fill one GPU's NVLink port, at NCCL's per-channel rate."""
    topology = preset(machine)
    port = min(link.rate for link in topology.links if link.kind == "nvswitch")
    arch = topology.machine.arch
    rate = CHANNEL_RATE[arch]
    return {"machine": machine, "port_Bps": port, "channel_Bps": rate, "channels": math.ceil(port / rate),
            "per_nic": T.CHANNELS_PER_NIC}


def against_published() -> list[dict]:
    """Published sweeps that say (or show) what NCCL ran, beside what the model picks there."""
    rows = []
    by_count = published.load("A17_mlengineering_h200x8_nvls_on_off_by_gpucount_8GiB")
    topology = preset("hgx-h200-8")
    for r in by_count.data["rows"]:
        if r["nccl_algorithm"]:
            p = predict_nccl("allreduce", r["bytes"], topology, nranks=r["ranks"])
            ring = predict_nccl("allreduce", r["bytes"], topology, algorithm="ring", nranks=r["ranks"])
            rows.append({"source": "A17", "machine": "8x H200", "collective": "allreduce", "ranks": r["ranks"],
                         "bytes": r["bytes"], "nccl_ran": r["nccl_algorithm"], "busbw_Bps": r["busbw_Bps"],
                         "model_picks": p.algorithm, "model_busbw_Bps": p.busbw,
                         "margin": abs(p.tuner_seconds / ring.tuner_seconds - 1) if p.algorithm != "ring" else 0.0})
    for r in published.load("A19_mlengineering_h200x8_16GiB_allreduce_nvls_ring_allgather_reducescatter").data["rows"]:
        if r["setting"] in (None, "NCCL_NVLS_ENABLE=1"):
            p = predict_nccl(r["collective"], r["bytes"], topology)
            rows.append({"source": "A19", "machine": "8x H200", "collective": r["collective"], "ranks": r["ranks"],
                         "bytes": r["bytes"], "nccl_ran": r["nccl_algorithm"], "busbw_Bps": r["busbw_Bps"],
                         "model_picks": p.algorithm, "model_busbw_Bps": p.busbw, "margin": 0.0})
    return rows


def describe_published(rows: list[dict]) -> str:
    """Where the model picks what NCCL ran, and where not (with how close its two options were)."""
    agree = [r for r in rows if r["nccl_ran"].lower() == r["model_picks"]]
    differ = [r for r in rows if r not in agree]
    said = [f"Of {len(rows)} published runs that say what NCCL ran, the model picks the same algorithm in {len(agree)}."]
    for r in differ:
        said.append(f"{r['source']}, {r['collective']} on {r['ranks']} GPUs at {format_bytes(r['bytes'])}: NCCL ran "
                    f"{r['nccl_ran']}, the model picks {r['model_picks']}, whose predicted time is within "
                    f"{r['margin']:.0%} of the ring's: a near tie, decided by what the model leaves out.")
    return " ".join(said)


def forced_ring_sizes() -> dict:
    """Published, 2 x 8 H100: NCCL's own choice against NCCL_ALGO=Ring size by size, and the model's pick at each
    with its predicted busbw."""
    own = {r["bytes"]: r["busbw_Bps"] for r in
           published.load("A02_nccltests290_h100_2x8_ib_ndr_allreduce_default").data["rows"]}
    ring = {r["bytes"]: r["busbw_Bps"] for r in
            published.load("A03_nccltests290_h100_2x8_ib_ndr_allreduce_ring").data["rows"]}
    topology = preset("ib-2x8-h100")
    sizes = sorted(set(own) & set(ring))
    picks = [predict_nccl("allreduce", k, topology) for k in sizes]
    return {"sizes": sizes, "ratio": [own[k] / ring[k] for k in sizes], "picks": [p.algorithm for p in picks],
            "share": [own[k] / p.busbw for k, p in zip(sizes, picks)]}


def describe_forced_ring(result: dict) -> str:
    """Where NCCL's own choice beat the ring (published), what the model picks there, and how the published busbw
    compares with the model's."""
    ahead = [k for k, r in zip(result["sizes"], result["ratio"]) if r > 1.1]
    not_ring = [k for k, p in zip(result["sizes"], result["picks"]) if p != "ring"]
    return (f"Published, 2 x 8 H100 (nccl-tests#290): NCCL's own choice beat NCCL_ALGO=Ring by more than 10% at "
            f"{len(ahead)} of {len(result['sizes'])} sizes from {format_bytes(result['sizes'][0])} to "
            f"{format_bytes(result['sizes'][-1])} ({min(result['ratio']):.1f}x to {max(result['ratio']):.1f}x); the "
            f"model picks something other than the ring at {len(not_ring)} of them "
            f"({', '.join(sorted(set(result['picks'])))}): " +
            ("the two agree that NCCL leaves the ring there." if set(ahead) <= set(not_ring) else
             "they disagree at " + ", ".join(format_bytes(k) for k in sorted(set(ahead) - set(not_ring))) + ".") +
            f" The published busbw was {min(result['share']):.0%} to {max(result['share']):.0%} of what the model "
            "predicts for its pick" + (": the choice agrees, the speed does not." if max(result["share"]) < 0.75 else
                                       "."))


def pat_rows(nodes=(2, 4, 8, 16, 32, 64), sizes=(1 << 12, 1 << 16, 1 << 20, 1 << 24)) -> list[dict]:
    """All-gather on H100 clusters of one GPU a node: what the model picks, PAT's time and the ring's (predicted)."""
    rows = []
    for count in nodes:
        topology = cluster("h100", count, gpus_per_node=1)
        for nbytes in sizes:
            p = predict_nccl("allgather", nbytes, topology)
            ring = predict_nccl("allgather", nbytes, topology, algorithm="ring")
            pat = predict_nccl("allgather", nbytes, topology, algorithm="pat")
            rows.append({"nodes": count, "bytes": nbytes, "choice": f"{p.algorithm}/{p.protocol}",
                         "pat_s": pat.seconds, "ring_s": ring.seconds, "pat_steps": math.ceil(math.log2(count)),
                         "ring_steps": count - 1})
    return rows


def _fastest_protocol(nbytes, options):
    return min(options, key=lambda p: options[p][0] + nbytes / options[p][1])


@exercise(_fastest_protocol, "rule")
def check_fastest_protocol(fastest_protocol):
    """Compare the learner's pick with NCCL's model's, on the ring of 8 H100s at several sizes."""
    topology = preset("hgx-h100-8")
    for nbytes in (1 << 12, 1 << 20, 1 << 23, 1 << 26, 1 << 30):
        options = {}
        for proto in T.PROTOCOLS:
            p = predict_nccl("allreduce", nbytes, topology, algorithm="ring", protocol=proto)
            options[proto] = (p.latency, p.algbw)
        got, want = fastest_protocol(nbytes, options), _fastest_protocol(nbytes, options)
        if got is None:
            from ...lab.exercises import NotDoneYet
            raise NotDoneYet("fastest_protocol returned None")
        if got != want:
            shown = ", ".join(f"{k}: {lat * 1e6:.1f} us and {bw / 1e9:.0f} GB/s" for k, (lat, bw) in options.items())
            raise AssertionError(f"fastest_protocol({nbytes}, ...) returned {got!r}; NCCL's model picks {want!r} "
                                 f"({shown}).\nHint: each protocol takes latency + bytes / bandwidth; pick the least.")
    print("Correct: latency + bytes / bandwidth, the least of the three, is NCCL's rule.")


PAT_COLUMNS = {"nodes": "nodes", "size (KiB)": "bytes", "NCCL's model picks": "choice", "PAT steps": "pat_steps",
               "ring steps": "ring_steps", "PAT (us)": "pat_s", "ring (us)": "ring_s"}
PUBLISHED_COLUMNS = {"source": "source", "collective": "collective", "GPUs": "ranks", "size (MiB)": "bytes",
                     "NCCL ran": "nccl_ran", "published busbw (GB/s)": "busbw_Bps", "model picks": "model_picks",
                     "model busbw (GB/s)": "model_busbw_Bps"}


def describe_pat(rows: list[dict]) -> str:
    """Where the model picks PAT, in words."""
    picked = [r for r in rows if r["choice"].startswith("pat")]
    if not picked:
        return "NCCL's model picks the ring for every all-gather here."
    fewest = min(r["nodes"] for r in picked)
    big = max(r["bytes"] for r in picked if r["nodes"] == max(x["nodes"] for x in rows))
    return (f"NCCL's model picks PAT for all-gather from {fewest} nodes up at some sizes, and at "
            f"{max(r['nodes'] for r in rows)} nodes up to {format_bytes(big)}: there the ring's "
            f"{max(r['ring_steps'] for r in rows)} steps of latency cost more than PAT's "
            f"{max(r['pat_steps'] for r in rows)}, while at large sizes the ring's bandwidth wins back.")
