"""Lab 10's NCCL: which algorithm and protocol NCCL's own model picks by size, ranks and machine, what each protocol
trades, the channels NCCL's ring search gives a board (``ringlab.predict.channels``) against what its logs printed,
held against published sweeps that say what NCCL ran; NVLS for allreduce, all-gather and reduce-scatter; PAT's
steps against NCCL's latency model of it (the exercises: :mod:`.checks`)."""
from __future__ import annotations

import math

from ...measure import published
from ...measure.units import format_bytes
from ...predict import channels as C
from ...predict import predict_nccl
from ...predict import tuning as T
from ...topology import cluster, preset

SIZES = [1 << k for k in range(10, 34, 2)]  # 1 KiB .. 8 GiB
MACHINES = ("hgx-h100-8", "ib-2x8-h100", "ib-16x8-h100")
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")
# NVLinks a GPU of each preset (NVIDIA's figures): the preset's port over these is NCCL's rate for one link (a GPU's
# NVLink bandwidth is count x SMxx_NVLINK_BW: src/graph/topo.cc, topo.h)
NVLINKS = {"hgx-a100-8": 12, "hgx-h100-8": 18, "hgx-b200-8": 18}
# boards of 8 GPUs on NVSwitch: (the preset of their GPU, NVLinks a GPU); the H800 is an H100 with 8 of its 18 NVLinks
# (NVIDIA: 400 GB/s bidirectional)
BOARDS = {"8 x A100": ("hgx-a100-8", 12), "8 x H100": ("hgx-h100-8", 18), "8 x H800": ("hgx-h100-8", 8),
          "8 x B200": ("hgx-b200-8", 18)}
# what NCCL_DEBUG=INFO printed on such a board (published), and where
LOGGED = {"8 x A100": (24, "nccl-tests#100: \"Channel 23/24\""),
          "8 x H100": (24, "AWS's expected output for p5.48xlarge: \"24 coll channels\""),
          "8 x H800": (16, "nccl#892: \"16 coll channels\"")}
NEAR = 0.05  # the model's accuracy taken for granted where no published run agrees with it to measure it by


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
            f"of which {T.LL_SHARE:.0%} is data (a flag with every 4), LL128 128-byte lines of which 120 bytes "
            f"({120 / 128:.0%}) are, which NCCL's tuner rounds down to {T.LL128_SHARE:.2f}, Simple all of it behind a "
            "fence a chunk.")


def channel_rows(boards=BOARDS, logged=LOGGED) -> list[dict]:
    """Each board: its NVLink port as NCCL rates it (links x the preset's rate for one link), the channels NCCL's ring
    search finds there and what it doubles them to (``ringlab.predict.channels``), beside what NCCL's log printed."""
    rows = []
    for board, (name, links) in boards.items():
        topology = preset(name)
        link = min(link.rate for link in topology.links if link.kind == "nvswitch") / NVLINKS[name]
        port, arch = links * link, topology.machine.arch
        found, speed = C.search(arch, port / 1e9)
        seen, source = logged.get(board, (None, None))
        rows.append({"board": board, "arch": arch, "links": links, "link_Bps": link, "port_Bps": port,
                     "found": found, "speed_Bps": speed * 1e9, "first_Bps": C.SPEEDS_INTRA[arch][0] * 1e9,
                     "graph": C.graph_channels(arch, port / 1e9), "channels": C.communicator_channels(arch, port / 1e9),
                     "logged": seen, "printed": "none published" if seen is None else str(seen),
                     "source": source, "per_nic": T.CHANNELS_PER_NIC})
    return rows


CHANNEL_COLUMNS = {"board": "board", "NVLinks": "links", "port (GB/s)": ("port_Bps", ".1f"), "found": "found",
                   "channel speed (GB/s)": ("speed_Bps", ".0f"), "duplicated": "graph", "channels": "channels",
                   "NCCL's log printed": "printed"}


