#!/usr/bin/env python3
"""Isolated latency of the TPC-H (or SSB) queries in DuckDB, on the data Stride
generates, for a side-by-side comparison with `stride bench isolated`.

Stride exports its generated tables to Parquet; DuckDB loads them into memory
tables (so neither engine reads files while timing) and runs each query
`--warmup` times unmeasured and `--runs` times measured. As `stride bench
isolated` does, each run is another instance of the query with drawn
substitution parameters (the texts come from `stride bench instances
--stream isolated`, so run k is the instance Stride runs as its k-th), unless
--fixed-params. The output has the same shape as `stride bench isolated`.

    pip install -r scripts/requirements.txt
    python3 scripts/duckdb_isolated.py --tpch 1 --threads 2
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent


def stride_binary(explicit):
    if explicit:
        return explicit
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    subprocess.run(["cargo", "build", "--release", "-p", "stride"], cwd=ROOT, check=True)
    return str(Path(target) / "release" / "stride")


def schema_name(prefix, sf):
    s = f"{sf}"
    if "." in s:
        s = s.rstrip("0").rstrip(".")
    return f"{prefix}sf{s.replace('.', '_')}"


def isolation_schedule(queries, warmup, runs, order):
    """(query index, measured) pairs: `warmup` then `runs` runs per query,
    round by round over the queries ("interleaved", as `stride bench` does
    by default) or each query's runs back to back ("repeated")."""
    total = warmup + runs
    if order == "repeated":
        return [(q, r >= warmup) for q in range(queries) for r in range(total)]
    return [(q, r >= warmup) for r in range(total) for q in range(queries)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpch", type=float, help="TPC-H scale factor")
    ap.add_argument("--ssb", type=float, help="SSB scale factor")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--order", choices=["interleaved", "repeated"], default="interleaved",
                    help="runs round by round over the queries, or back to back per query")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--stride", help="path of the stride binary (default: build it)")
    ap.add_argument("--params-seed", type=int, default=1,
                    help="seed of the substitution parameters (stride bench isolated --params-seed)")
    ap.add_argument("--fixed-params", action="store_true", help="the validation parameters in every run")
    args = ap.parse_args()
    if (args.tpch is None) == (args.ssb is None):
        sys.exit("name exactly one of --tpch SF or --ssb SF")
    if args.runs < 1 or args.warmup < 0:
        sys.exit("--runs must be at least 1 and --warmup at least 0")

    stride = stride_binary(args.stride)
    with tempfile.TemporaryDirectory() as tmp:
        flag = ["--tpch", str(args.tpch)] if args.tpch else ["--ssb", str(args.ssb), "--seed", str(args.seed)]
        subprocess.run([stride, *flag, "--no-pin", "export", "--dir", tmp], check=True)
        schema = schema_name("", args.tpch) if args.tpch else schema_name("ssb_", args.ssb)
        con = duckdb.connect()
        con.execute(f"SET threads = {args.threads}")
        for parquet in sorted((Path(tmp) / schema).glob("*.parquet")):
            con.execute(f'CREATE TABLE "{parquet.stem}" AS SELECT * FROM read_parquet(\'{parquet}\')')

    # The instances Stride's isolated runs use: run k of a query is instance k.
    cmd = [stride, *flag, "bench", "instances", "--classes", "tpch" if args.tpch else "ssb",
           "--stream", "isolated", "--count", str(args.warmup + args.runs), "--arrival-seed", str(args.params_seed)]
    if args.fixed_params:
        cmd.append("--fixed-params")
    doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    names = doc["classes"][0]["queries"]
    texts = doc["schemas"][schema]
    print(f"duckdb {duckdb.__version__} isolated latency: {args.threads} threads, "
          f"{args.warmup} warm-up + {args.runs} measured runs per query, {args.order}, "
          f"{doc['params']} parameters\n\nschema {schema}")
    print(f"{'query':<6} {'median_ms':>10} {'min_ms':>10} {'max_ms':>10} {'rows':>8}")
    times = {n: [] for n in names}
    rows = {}
    made = {n: 0 for n in names}
    for i, measured in isolation_schedule(len(names), args.warmup, args.runs, args.order):
        name = names[i]
        sql = texts[name][made[name]]
        made[name] += 1
        t = time.perf_counter()
        rows[name] = len(con.execute(sql).fetchall())
        if measured:
            times[name].append(time.perf_counter() - t)
    total, logs = 0.0, []
    for name in names:
        ts = times[name]
        med = statistics.median(ts)
        total += med
        logs.append(math.log(max(med, 1e-9)))
        print(f"{name:<6} {med*1e3:>10.2f} {min(ts)*1e3:>10.2f} {max(ts)*1e3:>10.2f} {rows[name]:>8}")
    print(f"sum_of_medians_ms={total*1e3:.1f} geomean_ms={math.exp(sum(logs)/len(logs))*1e3:.2f} queries={len(names)}")


if __name__ == "__main__":
    main()
