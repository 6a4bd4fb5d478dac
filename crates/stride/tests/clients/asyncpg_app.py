"""asyncpg as an application uses it: binary results and parameters for
every type it knows, prepared statements re-executed with new values,
executemany, a transaction that rolls back, a server-side cursor, COPY in
both directions, and errors that arrive as typed exceptions with the
connection still usable.

    python3 asyncpg_app.py HOST PORT

Prints one line per probe for crates/stride/tests/clients.rs to check.
asyncpg prepares every statement with Parse, Describe and Flush and waits
for the answer before it sends Sync, so an error the server kept until Sync
hangs it: every probe runs under a timeout.
"""
import asyncio
import datetime
import decimal
import io
import sys

import asyncpg

host, port = sys.argv[1], int(sys.argv[2])
TIMEOUT = 20


async def main():
    c = await asyncpg.connect(
        host=host, port=port, user="stride", database="stride", ssl=False, command_timeout=TIMEOUT
    )
    print("version", await c.fetchval("select version()") is not None,
          c.get_server_version().major)

    # Every type asyncpg decodes in binary, as results.
    row = await c.fetchrow(
        "select 1::smallint a, 2::int b, 3::bigint c, 1.5::real d, 2.5::double precision e,"
        " 'x'::text f, true g, date '2020-01-02' h, timestamp '2020-01-02 03:04:05.25' i,"
        " 12.34::numeric(10,2) j, cast(null as int) k, 'hi'::bytea l, time '03:04:05.5' m,"
        " interval '1 year 2 months 3 days 04:05:06.5' n, interval '-1 day 2 hours' o"
    )
    print("row", repr(tuple(row.values())))

    # The same values as parameters, in binary.
    values = (
        7, "héllo", datetime.date(1999, 12, 31), datetime.datetime(2001, 2, 3, 4, 5, 6, 789000),
        decimal.Decimal("-123.45"), 0.25, False, b"\x00\xffab", datetime.time(23, 59, 58, 500000),
        datetime.timedelta(days=-3, hours=5, microseconds=7),
    )
    back = await c.fetchrow(
        "select $1::int, $2::text, $3::date, $4::timestamp, $5::numeric(10,2), $6::float8,"
        " $7::bool, $8::bytea, $9::time, $10::interval",
        *values,
    )
    print("params", tuple(back.values()) == values, [v for v, w in zip(back.values(), values) if v != w])

    # Writes: executemany, a transaction that fails and rolls back.
    await c.execute("create table apg_items (id int not null, name text, blob bytea, at time, span interval)")
    await c.executemany(
        "insert into apg_items values ($1, $2, $3, $4, $5)",
        [(i, f"item {i}", bytes([i, 255 - i]), datetime.time(i, i), datetime.timedelta(days=i, seconds=i))
         for i in range(20)],
    )
    try:
        async with c.transaction():
            await c.execute("insert into apg_items values (100, 'lost', null, null, null)")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    print("count", await c.fetchval("select count(*) from apg_items"))

    # One prepared statement, many executions with new values.
    st = await c.prepare("select count(*) from apg_items where id < $1 and name <> $2")
    print("prepared", [await st.fetchval(n, "item 3") for n in (0, 5, 10, 20, 25)])
    r = await c.fetchrow("select blob, at, span from apg_items where id = 3")
    print("stored", r["blob"] == b"\x03\xfc", r["at"], r["span"])

    # A server-side cursor: the portal fetched in pieces inside a transaction.
    async with c.transaction():
        cur = await c.cursor("select id from apg_items order by id")
        first = await cur.fetch(3)
        middle = await cur.fetch(10)
        rest = await cur.fetch(100)
    print("cursor", [r["id"] for r in first], len(middle), [r["id"] for r in rest])

    # COPY in both directions.
    n = await c.copy_records_to_table(
        "apg_items", records=[(200, "copied", b"\x01\\", datetime.time(1), datetime.timedelta(hours=1))]
    )
    out = io.BytesIO()
    await c.copy_from_query("select id, name, blob from apg_items where id >= 19 order by id", output=out)
    print("copy", n, out.getvalue().decode().replace("\n", "|"))

    # Errors: typed, and the connection goes on.
    for sql, args in [("select * from apg_no_such_table", ()), ("selec 1", ()),
                      ("select 1 / $1::int", (0,)),
                      ("select interval '1 fortnight'", ())]:
        try:
            await c.fetch(sql, *args)
            print("error none", sql)
        except asyncpg.PostgresError as e:
            print("error", type(e).__name__, e.sqlstate)
    print("after errors", await c.fetchval("select 41 + 1"))

    await c.execute("drop table apg_items")
    await c.close()


asyncio.run(asyncio.wait_for(main(), 120))