def describe_channels(rows: list[dict]) -> str:
    """Each board's channels from the search, doubled twice, against what NCCL's log printed; the count is the rule's,
    not the port's rate over one channel's."""
    said = []
    for r in rows:
        speed, first = r["speed_Bps"], r["first_Bps"]
        fits = int(r["port_Bps"] / first + 1e-9)
        line = (f"{r['board']}: {r['links']} NVLinks at NCCL's {r['link_Bps'] / 1e9:.1f} GB/s each, a port of "
                f"{r['port_Bps'] / 1e9:.1f} GB/s; the search keeps {r['found']} channels of {speed / 1e9:.0f} GB/s "
                f"({r['found'] * speed / 1e9:.0f} GB/s in all")
        if speed < first:
            line += (f", more than the {fits} of {first / 1e9:.0f} GB/s, the fastest speed it tries, would carry"
                     if fits else f"; {first / 1e9:.0f} GB/s, the fastest speed it tries, does not fit")
        line += ")" + (f", doubled to {r['graph']} (ncclTopoDupChannels)" if r["graph"] > r["found"] else
                       ", not doubled by ncclTopoDupChannels")
        line += f" and again to {r['channels']} (ncclTopoPostset)"
        if r["logged"] is None:
            line += ": no published log here to hold it against."
        elif r["logged"] == r["channels"]:
            line += f": NCCL_DEBUG=INFO printed {r['logged']} ({r['source']})."
        else:
            line += f", but NCCL_DEBUG=INFO printed {r['logged']} ({r['source']}): the rule misses this board."
        said.append(line)
    per_nic = rows[0]["per_nic"]
    said.append("The count is the search's, not the port's rate over one channel's, and not the fastest speed that "
                f"fits. Across nodes NCCL runs {per_nic} channels for each network card (\"16 rings for 8 NICs\", "
                "nccl#518).")
    return "\n".join(said)


def _margin(collective: str, nbytes: int, topology, ranks: int, ran: str, pick) -> float:
    """How much longer NCCL's model says what NCCL ran takes than the model's own pick (0 when they are the same)."""
    ran = ran.lower()
    if ran == pick.algorithm:
        return 0.0
    other = predict_nccl(collective, nbytes, topology, algorithm=ran, nranks=ranks)
    return other.tuner_seconds / pick.tuner_seconds - 1


def against_published() -> list[dict]:
    """Published sweeps that say (or show) what NCCL ran, beside what the model picks there and how much longer the
    model says NCCL's choice takes than its own (``margin``)."""
    runs = []
    for r in published.load("A17_mlengineering_h200x8_nvls_on_off_by_gpucount_8GiB").data["rows"]:
        if r["nccl_algorithm"]:
            runs.append(("A17", "allreduce", r))
    for r in published.load("A19_mlengineering_h200x8_16GiB_allreduce_nvls_ring_allgather_reducescatter").data["rows"]:
        if r["setting"] in (None, "NCCL_NVLS_ENABLE=1"):
            runs.append(("A19", r["collective"], r))
    topology = preset("hgx-h200-8")
    rows = []
    for source, collective, r in runs:
        p = predict_nccl(collective, r["bytes"], topology, nranks=r["ranks"])
        rows.append({"source": source, "machine": "8x H200", "collective": collective, "ranks": r["ranks"],
                     "bytes": r["bytes"], "nccl_ran": r["nccl_algorithm"], "busbw_Bps": r["busbw_Bps"],
                     "model_picks": p.algorithm, "model_busbw_Bps": p.busbw,
                     "margin": _margin(collective, r["bytes"], topology, r["ranks"], r["nccl_algorithm"], p)})
    return rows


