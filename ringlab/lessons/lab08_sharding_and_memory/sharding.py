"""Lab 08's sharded data parallelism: what plain data parallelism and each ZeRO stage hold and send, measured on
4 ranks on an emulated machine, set against the ZeRO paper's formulas, predicted for 8 and 16 H100s (the exercises
on them: :mod:`.checks`)."""
from __future__ import annotations

import statistics

from ...algorithms import build
from ...lab.findings import Finding
from ...measure.units import format_bytes
from ...predict import predict, predict_nccl
from ...topology import from_spec, preset

# The emulated machine of the ZeRO steps (and of lab 09's experts): 50 MB/s each way per rank and 20 us a message,
# so that a step's collectives (435 KB of float64 gradients: some 13 ms of ring allreduce on 4 ranks) outweigh this
# CPU's own work in the step, which counts as the CPU time it took (compute="cpu": forward, backward, Adam, the
# optimizer's Python around its collectives), in virtual time: the links set the pace however busy this machine is,
# and what the CPU adds is in the numbers, beside the cost model's time for the collectives alone.
MACHINE = "uniform:0.05:20"
WIDTHS = (60, 250, 130, 50)  # the MLP's layer widths: 3 weight matrices and 3 biases, 54,430 parameters
VARIANTS = ("data parallel", "ZeRO stage 1", "ZeRO stage 2", "ZeRO stage 3")
STAGE = dict(zip(VARIANTS, range(4)))
ADAM_FP64 = dict(param_bytes=8, grad_bytes=8, state_bytes=16)  # float64 and Adam's two moments, what runs here
H100_MEMORY = 80e9  # bytes: the H100 SXM's published 80 GB
SCALE_MACHINES = ("hgx-h100-8", "ib-2x8-h100")
SAME = 0.25  # two steps within 25% take about as long
SLOWER = 1.2  # stage 3's step at least 1.2x the slowest of the others
MATCH = 0.01  # bytes sent within 1% of the paper's table agree with it
CLEARLY = 0.25  # beyond its collectives stage 1 spends clearly more (or less) than data parallelism: by a quarter of
                # data parallelism's predicted collectives


