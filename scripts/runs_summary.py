#!/usr/bin/env python3
"""Per-class slowdowns over several Poisson runs, and how many runs meet targets.

One run on a noisy machine says little: the same command gave a short-class
mean slowdown from 1.33 to 1.68 in one afternoon. This reads any number of
`stride bench poisson --json FILE` outputs, sweep results.json files (every
Poisson run in them) or scripts/peers.py outputs, prints one line per run
and the mean, minimum and maximum per figure, and, given targets, the number
of runs that meet each.

    for i in 1 2 3 4 5; do
      stride --tpch 0.1,1 --policy srpt bench poisson --load 0.9 --quiet --json bench-out/p$i.json
    done
    python3 scripts/runs_summary.py bench-out/p*.json \\
        --target short.mean=1.5 --target short.p95=4 --target long.mean=3.4

A target is CLASS.STAT=BOUND with STAT one of mean, p50, p95, p99, max (of
the slowdown); a run meets it when its figure is at most BOUND.
"""

import argparse
import json
import statistics
import sys

STATS = ("mean", "p50", "p95", "p99", "max")


def poisson_runs(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")
    if doc.get("kind") == "poisson" or "samples" in doc:
        return [(path, doc)]
    runs = [r for r in doc.get("runs", []) if r.get("kind") == "poisson"]
    if not runs:
        sys.exit(f"{path}: no Poisson run in it")
    return [(f"{path}[{i}]", r) for i, r in enumerate(runs)]


def label(run):
    parts = [str(run.get(k)) for k in ("system", "policy") if run.get(k)]
    if run.get("load") is not None:
        parts.append(f"α={run['load']}")
    return " ".join(parts)


def figure(run, cls, stat):
    s = run.get("summary", {}).get("classes", {}).get(cls, {}).get("slowdown", {})
    return s.get(stat)


def parse_target(text):
    try:
        key, bound = text.split("=", 1)
        cls, stat = key.rsplit(".", 1)
        bound = float(bound)
    except ValueError:
        sys.exit(f"--target {text}: expected CLASS.STAT=BOUND, e.g. short.mean=1.5")
    if stat not in STATS:
        sys.exit(f"--target {text}: STAT must be one of {', '.join(STATS)}")
    return cls, stat, bound


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--stats", default="mean,p95", help="slowdown statistics to show per class")
    ap.add_argument("--target", action="append", default=[], help="CLASS.STAT=BOUND (repeatable)")
    args = ap.parse_args()
    stats = [s for s in args.stats.split(",") if s]
    for s in stats:
        if s not in STATS:
            sys.exit(f"--stats: {s} is not one of {', '.join(STATS)}")
    targets = [parse_target(t) for t in args.target]
    runs = [r for p in args.json for r in poisson_runs(p)]
    classes = sorted({c for _, r in runs for c in r.get("summary", {}).get("classes", {})})
    columns = [(c, s) for c in classes for s in stats]
    for c, s, _ in targets:
        if (c, s) not in columns:
            columns.append((c, s))
    width = max(len(name) for name, _ in runs)
    print(f"{'run':<{width}}  {'what':<22}" + "".join(f" {c + '.' + s:>11}" for c, s in columns))
    values = {col: [] for col in columns}
    for name, run in runs:
        line = f"{name:<{width}}  {label(run):<22}"
        for col in columns:
            v = figure(run, *col)
            if v is not None:
                values[col].append(v)
            line += f" {v:>11.2f}" if v is not None else f" {'-':>11}"
        print(line)
    for agg, fn in (("mean", statistics.fmean), ("min", min), ("max", max)):
        line = f"{agg:<{width}}  {'':<22}"
        for col in columns:
            v = values[col]
            line += f" {fn(v):>11.2f}" if v else f" {'-':>11}"
        print(line)
    for c, s, bound in targets:
        v = values[(c, s)]
        met = sum(1 for x in v if x <= bound)
        mean = f"{statistics.fmean(v):.2f}" if v else "-"
        print(f"target {c}.{s} <= {bound:g}: met in {met} of {len(v)} runs (mean over runs {mean})")


if __name__ == "__main__":
    main()
