"""The plan cache from psycopg: a statement prepared on the server
(prepare_threshold=0, extended protocol) and the same statement with its
values inlined by a ClientCursor (simple protocol, one cached shape) run
with other values each time, while another client writes.

Usage: `python3 psycopg_plan_cache.py HOST PORT`. Each probe's rows (or
its SQLSTATE) go to standard output as one line, which
crates/stride/tests/clients.rs compares with what it expects.
"""
import sys

import psycopg

dsn = "host={} port={} user=stride dbname=stride".format(*sys.argv[1:3])
writer = psycopg.connect(dsn, autocommit=True)
prepared = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
simple = psycopg.connect(dsn, autocommit=True, cursor_factory=psycopg.ClientCursor)
query = "select name, qty from cache_py where id = %s and name like %s"

writer.execute("create table cache_py (id int, qty decimal(10,2), name text)")
writer.execute(
    "insert into cache_py values (1, 1.50, 'apple'), (2, 2.00, 'banana'), (3, 3.25, 'cherry')"
)


def probe(label, conn, values):
    try:
        rows = conn.execute(query, values).fetchall()
        print(label, " ".join(f"{n}:{q}" for n, q in rows) or "-")
    except psycopg.Error as e:
        print(label, e.sqlstate)


def hits():
    # The simple protocol's entry: the prepared connection's Parse leaves
    # one of the same shape text, of kind 'text'.
    return writer.execute(
        "select hits from stride.plan_cache "
        "where shape = 'SELECT name, qty FROM cache_py WHERE id = $1 AND name LIKE $2' "
        "and kind = 'masked'"
    ).fetchone()[0]


for conn, label in ((prepared, "prepared"), (simple, "simple")):
    probe(label, conn, (1, "a%"))
    probe(label, conn, (2, "%an%"))
    probe(label, conn, (2, "x%"))
    writer.execute("update cache_py set qty = 9.99 where id = 3")
    probe(label, conn, (3, "%"))
    writer.execute("update cache_py set qty = 3.25 where id = 3")
print("prepared on the server", "yes" if prepared._prepared._names else "no")
print("simple shape hits", hits())
writer.execute("drop table cache_py")
probe("dropped simple", simple, (1, "%"))
writer.execute("create table cache_py (id bigint, qty text, name text)")
writer.execute("insert into cache_py values (1, 'many', 'apple')")
probe("retyped simple", simple, (1, "%"))
probe("retyped prepared", prepared, (1, "%"))
writer.execute("drop table cache_py")
