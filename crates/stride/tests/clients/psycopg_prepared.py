"""A pooled dashboard as psycopg runs one: every statement prepared on the
server (prepare_threshold=0) and re-executed while another client writes.

    python3 psycopg_prepared.py HOST PORT

Prints what the reader saw, one line per probe, for the Rust test
(crates/stride/tests/clients.rs) to check; exits non-zero only when psycopg
itself fails to run.
"""
import sys

import psycopg

host, port = sys.argv[1], sys.argv[2]
dsn = f"host={host} port={port} user=stride dbname=stride"
writer = psycopg.connect(dsn, autocommit=True)
reader = psycopg.connect(dsn, autocommit=True, prepare_threshold=0)
query = "select count(*), sum(v) from pooled_py where id <= %s"

writer.execute("create table pooled_py (id int, v int)")
seen = []
for i in range(1, 6):
    writer.execute("insert into pooled_py values (%s, %s)", (i, i * 10))
    count, total = reader.execute(query, (100,)).fetchone()
    seen.append(f"{count}:{total}")
print("seen", " ".join(seen))
# psycopg keeps the statements it prepared: the query ran prepared.
print("prepared", "yes" if reader._prepared._names else "no")


def probe(label):
    try:
        count, total = reader.execute(query, (100,)).fetchone()
        print(label, f"{count}:{total}")
    except psycopg.Error as e:
        print(label, e.sqlstate)


writer.execute("drop table pooled_py")
probe("dropped")
writer.execute("create table pooled_py (id int, v int)")
writer.execute("insert into pooled_py values (1, 7)")
probe("recreated")
writer.execute("drop table pooled_py")
writer.execute("create table pooled_py (id int, v text)")
probe("retyped")
writer.execute("drop table pooled_py")