def describe_published(rows: list[dict], near: float = NEAR) -> str:
    """Where the model picks what NCCL ran, and where not: whether its two options are closer than the model's own
    error where it agrees (a tie it cannot call) or further apart (a miss)."""
    agree = [r for r in rows if r["nccl_ran"].lower() == r["model_picks"]]
    differ = [r for r in rows if r not in agree]
    errors = [abs(r["busbw_Bps"] / r["model_busbw_Bps"] - 1) for r in agree]
    error = max(errors) if errors else near
    said = [f"Of {len(rows)} published runs that say what NCCL ran, the model picks the same algorithm in "
            f"{len(agree)}" + (f", and predicts their busbw within {error:.0%}." if errors else ".")]
    for r in differ:
        tie = r["margin"] <= error
        said.append(f"{r['source']}, {r['collective']} on {r['ranks']} GPUs at {format_bytes(r['bytes'])}: NCCL ran "
                    f"{r['nccl_ran']}, the model picks {r['model_picks']}, and predicts {r['nccl_ran']} "
                    f"{r['margin']:.0%} slower: " +
                    ("closer than the model comes to the published busbw where it agrees, so a tie it cannot call."
                     if tie else f"further apart than the model's {error:.0%} where it agrees, so a miss of the "
                     "model, not a tie."))
    if not differ:
        said.append("It picks what NCCL ran in every one.")
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
            "predicts for its pick" + (
                "." if max(result["share"]) >= 0.75 else
                ": the choice agrees, the speed does not." if set(ahead) <= set(not_ring) else
                ": below the model's speed as well as off its choice."))


# bytes each GPU's port carries one way, in units of the call's size K (nccl-tests' size): the ring's and NVLS's
PORT_SHARE = {"ring": {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
                       "reduce_scatter": lambda n: (n - 1) / n},
              "nvls": {"allreduce": lambda n: (n + 1) / n, "allgather": lambda n: 1.0,
                       "reduce_scatter": lambda n: 1.0}}


def nvls_rows(machine: str = "hgx-h100-8", collectives=COLLECTIVES, sizes=SIZES) -> list[dict]:
    """NVLS against the ring, size by size, inside one NVSwitch node (predicted by NCCL's model): the ring at its
    best protocol, NVLS forced, what the model picks, and what each makes a GPU's port carry (units of the size)."""
    topology = preset(machine)
    n = topology.nranks
    rows = []
    for collective in collectives:
        for nbytes in sizes:
            ring = predict_nccl(collective, nbytes, topology, algorithm="ring")
            nvls = predict_nccl(collective, nbytes, topology, algorithm="nvls")
            pick = predict_nccl(collective, nbytes, topology)
            rows.append({"machine": machine, "ranks": n, "collective": collective, "bytes": nbytes,
                         "ring": f"ring/{ring.protocol}", "ring_s": ring.seconds, "nvls_s": nvls.seconds,
                         "ring_busbw_Bps": ring.busbw, "nvls_busbw_Bps": nvls.busbw,
                         "speedup": ring.seconds / nvls.seconds, "choice": f"{pick.algorithm}/{pick.protocol}",
                         "efficiency": T.NVLS_EFFICIENCY[topology.machine.arch],
                         "ring_port": PORT_SHARE["ring"][collective](n),
                         "nvls_port": PORT_SHARE["nvls"][collective](n)})
    return rows


def nvls_table(rows: list[dict]) -> list[dict]:
    """:func:`nvls_rows` one size a row: NVLS's speedup over the ring and the model's pick, collective by collective."""
    out = {}
    for r in rows:
        row = out.setdefault(r["bytes"], {"bytes": r["bytes"], "size": format_bytes(r["bytes"])})
        row[f"{r['collective']}_speedup"] = r["speedup"]
        row[f"{r['collective']}_choice"] = r["choice"]
    return list(out.values())


NVLS_COLUMNS = {"size": "size", **{f"{name}: NVLS speedup": (f"{c}_speedup", ".2f") for c, name in
                                    (("allreduce", "allreduce"), ("allgather", "all-gather"),
                                     ("reduce_scatter", "reduce-scatter"))},
                **{f"{name}: model picks": f"{c}_choice" for c, name in
                   (("allreduce", "allreduce"), ("allgather", "all-gather"), ("reduce_scatter", "reduce-scatter"))}}


