#!/usr/bin/env python3
"""The longest steps a newly arrived query may wait behind, from a trace.

Reads a Chrome/Perfetto trace written by `stride bench ... --trace FILE`
and prints, per query, the longest finalization step (one call of a task
set's finalize: nothing can preempt it) and the longest task that ran a
single morsel (a morsel is not split either; tasks of several morsels are
preemptible between them), then the longest of each over all queries,
with the task set each ran (`step`, when the trace names it) and the CPU
time its worker's thread used (`cpu`: far below the wall time when the OS
ran other threads meanwhile, on a machine loaded by other work).

Groups the benchmark did not label (its warm-up runs) are listed as
`group N`; `--measured` leaves them out of the maxima.

    python3 scripts/longest_steps.py trace.json [--top 5] [--measured]
"""
import argparse
import collections
import json


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=5, help="longest steps listed")
    ap.add_argument(
        "--measured", action="store_true", help="only groups labelled with a query"
    )
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
        if args.measured and not a.get("query"):
            continue
        query = a.get("query") or f"group {a.get('group')}"
        query = query.split("/")[-1]
        dur_ms = e["dur"] / 1000.0
        cpu = a.get("cpu_us")
        cpu_ms = cpu / 1000.0 if cpu is not None else None
        where = a.get("step") or f"task set {a.get('task_set')}"
        if e.get("cat") == "finalize":
            finals[query] = max(finals[query], dur_ms)
            steps.append((dur_ms, cpu_ms, "finalize", query, where, 0))
        elif a.get("morsels") == 1:
            morsels[query] = max(morsels[query], dur_ms)
            steps.append((dur_ms, cpu_ms, "one-morsel task", query, where, a.get("tuples")))
    print(f"{'query':<10} {'finalize ms':>12} {'1-morsel task ms':>17}")
    for q in sorted(set(finals) | set(morsels), key=lambda q: (len(q), q)):
        print(f"{q:<10} {finals.get(q, 0):>12.2f} {morsels.get(q, 0):>17.2f}")
    if finals or morsels:
        print(
            f"{'max':<10} {max(finals.values(), default=0):>12.2f}"
            f" {max(morsels.values(), default=0):>17.2f}"
        )
    steps.sort(key=lambda s: s[0], reverse=True)
    print(f"\nlongest {args.top}:")
    for dur, cpu, kind, q, where, tuples in steps[: args.top]:
        cpu_s = f"cpu {cpu:6.2f}" if cpu is not None else "cpu    n/a"
        rows = f", {tuples} rows" if tuples else ""
        print(f"  {dur:8.2f} ms ({cpu_s})  {kind:<16} {q}: {where}{rows}")


if __name__ == "__main__":
    main()