def make_model(seed: int = 0):
    """The lesson's MLP (:data:`WIDTHS`, ReLU between), float64."""
    import torch

    torch.manual_seed(seed)
    layers = []
    for a, b in zip(WIDTHS, WIDTHS[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).double()


def unit_bytes(model) -> list[int]:
    """Bytes of each module's own parameters: what ZeroOptimizer shards as one unit."""
    return [sum(p.numel() * p.element_size() for p in m.parameters(recurse=False)) for m in model.modules()
            if any(True for _ in m.parameters(recurse=False))]


def _calls(variant: str, sizes: list[int]) -> list[tuple[str, int]]:
    """(schedule, bytes) of every collective a step runs: one bucket's allreduce, or each unit's."""
    if variant == "data parallel":
        return [("allreduce.ring", sum(sizes))]
    per = ["reduce_scatter.ring", "allgather.ring"] + (["allgather.ring"] if STAGE[variant] == 3 else [])
    return [(name, size) for size in sizes for name in per]


def message_steps(variant: str, calls: int, n: int) -> int:
    """The ring steps ``calls`` collectives of ``variant`` take one after another on ``n`` ranks, each a message
    latency in the cost model: an allreduce's 2(n-1), a reduce-scatter's or allgather's n-1 (from the schedules)."""
    per = [name for name, _ in _calls(variant, [1])]  # one unit's calls, in their order
    return sum(len(build(per[i % len(per)], n).steps) for i in range(calls))


def measure_sharding(comm=None, steps: int = 3, machine: str = MACHINE) -> dict:
    """Every variant trains ``steps`` steps (Adam) on ``machine``'s emulated links, timed in virtual time (this CPU's
    work counted as the CPU time it took) with this machine's wall time beside; what each rank holds, sends and
    waits, on every rank: {"rows": [...], "machine", "ranks", "nparams"}."""
    import torch
    from mpi4py import MPI

    from ...mpi.emulate import emulate, now, synchronize, wall
    from ...train import DistributedOptimizer, ZeroOptimizer
    from ...train.task import one_thread
    from ...train.zero import model_memory, sent_bytes, zero_memory

    comm = MPI.COMM_WORLD if comm is None else comm
    n, rank = comm.Get_size(), comm.Get_rank()
    topology, scale = from_spec(machine, n)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(8, WIDTHS[0], generator=gen, dtype=torch.float64)
    rows = []
    with one_thread():
        for variant in VARIANTS:
            model = make_model()
            adam = torch.optim.Adam(model.parameters(), lr=1e-3)
            sizes = unit_bytes(model)
            if variant == "data parallel":
                opt = DistributedOptimizer(adam, model.named_parameters(), overlap=False, bucket_bytes=sum(sizes))
            else:
                opt = ZeroOptimizer(adam, model, stage=STAGE[variant], comm=comm)
            seconds, walls = [], []
            with emulate(machine):
                for step in range(steps + 1):  # the first is a warm-up
                    opt.zero_grad()
                    synchronize(comm)  # virtual time: every rank's clock set to the latest, at no cost
                    start, began = now(), wall()
                    model(x).pow(2).mean().backward()
                    opt.step()
                    synchronize(comm)
                    seconds.append(now() - start)
                    walls.append(wall() - began)
                    if step == 0 and variant != "data parallel":
                        opt.sent.clear()
            held = opt.memory() if variant != "data parallel" else model_memory(model, adam)
            sent = (sum(opt.sent.values()) / steps if variant != "data parallel"
                    else sent_bytes("allreduce.ring", n, sum(sizes), 8)[rank])
            predicted = sum(predict(build(name, n), nbytes, topology).seconds for name, nbytes in _calls(variant, sizes))
            opt.close()
            rows.append({"variant": variant, "held": held, "sent": sent, "calls": len(_calls(variant, sizes)),
                         "measured_s": statistics.median(seconds[1:]) / scale, "predicted_s": predicted,
                         "wall_s": statistics.median(walls[1:])})
    everyone = comm.allgather(rows)
    nparams = sum(p.numel() for p in make_model().parameters())
    out = []
    for i, row in enumerate(rows):
        out.append({**{k: v for k, v in row.items() if k not in ("held", "sent")},
                    "held": [r[i]["held"] for r in everyone], "sent": [r[i]["sent"] for r in everyone],
                    "measured_s": max(r[i]["measured_s"] for r in everyone), "wall_s": max(r[i]["wall_s"] for r in everyone),
                    "formula": sum(zero_memory(nparams, n, STAGE[row["variant"]], **ADAM_FP64).values())})
    return {"rows": out, "machine": machine, "ranks": n, "nparams": nparams}


def memory_rows(result: dict) -> list[dict]:
    """Rank 0's bytes by kind against the paper's formula (in this run's bytes: float64, Adam), per variant."""
    from ...train.zero import zero_memory

    out = []
    for row in result["rows"]:
        formula = zero_memory(result["nparams"], result["ranks"], STAGE[row["variant"]], **ADAM_FP64)
        held = row["held"][0]
        out.append({"variant": row["variant"], **held, "total": sum(held.values()),
                    "formula": sum(formula.values()), "ratio": sum(held.values()) / sum(formula.values())})
    return out


def traffic_rows(result: dict) -> list[dict]:
    """Bytes every rank sent a step (mean over ranks, counted from the schedules) against the paper's table, and the
    step measured on the emulated links (virtual time) against the cost model's time for its collectives, with this
    machine's wall time a step beside."""
    from ...train.zero import zero_traffic

    n, psi = result["ranks"], result["nparams"]
    base = zero_traffic(psi, n, 0, itemsize=8)
    return [{"variant": row["variant"], "calls": row["calls"], "sent": statistics.mean(row["sent"]),
             "paper": zero_traffic(psi, n, STAGE[row["variant"]], itemsize=8),
             "versus_dp": statistics.mean(row["sent"]) / base,
             "measured_s": row["measured_s"], "predicted_s": row["predicted_s"], "wall_s": row.get("wall_s")}
            for row in result["rows"]]


def _variant_name(variant: str) -> str:
    return "plain data parallelism" if variant == "data parallel" else "stage " + variant[-1]


def _memory_sentence(result: dict, memory: list[dict]) -> str:
    """What rank 0 held, stage by stage, against the paper's formula: where it differs and by how much."""
    from ...train.zero import KINDS, zero_memory

    totals = [row["total"] for row in memory]
    said = (f"Rank 0 of {result['ranks']} held {format_bytes(totals[0])} with plain data parallelism, then "
            + ", ".join(f"{format_bytes(t)} at stage {i}" for i, t in enumerate(totals[1:], 1))
            + f" ({totals[-1] / totals[0]:.0%} of it at stage 3)")
    worst = max(memory, key=lambda r: abs(r["ratio"] - 1))
    if abs(worst["ratio"] - 1) <= 1e-9:
        return said + ", each exactly the paper's formula."
    formula = zero_memory(result["nparams"], result["ranks"], STAGE[worst["variant"]], **ADAM_FP64)
    off = {kind: worst[kind] - formula[kind] for kind in KINDS if worst[kind] != formula[kind]}
    said += (f", each within {abs(worst['ratio'] - 1):.2%} of the paper's formula; the most at "
             f"{_variant_name(worst['variant'])}: " + ", ".join(
                 f"{format_bytes(abs(extra))} {'more' if extra > 0 else 'less'} {kind.replace('_', ' ')}"
                 for kind, extra in off.items()) + ".")
    plain = zero_memory(result["nparams"], result["ranks"], 0, **ADAM_FP64)
    unsharded = {kind: memory[0][kind] - plain[kind] for kind in KINDS}  # what data parallelism holds beyond it
    sharded = [k for k, extra in off.items()  # kinds this stage shards, of which rank 0 holds more than unsharded
               if STAGE[worst["variant"]] > KINDS[::-1].index(k) and extra > unsharded[k]]
    reasons = []
    if sharded:
        reasons.append(f"where a unit's count does not divide by {result['ranks']}, rank 0's piece is one element "
                       f"larger than the others' (in the {', '.join(k.replace('_', ' ') for k in sharded)})")
    if off.get("optimizer_state", 0) > 0 and unsharded["optimizer_state"] > 0:  # unsharded, so not the pieces
        reasons.append(f"torch's Adam keeps a step count for each tensor beside the two moments the formula counts "
                       f"({format_bytes(unsharded['optimizer_state'])} with plain data parallelism)")
    return said + (" What the formula leaves out: " + "; and ".join(reasons) + "." if reasons else "")


def sharding_lesson(result: dict) -> Finding:
    """What the rows say, each clause chosen by its numbers: memory by stage against the formula, bytes sent against
    the paper's table, the emulated steps' times, and what a step spends beyond its collectives."""
    memory, traffic = memory_rows(result), traffic_rows(result)
    totals = [row["total"] for row in memory]
    falls = all(b < a for a, b in zip(totals, totals[1:]))
    row = {r["variant"]: r for r in traffic}
    ratio = {v: r["versus_dp"] for v, r in row.items()}
    paper = {v: r["paper"] / row["data parallel"]["paper"] for v, r in row.items()}
    time = {v: r["measured_s"] for v, r in row.items()}
    predicted = {v: r["predicted_s"] for v, r in row.items()}
    calls = {v: r["calls"] for v, r in row.items()}
    stages = VARIANTS[1:]
    one, two, three = (time[v] for v in stages)
    alike = abs(two / one - 1) <= SAME
    # the slowest of the others, stage 2 where it ties: what stage 3 must clearly outlast to be the slowest
    other = max(VARIANTS[:3], key=lambda v: (time[v], v == "ZeRO stage 2"))
    slower = three >= SLOWER * time[other]
    said = [_memory_sentence(result, memory)]

    differ = [v[-1] for v in stages if abs(ratio[v] / paper[v] - 1) > MATCH]
    said.append("Per step every rank sent " + ", ".join(f"{ratio[v]:.2f}x" for v in stages)
                + " what plain data parallelism sends at stages 1, 2 and 3 (counted from the schedules); the paper's "
                "table gives " + ", ".join(f"{paper[v]:.2f}x" for v in stages)
                + ("; they agree." if not differ else f"; they differ at stage {' and '.join(differ)}."))

    s1, s2, s3 = stages
    same_work = calls[s1] == calls[s2] and abs(ratio[s1] / ratio[s2] - 1) <= MATCH
    said.append("On the emulated links a step took, in virtual time, " + ", ".join(
        f"{time[v] * 1e3:.1f} ms {'with plain data parallelism' if v == 'data parallel' else 'at stage ' + v[-1]}"
        f" (predicted {predicted[v] * 1e3:.1f} for its {calls[v]} collective{'s' if calls[v] > 1 else ''})"
        for v in VARIANTS) + ". "
        + f"Stages 1 and 2 {'ran the same collectives' if same_work else 'ran different collectives'} and "
        + ("took about as long" if alike else f"did not take as long as each other ({two / one:.2f}x)")
        + (f"; stage 3 took {three / two:.1f}x as long as stage 2, sending {ratio[s3] / ratio[s2]:.2f}x its bytes "
           f"in {calls[s3]} collectives to {calls[s2]}, to hold {totals[3] / totals[2]:.0%} of its memory." if slower else
           f"; stage 3 was not clearly slower ({three / time[other]:.1f}x {_variant_name(other)})."))

    dp = "data parallel"
    apart = predicted[s1] / predicted[dp] - 1
    same_bytes = abs(ratio[s1] - 1) <= MATCH
    steps = {v: message_steps(v, calls[v], result["ranks"]) for v in (dp, s1)}
    model = (f"The cost model prices stage 1's collectives {abs(apart):.0%} {'above' if apart >= 0 else 'below'} "
             "data parallelism's"
             + (f": the same bytes in {calls[s1]} calls instead of {calls[dp]}, {steps[s1]} ring steps one after "
                f"another instead of {steps[dp]}, so the difference is {steps[s1] - steps[dp]} more message latencies."
                if same_bytes and steps[s1] > steps[dp] else "."))
    beyond = {v: time[v] - predicted[v] for v in VARIANTS}
    overhead = beyond[s1] - beyond[dp]
    by_calls = sorted(VARIANTS, key=lambda v: (calls[v], v))
    grows = all(beyond[a] < beyond[b] for a, b in zip(by_calls, by_calls[1:]) if calls[a] < calls[b])
    spent = ("Beyond its predicted collectives a step's virtual time is this CPU's own work, counted as the CPU time it "
             f"took: {beyond[s1] * 1e3:.1f} ms at stage 1 against {beyond[dp] * 1e3:.1f} ms for data parallelism")
    if overhead > CLEARLY * predicted[dp]:
        observed = "stage 1 spends clearly more beyond its collectives than data parallelism"
        spent += (f", {overhead * 1e3:.1f} ms more. " + (
            "That work grows with the number of collectives a step runs ("
            + ", ".join(f"{beyond[v] * 1e3:.1f} ms for {calls[v]}" for v in by_calls)
            + f"): about {overhead / (calls[s1] - calls[dp]) * 1e6:.0f} us for each collective beyond data "
            "parallelism's, the optimizer's Python around a call (FSDP and DeepSpeed bucket their units into fewer "
            "calls for this reason)." if grows and calls[s1] > calls[dp] else
            "It does not grow with the number of collectives (" + ", ".join(
                f"{beyond[v] * 1e3:.1f} ms for {calls[v]}" for v in by_calls)
            + "): these numbers do not say where it went."))
    elif overhead < -CLEARLY * predicted[dp]:
        observed = "stage 1 spends clearly less beyond its collectives than data parallelism"
        spent += f", {-overhead * 1e3:.1f} ms less."
    else:
        observed = "stage 1 spends about as much beyond its collectives as data parallelism"
        spent += (f": about as much, though it ran {calls[s1]} collectives to {calls[dp]}, so the work around a call "
                  "is small next to a step here." if calls[s1] > calls[dp] else ": about as much.")
    said.append(model + " " + spent)
    walls = [r["wall_s"] for r in traffic if r.get("wall_s")]
    if len(walls) == len(traffic):
        said.append("This machine took " + ", ".join(f"{w * 1e3:.1f}" for w in walls) + " ms of wall time a step "
                    "(data parallelism, then stages 1 to 3) to run them: the links' time is virtual, never waited for.")
    conclusions = ("each stage holds less than the one before" if falls else "a stage holds as much as the one before",
                   f"stage 3 sends {ratio['ZeRO stage 3']:.1f}x what data parallelism sends",
                   "stages 1 and 2 take about as long on the emulated machine" if alike else
                   "stages 1 and 2 do not take as long as each other on the emulated machine",
                   "stage 3 is the slowest on the emulated machine" if slower else
                   "stage 3 is not clearly the slowest on the emulated machine")
    return Finding(" ".join(said), conclusions, (observed,))


def at_scale(nparams: float = 7.5e9, machines=SCALE_MACHINES) -> list[dict]:
    """Predicted per GPU for a model of ``nparams`` in mixed precision with Adam (the paper's K = 12): memory by
    the paper's formulas against an H100's 80 GB, and each step's collectives by NCCL's model (fp16 gradients and
    parameters, each collective over the whole model in one call)."""
    from ...train.zero import zero_memory

    rows = []
    for name in machines:
        topology = preset(name)
        n, nbytes = topology.nranks, int(2 * nparams)
        for variant in VARIANTS:
            stage = STAGE[variant]
            calls = (["allreduce"] if stage == 0 else ["reduce_scatter", "allgather"]
                     + (["allgather"] if stage == 3 else []))
            picks = [predict_nccl(c, nbytes, topology) for c in calls]
            memory = sum(zero_memory(nparams, n, stage).values())
            rows.append({"machine": name, "ranks": n, "variant": variant, "memory": memory, "gb": memory / 1e9,
                         "fits": memory <= H100_MEMORY, "comm_s": sum(p.seconds for p in picks),
                         "algorithms": {c: p.algorithm for c, p in zip(calls, picks)},
                         "busbw": {c: p.busbw for c, p in zip(calls, picks)}})
    return rows


def describe_at_scale(rows: list[dict], nparams: float = 7.5e9) -> str:
    """Which variants fit, and what their traffic costs, machine by machine (predicted); where stages 1 and 2 take
    longer than data parallelism for the same bytes, the algorithms NCCL's model picked and their bus bandwidths."""
    said = []
    for name in dict.fromkeys(r["machine"] for r in rows):
        mine = [r for r in rows if r["machine"] == name]
        fits = [r for r in mine if r["fits"]]
        dp = mine[0]
        first = fits[0] if fits else None
        said.append(f"{name} ({dp['ranks']} GPUs), {nparams / 1e9:g}B parameters: plain data parallelism needs "
                    f"{dp['memory'] / 1e9:.0f} GB a GPU, " + ("which fits" if dp["fits"] else "more than 80 GB") +
                    (f"; {first['variant']} is the first that fits ({first['memory'] / 1e9:.1f} GB)" if first and
                     first is not dp else "") +
                    f". The collectives of a step: {dp['comm_s'] * 1e3:.0f} ms for data parallelism, "
                    + ", ".join(f"{r['comm_s'] * 1e3:.0f} ms at stage {STAGE[r['variant']]}" for r in mine[1:])
                    + " (NCCL's model)." + _why_slower(dp, mine[1]))
    return "\n".join(said)


def _why_slower(dp: dict, stage1: dict) -> str:
    """Stage 1 moves data parallelism's gradient in a reduce-scatter and an all-gather (on rings, what an allreduce
    sends); where its collectives are predicted slower or faster, by which algorithms, at what bus bandwidths."""
    ratio = stage1["comm_s"] / dp["comm_s"]
    said = (" Stages 1 and 2 move the same gradient as data parallelism, in a reduce-scatter and an all-gather "
            "instead of one allreduce, ")
    if abs(ratio - 1) <= SAME / 5:
        return said + f"and take about as long ({ratio:.2f}x)."
    def how(row: dict, call: str) -> str:
        words = {"allreduce": "allreduce", "reduce_scatter": "reduce-scatter", "allgather": "all-gather"}[call]
        return f"the {words} by {row['algorithms'][call]} at {row['busbw'][call] / 1e9:.0f} GB/s"

    return (said + f"yet take {ratio:.2f}x as long: NCCL's model runs {how(dp, 'allreduce')} of bus bandwidth, "
            f"{how(stage1, 'reduce_scatter')} and {how(stage1, 'allgather')}.")


def optimizers() -> tuple:
    """The optimizers the ZeRO checks train with: (name, a function of the parameters that makes one)."""
    import torch

    return (("SGD", lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9)),
            ("Adam", lambda p: torch.optim.Adam(p, lr=0.01)))


