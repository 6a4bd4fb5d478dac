#!/usr/bin/env python3
"""Latency of a short query while a join of large fan-out keeps every worker
busy, over the PostgreSQL protocol, on one or more Stride servers.

A join on a key with three values (TPC-H's o_orderstatus) makes each probe
row meet about half of the other side, so a single morsel turns into
hundreds of output chunks. Where a morsel is one unsplittable step, a short
query that arrives meanwhile waits for the end of a morsel on some worker;
where a task may stop between chunks (stride_exec::suspend), it waits for
the end of a chunk. The heavy query runs in a loop on its own connection
(each run cut by statement_timeout), and the short query is sent every
`--gap` seconds on another; each server gets `--rounds` rounds, servers
interleaved round by round so that all see the same machine.

    stride-old --tpch 1 --in-memory serve --port 5501 &
    stride-new --tpch 1 --in-memory serve --port 5502 &
    python3 scripts/short_beside_fanout.py --servers 127.0.0.1:5501,127.0.0.1:5502

Prints, per server, the short query's latency alone and beside the heavy
query (median, p95, p99, max, in ms), and how many heavy runs the timeout
cut.
"""

import argparse
import statistics
import threading
import time

import psycopg

import ab_wire
from ab_wire import connect

HEAVY = (
    "SELECT count(*) FROM orders o1 JOIN orders o2 "
    "ON o1.o_orderstatus = o2.o_orderstatus"
)
SHORT = "SELECT n_name FROM nation WHERE n_nationkey = 7"


def timed(con, sql):
    """Milliseconds to run `sql` and fetch its rows."""
    return ab_wire.timed(con, sql)[0] * 1e3


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def heavy_loop(addr, schema, timeout_ms, stop, runs):
    con = connect(addr, schema)
    con.execute(f"SET statement_timeout = {timeout_ms}")
    while not stop.is_set():
        try:
            con.execute(HEAVY).fetchall()
            runs["finished"] += 1
        except psycopg.errors.QueryCanceled:
            runs["cut"] += 1
    con.close()


def one_round(addr, schema, args):
    con = connect(addr, schema)
    for _ in range(20):  # warm-up: plan cache, first-touch memory
        timed(con, SHORT)
    alone = [timed(con, SHORT) for _ in range(args.samples)]
    stop = threading.Event()
    runs = {"finished": 0, "cut": 0}
    heavy = threading.Thread(target=heavy_loop, args=(addr, schema, args.heavy_timeout_ms, stop, runs))
    heavy.start()
    time.sleep(0.5)  # the heavy query is on every worker
    beside = []
    for _ in range(args.samples):
        beside.append(timed(con, SHORT))
        time.sleep(args.gap)
    stop.set()
    heavy.join()
    con.close()
    return alone, beside, runs


def summary(xs):
    return (
        f"median {statistics.median(xs):7.2f}  p95 {quantile(xs, 0.95):7.2f}  "
        f"p99 {quantile(xs, 0.99):7.2f}  max {max(xs):7.2f}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", required=True, help="comma-separated host:port list")
    ap.add_argument("--schema", default="sf1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=200, help="short queries per round and phase")
    ap.add_argument("--gap", type=float, default=0.01, help="seconds between short queries")
    ap.add_argument("--heavy-timeout-ms", type=int, default=5000)
    args = ap.parse_args()
    servers = args.servers.split(",")
    results = {s: ([], [], {"finished": 0, "cut": 0}) for s in servers}
    for r in range(args.rounds):
        order = servers if r % 2 == 0 else list(reversed(servers))
        for s in order:
            alone, beside, runs = one_round(s, args.schema, args)
            results[s][0].extend(alone)
            results[s][1].extend(beside)
            for k in runs:
                results[s][2][k] += runs[k]
            print(f"round {r} {s}: alone {statistics.median(alone):.2f} ms, beside {statistics.median(beside):.2f} ms", flush=True)
    print(f"\nshort query: {SHORT}\nheavy query: {HEAVY} (statement_timeout {args.heavy_timeout_ms} ms)\n")
    for s in servers:
        alone, beside, runs = results[s]
        print(f"{s}")
        print(f"  alone       {summary(alone)}")
        print(f"  beside      {summary(beside)}")
        print(f"  heavy runs: {runs['cut']} cut by the timeout, {runs['finished']} finished")


if __name__ == "__main__":
    main()
