#!/usr/bin/env python3
"""Reads `select * from lineitem` through psycopg under a given query
memory share and prints the rows it got, then the query's line of
stride.queries (pauses, spilled bytes, memory peak): the backpressure
check of docs/experiments.md.

    stride --tpch 1 serve --port 5499 &
    python3 scripts/stream_reader.py 127.0.0.1 5499 64MB
"""
import sys, time, psycopg
host, port, share = sys.argv[1], sys.argv[2], sys.argv[3]
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride", autocommit=True)
conn.execute(f"set stride.query_memory_limit = '{share}'")
t0 = time.time()
n = 0
try:
    with conn.cursor() as cur:
        cur.execute("select * from lineitem /* sf1 stream */")
        while True:
            b = cur.fetchmany(100000)
            if not b:
                break
            n += len(b)
    print(f"rows={n} seconds={time.time()-t0:.1f}")
except Exception as e:
    print(f"error after {time.time()-t0:.1f}s: {getattr(e, 'sqlstate', None)} {e}")
r = conn.execute("select state, pauses, spilled_bytes, memory_peak_bytes, latency_ms from stride.queries where query like '%sf1 stream%' and query not like '%stride.queries%' order by query_id desc limit 1").fetchone()
print("state={} pauses={} spilled_bytes={} memory_peak_bytes={} latency_ms={:.0f}".format(*r))
