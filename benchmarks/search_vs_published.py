"""The layout search held to the layouts published runs chose: does it find what practitioners picked, or better?

    python benchmarks/search_vs_published.py [--json OUT] [--gpu h100] [--close 1.05]

For every run transcribed in ``ringlab/data/training_runs.json``, plans the run's published layout (as
``plan_vs_published.py`` does) and searches every layout of the same model on the same machine for the same global
batch, sequence and precision, with the run's software and memory settings (``planner.search``). It prints the
published layout's planned step over the fastest found, where the published layout ranks among those the search
tried (or which of its settings the search does not try), the fastest layout, and why the published one loses to
it (``Search.why_slower``).

Both step times are the planner's predictions; nothing here is measured, and the published throughputs play no
part. What it shows is whether the planner and its search agree with the people who laid these runs out: where the
published layout plans close to the fastest found, they do; where the search finds a much faster layout, either
the run's software could not do what the search assumes (ZeRO-1 before Megatron-LM had a distributed optimizer) or
the planner misses a cost that kept its authors away from that layout.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ringlab.measure.tables import table
from ringlab.train import runs
from ringlab.train.planner import SEARCH_RECIPE, SEARCH_SOFTWARE, search, search_choices

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_vs_published import each_run  # noqa: E402  (beside this script)

LAYOUT = ("tp", "pp", "cp", "ep", "vp", "zero", "micro_batch", "recompute")
CLOSE = 1.05  # a published layout planned within 5% of the fastest found is "close" (the default of --close)


def outside(layout: dict, choices: dict) -> list[str]:
    """The published layout's settings the search does not try (``key=value``), with its two rules across them."""
    out = [f"{k}={layout[k]}" for k in LAYOUT if layout[k] not in choices[k]]
    if layout["zero"] == 3 and layout["pp"] > 1:
        out.append("ZeRO-3 with pipeline stages")
    return out


def compare(run: dict) -> dict:
    """The run's published layout planned, the search's ranking on the same machine and batch, and where they meet."""
    published, ratio, _ = runs.predict(run)
    topology, _ = runs.topology_of(run)
    layout, _ = runs.layout_of(run)
    model = runs.model_of(run)
    held = {k: v for k, v in layout.items() if k in SEARCH_SOFTWARE + SEARCH_RECIPE}
    found = search(model, topology, global_batch=layout["global_batch"], seq=layout["seq"],
                   precision=layout["precision"], **held)
    mine = {k: published.layout[k] for k in LAYOUT}
    rank = next((i + 1 for i, p in enumerate(found.best) if {k: p.layout[k] for k in LAYOUT} == mine), None)
    best = found.best[0] if found.best else None
    row = {"run": run["id"], "gpus": published.gpus, "gpu": run["hardware"]["gpu"],
           "published_layout": published.layout_str(), "published_step": published.step_seconds,
           "published_fits": published.fits, "considered": found.considered, "fit": len(found.best),
           "rank": rank, "outside": [] if rank else outside(mine, search_choices(model, topology, layout["seq"],
                                                                                     held.get("attention", "flash"))),
           "best_layout": best.layout_str() if best else None, "best_step": best.step_seconds if best else None,
           "over_best": published.step_seconds / best.step_seconds if best else None,
           "why": (found.why_slower(published) if best and published.step_seconds > best.step_seconds else None),
           "planned_over_published_throughput": ratio}
    if rank:
        row["where"] = f"#{rank} of {len(found.best)}"
    elif row["outside"]:
        row["where"] = "not tried: " + ", ".join(row["outside"])
    else:  # tried, and refused or too big
        why = next((w for lay, w in found.rejected if {k: lay[k] for k in LAYOUT} == mine), "not found")
        row["where"] = f"tried: {why}"
    return row


def rows(gpu: str | None = None) -> tuple[list[dict], list[dict]]:
    """(compared runs, runs that could not be compared with why)."""
    return each_run(compare, gpu)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="write every row and the summary to this file")
    parser.add_argument("--gpu", help="only runs on this GPU (a100, h100, b200, gb200)")
    parser.add_argument("--close", type=float, default=CLOSE,
                        help=f"a published layout planned within this factor of the fastest found is close "
                             f"(default {CLOSE})")
    args = parser.parse_args(argv)
    if not args.close >= 1:
        parser.error(f"--close must be a factor of at least 1, got {args.close}")
    done, skipped = rows(args.gpu)
    print("# predicted, not measured: each run's published layout planned by rl.plan, against the fastest layout "
          "planner.search finds for the same model, machine, global batch, sequence, precision and software\n")
    table(done, {"run": "run", "GPUs": "gpus", "published layout": "published_layout",
                 "its step (s)": ("published_step", ".3f"), "in the search": "where",
                 "fastest found": "best_layout", "its step (s) ": ("best_step", ".3f"),
                 "published / fastest": ("over_best", ".2f")})
    for s in skipped:
        print(f"  not compared: {s['run']}: {s['why']}")
    compared = [r for r in done if r["over_best"] is not None]
    if not compared:
        print("\nno run compared")
        return 0
    factors = [r["over_best"] for r in compared]
    close = [r for r in compared if r["over_best"] <= args.close]
    beaten = [r for r in compared if r["over_best"] < 1]
    print(f"\n{len(compared)} runs compared, {len(skipped)} not. The published layout plans at {min(factors):.2f} "
          f"to {max(factors):.2f}x the fastest step found (median {statistics.median(factors):.2f}); within "
          f"{args.close:g}x of it in {len(close)} of {len(compared)} runs.")
    if beaten:
        print(f"  faster than anything the search tried in {len(beaten)}, each with a setting it does not try: "
              + "; ".join(f"{r['run']} ({', '.join(r['outside']) or r['where']})" for r in beaten))
    far = sorted((r for r in compared if r["over_best"] > args.close), key=lambda r: -r["over_best"])
    if far:
        print(f"  the search finds a layout more than {args.close:g}x faster for {len(far)}; the published layout "
              "loses by:")
        for r in far:
            print(f"    {r['run']}: {r['over_best']:.2f}x, {r['why']} (fastest found: {r['best_layout']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": done, "skipped": skipped, "close_factor": args.close, "close": len(close),
                       "compared": len(compared), "label": "predicted, not measured"}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
