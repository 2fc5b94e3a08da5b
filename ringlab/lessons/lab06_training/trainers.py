"""What lab 06 says about its measurements, worded from the numbers it quotes: three trainers' weights
and times compared, the speed-up against ranks on this machine's cores, and why accuracies differ between runs."""
from __future__ import annotations

import numpy as np

from ...measure.units import format_bytes
from ...lab.words import and_join

ROUNDING = 1e-5  # float32 keeps about 7 significant digits; 30 steps of rounding stay well under this
SLOWER = 1.3  # a trainer this many times slower than DDP gets a word on why
BEYOND = 1.1  # a speed-up this many times what the cores allow (or computing this many times slower) is past noise
SAME_ACCURACY = 0.01  # accuracies within 1 point (20 of 2,000 test points) count as "about the same"
TRAINER_SPEED_COLUMNS = {"trainer": "trainer", "step (ms)": "step_s", "samples/s": ("samples_per_s", ".0f"),
                         "x the fastest": ("times_fastest", ".2f")}  # for ringlab.measure.tables.table


def compare_trainers(trained: dict, reference: str = "DDP") -> list[dict]:
    """One row per trainer of ``trained`` ({name: flat weights}) but ``reference``: its largest difference
    from ``reference``'s weights, relative to the largest of those weights."""
    if reference not in trained:
        raise ValueError(f"no weights named {reference!r} to compare with; got {', '.join(trained)}")
    theirs = np.asarray(trained[reference])
    return [{"trainer": name, "difference": float(np.abs(np.asarray(w) - theirs).max() / np.abs(theirs).max())}
            for name, w in trained.items() if name != reference]


def describe_trainers(rows: list[dict], reference: str = "DDP", tolerance: float = ROUNDING) -> str:
    """Whether the trainers of :func:`compare_trainers` ended on ``reference``'s weights, up to rounding."""
    worst = max(rows, key=lambda row: row["difference"])
    names = and_join([row["trainer"] for row in rows])
    if worst["difference"] <= tolerance:
        return (f"The {names} ended within {worst['difference']:.1e} of {reference}'s weights (relative to the largest "
                f"weight), under the {tolerance:.0e} that float rounding can explain: the same average, "
                f"computed {len(rows) + 1} ways.")
    return (f"The {worst['trainer']} ended {worst['difference']:.1e} away from {reference}'s weights, more than the "
            f"{tolerance:.0e} that float rounding can explain: it did not compute the same average.")


def trainer_speeds(seconds: dict, steps: int, batch: int) -> list[dict]:
    """One row per trainer of ``seconds`` ({name: seconds for ``steps`` steps of global ``batch``}), fastest
    first: seconds per step, samples per second, and how many times the fastest's time it took."""
    if not seconds:
        raise ValueError("no trainers timed")
    if any(not s > 0 for s in seconds.values()):
        raise ValueError(f"every trainer's seconds must be > 0, got {seconds!r}")
    fastest = min(seconds.values())
    return [{"trainer": name, "step_s": s / steps, "samples_per_s": steps * batch / s, "times_fastest": s / fastest}
            for name, s in sorted(seconds.items(), key=lambda item: item[1])]


def describe_trainer_speeds(rows: list[dict], workers: int, nranks: int, cores: int) -> str:
    """What :func:`trainer_speeds`' rows say, the trainers having run on ``workers`` of ``nranks`` ranks."""
    fastest, slowest = rows[0], rows[-1]
    lines = [f"Measured here, the same {workers} workers and batches: " + ", ".join(
        f"{row['trainer']} {row['step_s'] * 1e3:.2f} ms a step" for row in rows)
        + f". The {slowest['trainer']} took {slowest['times_fastest']:.2f} times as long as the {fastest['trainer']}."]
    server = [row for row in rows if "parameter server" in row["trainer"]]
    if server and server[0] is slowest:
        lines.append(f"The parameter server's rank receives all {workers} workers' gradients and sends the model back "
                     f"to each every step: {workers} times the gradients in and out of one rank, where a ring rank "
                     f"sends and receives 2(n-1)/n = {2 * (workers - 1) / workers:.3g} times them (lab 04).")
    ours = next((row for row in rows if row["trainer"].startswith("DistributedOptimizer")), None)
    ddp = next((row for row in rows if row["trainer"] == "DDP"), None)
    if ours and ddp and ours["step_s"] > SLOWER * ddp["step_s"]:
        lines.append(f"The DistributedOptimizer took {ours['step_s'] / ddp['step_s']:.1f} times DDP's time a step. Both "
                     "average the same gradients once a step, but DDP's allreduce runs inside gloo, in C++ threads, "
                     f"while ringlab's ring runs in Python: 2(n-1) = {2 * (workers - 1)} steps of MPI messages, each "
                     "with Python's bookkeeping around it (lab 03 measured what a step of ringlab's ring costs beyond "
                     "a raw message). A model this small has few gradient bytes, so a step's time is mostly that "
                     "fixed cost per call, not bytes on a link.")
    if nranks > cores:
        lines.append(f"{nranks} ranks shared {cores} core{'s' * (cores != 1)} here (the server's rank waits during "
                     "the other two runs): a rank's wait for a peer that had no core counts in every time.")
    return "\n".join(lines)


