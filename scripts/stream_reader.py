#!/usr/bin/env python3
"""Reads `select * from lineitem` through psycopg under a given query
memory share and prints the rows it got, then the query's line of
stride.queries (pauses, spilled bytes, memory peak): the backpressure
check of docs/experiments.md. With `named`, through a server-side cursor
(DECLARE, then FETCH FORWARD 10000 per batch in a transaction).

    stride --tpch 1 --in-memory serve --port 5499 &
    python3 scripts/stream_reader.py 127.0.0.1 5499 64MB [named]
"""
import sys, time, psycopg
host, port, share = sys.argv[1], sys.argv[2], sys.argv[3]
named = len(sys.argv) > 4 and sys.argv[4] == "named"
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride",
                       autocommit=not named)
conn.execute(f"set stride.query_memory_limit = '{share}'")
t0 = time.time()
n = 0
try:
    with conn.cursor(name="sf1_stream" if named else None) as cur:
        if named:
            cur.itersize = 10000
        # The alias marks the query in stride.queries (a prepared
        # statement is logged without its comments).
        cur.execute("select * from lineitem as sf1_stream")
        while True:
            b = cur.fetchmany(10000 if named else 100000)
            if not b:
                break
            n += len(b)
    if named:
        conn.commit()
    print(f"rows={n} seconds={time.time()-t0:.1f}")
except Exception as e:
    print(f"error after {time.time()-t0:.1f}s: {getattr(e, 'sqlstate', None)} {e}")
    if named:
        conn.rollback()
r = conn.execute("select state, pauses, spilled_bytes, memory_peak_bytes, latency_ms from stride.queries where query like '%sf1_stream%' and query not like '%stride.queries%' order by query_id desc limit 1").fetchone()
print("state={} pauses={} spilled_bytes={} memory_peak_bytes={} latency_ms={:.0f}".format(*r))
