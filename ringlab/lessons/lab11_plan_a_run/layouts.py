"""Lab 11's four questions, each answered from the plans it computes (all predicted by ``rl.plan``): tensor
parallelism inside a node or across two; when ZeRO-3 pays; context parallelism at 128k tokens; the same run on B200
and on GB200 NVL72. Each ``*_rows`` or ``*_result`` function plans; each ``*_lesson`` says what its numbers say."""
from __future__ import annotations

from ...lab.findings import Finding
from ...lab.words import and_join, article, plural
from ...measure.units import format_bytes
from ...train.planner import plan, search
from .run import GIB, GLOBAL_BATCH, MICRO_BATCH, SEQ, _seconds, machine, model

SAME = 0.05  # two times within 5% are "about the same"
TOKENS = 1e12  # a trillion tokens: the budget the machines are compared on
LONG_SEQ, LONG_BATCH = 131072, 32  # 128k tokens a sequence, 32 of them: 4M tokens a step, as at 8k


def _layout(p) -> str:
    return p.layout_str()


def _printed_gap(first: float, second: float) -> float:
    """``second - first`` in seconds as the two print, to a hundredth: 0 where they print alike."""
    return round(float(f"{second:.2f}") - float(f"{first:.2f}"), 2)


# -- tensor parallelism: inside a node, or across two -----------------------------------------------------------
def tensor_reach(tps=(8, 16), model_parallel: int = 32, topology=None, **common) -> dict:
    """Each ``tp`` with ``pp = model_parallel / tp`` (the same data-parallel group and GPUs), ZeRO 1, 4M tokens a
    step: its tensor group's all-gathers (size, price, calls, where they run), the exposed tensor time and the step."""
    tps = tuple(tps)
    if len(tps) != 2 or tps[0] == tps[1]:
        raise ValueError(f"tps must be two different tensor-parallel sizes to compare, got {tps!r}")
    for tp in tps:
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 2 or model_parallel % tp:
            raise ValueError(f"each of tps must be a whole number >= 2 (a tensor group) that divides "
                             f"model_parallel={model_parallel}, got tp={tp!r}")
    topology = topology or machine()
    settings = {"zero": 1, "micro_batch": 1, "global_batch": GLOBAL_BATCH, "seq": SEQ, **common}
    rows = []
    for tp in tps:
        p = plan(model(), topology, tp=tp, pp=model_parallel // tp, **settings)
        gather = next(c for c in p.collectives if c.parallelism == "tp" and c.collective == "allgather")
        rows.append({"tp": tp, "pp": p.layout["pp"], "layers": -(-p.model.layers // p.layout["pp"]), "plan": p,
                     "where": gather.where, "inside": topology.machine.gpus_per_node >= tp, "nbytes": gather.nbytes,
                     "algorithm": f"{gather.algorithm}/{gather.protocol}", "call_s": gather.seconds,
                     "calls": gather.calls, "tp_s": p.time.get("tp", 0.0), "step_s": p.step_seconds,
                     "memory_gib": p.memory_total / GIB})
    return {"rows": rows, "gpus_per_node": topology.machine.gpus_per_node}


TENSOR_COLUMNS = {"tp": "tp", "pp": "pp", "tensor group": "where", "all-gather": "algorithm",
                  "one all-gather (ms)": "call_s", "all-gathers a step": ("calls", ".0f"),
                  "exposed tp (s)": "tp_s", "step (s)": "step_s"}


def tensor_lesson(result: dict) -> Finding:
    """Why the tensor group stays in a node, or not: the price of one call in and across nodes, how many calls a GPU
    makes, the exposed tensor time and the step, compared."""
    if len(result["rows"]) != 2:
        raise ValueError(f"tensor_lesson compares two tensor-parallel sizes, got {len(result['rows'])} rows")
    a, b = result["rows"]
    per_call, calls, exposed = b["call_s"] / a["call_s"], b["calls"] / a["calls"], b["tp_s"] / a["tp_s"]
    on = lambda r: "one node's NVLink" if r["inside"] else f"{r['where']} GPUs, across the network"  # noqa: E731
    said = [f"tp={a['tp']} (pp={a['pp']}) runs each tensor group on {on(a)}: each all-gather (and each "
            f"reduce-scatter) of {format_bytes(a['nbytes'])} takes {a['call_s'] * 1e3:.3f} ms ({a['algorithm']}), "
            f"{a['calls']:.0f} of each a step, {a['tp_s']:.2f} s exposed.",
            f"tp={b['tp']} (pp={b['pp']}) runs it on {on(b)}: each call takes {b['call_s'] * 1e3:.3f} ms "
            f"({b['algorithm']}), {per_call:.2f}x, and each GPU makes {b['calls']:.0f} ({calls:.1f}x: it holds slices "
            f"of {plural(b['layers'], 'layer')} where tp={a['tp']} holds {a['layers']}, and every layer's calls carry "
            f"the micro-batch's whole hidden states whatever tp is), {b['tp_s']:.2f} s exposed: {exposed:.2f}x."]
    where = "across nodes" if a["inside"] and not b["inside"] else f"on {b['tp']} GPUs than on {a['tp']}"
    if abs(per_call - 1) <= SAME:
        crossing = f"a call costs about the same {where.replace(' than ', ' as ')}"
    else:
        crossing = f"a call costs {'more' if per_call > 1 else 'less'} {where}"
    by_count = abs(calls - 1) > abs(per_call - 1)
    cause = "the number of calls" if by_count else "the price of each call"
    weighed = (f"{calls:.1f}x, against {per_call:.2f}x for the price of each" if by_count else
               f"{per_call:.2f}x, against {calls:.1f}x for the number of calls")
    gap = _printed_gap(a["step_s"], b["step_s"])  # as the steps print: a tie is no one's win
    faster = a if gap > 0 else b
    step = (f"tp={faster['tp']} is faster, by {abs(gap):.2f} s a step" if gap else
            "the two steps are the same to a hundredth of a second")
    said.append(f"So {crossing} ({per_call:.2f}x), and most of the change in exposed time comes from {cause} "
                f"({weighed}). "
                f"The step: {a['step_s']:.2f} s at tp={a['tp']} against {b['step_s']:.2f} s at tp={b['tp']}: "
                f"{step}.")
    conclusions = (crossing, f"most of the change from {cause}",
                   f"tp={faster['tp']} is faster" if gap else "the same step")
    return Finding(" ".join(said), conclusions)


# -- ZeRO-3: what it saves and what it costs --------------------------------------------------------------------
ZERO_LAYOUTS = (dict(tp=8, micro_batch=1), dict(tp=8, micro_batch=16, recompute="full"))


def zero_rows(layouts=ZERO_LAYOUTS, stages=(1, 3), topology=None, global_batch: int = GLOBAL_BATCH,
              seq: int = SEQ) -> list[dict]:
    """Each layout at each ZeRO stage: memory, whether it fits, the data-parallel calls a step, their exposed and
    hidden seconds, and the step."""
    stages = tuple(stages)
    if len(stages) != 2 or stages[0] == stages[1] or any(z not in (0, 1, 2, 3) or isinstance(z, bool) for z in stages):
        raise ValueError(f"stages must be two different ZeRO stages (0, 1, 2 or 3) to compare, got {stages!r}")
    topology = topology or machine()
    rows = []
    for i, layout in enumerate(layouts):
        for zero in stages:
            p = plan(model(), topology, zero=zero, global_batch=global_batch, seq=seq, **layout)
            dp_calls = sum(c.calls for c in p.collectives if c.parallelism == "dp")
            rows.append({"case": i, "layout": _layout(p), "zero": zero,
                         "setting": _layout(p).replace(f" zero={zero}", ""), "plan": p, "memory_gib": p.memory_total / GIB,
                         "capacity_gib": p.capacity / GIB, "fits": p.fits, "dp_calls": dp_calls,
                         "dp_listed": _dp_calls(p),
                         "dp_s": p.time.get("dp", 0.0), "dp_hidden_s": p.hidden.get("dp", 0.0),
                         "micro_batches": p.layout["micro_batches"], "step_s": p.step_seconds})
    return rows


ZERO_COLUMNS = {"layout": "layout", "memory (GiB)": ("memory_gib", ".1f"), "fits": "fits",
                "micro-batches": "micro_batches", "dp calls a step": ("dp_calls", ".0f"), "dp exposed (s)": "dp_s",
                "dp hidden (s)": "dp_hidden_s", "step (s)": "step_s"}


def _dp_calls(p) -> str:
    """A plan's data-parallel calls a step, by kind: '221 reduce-scatters of 152.2 MiB and 221 all-gathers of ...'."""
    names = {"allreduce": "allreduces", "allgather": "all-gathers", "reduce_scatter": "reduce-scatters"}
    return and_join([f"{c.calls:,.0f} {names.get(c.collective, c.collective)} of {format_bytes(c.nbytes)}"
                     for c in p.collectives if c.parallelism == "dp" and c.calls])


def zero_lesson(rows: list[dict]) -> Finding:
    """For each layout, whether ZeRO-3 pays against ZeRO-1 there (it must fit where ZeRO-1 does not, or be faster),
    and which plan of all fits fastest."""
    said, conclusions = [], []
    for case in dict.fromkeys(r["case"] for r in rows):
        pair = sorted((r for r in rows if r["case"] == case), key=lambda r: r["zero"])
        if len(pair) != 2 or pair[0]["zero"] == pair[1]["zero"]:
            raise ValueError(f"zero_lesson compares two ZeRO stages of each layout; layout {case} has "
                             f"{', '.join(str(r['zero']) for r in pair)}")
        low, high = pair
        fit = lambda r: "fits" if r["fits"] else "does not fit"  # noqa: E731
        saved = round(low["memory_gib"], 1) - round(high["memory_gib"], 1)  # as the two print
        each = ("for its one micro-batch" if high["micro_batches"] == 1 else
                f"for each of its {plural(high['micro_batches'], *MICRO_BATCH)}")
        listed = (f": {high['dp_listed']}; ZeRO-{low['zero']}: {low['dp_listed'] or 'none'}"
                  if "dp_listed" in high and "dp_listed" in low else "")
        gathers = (f" (ZeRO-3 gathers every layer's weights before each use and reduce-scatters its gradients, {each}"
                   f"{listed})" if high["zero"] == 3 and high["dp_calls"] > 0 else "")
        exposed = "none of them exposed" if high["dp_s"] <= 0 else f"{_seconds(high['dp_s'])} of them exposed"
        text = (f"{low['setting']}: ZeRO-{low['zero']} needs {low['memory_gib']:.1f} GiB a GPU ({fit(low)} in "
                f"{low['capacity_gib']:.1f}), ZeRO-{high['zero']} {high['memory_gib']:.1f} GiB ({fit(high)}), "
                + (f"{saved:.1f} GiB less" if round(saved, 1) > 0 else f"{-saved:.1f} GiB more" if round(saved, 1) < 0
                   else "about the same")
                + f", with {high['dp_calls']:.0f} data-parallel calls a step against {low['dp_calls']:.0f}{gathers}, "
                f"{exposed} and {_seconds(high['dp_hidden_s'])} hidden behind compute: a step of "
                f"{high['step_s']:.2f} s against {low['step_s']:.2f} s"
                + (f" (ZeRO-{low['zero']}'s, were it to fit)." if not low["fits"] else "."))
        slower = _printed_gap(low["step_s"], high["step_s"])  # as the steps print
        if high["fits"] and not low["fits"]:
            verdict = f"ZeRO-{high['zero']} pays at {high['setting']}: it makes the layout fit"
        elif high["fits"] and slower < 0:
            verdict = f"ZeRO-{high['zero']} pays at {high['setting']}: it is faster"
        elif not high["fits"]:
            verdict = (f"ZeRO-{high['zero']} does not pay at {high['setting']}: it does not fit"
                       + (" either" if not low["fits"] else f", where ZeRO-{low['zero']} does"))
        elif slower == 0:
            verdict = (f"ZeRO-{high['zero']} does not pay at {high['setting']}: ZeRO-{low['zero']} fits too, "
                       "with the same step to a hundredth of a second")
        else:
            verdict = (f"ZeRO-{high['zero']} does not pay at {high['setting']}: ZeRO-{low['zero']} fits and is "
                       f"{slower:.2f} s a step faster")
        said.append(text + " " + verdict + ".")
        conclusions.append(verdict)
    fitting = [r for r in rows if r["fits"]]
    if fitting:
        best = min(fitting, key=lambda r: r["step_s"])
        last = f"the fastest that fits is {best['layout']} ({best['step_s']:.2f} s)"
    else:
        last = "none of these fits"
    said.append(f"Of all {len(rows)}, {last}.")
    conclusions.append(last)
    return Finding(" ".join(said), tuple(conclusions))


# -- context parallelism at 128k tokens -------------------------------------------------------------------------
def context_rows(cps=(1, 2, 4, 8), topology=None, seq: int = LONG_SEQ, global_batch: int = LONG_BATCH,
                 **layout) -> list[dict]:
    """Each ``cp`` at ``seq`` tokens a sequence (tp=8, pp=4, ZeRO 1 unless ``layout`` says): activations, memory,
    fit, the ring's exposed and hidden seconds, data parallelism, the bubble and the step."""
    cps = tuple(cps)
    if len(cps) < 2 or len(set(cps)) != len(cps):
        raise ValueError(f"cps must be at least two different context-parallel sizes to compare, got {cps!r}")
    topology = topology or machine()
    layout = {"tp": 8, "pp": 4, "zero": 1, "micro_batch": 1, **layout}
    rows = []
    for cp in cps:
        p = plan(model(), topology, cp=cp, global_batch=global_batch, seq=seq, **layout)
        rows.append({"cp": cp, "plan": p, "layout": _layout(p), "seq": seq, "dp": p.layout["dp"],
                     "activations_gib": p.memory["activations"] / GIB, "memory_gib": p.memory_total / GIB,
                     "capacity_gib": p.capacity / GIB, "fits": p.fits, "cp_s": p.time.get("cp", 0.0),
                     "cp_hidden_s": p.hidden.get("cp", 0.0), "bubble_s": p.time.get("bubble", 0.0),
                     "micro_batches": p.layout["micro_batches"], "step_s": p.step_seconds})
    return rows


CONTEXT_COLUMNS = {"cp": "cp", "dp": "dp", "activations (GiB)": ("activations_gib", ".1f"),
                   "memory (GiB)": ("memory_gib", ".1f"), "fits": "fits", "ring exposed (s)": "cp_s",
                   "ring hidden (s)": "cp_hidden_s", "bubble (s)": "bubble_s", "step (s)": "step_s"}


def context_lesson(rows: list[dict]) -> Finding:
    """What context parallelism buys at long sequences: activations against cp, the smallest cp that fits, what its
    ring costs and hides, and what it does to the bubble."""
    if len(rows) < 2:
        raise ValueError(f"context_lesson compares at least two values of cp, got {len(rows)} rows")
    first, last = rows[0], rows[-1]
    said = [f"At {first['seq']:,} tokens a sequence a GPU's activations take {first['activations_gib']:.1f} GiB at "
            f"cp={first['cp']} and {last['activations_gib']:.1f} GiB at cp={last['cp']} "
            f"({last['activations_gib'] / first['activations_gib']:.3f}x; 1/cp would be "
            f"{first['cp'] / last['cp']:.3f}x): each GPU keeps {first['seq'] // last['cp']:,} of a sequence's tokens."]
    fitting = [r for r in rows if r["fits"]]
    if fitting:
        least = min(fitting, key=lambda r: r["cp"])
        fit = f"cp={least['cp']} is the smallest that fits"
        said.append(f"{fit}: {least['memory_gib']:.1f} GiB of {least['capacity_gib']:.0f}"
                    + (f", where cp={rows[0]['cp']} needs {rows[0]['memory_gib']:.1f}." if least is not rows[0] else "."))
        said.append(f"Its ring passes keys and values while attention computes: {least['cp_hidden_s']:.2f} s hidden, "
                    f"{least['cp_s']:.2f} s exposed a step.")
    else:
        fit = "none of these fits"
        least = min(rows, key=lambda r: r["memory_gib"])
        said.append(f"None of cp={and_join(r['cp'] for r in rows)} fits: the least, cp={least['cp']}, needs "
                    f"{least['memory_gib']:.1f} GiB of {least['capacity_gib']:.0f}.")
    change = round(last["bubble_s"], 2) - round(first["bubble_s"], 2)
    bubble = "the bubble shrinks" if change < 0 else "the bubble does not shrink"  # at the hundredths printed
    if first["bubble_s"] or last["bubble_s"]:
        said.append(f"cp takes its GPUs from data parallelism (dp {first['dp']} to {last['dp']}), so each pipeline "
                    f"runs {plural(last['micro_batches'], *MICRO_BATCH)} a step instead of {first['micro_batches']:,} "
                    f"and {bubble}: {first['bubble_s']:.2f} s to {last['bubble_s']:.2f} s.")
    return Finding(" ".join(said), (fit, bubble))


# -- the same run on other machines -----------------------------------------------------------------------------
def machines(seq: int = SEQ, tokens_per_gpu_step: int = GLOBAL_BATCH * SEQ // 256, candidates=None) -> list[dict]:
    """The fastest layout ``ringlab.train.planner.search`` finds for the lab's model on 256 H100s, 256 B200s and 4
    GB200 NVL72 racks (72 GPUs an NVLink domain), each at the same tokens a GPU a step as the lab's run: its step,
    throughput, MFU and days for a trillion tokens."""
    candidates = candidates or [("256 H100s (32 nodes of 8)", machine("h100")),
                                ("256 B200s (32 nodes of 8)", machine("b200")),
                                ("288 GB200s (4 NVL72 racks of 72)", machine("gb200", 4, 72))]
    rows = []
    for name, topology in candidates:
        gpus = topology.machine.nodes * topology.machine.gpus_per_node
        global_batch = tokens_per_gpu_step * gpus // seq
        found = search(model(), topology, global_batch=global_batch, seq=seq, top=1)
        row = {"machine": name, "gpus": gpus, "gpu": topology.machine.gpu, "global_batch": global_batch,
               "tokens_per_gpu": global_batch * seq / gpus,  # whole sequences: the asked tokens where they divide
               "considered": found.considered, "fits": bool(found.best),
               "too_big": sum(why.startswith("does not fit") for _, why in found.rejected),
               "refusal": _most_common([why for _, why in found.rejected if not why.startswith("does not fit")])}
        if found.best:
            p = found.best[0]
            row.update(plan=p, layout=_layout(p), step_s=p.step_seconds, tps=p.tokens_per_second_per_gpu, mfu=p.mfu,
                       memory_gib=p.memory_total / GIB, capacity_gib=p.capacity / GIB,
                       days=TOKENS / (p.tokens_per_second_per_gpu * gpus) / 86400,
                       gpu_hours=TOKENS / p.tokens_per_second_per_gpu / 3600)
        rows.append(row)
    return rows


MACHINE_COLUMNS = {"machine": "machine", "global batch": "global_batch", "fastest layout": "layout",
                   "memory (GiB)": ("memory_gib", ".1f"), "step (s)": "step_s", "tokens/s per GPU": ("tps", ",.0f"),
                   "MFU": ("mfu", ".1%"), "days for 1T tokens": ("days", ".1f")}


def _most_common(reasons: list[str]) -> str | None:
    return max(set(reasons), key=reasons.count) if reasons else None


def none_runs(row: dict) -> str:
    """Why no layout runs on a machine of :func:`machines`: too big for its memory, refused by a rule of the
    planner (the global batch not dividing, most often), or both, with how many of each."""
    too_big = row.get("too_big", row["considered"])
    refused = row["considered"] - too_big
    if not refused:
        return f"none of the {row['considered']} layouts tried fits in its memory."
    rule = f"refused by a rule of the planner (the most often: {row['refusal']})"
    if not too_big:
        return f"none of the {row['considered']} layouts tried can run: each is {rule}."
    return f"none of the {row['considered']} layouts tried runs: {too_big} do not fit in its memory, {refused} are {rule}."


def _capacity_note(gpu: str) -> str:
    """Where a GPU's memory figure comes from, when it is only an upper bound (nvidia-smi's total, not CUDA's)."""
    from ...train.planner import compute_data

    kind = compute_data().get(gpu, {}).get("reported_total_kind", "")
    return " (nvidia-smi's total less the CUDA context: an upper bound, CUDA reports less)" if kind.startswith(
        "nvidia-smi") else ""


def machines_lesson(rows: list[dict]) -> Finding:
    """Each machine's fastest layout and what it takes for a trillion tokens, against the first machine's."""
    base = rows[0]
    if not base["fits"]:
        return Finding(f"Nothing fits on {base['machine']}: {none_runs(base)}", ("nothing fits on the first machine",))
    said = [f"{base['machine']}: the fastest layout is {base['layout']}, {base['tps']:,.0f} tokens/s per GPU "
            f"(MFU {base['mfu']:.1%}): a trillion tokens in {base['days']:.1f} days, {base['gpu_hours']:,.0f} GPU-hours."]
    conclusions = []
    for r in rows[1:]:
        if not r["fits"]:
            said.append(f"{r['machine']}: {none_runs(r)}")
            conclusions.append(f"nothing fits on {r['machine']}")
            continue
        per_gpu = r["tps"] / base["tps"]
        same_speed = base["tps"] * base["gpus"] / r["tps"]
        changed = r["layout"] != base["layout"]
        same = r["tokens_per_gpu"] == base["tokens_per_gpu"]
        tokens = ("the same tokens a GPU a step" if same else
                  f"{r['tokens_per_gpu']:,.0f} tokens a GPU a step, against {base['tokens_per_gpu']:,.0f}: whole "
                  "sequences")
        said.append(f"{r['machine']}, with a global batch of {r['global_batch']} ({tokens}): "
                    f"{r['layout']}, "
                    f"{r['tps']:,.0f} tokens/s per GPU, {per_gpu:.2f}x {article(base['gpu'].upper())}'s "
                    f"(MFU {r['mfu']:.1%}), "
                    f"in {r['memory_gib']:.0f} of {r['capacity_gib']:.1f} GiB{_capacity_note(r['gpu'])}: a trillion tokens "
                    f"in {r['days']:.1f} days; "
                    f"{same_speed:.0f} {r['gpu'].upper()}s would match the {base['gpus']} {base['gpu'].upper()}s' tokens a second."
                    + (f" The best layout differs from the {base['gpu'].upper()}s' ({base['layout']})." if changed else
                       " The best layout is the same."))
        speed = "faster" if round(per_gpu, 2) > 1 else "slower" if round(per_gpu, 2) < 1 else "about as fast"
        conclusions.append(f"{r['machine']} is {speed} per GPU")
        conclusions.append(f"{r['machine']}: {'another' if changed else 'the same'} layout")
    return Finding(" ".join(said), tuple(conclusions))
