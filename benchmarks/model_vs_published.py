"""The cost model held to real machines: predicted against published nccl-tests bus bandwidth.

    python benchmarks/model_vs_published.py [--min-bytes 64K] [--json OUT]

For every published nccl-tests sweep that ringlab ships (``ringlab.measure.published``) and whose
machine a topology preset models, prints size by size the published busbw, the busbw the cost model
predicts for that preset (NCCL's protocols, its best one per size; NVLS as a closed form where the
sweep ran it) and their ratio, predicted / published. Then, per sweep, the goals and whether each
is met:

- within 25% (ratio 0.75 to 1.25) at every size of 64 MiB and more;
- within a factor 2 (ratio 0.5 to 2) at every size from 64 KiB.

Everything printed is either a published measurement (with its source) or a prediction; nothing is
measured here.
"""
from __future__ import annotations

import argparse
import json
import sys

from ringlab.measure.tables import table
from ringlab.measure import published
from ringlab.measure.units import parse_size

LARGE, MID = 64 << 20, 64 << 10
GOALS = (("within 25% from 64 MiB", LARGE, 0.75, 1.25), ("within 2x from 64 KiB", MID, 0.5, 2.0))


def goals(rows: list[dict]) -> list[dict]:
    """For each goal: the worst ratio over the sizes it covers and whether it is met (None: no sizes)."""
    out = []
    for what, smallest, low, high in GOALS:
        ratios = [r["ratio"] for r in rows if r["bytes"] >= smallest]
        worst = max(ratios, key=lambda x: max(x, 1 / x)) if ratios else None
        out.append({"goal": what, "sizes": len(ratios), "worst_ratio": worst,
                    "met": None if worst is None else low <= min(ratios) and max(ratios) <= high})
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-bytes", default="64K", help="smallest size to print (default 64K)")
    parser.add_argument("--json", help="write every row and verdict to this file")
    args = parser.parse_args(argv)
    smallest = parse_size(args.min_bytes)
    report, summary = [], []
    for name in published.names("nccl-tests"):
        entry = published.load(name)
        match = published.model_for(name)
        if isinstance(match, str):
            print(f"\n## {name[:3]}: {entry.machine}\n# not modelled: {match}")
            summary.append({"sweep": name[:3], "preset": "-", "goal": "not modelled", "worst": "-", "verdict": "-"})
            continue
        rows = published.against_model(name)
        print(f"\n## {name[:3]}: {entry.label}\n# model: preset {match[0]}, {match[1]}")
        table([r for r in rows if r["bytes"] >= smallest],
              {"size (B)": "bytes", "published busbw (GB/s)": ("measured_busbw", ".1f"),
               "predicted busbw (GB/s)": ("predicted_busbw", ".1f"), "predicted/published": ("ratio", ".2f"),
               "predicted as": "predicted"})
        verdicts = goals(rows)
        report.append({"sweep": name, "label": entry.label, "preset": match[0], "model": match[1], "rows": rows,
                       "goals": verdicts})
        for v in verdicts:
            summary.append({"sweep": name[:3], "preset": match[0], "goal": v["goal"],
                            "worst": "-" if v["worst_ratio"] is None else f"{v['worst_ratio']:.2f}",
                            "verdict": {None: "no sizes", True: "met", False: "NOT met"}[v["met"]]})
    print("\n## Goals: predicted / published busbw (worst ratio over the sizes each goal covers)")
    table(summary, {"sweep": "sweep", "preset": "preset", "goal": "goal", "worst ratio": "worst", "verdict": "verdict"})
    checked = [v for item in report for v in item["goals"] if v["met"] is not None]
    met = sum(v["met"] for v in checked)
    print(f"\n# {met} of {len(checked)} goals met over {len(report)} modelled sweeps")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sweeps": report}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