def describe_nvls(rows: list[dict]) -> str:
    """For each collective, where NVLS beats the ring and by how much, and why at the largest size: the bytes a
    GPU's port carries each way, and the efficiency NCCL gives NVLS."""
    said = []
    for collective in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == collective]
        wins = [r for r in mine if r["speedup"] > 1]
        top = mine[-1]
        n = top["ranks"]
        span = f"{format_bytes(mine[0]['bytes'])} to {format_bytes(top['bytes'])}"
        if not wins:
            verdict = (f"{collective}: the ring is faster at every size from {span} (NVLS takes "
                       f"{min(1 / r['speedup'] for r in mine):.2f}x to {max(1 / r['speedup'] for r in mine):.2f}x "
                       "its time)")
        else:
            verdict = (f"{collective}: NVLS is faster at {len(wins)} of {len(mine)} sizes, from "
                       f"{format_bytes(wins[0]['bytes'])} (up to {max(r['speedup'] for r in wins):.2f}x)")
        counted = top["ring_port"] / top["nvls_port"]
        measured = top["nvls_busbw_Bps"] / top["ring_busbw_Bps"]
        eff, product = top["efficiency"], counted * top["efficiency"]
        port = (f"at {format_bytes(top['bytes'])} a GPU's port carries {top['nvls_port']:.2f} K each way with NVLS "
                f"against the ring's {top['ring_port']:.2f} K, {counted:.2f}x the ring's speed by bytes, at NCCL's NVLS "
                f"efficiency of {eff:.2f} of the port's rate: {counted:.2f} x {eff:.2f} = {product:.2f}, and the "
                f"model's bus bandwidth for NVLS is {measured:.2f} of the ring's" +
                ("" if abs(measured - product) < 0.005 else " with each call's latency and NVLS's pipeline fill"))
        said.append(f"{verdict}; {port}.")
    gather = [r for r in rows if r["collective"] in ("allgather", "reduce_scatter")]
    if gather and all(r["nvls_port"] > r["ring_port"] for r in gather):
        said.append(f"On {n} GPUs the switch saves no bytes in all-gather and reduce-scatter: every GPU still "
                    "receives (or sends) the whole buffer through its port, its own shard included, where a ring "
                    f"skips its own, (n-1)/n = {(n - 1) / n:.2f} of it; it saves steps only, one against n-1.")
    return "\n".join(said)


def pat_rows(nodes=(2, 4, 8, 16, 32, 64), sizes=(1 << 12, 1 << 16, 1 << 20, 1 << 24)) -> list[dict]:
    """All-gather on H100 clusters of one GPU a node: what the model picks, PAT's time and the ring's, and PAT's
    latency in NCCL's three terms (base, log2 of the nodes, linear in the ranks), all predicted."""
    rows = []
    for count in nodes:
        topology = cluster("h100", count, gpus_per_node=1)
        for nbytes in sizes:
            p = predict_nccl("allgather", nbytes, topology)
            ring = predict_nccl("allgather", nbytes, topology, algorithm="ring")
            pat = predict_nccl("allgather", nbytes, topology, algorithm="pat")
            linear = topology.nranks * T.PAT_LATENCY_PER_RANK
            base = T.BASE_LATENCY["pat"][pat.protocol]
            rows.append({"nodes": count, "bytes": nbytes, "choice": f"{p.algorithm}/{p.protocol}",
                         "pat_s": pat.seconds, "ring_s": ring.seconds, "pat_steps": math.ceil(math.log2(count)),
                         "ring_steps": count - 1, "pat_latency_s": pat.latency, "pat_linear_s": linear,
                         "pat_log_s": pat.latency - linear - base, "ring_latency_s": ring.latency})
    return rows


def pat_refusal(nodes: int = 8, gpus_per_node: int = 8) -> dict:
    """Whether NCCL's model lets PAT run an all-gather on nodes of several GPUs, and why not."""
    try:
        predict_nccl("allgather", 1 << 20, cluster("h100", nodes, gpus_per_node=gpus_per_node), algorithm="pat")
        reason = None
    except ValueError as error:
        reason = str(error).split(": ", 1)[-1]
    return {"nodes": nodes, "gpus_per_node": gpus_per_node, "reason": reason}


