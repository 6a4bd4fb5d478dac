"""psycopg's server-side ("named") cursor reading a result far larger than
the query's memory share, itersize rows per FETCH: the cursor's query
stays live between fetches (paused) instead of being materialized. Prints
the fetched rows' count and checksums, then the same computed by the
server with count/sum, for crates/stride/tests/portals.rs to compare.

    python3 psycopg_cursor_stream.py MARKER HOST PORT SHARE

MARKER is appended to the query (a table alias that marks it in
stride.queries).
"""
import sys

import psycopg

marker, host, port, share = sys.argv[1:5]
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride")
conn.execute(f"set stride.query_memory_limit = '{share}'")
conn.commit()
rows = keys = chars = 0
with conn.cursor(name="big") as cur:
    cur.itersize = 2000
    cur.execute(f"select l_orderkey, l_linenumber, l_comment from lineitem {marker}")
    for orderkey, linenumber, comment in cur:
        rows += 1
        keys += orderkey * 10 + linenumber
        chars += len(comment)
conn.commit()
print(f"rows={rows} keys={keys} chars={chars}")
n, k, c = conn.execute(
    "select count(*), cast(sum(l_orderkey * 10 + l_linenumber) as bigint), "
    "cast(sum(length(l_comment)) as bigint) from lineitem"
).fetchone()
print(f"rows={n} keys={k} chars={c}")
conn.close()
