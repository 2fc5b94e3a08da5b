"""Lab 09's experts: a mixture-of-experts layer on 4 ranks, its router as initialised and skewed towards one expert,
the load on each expert and what the padded all-to-all costs, measured on emulated links; what a fixed capacity
(capacity factor, dropped tokens) and dropless sizes would send on the same count tables; the three ways built and run
on the skewed router (padded, a capacity of 1.25, dropless by rl.alltoallv); the exercise on padding."""
from __future__ import annotations

import math
import statistics

import numpy as np

from ...algorithms import build
from ...lab.exercises import compare, exercise
from ...lab.findings import Finding
from ...measure.units import format_bytes
from ...predict import predict
from ...topology import from_spec
from ..lab08_sharding_and_memory.sharding import MACHINE  # the emulated machine of lab 08's ZeRO steps

TOKENS, FEATURES, HIDDEN = 1024, 64, 64  # a rank's tokens, their width, each expert's hidden width
SKEW = 2.0  # added to the router's bias for expert 0: how the skewed router favours it
COSTLIER = 1.3  # the skewed layer at least 1.3x as long: imbalance costs
FACTORS = (1.0, 1.25, 2.0)  # capacity factors: Switch Transformer's 1.0 and 1.25, and a generous 2.0


def measure_imbalance(comm=None, steps: int = 2, machine: str = MACHINE, skew: float = SKEW) -> list[dict]:
    """Forward and backward of the expert-parallel layer (one expert a rank) on ``machine``'s emulated links, in
    virtual time (this CPU's work, the router's and the experts', counted as the CPU time it took), with the router
    as initialised and skewed (``skew`` added to expert 0's bias); a row for each, on every rank, with this
    machine's wall time a step beside."""
    import torch
    from mpi4py import MPI

    from ...mpi.emulate import emulate, now, synchronize, wall
    from ...train.experts import ExpertParallel, MixtureOfExperts
    from ...train.task import one_thread
    from ...train.zero import sent_bytes

    comm = MPI.COMM_WORLD if comm is None else comm
    n = comm.Get_size()
    topology, scale = from_spec(machine, n)
    x = torch.randn(TOKENS, FEATURES, generator=torch.Generator().manual_seed(comm.Get_rank()), dtype=torch.float64)
    rows = []
    with one_thread():
        for router in ("as initialised", "skewed"):
            moe = MixtureOfExperts(FEATURES, n, HIDDEN, seed=0).double()
            if router == "skewed":
                with torch.no_grad():
                    moe.router.bias[0] += skew
            layer = ExpertParallel(moe, comm)
            seconds, walls = [], []
            with emulate(machine):
                for step in range(steps + 1):  # the first is a warm-up
                    synchronize(comm)  # virtual time: every rank's clock set to the latest, at no cost
                    start, began = now(), wall()
                    layer(x).sum().backward()
                    synchronize(comm)
                    seconds.append(now() - start)
                    walls.append(wall() - began)
                    if step == 0:
                        layer.sent.clear()
            last = layer.last
            block = last["capacity"] * FEATURES * 8  # bytes of one padded block
            ids = ("alltoall.pairwise", n * n * last["capacity"] * 8)  # which expert each slot is for
            sent = layer.sent["alltoall"] / steps
            # the padded all-to-alls a step ran, counted from the bytes this rank sent: dispatch and combine, and
            # combine's gradient backward (the tokens here need no gradient, so dispatch's backward never runs)
            padded = round((sent - sent_bytes(ids[0], n, ids[1], 8)[comm.Get_rank()]) /
                           sent_bytes("alltoall.pairwise", n, n * n * block, 8)[comm.Get_rank()])
            calls = [("alltoall.pairwise", n * n * block)] * padded + [ids, ("allreduce.ring", (n + 1) * n * 8)]
            per_expert = last["per_expert"]
            rows.append({"router": router, "per_expert": per_expert, "capacity": last["capacity"],
                         "table": last["table"], "token_bytes": FEATURES * 8, "mean_pair": TOKENS / n, "imbalance": max(per_expert) / statistics.mean(per_expert),
                         "sent": comm.allreduce(sent, op=MPI.MAX), "padded": padded,
                         "measured_s": comm.allreduce(statistics.median(seconds[1:]), op=MPI.MAX) / scale,
                         "wall_s": comm.allreduce(statistics.median(walls[1:]), op=MPI.MAX),
                         "predicted_s": sum(predict(build(name, n), nbytes, topology).seconds for name, nbytes in calls)})
    return rows