def small_model():
    """The small float64 model of the ZeRO checks: modules of 88, 1, 60 and 6 parameters (no count dividing by most
    rank counts), made with the same seed wherever it is made."""
    import torch

    torch.manual_seed(5)
    return torch.nn.Sequential(torch.nn.Linear(7, 11), torch.nn.PReLU(), torch.nn.Linear(11, 5), torch.nn.Tanh(),
                               torch.nn.Linear(5, 1)).double()


def train_small_model(wrap, make, rank: int, steps: int = 3, make_model=small_model):
    """``make_model()`` (a Sequential whose first module is a Linear) trained ``steps`` steps on this ``rank``'s own
    batches, with ``wrap(model, make(model.parameters()))`` as the optimizer under test. Its weights after the last
    step, whole (``full_parameters()`` where the optimizer shards them), and the optimizer, closed."""
    import torch

    m = make_model()
    opt = wrap(m, make(m.parameters()))
    for step in range(steps):
        x = torch.randn(6, m[0].in_features, generator=torch.Generator().manual_seed(1000 * step + rank),
                        dtype=torch.float64)
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), x.sum(dim=1, keepdim=True).sin()).backward()
        opt.step()
    weights = torch.cat([t.reshape(-1) for t in (opt.full_parameters() if hasattr(opt, "full_parameters")
                                                 else m.parameters())]).detach()
    opt.close()
    return weights, opt


