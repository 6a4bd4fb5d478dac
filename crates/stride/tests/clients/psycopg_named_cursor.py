"""psycopg's server-side ("named") cursors: DECLARE ... CURSOR inside a
transaction with a parameter, the cursor's portal described, FETCH FORWARD
n in batches, CLOSE; iteration with itersize; WITH HOLD across a commit.

    python3 psycopg_named_cursor.py HOST PORT

Prints one line per probe for crates/stride/tests/catalogs.rs to check.
"""
import sys

import psycopg

host, port = sys.argv[1], sys.argv[2]
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride")
conn.execute("create table named_cur (id int, v varchar)")
conn.execute("insert into named_cur values (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')")
conn.commit()
with conn.cursor(name="batches") as cur:
    cur.execute("select id, v from named_cur where id >= %s order by id", (2,))
    print("columns", ",".join(d.name for d in cur.description))
    print("first", cur.fetchmany(2))
    print("next", cur.fetchmany(2))
    print("rest", cur.fetchall())
conn.commit()
with conn.cursor(name="iterated") as cur:
    cur.itersize = 2
    cur.execute("select id from named_cur order by id")
    print("iterated", [r[0] for r in cur])
conn.commit()
with conn.cursor(name="held", withhold=True) as cur:
    cur.execute("select count(*) from named_cur")
    conn.commit()
    print("held", cur.fetchone()[0])
conn.execute("drop table named_cur")
conn.commit()