def describe_speedup(rows: list[dict], cores: int) -> str:
    """What the speed-up rows of ``measure_scaling`` say, on a machine that gives the ranks ``cores`` cores."""
    first, last = rows[0], rows[-1]
    ranks = [row["ranks"] for row in rows]
    lines = [_cores_sentence(ranks, cores)]
    ideal, allowed = last["ranks"] / first["ranks"], min(last["ranks"], cores) / min(first["ranks"], cores)
    said = (f"At {last['ranks']} ranks training ran {last['speedup']:.2f}x as fast as at {_ranks(first['ranks'])} "
            f"(ideal {ideal:.3g}x" + (f"; {cores} cores allow at most {allowed:.3g}x" if allowed < ideal else "")
            + ")")
    if round(last["speedup"], 2) < 1:
        lines.append(f"{said}: slower than {_ranks(first['ranks'])}, so adding ranks "
                     "cost more than it gained.")
    elif last["speedup"] > BEYOND * allowed:
        lines.append(f"{said}: more than the cores allow ({last['speedup'] / allowed:.0%} of it).")
    elif last["speedup"] >= 0.8 * allowed:
        lines.append(f"{said}: {last['speedup'] / allowed:.0%} of what the cores allow.")
    else:
        lines.append(f"{said}: only {last['speedup'] / allowed:.0%} of what the cores allow.")
    best = max(rows, key=lambda row: row["speedup"])
    if best is not last and best is not first:
        lines.append(f"The fastest run was {best['ranks']} ranks, at {best['speedup']:.2f}x.")
    beyond = [row for row in rows[1:]
              if row["speedup"] > BEYOND * min(row["ranks"], cores) / min(first["ranks"], cores)]
    if beyond:  # each rank computes the same samples a step at every width: more than the cores allow is no scaling
        lines.append(f"The run{'s' * (len(beyond) > 1)} with {and_join([row['ranks'] for row in beyond])} ranks "
                     f"went faster than the cores allow: a rank there took less time a sample than the single rank "
                     "did, which these numbers do not explain (a step is about a millisecond, and moves with whatever "
                     "else the machine does). Run the cell again before reading scaling from it.")
    lines.append(_communication_sentence(first, last, cores))
    return "\n".join(lines)


def _cores_sentence(ranks: list[int], cores: int) -> str:
    fit, over = [n for n in ranks if n <= cores], [n for n in ranks if n > cores]
    said = f"This machine gives the ranks {cores} core{'s' * (cores != 1)}: "
    if not over:
        return said + f"every run had a core per rank ({and_join(ranks)} ranks), so no rank waited for a core."
    fitting = (f"the run{'s' * (len(fit) > 1)} with {and_join(fit)} rank{'s' * (fit != [1])} had a core per rank; "
               if fit else "")
    shared = " and ".join(f"{n} ranks ({n / cores:.2g} ranks a core)" for n in over)
    return (f"{said}{fitting}the run{'s' * (len(over) > 1)} with {shared} {'were' if len(over) > 1 else 'was'} "
            "oversubscribed: ranks took turns on the cores, and a rank waiting for a peer that had no core counted "
            "that wait as communicating.")


def _communication_sentence(first: dict, last: dict, cores: int) -> str:
    def step(row):  # (seconds a step, seconds of it computing) on a rank
        seconds = row["seconds"] / row["steps"]
        return seconds, seconds * (1 - row["comm_share"])

    (one, one_computing), (many, computing) = step(first), step(last)
    lines = [f"At {_ranks(first['ranks'])} a step took {one * 1e6:.0f} us: {one_computing * 1e6:.0f} us computing "
             f"its {first['batch'] // first['ranks']} samples and {first['comm_share']:.0%} of it in step()"
             + (", though no bytes travel (handing the gradients to the communication thread and back, and an "
                "allreduce with no one to send to)."
                if first["ranks"] == 1 else ", averaging the gradients.")]
    slower = computing / one_computing
    shared = ": ranks shared cores" if last["ranks"] > cores and slower > BEYOND else ""
    lines.append(f"At {_ranks(last['ranks'])} a step took {many * 1e6:.0f} us: {computing * 1e6:.0f} us computing the "
                 f"same samples per rank ({slower:.1f}x as long{shared}) and {last['comm_share']:.0%} of it averaging "
                 f"{format_bytes(last['gradient_bytes'])} of gradients.")
    if last["comm_share"] > 0.5:
        lines.append("Communication, not computation, set the pace: a model this small has too little to compute per "
                     "byte it sends for more ranks to pay off much.")
    else:
        lines.append("Computation still took most of each step, so more ranks had work to share.")
    return "\n".join(lines)