def against_data_parallel(comm=None, steps: int = 3) -> list[dict]:
    """Each stage and plain data parallelism train :func:`train_small_model` ``steps`` steps with SGD and with
    Adam; the largest relative difference of each stage's weights from data parallelism's, on every rank."""
    from mpi4py import MPI

    from ...train import DistributedOptimizer, ZeroOptimizer

    comm = MPI.COMM_WORLD if comm is None else comm
    rank = comm.Get_rank()

    def train(wrap, make):
        return train_small_model(wrap, make, rank, steps)[0]

    rows = []
    for name, make in optimizers():
        plain = train(lambda m, o: DistributedOptimizer(o, m.named_parameters(), overlap=False, comm=comm), make)
        for stage in (1, 2, 3):
            mine = train(lambda m, o: ZeroOptimizer(o, m, stage=stage, comm=comm), make)
            difference = float((mine - plain).abs().max() / plain.abs().max())
            rows.append({"optimizer": name, "stage": stage, "difference": comm.allreduce(difference, op=MPI.MAX)})
    return rows


MEMORY_COLUMNS = {"variant": "variant", "parameters (KiB)": "parameters", "gradients (KiB)": "gradients",
                  "optimizer state (KiB)": "optimizer_state", "total (KiB)": "total",
                  "paper's formula (KiB)": "formula", "measured / formula": ("ratio", ".4f")}
TRAFFIC_COLUMNS = {"variant": "variant", "collectives a step": "calls", "sent a step (KiB)": "sent",
                   "paper's table (KiB)": "paper", "x data parallel": ("versus_dp", ".2f"),
                   "measured step, virtual (ms)": "measured_s", "predicted collectives (ms)": "predicted_s",
                   "this machine's step, wall (ms)": "wall_s"}
SCALE_COLUMNS = {"machine": "machine", "GPUs": "ranks", "variant": "variant", "memory a GPU (GB)": ("gb", ".1f"),
                 "fits in 80 GB": "fits", "collectives a step (ms)": "comm_s"}
