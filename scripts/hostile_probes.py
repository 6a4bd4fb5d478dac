#!/usr/bin/env python3
"""Issue 14's probes, run against a live `stride serve` over the wire, one
line per probe: what came back (rows, or the SQLSTATE), how long it took,
and whether the server still answered afterwards.

    stride --tpch 1 --in-memory serve --port 5433 --memory-limit 4GB --query-memory-limit 1GB &
    python3 scripts/hostile_probes.py --port 5433 [--schema sf1]

The CI suite (crates/stride/tests/hostile.rs, memory.rs, roles.rs,
clients.rs, alloc_guard.rs) asserts the same behaviours at SF 0.01; this script is for
re-measuring the issue's table at the scale it was found (needs psycopg:
`bash scripts/setup.sh`).
"""
import argparse
import socket
import struct
import threading
import time

import psycopg


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5433)
    ap.add_argument("--user", default="stride")
    ap.add_argument("--schema", default="sf1")
    ap.add_argument("--timeout-ms", type=int, default=120_000,
                    help="statement_timeout of every probe")
    args = ap.parse_args()
    dsn = f"host={args.host} port={args.port} user={args.user} dbname=stride"
    s = args.schema

    def connect(**kw):
        c = psycopg.connect(dsn, autocommit=True, **kw)
        c.execute(f"set statement_timeout = {args.timeout_ms}")
        return c

    def alive():
        with connect() as c:
            return c.execute("select 1").fetchone()[0] == 1

    def probe(label, sql, params=None, conn=None, fetch=True):
        c = conn or connect()
        t0 = time.time()
        try:
            cur = c.execute(sql, params)
            rows = cur.fetchall() if fetch and cur.description else []
            outcome = f"ok ({len(rows)} rows)" if len(rows) != 1 else f"ok {rows[0]}"
        except psycopg.Error as e:
            outcome = f"{e.sqlstate} {str(e).splitlines()[0][:90]}"
        elapsed = time.time() - t0
        print(f"{label:<48} {outcome:<70} {elapsed * 1e3:9.0f} ms  alive={alive()}",
              flush=True)

    print("# stack depth")
    probe("1000-term OR", f"select count(*) from {s}.nation where "
          + " or ".join(f"n_nationkey = {i}" for i in range(1000)))
    probe("5000-term AND", f"select count(*) from {s}.nation where "
          + " and ".join(f"n_nationkey <> {i}" for i in range(5000)))
    probe("500-branch UNION ALL", "select count(*) from ("
          + " union all ".join(f"select {i} as x" for i in range(500)) + ") t")
    probe("2000-branch UNION ALL", "select count(*) from ("
          + " union all ".join(f"select {i} as x" for i in range(2000)) + ") t")
    probe("prepared, 1000 parameters",
          "select " + " + ".join(["%s::int"] * 1000), [1] * 1000,
          conn=connect(prepare_threshold=0))

    print("# prepared statements across writes (psycopg prepare_threshold=0)")
    w, r = connect(), connect(prepare_threshold=0)
    w.execute("drop table if exists probe_prep")
    w.execute("create table probe_prep (v int)")
    for i in range(3):
        w.execute("insert into probe_prep values (%s)", (i,))
        probe(f"prepared count after insert {i + 1}",
              "select count(*) from probe_prep where v >= %s", (0,), conn=r)
    w.execute("drop table probe_prep")
    probe("prepared after DROP TABLE", "select count(*) from probe_prep where v >= %s",
          (0,), conn=r)

    print("# memory")
    # The cross join streams at the client's pace (the server pauses it
    # and holds a bounded share): psycopg keeps every row it receives, so
    # the probe stops it after 5 s (57014) to keep the client's memory small.
    cross = connect()
    cross.execute("set statement_timeout = 5000")
    probe("cross join of lineitem with itself (rows out, 5 s)",
          f"select a.l_orderkey, b.l_orderkey from {s}.lineitem a, {s}.lineitem b",
          conn=cross)
    probe("self-join on l_returnflag",
          f"select count(*) from {s}.lineitem a join {s}.lineitem b "
          "on a.l_returnflag = b.l_returnflag")
    probe("6M-group aggregate",
          f"select l_orderkey, l_linenumber, count(*) from {s}.lineitem group by 1, 2")
    probe("sort of lineitem", f"select * from {s}.lineitem order by l_comment")
    probe("repeat('x', 2000000000)", "select length(repeat('x', 2000000000))")
    probe("stride.memory", "select * from stride.memory")

    print("# tables filling memory: copies of lineitem until stride.allocation_limit")
    # Stored tables are no query's memory; the allocation guard counts them
    # with everything else. With the limit 3 GB above what the server holds
    # now, the copies that would take it past fail with 53200 instead of an
    # allocation failing and aborting the server.
    g = connect()
    allocated = g.execute("select allocated_bytes from stride.memory").fetchone()[0]
    if allocated is None:
        print("the server does not count its allocations (not the stride binary?)")
    else:
        before = g.execute("show stride.allocation_limit").fetchone()[0]
        g.execute(f"set stride.allocation_limit = '{allocated // (1 << 20) + 3072}MB'")
        # Computed columns: a plain `select *` copy would share the stored
        # table's buffers and allocate nothing.
        for i in range(8):
            probe(f"copy {i + 1} of lineitem (computed columns)",
                  f"create table probe_copy_{i} as select l_orderkey + 1 as k, "
                  f"l_partkey + 1 as p, l_extendedprice * 2 as e, l_comment || 'x' as c, "
                  f"l_shipinstruct || 'y' as i from {s}.lineitem", conn=g)
        probe("allocation guard", "select allocated_bytes, allocation_limit_bytes, "
              "allocation_trips from stride.memory", conn=g)
        probe("a short query after the copies", f"select count(*) from {s}.nation", conn=g)
        for i in range(8):
            g.execute(f"drop table if exists probe_copy_{i}")
        g.execute(f"set stride.allocation_limit = '{before}'")

    print("# server files (non-superuser)")
    a = connect()
    a.execute("drop role if exists probe_user")
    a.execute("create role probe_user login")
    u = psycopg.connect(f"host={args.host} port={args.port} user=probe_user dbname=stride",
                        autocommit=True)
    probe("external table on /etc/shadow",
          "create external table shadow stored as csv location '/etc/shadow'", conn=u)
    probe("SET stride.policy as non-superuser", "set stride.policy = 'fifo'", conn=u,
          fetch=False)
    u.close()

    print("# integers")
    probe("9223372036854775807 + 1", "select 9223372036854775807 + 1")
    probe("int4 overflow", "select 2147483647::int4 + 1::int4")
    probe("sum over int8 past 2^63",
          "select sum(x) from (values (9223372036854775807), (1)) t(x)")

    print("# cancels under load (8 clients looping a heavy query)")
    stop = threading.Event()

    def load():
        c = connect()
        while not stop.is_set():
            try:
                c.execute(f"select l_returnflag, count(*), sum(l_extendedprice) "
                          f"from {s}.lineitem group by 1").fetchall()
            except psycopg.Error:
                pass

    threads = [threading.Thread(target=load, daemon=True) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(2)
    c = connect()
    c.execute("set statement_timeout = 500")
    probe("statement_timeout 500 ms under load",
          f"select count(*) from {s}.lineitem a join {s}.lineitem b on a.l_partkey = b.l_partkey",
          conn=c)
    c.execute("set statement_timeout = 200")
    probe("statement_timeout 200 ms, 2000-branch UNION planning",
          " union all ".join(f"select {i} as x" for i in range(2000)), conn=c)
    stop.set()
    for t in threads:
        t.join()

    print("# invalid UTF-8")
    try:
        sock = socket.create_connection((args.host, args.port))
        params = b"user\0" + args.user.encode() + b"\0database\0stride\0\0"
        sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        time.sleep(0.3)
        sock.recv(65536)
        q = b"select '\xff\xfe'\0"
        sock.sendall(b"Q" + struct.pack("!i", 4 + len(q)) + q)
        time.sleep(0.3)
        reply = sock.recv(65536)
        code = reply.split(b"C", 1)[1][:5].decode() if b"C" in reply else "?"
        still = b"Z" in reply
        print(f"{'invalid UTF-8 in a query':<48} {code} connection kept={still}")
        sock.close()
    except OSError as e:
        print("invalid UTF-8 probe failed:", e)

    print("# a client that stops reading")
    try:

        def raw_query(sock, sql):
            q = sql.encode() + b"\0"
            sock.sendall(b"Q" + struct.pack("!i", 4 + len(q)) + q)

        sock = socket.create_connection((args.host, args.port))
        params = b"user\0" + args.user.encode() + b"\0database\0stride\0\0"
        sock.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
        time.sleep(0.3)
        sock.recv(65536)
        raw_query(sock, "set statement_timeout = 1000")
        time.sleep(0.3)
        sock.recv(65536)
        marker = f"/* stops reading {time.time()} */"
        t0 = time.time()
        raw_query(sock, f"select * from {s}.lineitem {marker}")
        watch = connect()
        state = "running"
        while state == "running" and time.time() - t0 < 30:
            row = watch.execute("select state from stride.queries where query like %s "
                                "order by query_id desc limit 1", (f"%{marker}%",)).fetchone()
            state = row[0] if row else "running"
            time.sleep(0.01)
        ended = time.time() - t0
        sock.settimeout(10)
        closed = False
        try:
            while sock.recv(1 << 16):
                pass
            closed = True
        except socket.timeout:
            closed = False
        except OSError:
            closed = True
        print(f"{'timeout 1000 ms, client reads nothing':<48} {state} after "
              f"{ended * 1e3:.0f} ms, connection closed={closed}  alive={alive()}")
        sock.close()
    except OSError as e:
        print("stops-reading probe failed:", e)


if __name__ == "__main__":
    main()
