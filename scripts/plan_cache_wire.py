"""A short query's latency over the wire with the plan cache off and on
(`SET stride.plan_cache_size`), simple protocol and prepared, on one server
started with `stride --tpch 0.1 --in-memory serve --port PORT`.

    python3 scripts/plan_cache_wire.py PORT RUNS
"""
import statistics, sys, time
import psycopg

port, runs = sys.argv[1], int(sys.argv[2])
dsn = f"host=127.0.0.1 port={port} user=stride dbname=stride"
admin = psycopg.connect(dsn, autocommit=True)
simple = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)
simple.execute("set search_path = sf0_1")
Q = "select n_name, r_name from nation join region on n_regionkey = r_regionkey where n_nationkey = %s"

def measure(conn):
    for i in range(20):
        conn.execute(Q, (i % 25,)).fetchall()
    ts = []
    for i in range(runs):
        t = time.perf_counter()
        conn.execute(Q, (i % 25,)).fetchall()
        ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)

for size in ("0", "512", "0", "512"):
    admin.execute(f"set stride.plan_cache_size = {size}")
    # A new connection per setting: psycopg keeps its prepared statements.
    prep = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
    prep.execute("set search_path = sf0_1")
    print(f"plan_cache_size={size} simple_median_ms={measure(simple):.3f} prepared_median_ms={measure(prep):.3f}")
