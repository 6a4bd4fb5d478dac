"""psycopg fetching a result many times the query's memory share: the
rows stream from the server as they are made. Prints the streamed rows'
count and checksums, then the same computed by the server with count/sum,
for crates/stride/tests/streaming.rs to compare.

    python3 psycopg_stream.py HOST PORT SHARE
"""
import sys

import psycopg

host, port, share = sys.argv[1], sys.argv[2], sys.argv[3]
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride", autocommit=True)
conn.execute(f"set stride.query_memory_limit = '{share}'")
query = " union all ".join(
    ["select l_orderkey, l_linenumber, l_comment from lineitem"] * 4
)
rows = keys = chars = 0
with conn.cursor() as cur:
    cur.execute(query)
    while True:
        batch = cur.fetchmany(10000)
        if not batch:
            break
        for orderkey, linenumber, comment in batch:
            rows += 1
            keys += orderkey * 10 + linenumber
            chars += len(comment)
print(f"rows={rows} keys={keys} chars={chars}")
n, k, c = conn.execute(
    "select 4 * count(*), cast(4 * sum(l_orderkey * 10 + l_linenumber) as bigint), "
    "cast(4 * sum(length(l_comment)) as bigint) from lineitem"
).fetchone()
print(f"rows={n} keys={k} chars={c}")
conn.close()
