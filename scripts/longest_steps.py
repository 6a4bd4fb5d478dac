#!/usr/bin/env python3
"""The longest steps a newly arrived query may wait behind, from a trace.

Reads a Chrome/Perfetto trace written by `stride bench ... --trace FILE`
and prints, per query, the longest finalization step (one call of a task
set's finalize: nothing can preempt it) and the longest task that ran a
single morsel (a morsel is not split either; tasks of several morsels are
preemptible between them), then the longest of each over all queries.

    python3 scripts/longest_steps.py trace.json [--top 5]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=5, help="longest steps listed")
    args = ap.parse_args()
    with open(args.trace) as f:
        events = json.load(f)["traceEvents"]
    finals = collections.defaultdict(float)
    morsels = collections.defaultdict(float)
    steps = []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 1:
            continue
        a = e.get("args", {})
        query = a.get("query") or f"group {a.get('group')}"
        query = query.split("/")[-1]
        dur_ms = e["dur"] / 1000.0
        if e.get("cat") == "finalize":
            finals[query] = max(finals[query], dur_ms)
            steps.append((dur_ms, "finalize", query, a.get("task_set")))
        elif a.get("morsels") == 1:
            morsels[query] = max(morsels[query], dur_ms)
            steps.append((dur_ms, "one-morsel task", query, a.get("task_set")))
    print(f"{'query':<10} {'finalize ms':>12} {'1-morsel task ms':>17}")
    for q in sorted(set(finals) | set(morsels), key=lambda q: (len(q), q)):
        print(f"{q:<10} {finals.get(q, 0):>12.2f} {morsels.get(q, 0):>17.2f}")
    steps.sort(reverse=True)
    print(f"\nlongest {args.top}:")
    for dur, kind, q, ts in steps[: args.top]:
        print(f"  {dur:8.2f} ms  {kind:<16} {q} (task set {ts})")


if __name__ == "__main__":
    main()