CAPACITY_FACTOR = 1.25  # Switch Transformer's factor for training
WAYS = (("padded to the largest count", "padded", None), (f"capacity factor {CAPACITY_FACTOR}", "padded", CAPACITY_FACTOR),
        ("dropless (rl.alltoallv)", "dropless", None))  # name, ExpertParallel's dispatch and capacity_factor
AGREE = 0.05  # a measured step within 5% of the prediction "matches" it


def measure_dispatch(comm=None, steps: int = 1, machine: str = MACHINE, skew: float = SKEW,
                     factor: float = CAPACITY_FACTOR) -> list[dict]:
    """The layer three ways, built (``ExpertParallel``), with the router as initialised and skewed (``skew`` added to
    expert 0's bias): padded to the largest count, a fixed capacity of ``factor`` x the even share (the overflow
    dropped), and dropless (``rl.alltoallv``, each pair's own count). Forward and backward on ``machine``'s emulated
    links with ``compute="model"``: a step's virtual time is its collectives' alone, beside the cost model's
    prediction of the same collectives (rl.alltoall as the pairwise schedule, rl.alltoallv by
    ``predict_alltoallv``). Each way also against the layer on one rank (dropping the same tokens where a capacity
    does): the largest relative difference of the outputs. A row a router and way, on every rank."""
    import torch
    from mpi4py import MPI

    from ...mpi.emulate import emulate, now, synchronize
    from ...predict import predict_alltoallv
    from ...train.experts import ExpertParallel, MixtureOfExperts, expert_capacity
    from ...train.task import one_thread

    comm = MPI.COMM_WORLD if comm is None else comm
    n, rank = comm.Get_size(), comm.Get_rank()
    topology, scale = from_spec(machine, n)
    x = torch.randn(TOKENS, FEATURES, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    token_bytes, rows = FEATURES * 8, []
    pairwise = lambda nbytes: predict(build("alltoall.pairwise", n), nbytes, topology).seconds

    def made(bias: float) -> MixtureOfExperts:
        moe = MixtureOfExperts(FEATURES, n, HIDDEN, seed=0).double()
        with torch.no_grad():
            moe.router.bias[0] += bias
        return moe

    with one_thread():
        for router, bias in (("as initialised", 0.0), ("skewed", skew)):
            for name, dispatch, capacity_factor in WAYS:
                layer = ExpertParallel(made(bias), comm, dispatch=dispatch, capacity_factor=capacity_factor)
                seconds = []
                with emulate(machine, compute="model"):
                    for step in range(steps + 1):  # the first is a warm-up
                        synchronize(comm)
                        start = now()
                        out = layer(x)
                        out.sum().backward()
                        synchronize(comm)
                        seconds.append(now() - start)
                        if step == 0:
                            layer.sent.clear()
                with torch.no_grad():
                    capacity = None if capacity_factor is None else expert_capacity(capacity_factor, TOKENS, n)
                    alone = made(bias)(x, capacity)
                difference = float((out.detach() - alone).abs().max() / alone.abs().max())
                table, block = np.asarray(layer.last["table"]), layer.last["capacity"]
                into = np.where(np.eye(n, dtype=bool), 0, table).sum(axis=0)  # tokens each rank takes from others
                if dispatch == "dropless":  # dispatch, the experts' ids, combine, and combine's gradient backward
                    predicted = (2 * predict_alltoallv(table * token_bytes, topology)
                                 + predict_alltoallv(table.T * token_bytes, topology)
                                 + predict_alltoallv(table * 8, topology))
                    busiest_in = int(into.max()) * token_bytes
                else:  # the same of padded blocks: three of tokens, one of ids (8-byte slots)
                    predicted = 3 * pairwise(n * n * block * token_bytes) + pairwise(n * n * block * 8)
                    busiest_in = (n - 1) * block * token_bytes
                predicted += predict(build("allreduce.ring", n), (n + 2) * n * 8, topology).seconds  # the counts
                sent = sum(v for k, v in layer.sent.items() if k != "allreduce") / steps
                rows.append({"router": router, "way": name, "dispatch": dispatch, "factor": capacity_factor,
                             "block": "variable" if block is None else block, "dropped": layer.last["dropped"],
                             "dropped_share": layer.last["dropped"] / (n * TOKENS), "per_expert": layer.last["per_expert"],
                             "sent": comm.allreduce(sent, op=MPI.MAX), "busiest_in": busiest_in,
                             "measured_s": comm.allreduce(statistics.median(seconds[1:]), op=MPI.MAX) / scale,
                             "predicted_s": predicted, "difference": comm.allreduce(difference, op=MPI.MAX)})
    return rows


SAME_TIME = 0.05  # steps within 5% of each other take "as long"


def dispatch_lesson(rows: list[dict]) -> Finding:
    """What the table of the three built ways does not say itself: per router, what dropless saved in bytes and in time
    and why, and what the capacity's time cost in tokens; the conclusions also hold the predictions and the one-rank
    check, whose numbers are in the table."""
    said, conclusions = [], []
    for router in dict.fromkeys(r["router"] for r in rows):
        padded, capped, dropless = (r for r in rows if r["router"] == router)
        ratio, into = dropless["measured_s"] / padded["measured_s"], dropless["busiest_in"] / padded["busiest_in"]
        same = abs(ratio - 1) <= SAME_TIME
        said.append(f"Router {router} (the experts got {padded['per_expert']} tokens): dropless sent "
                    f"{1 - dropless['sent'] / padded['sent']:.0%} fewer bytes than padding in {ratio:.2f}x its time, "
                    + ("since the busiest receiver took as many bytes (each pairwise round lasts as long as its largest "
                       "message: the bytes saved were on links that were not the bottleneck)"
                       if same and abs(into - 1) <= SAME_TIME else
                       f"though its busiest receiver took {into:.2f}x padding's bytes" if same else
                       f"its busiest receiver taking {into:.2f}x padding's bytes")
                    + f"; the capacity took {capped['measured_s'] / padded['measured_s']:.2f}x padding's time and "
                    f"dropped {capped['dropped_share']:.1%} of the tokens.")
        conclusions.append(f"dropless sends fewer bytes than padding with the router {router}"
                           if dropless["sent"] < padded["sent"] else
                           f"dropless sends no fewer bytes than padding with the router {router}")
        conclusions.append(f"with the router {router} dropless takes as long as padding on the emulated machine" if same
                           else f"with the router {router} dropless is quicker than padding on the emulated machine"
                           if ratio < 1 else f"with the router {router} dropless is slower than padding on the "
                           "emulated machine")
        conclusions.append(f"capacity factor {_factor(capped['factor'])} drops tokens with the router {router}"
                           if capped["dropped"] else
                           f"capacity factor {_factor(capped['factor'])} drops no tokens with the router {router}")
    match = all(abs(r["measured_s"] / r["predicted_s"] - 1) <= AGREE for r in rows)
    conclusions.append("the measured steps match the predictions on the emulated machine" if match else
                       "the measured steps do not match the predictions on the emulated machine")
    conclusions.append("every way equals the one-rank layer" if all(r["difference"] < 1e-9 for r in rows) else
                       "a way differs from the one-rank layer")
    return Finding(" ".join(said), tuple(conclusions))


def imbalance_lesson(rows: list[dict]) -> Finding:
    """What the two routers' rows say: how uneven the experts' loads were, and what the padding cost."""
    even, skewed = rows
    said = []
    for r in rows:
        said.append(f"Router {r['router']}: the experts got {r['per_expert']} tokens (the busiest "
                    f"{r['imbalance']:.1f}x the mean); the largest count in the table (a rank's tokens for one rank's "
                    f"expert, its own included) was {r['capacity']}" + _where(r)
                    + f" against a mean of {r['mean_pair']:.0f}, so every block was padded to it and each rank "
                    f"sent {format_bytes(r['sent'])} a step in all-to-alls"
                    + (f" ({r['padded']} padded ones)" if "padded" in r else "")
                    + f"; a step took {r['measured_s'] * 1e3:.1f} ms on the emulated links, in virtual time "
                    f"({r['predicted_s'] * 1e3:.1f} ms predicted for its collectives; "
                    + ("the rest is this CPU's work, the router's and the experts', counted as the CPU time it took"
                       if r["measured_s"] >= r["predicted_s"] else
                       "more than the whole step: the emulated collectives ran faster than predicted, and no time "
                       "is left to show this CPU's work")
                    + (f"; this machine took {r['wall_s'] * 1e3:.1f} ms of wall time)." if r.get("wall_s") else ")."))
    ratio = skewed["measured_s"] / even["measured_s"]
    said.append(f"Skewing the router made the busiest expert {skewed['imbalance'] / even['imbalance']:.1f}x as busy, "
                f"the all-to-alls {skewed['sent'] / even['sent']:.1f}x as heavy and the step {ratio:.1f}x as long "
                f"(predicted {skewed['predicted_s'] / even['predicted_s']:.1f}x for the collectives alone).")
    # a step shorter than its predicted collectives (a busy machine's numbers) shows no CPU work, not a negative one
    extra = {r["router"]: max(r["measured_s"] - r["predicted_s"], 0.0) for r in rows}
    busiest = [max(r["per_expert"]) for r in rows]
    grew, busier = extra[skewed["router"]] > extra[even["router"]], busiest[1] > busiest[0]
    work = {r["router"]: (f"{extra[r['router']] * 1e3:.1f} ms" if r["measured_s"] >= r["predicted_s"] else
                          "nothing") for r in rows}
    said.append(f"Beyond the collectives, this CPU's work came to {work[even['router']]} a step as "
                f"initialised and {work[skewed['router']]} skewed, while the busiest expert's tokens "
                f"went from {busiest[0]} to {busiest[1]}: "
                + ("it grew with the busiest expert's load, whose rank computes longest while the others wait for it "
                   "in the combine: imbalance costs twice." if grew and busier else
                   "it grew, though the busiest expert's load did not." if grew else
                   "it did not grow with the busiest expert's load here."))
    conclusions = ("the skewed router loads its busiest expert more" if skewed["imbalance"] > even["imbalance"] else
                   "the skewed router does not load its busiest expert more",
                   "the skewed router's all-to-alls move more bytes" if skewed["sent"] > even["sent"] else
                   "the skewed router's all-to-alls do not move more bytes",
                   "the skewed layer takes longer on the emulated machine" if ratio >= COSTLIER else
                   "the skewed layer does not take clearly longer on the emulated machine")
    return Finding(" ".join(said), conclusions)


def _where(row: dict) -> str:
    """' (rank s to rank d)' for the largest count of the row's table, where the row has its table."""
    table = row.get("table")
    if not table:
        return ""
    s, d = max(((s, d) for s in range(len(table)) for d in range(len(table))), key=lambda sd: table[sd[0]][sd[1]])
    return f" (rank {s} to rank {d}{': its own expert' if s == d else ''})"


def capacity_rows(rows: list[dict], factors=FACTORS) -> list[dict]:
    """What each router's count table (one expert a rank) would cost three ways: a fixed capacity of ``factor`` x
    tokens / experts for each rank's tokens to each expert, the rest dropped (Switch Transformer, GShard); every block
    padded to the table's largest count (what ExpertParallel runs); variable sizes, each rank sending exactly its
    tokens (dropless: MegaBlocks, DeepEP). Tokens dropped, and the bytes the busiest rank sends in one dispatch."""
    out = []
    for row in rows:
        table = np.asarray(row["table"])
        n, experts = len(table), len(row["per_expert"])
        if experts != n:
            raise ValueError(f"capacity_rows counts one expert a rank; this table has {n} ranks and {experts} experts")
        tokens = int(table.sum(axis=1).max())  # a rank's tokens
        off = ~np.eye(n, dtype=bool)
        largest = int(table.max())

        def add(scheme, block, dropped, sent, factor=None):
            out.append({"router": row["router"], "scheme": scheme, "factor": factor, "block": block,
                        "dropped": int(dropped), "dropped_share": dropped / table.sum(), "sent": sent * row["token_bytes"],
                        "no_drop_factor": largest / (tokens / experts)})

        for factor in factors:
            capacity = math.ceil(factor * tokens / experts)
            dropped = np.maximum(table - capacity, 0).sum()  # beyond capacity, each rank's tokens for each expert
            add(f"capacity factor {_factor(factor)}", capacity, dropped, (n - 1) * capacity, factor)
        add("padded to the largest count", largest, 0, (n - 1) * largest)
        add("dropless (variable sizes)", "variable", 0, int(np.where(off, table, 0).sum(axis=1).max()))
    return out


def capacity_row(table, factor: float) -> dict:
    """``capacity_rows``' row for a fixed capacity of ``factor`` x the even share on a bare count ``table`` (one expert a
    rank; its block, the tokens it drops and their share)."""
    row = {"router": "given", "table": [list(r) for r in table], "per_expert": [0] * len(table), "token_bytes": 1}
    return next(r for r in capacity_rows([row], factors=(factor,)) if r["factor"] == factor)


# A router's count table to choose a capacity factor for: each expert's popularity drawn once (lognormal), each rank's
# around it, each token routed top-1 by those shares; seeded, so every learner gets the same table
ROUTING = {"ranks": 8, "tokens": 4096, "seed": 0, "spread": 0.3, "rank_spread": 0.1}


def routing_table(ranks: int = ROUTING["ranks"], tokens: int = ROUTING["tokens"], seed: int = ROUTING["seed"],
                  spread: float = ROUTING["spread"], rank_spread: float = ROUTING["rank_spread"]) -> list[list[int]]:
    """A skewed top-1 router's count table (``table[s][e]``: rank s's tokens for expert e, one expert a rank): the
    experts' popularity drawn from a lognormal of sigma ``spread``, each rank's from its own of ``rank_spread`` around
    it, and each rank's ``tokens`` drawn from those shares (multinomial)."""
    rng = np.random.default_rng(seed)
    popularity = rng.lognormal(0.0, spread, ranks)
    rows = []
    for _ in range(ranks):
        shares = popularity * rng.lognormal(0.0, rank_spread, ranks)
        rows.append([int(c) for c in rng.multinomial(tokens, shares / shares.sum())])
    return rows


def describe_routing(table) -> str:
    """The count table, a rank a line, and each expert's load against the even share."""
    counts = np.asarray(table)
    loads = counts.sum(axis=0) / (counts.sum() / len(counts))
    lines = [f"rank {s}: " + " ".join(f"{c:5d}" for c in row) for s, row in enumerate(counts)]
    lines.append("experts' loads against the even share: " + ", ".join(f"{x:.2f}" for x in loads)
                 + f" (largest count {counts.max()}, {counts.max() / (counts.sum(axis=1).max() / len(counts)):.2f}x a "
                 "rank's even share for one expert)")
    return "\n".join(lines)


def _factor(factor: float) -> str:
    return f"{factor:.2f}".rstrip("0").rstrip(".") if factor * 10 % 1 else f"{factor:.1f}"


def capacity_lesson(rows: list[dict]) -> Finding:
    """What a fixed capacity would have dropped and sent on each router's own table, against padding and dropless."""
    said, conclusions = [], []
    for router in dict.fromkeys(r["router"] for r in rows):
        mine = [r for r in rows if r["router"] == router]
        fixed = [r for r in mine if r["scheme"].startswith("capacity factor")]
        (padded,), (dropless,) = ([r for r in mine if r["scheme"].startswith(k)] for k in ("padded", "dropless"))
        slash = lambda texts: " / ".join(texts)
        said.append(
            f"Router {router}, capacity factor {slash(_factor(r['factor']) for r in fixed)}: blocks of "
            f"{slash(str(r['block']) for r in fixed)} tokens would drop "
            + slash(f"{r['dropped']} ({r['dropped_share']:.1%})" if r["dropped"] else "none" for r in fixed)
            + f" of the layer's tokens, the busiest rank sending {slash(format_bytes(r['sent']) for r in fixed)} a "
            f"dispatch. Padded to the largest count ({padded['block']} tokens: capacity factor "
            f"{padded['no_drop_factor']:.2f}, the smallest that drops nothing here) it sends "
            f"{format_bytes(padded['sent'])}; dropless, each rank sending its own count, {format_bytes(dropless['sent'])}"
            + (f": padding sends {padded['sent'] / dropless['sent']:.1f}x as much." if dropless["sent"] < padded["sent"]
               else ", as much as padding."))
        first = fixed[0]
        drops = "tokens" if first["dropped"] else "no tokens"
        conclusions.append(f"capacity factor {_factor(first['factor'])} drops {drops} with the router {router}")
    return Finding(" ".join(said), tuple(conclusions))


def _padded_bytes(table, token_bytes):
    n = len(table)
    return (n - 1) * max(max(row) for row in table) * token_bytes


@exercise(_padded_bytes, "formula")
def check_padded_bytes(padded_bytes):
    """Compare ``padded_bytes(table, token_bytes)`` (what one rank sends in one padded all-to-all) with ringlab's."""
    cases = [dict(table=[[3, 1], [2, 2]], token_bytes=8), dict(table=[[5, 1, 0], [2, 2, 9], [0, 1, 1]], token_bytes=512),
             dict(table=[[64] * 4] * 4, token_bytes=256)]
    compare(padded_bytes, "padded_bytes", cases, _padded_bytes,
            "every block is padded to the largest count in the whole table, the diagonal (a rank's tokens for its own "
            "expert) included, and a rank sends one block to each of the n-1 others (its own stays).", unit="bytes")
    print("Correct: the largest count sets every block's size, so one busy expert makes every rank send more.")


def against_one_rank(comm=None) -> dict:
    """The expert-parallel layer (one expert a rank) against the same layer on one rank over every rank's tokens:
    the largest relative difference of the outputs and of the input's gradient, on every rank."""
    import torch
    from mpi4py import MPI

    from ...train.experts import ExpertParallel, MixtureOfExperts

    comm = MPI.COMM_WORLD if comm is None else comm
    n, rank = comm.Get_size(), comm.Get_rank()
    tokens = torch.randn(n * 50, 8, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    whole = tokens.clone().requires_grad_(True)
    MixtureOfExperts(8, n, 16, seed=4).double()(whole).pow(2).sum().backward()
    mine = tokens[rank * 50:(rank + 1) * 50].clone().requires_grad_(True)
    layer = ExpertParallel(MixtureOfExperts(8, n, 16, seed=4).double(), comm)
    out = layer(mine)
    out.pow(2).sum().backward()
    with torch.no_grad():
        reference = MixtureOfExperts(8, n, 16, seed=4).double()(tokens)[rank * 50:(rank + 1) * 50]
    worst = lambda a, b: comm.allreduce(float((a - b).detach().abs().max() / b.detach().abs().max()), op=MPI.MAX)
    return {"output": worst(out, reference), "input's gradient": worst(mine.grad, whole.grad[rank * 50:(rank + 1) * 50]),
            "tokens per expert": layer.last["per_expert"]}


DISPATCH_COLUMNS = {"router": "router", "way": "way", "block (tokens)": "block", "tokens dropped": "dropped",
                    "dropped share": ("dropped_share", ".1%"), "busiest rank sends a step (KiB)": "sent",
                    "busiest receiver takes a dispatch (KiB)": "busiest_in",
                    "measured step, virtual (ms)": "measured_s", "predicted (ms)": "predicted_s",
                    "vs one rank": ("difference", ".1e")}
CAPACITY_COLUMNS = {"router": "router", "scheme": "scheme", "block (tokens)": "block", "tokens dropped": "dropped",
                    "dropped share": ("dropped_share", ".1%"), "busiest rank sends a dispatch (KiB)": "sent"}
IMBALANCE_COLUMNS = {"router": "router", "tokens per expert": "per_expert", "busiest / mean": ("imbalance", ".2f"),
                     "block (tokens)": "capacity", "all-to-all a step (KiB)": "sent",
                     "measured step, virtual (ms)": "measured_s", "predicted collectives (ms)": "predicted_s",
                     "this machine's step, wall (ms)": "wall_s"}