def describe_accuracy(rows: list[dict], one_process: dict) -> str:
    """Why the test accuracies of ``measure_scaling``'s rows differ, and whether one process trained on
    the global batches of one of them (:func:`ringlab.train.scaling.train_in_one_process`) matches it."""
    lines = [_recipe_sentence(rows)]
    lo, hi = min(rows, key=lambda r: r["accuracy"]), max(rows, key=lambda r: r["accuracy"])
    points = rows[0]["test_points"]
    spread = hi["accuracy"] - lo["accuracy"]
    lines.append(f"Test accuracy ranged from {lo['accuracy']:.4f} ({_ranks(lo['ranks'])}) to {hi['accuracy']:.4f} "
                 f"({_ranks(hi['ranks'])}): {round(spread * points):,} more of the {points:,} test points classified "
                 "right.")
    lines.append(_one_process_sentence(rows, one_process, points))
    if len({row["samples"] for row in rows}) > 1:
        lines.append("The runs saw different numbers of samples, so their accuracies compare different amounts of "
                     "training, not the ranks: measure with samples= for a fair comparison.")
    elif spread <= SAME_ACCURACY + 1e-9:
        lines.append(f"At equal samples they are within {SAME_ACCURACY:.2f} ({SAME_ACCURACY * points:.0f} test "
                     "points): n times the batch at n times the learning rate learned about as well in n times "
                     "fewer steps (linear scaling held).")
    elif lo is rows[0]:
        lines.append(f"At equal samples they are more than {SAME_ACCURACY:.2f} ({SAME_ACCURACY * points:.0f} test "
                     f"points) apart, and {_ranks(lo['ranks'])}, the smallest batch at the smallest learning rate, "
                     "ended lowest: the larger batches did better here, so more ranks cost no accuracy.")
    else:
        times = lo["ranks"] / rows[0]["ranks"]
        lines.append(f"At equal samples they are more than {SAME_ACCURACY:.2f} ({SAME_ACCURACY * points:.0f} test "
                     f"points) apart, and {_ranks(lo['ranks'])} ended lowest: here {times:.3g} times the learning "
                     f"rate did not fully make up for {times:.3g} times fewer steps. The linear scaling rule is an "
                     "approximation: it holds while one step changes the weights little, and larger rates want the "
                     "warm-up of Exercise 1.")
    return "\n".join(lines)


def _recipe_sentence(rows: list[dict]) -> str:
    runs = ", ".join(f"{_ranks(r['ranks'])} {r['steps']} steps of {r['batch']} at lr "
                     f"{r['lr']:.2f}" for r in rows)
    samples = {row["samples"] for row in rows}
    if len(samples) == 1:
        total = samples.pop()
        return (f"Every run trained on {total:,} samples ({total / rows[0]['train_points']:.2f} passes over the "
                f"{rows[0]['train_points']:,} training points): {runs} (the linear scaling rule).")
    seen = ", ".join(f"{_ranks(r['ranks'])} {r['samples']:,}" for r in rows)
    return f"The runs took the same number of steps, so n ranks saw n times the samples ({seen}): {runs}."


def _one_process_sentence(rows: list[dict], one: dict, points: int) -> str:
    match = [r for r in rows if r["ranks"] == one["ranks"] and r["steps"] == one["steps"]]
    if not match:
        raise ValueError(f"no run of {one['ranks']} ranks and {one['steps']} steps to set the one-process run against")
    run = match[0]
    said = (f"One process trained on the {run['ranks']}-rank run's global batches ({one['batch']} a step, lr "
            f"{one['lr']:.2f}, {one['steps']} steps) reached {one['accuracy']:.4f}; the {run['ranks']} ranks "
            f"reached {run['accuracy']:.4f}")
    apart = round(abs(one["accuracy"] - run["accuracy"]) * points)
    rounding = ("the ranks add their gradients in another order than one process does, and steps carry the "
                "rounding on")
    if apart == 0:
        return (f"{said}: the same. Ranks averaging gradients compute what one process computes on the whole global "
                "batch, so the ranks change nothing that is learned: the batch size, the learning rate and the "
                "number of steps do.")
    if apart <= SAME_ACCURACY * points:
        return (f"{said}: {apart} test point{'s' * (apart != 1)} apart ({rounding}). Ranks averaging gradients compute "
                "what one process computes on the whole global batch: the batch size, the learning rate and the "
                "number of steps set what is learned, not the ranks.")
    return (f"{said}: {apart} test points apart, more than float rounding explains ({rounding}), so the ranks "
            "did not compute what one process computes on the global batch.")


def _ranks(n: int) -> str:
    return f"{n} rank{'s' * (n != 1)}"


