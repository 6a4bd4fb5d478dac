#!/usr/bin/env python3
"""A/B of two Stride builds over the PostgreSQL protocol, interleaved query
by query so that both see the same machine.

On a shared 2-core VM the speed of a whole suite drifts by 30 % from one
minute to the next, which swamps most changes when two builds run one
after the other. Here both servers run at once (each on its own port, idle
while the other works) and every run of a query goes to A and to B back to
back, in alternating order, with the same drawn parameters.

    stride-old --tpch 1 --in-memory serve --port 5501 &
    stride-new --tpch 1 --in-memory serve --port 5502 &
    python3 scripts/ab_wire.py --a 127.0.0.1:5501 --b 127.0.0.1:5502 \\
        --stride stride-new --tpch 1 --runs 7

Prints each query's median on A and on B and the ratio B / A, then the
sums and the geometric mean of the ratios.
"""

import argparse
import json
import math
import statistics
import subprocess
import sys
import time

import psycopg


def schema_name(sf):
    s = f"{sf}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return f"sf{s.replace('.', '_')}"


def connect(addr, schema):
    host, port = addr.rsplit(":", 1)
    con = psycopg.connect(host=host, port=int(port), user="stride", dbname="stride", autocommit=True)
    con.execute(f"SET search_path = {schema}")
    return con


def timed(con, sql):
    t = time.perf_counter()
    with con.cursor() as cur:
        cur.execute(sql)
        rows = len(cur.fetchall())
    return time.perf_counter() - t, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="host:port of build A (the baseline)")
    ap.add_argument("--b", required=True, help="host:port of build B")
    ap.add_argument("--stride", required=True, help="a stride binary, for the query instances")
    ap.add_argument("--tpch", type=float, default=1.0, help="TPC-H scale factor both servers hold")
    ap.add_argument("--queries", help="only these queries (e.g. q3,q5)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--arrival-seed", type=int, default=1, help="seed of the drawn parameters")
    args = ap.parse_args()
    if args.runs < 1 or args.warmup < 0:
        sys.exit("--runs must be at least 1 and --warmup at least 0")

    schema = schema_name(args.tpch)
    cmd = [args.stride, "--tpch", str(args.tpch), "bench", "instances", "--classes", "tpch",
           "--stream", "isolated", "--count", str(args.warmup + args.runs),
           "--arrival-seed", str(args.arrival_seed)]
    if args.queries:
        cmd += ["--queries", args.queries]
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    names = doc["classes"][0]["queries"]
    texts = doc["schemas"][schema]
    cons = {"a": connect(args.a, schema), "b": connect(args.b, schema)}
    times = {(side, n): [] for side in "ab" for n in names}
    for run in range(args.warmup + args.runs):
        for qi, name in enumerate(names):
            sql = texts[name][run]
            order = "ab" if (run + qi) % 2 == 0 else "ba"
            rows = {}
            for side in order:
                elapsed, rows[side] = timed(cons[side], sql)
                if run >= args.warmup:
                    times[(side, name)].append(elapsed)
            if rows["a"] != rows["b"]:
                sys.exit(f"{name} run {run}: A returned {rows['a']} rows, B {rows['b']}")

    print(f"A = {args.a}, B = {args.b}: {schema}, {args.warmup} warm-up + {args.runs} runs, "
          f"interleaved, drawn parameters (seed {args.arrival_seed})\n")
    print(f"{'query':<6} {'A_ms':>9} {'B_ms':>9} {'B/A':>6}")
    sums = {"a": 0.0, "b": 0.0}
    logs = []
    for name in names:
        a = statistics.median(times[("a", name)])
        b = statistics.median(times[("b", name)])
        sums["a"] += a
        sums["b"] += b
        logs.append(math.log(b / a))
        print(f"{name:<6} {a*1e3:>9.2f} {b*1e3:>9.2f} {b/a:>6.2f}")
    print(f"sum      {sums['a']*1e3:>9.1f} {sums['b']*1e3:>9.1f} {sums['b']/sums['a']:>6.2f}"
          f"   geomean B/A {math.exp(sum(logs)/len(logs)):.3f}")


if __name__ == "__main__":
    main()