PAT_COLUMNS = {"nodes": "nodes", "size (KiB)": "bytes", "NCCL's model picks": "choice", "PAT steps": "pat_steps",
               "ring steps": "ring_steps", "PAT (us)": "pat_s", "ring (us)": "ring_s",
               "PAT's log2 term (us)": "pat_log_s", "PAT's linear term (us)": "pat_linear_s"}
PUBLISHED_COLUMNS = {"source": "source", "collective": "collective", "GPUs": "ranks", "size (MiB)": "bytes",
                     "NCCL ran": "nccl_ran", "published busbw (GB/s)": "busbw_Bps", "model picks": "model_picks",
                     "model busbw (GB/s)": "model_busbw_Bps"}


def describe_pat(rows: list[dict], refusal: dict | None = None) -> str:
    """Where the model picks PAT, how much its log-depth buys against the linear term NCCL's model keeps, where the
    ring wins back, and (``refusal``, from :func:`pat_refusal`) whether PAT runs with several GPUs a node."""
    picked = [r for r in rows if r["choice"].startswith("pat")]
    if picked:
        said = [f"NCCL's model picks PAT for all-gather at {len(picked)} of {len(rows)} (nodes, size) pairs here, "
                f"from {min(r['nodes'] for r in picked)} nodes up."]
    else:
        said = ["NCCL's model picks the ring, never PAT, for every all-gather here."]
    most = max(r["nodes"] for r in rows)
    top = [r for r in rows if r["nodes"] == most]
    small = min(top, key=lambda r: r["bytes"])
    steps, speedup = small["ring_steps"] / small["pat_steps"], small["ring_s"] / small["pat_s"]
    linear, log = small["pat_linear_s"], small["pat_log_s"]
    said.append(f"At {most} nodes PAT takes {small['pat_steps']} steps to the ring's {small['ring_steps']} "
                f"({steps:.1f}x fewer), yet at {format_bytes(small['bytes'])} the model has it "
                + (f"{speedup:.1f}x as fast as the ring, not {steps:.1f}x" if speedup > 1 else
                   f"slower than the ring ({1 / speedup:.1f}x as long)")
                + f": of PAT's {small['pat_latency_s'] * 1e6:.0f} us of latency, "
                f"{linear * 1e6:.0f} us is a term linear in the ranks ({T.PAT_LATENCY_PER_RANK * 1e6:.1f} us a rank) "
                f"and "
                f"{log * 1e6:.0f} us the log-depth part, "
                + ("so the linear term sets it" if linear > log else "so the log-depth part sets it")
                + " (NCCL's src/graph/tuning.cc: \"Still a linear part; hopefully we'll manage to remove it at some "
                "point\").")
    largest = max(r["bytes"] for r in rows)
    ring_back = sorted(r["nodes"] for r in rows if r["bytes"] == largest and r["ring_s"] < r["pat_s"])
    pat_all = sorted(n for n in dict.fromkeys(r["nodes"] for r in rows)
                     if all(r["pat_s"] <= r["ring_s"] for r in rows if r["nodes"] == n))
    if ring_back:
        said.append(f"At {format_bytes(largest)} the ring is the faster on {_counts(ring_back)} nodes, where its "
                    "bandwidth outweighs its latency" + (f"; on {_counts(pat_all)} PAT is faster at every size here."
                                                         if pat_all else "."))
    else:
        said.append(f"The ring does not win back at {format_bytes(largest)}: PAT is faster there at every node count "
                    "here.")
    if refusal is not None:
        said.append(f"On {refusal['nodes']} nodes of {refusal['gpus_per_node']} GPUs " +
                    (f"the model does not run PAT at all: {refusal['reason']} (tuning.cc, ncclPatEnable: "
                     "\"PAT only supports 1 GPU per node\")." if refusal["reason"] else "the model would run PAT too."))
    return " ".join(said)


def _counts(nodes: list[int]) -> str:
    return ", ".join(map(str, nodes[:-1])) + (" and " if len(nodes) > 1 else "") + str(nodes[-1])
