#!/usr/bin/env python3
"""A class's slowdowns split by what else was in flight when each query arrived.

Reads the JSON of `stride bench poisson --json FILE` (or one run of a sweep's
results.json, with --run N) and groups the measured queries of one class by
whether a short and/or a long query was in flight at their arrival:

  --   nothing else in flight: what remains is the baseline's own error
       (isolated medians come from back-to-back repetitions of one query)
  -L   only long queries in flight
  S-   only short queries
  SL   both

For each group: the count, the mean slowdown, its share of the class's
excess slowdown (sum of slowdown - 1), and, for in-process runs, what each
phase added over the query's isolated run.

    python3 scripts/slowdown_context.py bench-out/poisson.json --class short
"""

import argparse
import collections
import json
import sys

PHASES = ["planning_ms", "queued_ms", "running_ms", "waking_ms"]


def load_run(path, index):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    if "samples" in doc:
        return doc
    runs = [r for r in doc.get("runs", []) if r.get("kind") == "poisson"]
    if not runs:
        sys.exit(f"{path}: neither a Poisson run nor a sweep with Poisson runs")
    if not 0 <= index < len(runs):
        sys.exit(f"{path}: --run {index} out of range (0..{len(runs) - 1})")
    return runs[index]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--class", dest="cls", default="short")
    ap.add_argument("--run", type=int, default=0, help="Poisson run of a sweep")
    args = ap.parse_args()
    run = load_run(args.json, args.run)
    done = [s for s in run["samples"] if not s.get("error")]
    measured = [s for s in done if not s.get("warmup") and s["class"] == args.cls
                and s.get("slowdown") is not None]
    if not measured:
        sys.exit(f"no measured {args.cls} query with a slowdown in {args.json}")
    groups = collections.defaultdict(list)
    for s in measured:
        at = s["arrival_s"]
        others = [o for o in done if o is not s and o["arrival_s"] < at < o["end_s"]]
        short = any(o["class"] == args.cls for o in others)
        other = any(o["class"] != args.cls for o in others)
        groups[("S" if short else "-") + ("L" if other else "-")].append(s)
    excess = sum(s["slowdown"] - 1 for s in measured)
    print(f"{args.cls}: {len(measured)} queries, mean slowdown "
          f"{sum(s['slowdown'] for s in measured) / len(measured):.3f}")
    print(f"{'in flight':<10} {'n':>5} {'mean':>6} {'excess':>7}  phases added over isolated (ms)")
    for key in ("--", "-L", "S-", "SL"):
        g = groups.get(key, [])
        if not g:
            continue
        mean = sum(s["slowdown"] for s in g) / len(g)
        share = sum(s["slowdown"] - 1 for s in g) / excess if excess else 0.0
        added = ""
        with_phases = [s for s in g if s.get("phases") and s.get("isolated_phases")]
        if with_phases:
            send = sum(s["start_s"] - s["arrival_s"] for s in with_phases) * 1e3
            parts = [f"send +{send / len(with_phases):.2f}"]
            for p in PHASES:
                d = sum(s["phases"][p] - s["isolated_phases"][p] for s in with_phases)
                parts.append(f"{p[:-3]} {d / len(with_phases):+.2f}")
            added = " ".join(parts)
        print(f"{key:<10} {len(g):>5} {mean:>6.2f} {share:>7.0%}  {added}")


if __name__ == "__main__":
    main()
