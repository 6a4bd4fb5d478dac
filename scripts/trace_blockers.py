#!/usr/bin/env python3
"""What the workers did while the queries of one class were in the engine.

Reads a trace written by `stride bench poisson --trace FILE` (Chrome/Perfetto
JSON: one event per task and finalization step on pid 1, one per query on
pid 2) and, for every measured query of the class whose resource group the
trace could name, splits its time in the engine (first to last event of its
group) over the workers:

  own        the query's own tasks and finalization steps
  other      other groups' tasks (a task started before the query's previous
             event ended is one the workers could only leave at a morsel end)
  other-fin  other groups' finalization steps (never split by the scheduler)
  idle       nothing

lists the longest events of other groups that overlapped such queries, and
measures the join delay: for each task set of theirs that ran on more than
one worker, how long after its first task each other worker's first task
in it started (the first task set separately: at arrival every worker may
be inside another query's morsel). A worker joins late when it is inside a
morsel or finalization step of another group when the set becomes
runnable; the events it was in are counted by kind.

    python3 scripts/trace_blockers.py bench-out/trace.json --class short
"""

import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--class", dest="cls", default="short")
    ap.add_argument("--top", type=int, default=10, help="longest blockers to list")
    args = ap.parse_args()
    try:
        with open(args.trace) as f:
            events = json.load(f)["traceEvents"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"{args.trace}: not a Stride trace ({e})")

    work = [e for e in events if e.get("ph") == "X" and e.get("pid") == 1]
    workers = sorted({e["tid"] for e in work})
    by_group = collections.defaultdict(list)
    for e in work:
        by_group[e["args"]["group"]].append(e)
    by_worker = collections.defaultdict(list)
    for e in work:
        by_worker[e["tid"]].append(e)
    for evs in by_worker.values():
        evs.sort(key=lambda e: e["ts"])

    prefix = args.cls + "/"
    totals = collections.Counter()
    blockers = []
    queries = 0
    for group, evs in by_group.items():
        query = evs[0]["args"].get("query")
        if not query or not query.startswith(prefix):
            continue
        queries += 1
        lo = min(e["ts"] for e in evs)
        hi = max(e["ts"] + e["dur"] for e in evs)
        for w in workers:
            busy = 0.0
            for e in by_worker[w]:
                a, b = max(lo, e["ts"]), min(hi, e["ts"] + e["dur"])
                if b <= a:
                    continue
                busy += b - a
                if e["args"]["group"] == group:
                    totals["own"] += b - a
                elif e.get("cat") == "finalize":
                    totals["other-fin"] += b - a
                    blockers.append((b - a, e["name"], "finalize", e["dur"]))
                else:
                    totals["other"] += b - a
                    blockers.append((b - a, e["name"], "task", e["dur"]))
            totals["idle"] += (hi - lo) - busy
        totals["span"] += hi - lo
    if queries == 0:
        sys.exit(f"no named {args.cls} query in {args.trace}")
    span = totals["span"]
    print(f"{queries} {args.cls} queries, {len(workers)} workers, "
          f"mean time in the engine {span / queries / 1e3:.2f} ms")
    print("share of worker time during their spans (workers × span):")
    for k in ("own", "other", "other-fin", "idle"):
        print(f"  {k:<10} {totals[k] / (span * len(workers)):6.1%}"
              f"   {totals[k] / queries / 1e3:7.3f} ms per query")
    join_delays(by_group, by_worker, prefix)
    blockers.sort(reverse=True)
    print(f"longest overlaps with other groups' events (ms overlapped, event):")
    for overlap, name, kind, dur in blockers[: args.top]:
        print(f"  {overlap / 1e3:7.2f} of {dur / 1e3:7.2f}  {kind:<8} {name}")


def join_delays(by_group, by_worker, prefix):
    """Per task set of the class's queries: delay of each further worker."""
    delays = {"first": [], "later": []}
    late_in = collections.Counter()
    for group, evs in by_group.items():
        query = evs[0]["args"].get("query")
        if not query or not query.startswith(prefix):
            continue
        sets = collections.defaultdict(list)
        for e in evs:
            if e.get("cat") == "task":
                sets[e["args"]["task_set"]].append(e)
        first_set = min(sets, default=None)
        for ts, tasks in sets.items():
            start = min(e["ts"] for e in tasks)
            joins = {}
            for e in tasks:
                joins[e["tid"]] = min(joins.get(e["tid"], e["ts"]), e["ts"])
            kind = "first" if ts == first_set else "later"
            for w, t in joins.items():
                if t == start:
                    continue
                delays[kind].append(t - start)
                # What the late worker was running when the set started.
                for e in by_worker[w]:
                    if e["ts"] <= start < e["ts"] + e["dur"] and e["args"]["group"] != group:
                        late_in["finalize" if e.get("cat") == "finalize" else "task"] += 1
                        break
    print("join delay of further workers, µs (task sets run by more than one worker):")
    for kind in ("first", "later"):
        d = sorted(delays[kind])
        if not d:
            print(f"  {kind:<6} none")
            continue
        pick = lambda q: d[min(len(d) - 1, int(q * len(d)))]
        print(f"  {kind:<6} n={len(d):5}  mean {sum(d) / len(d):7.1f}  p50 {pick(0.5):7.1f}"
              f"  p90 {pick(0.9):7.1f}  max {d[-1]:8.1f}")
    print(f"  late workers were inside another group's task {late_in['task']} times, "
          f"its finalization step {late_in['finalize']} times")


if __name__ == "__main__":
    main()
