"""COPY through psycopg 3's cursor.copy(): rows written and read in text
and binary format, a copy the client abandons (CopyFail) and one with a
wrong column count, each leaving the table as it was.

    python3 psycopg_copy.py HOST PORT

Prints one line per check for the Rust test (crates/stride/tests/copy.rs).
"""
import sys
from datetime import date
from decimal import Decimal

import psycopg

host, port = sys.argv[1], sys.argv[2]
conn = psycopg.connect(f"host={host} port={port} user=stride dbname=stride", autocommit=True)
cur = conn.cursor()
cur.execute("create table copy_py (id int, name varchar, price decimal(10,2), d date)")

rows = [
    (1, "tab\there", Decimal("1.50"), date(2020, 1, 2)),
    (2, None, None, None),
    (3, "line\nbreak \\ back", Decimal("-3.25"), date(1999, 12, 31)),
]
with cur.copy("COPY copy_py (id, name, price, d) FROM STDIN") as copy:
    for row in rows:
        copy.write_row(row)
print("copied", cur.rowcount)
back = cur.execute("select id, name, price, d from copy_py order by id").fetchall()
print("roundtrip", back == rows)

with cur.copy("COPY (select id, name from copy_py order by id) TO STDOUT") as copy:
    print("text out", list(copy.rows()))

with cur.copy("COPY copy_py (id, price) TO STDOUT (FORMAT BINARY)") as copy:
    copy.set_types(["int4", "numeric"])
    print("binary out", sorted(copy.rows()))

with cur.copy("COPY copy_py (id, name) FROM STDIN (FORMAT BINARY)") as copy:
    copy.set_types(["int4", "text"])
    copy.write_row((4, "binary"))
print("binary in", cur.execute("select name from copy_py where id = 4").fetchone()[0])

with cur.copy("COPY copy_py TO STDOUT (FORMAT csv, HEADER)") as copy:
    csv = b"".join(bytes(chunk) for chunk in copy)
print("csv lines", len(csv.decode().splitlines()))

try:
    with cur.copy("COPY copy_py (id) FROM STDIN") as copy:
        copy.write_row((5,))
        raise RuntimeError("client gave up")
except RuntimeError:
    pass
print("after copyfail", cur.execute("select count(*) from copy_py").fetchone()[0])

try:
    with cur.copy("COPY copy_py (id) FROM STDIN") as copy:
        copy.write(b"6\n7\textra\n")
except psycopg.Error as e:
    print("wrong width", e.sqlstate)
print("after bad data", cur.execute("select count(*) from copy_py").fetchone()[0])
