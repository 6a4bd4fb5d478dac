#!/usr/bin/env python3
"""Peer comparison: the workloads of `stride bench sweep`, run against DuckDB
(in-process) and PostgreSQL (over the wire) on the data Stride generates, with
results in the JSON shape Stride's report reads.

    bash scripts/setup.sh --peers          # duckdb and psycopg (PyPI), PostgreSQL (Debian)
    python3 scripts/peers.py --tpch 0.1,1 --loads 0.9 --out bench-out/peers.json
    stride bench report --results bench-out/sweep/results.json --peers bench-out/peers.json

What it does, per system:
  1. Data: `stride export` writes the generated tables as Parquet (kept in
     --data and reused); DuckDB loads them into in-memory tables, PostgreSQL
     gets them by COPY into a private cluster this script initialises and
     starts (primary keys, an index on l_partkey and ANALYZE, as usual for
     TPC-H on PostgreSQL; jit off).
  2. Isolated: each query's median latency over --isolated-runs runs after one
     warm-up, alone on the system; the runs go round by round over a schema's
     queries (--isolated-order interleaved, Stride's default) or back to back
     per query (repeated).
  3. Poisson (open loop, seed 001 §5.1): arrivals with exponential gaps at
     λ = α / (mean isolated duration of a drawn query), short:long drawn
     3:1, each arrival sent at once on its own thread/connection; latency from
     the arrival (queueing included), slowdown = latency / isolated median.
  4. Spin (closed loop, seed 000 §4.1): C clients resubmitting, completions
     per second over the stable window.

Query instances: each submission has its substitution parameters drawn as
Stride's benchmarks draw them, unless --fixed-params. The texts come from
`stride bench instances` (one generator, in Stride): the k-th isolated run,
Poisson arrival or spin submission of a query is the same instance Stride
submits as its k-th with the same --arrival-seed (spin cycles through the
first --spin-instances instances of each query). Isolated medians are over
the instances of the isolated runs, and slowdowns are against the median of
the query number.

The arrival process has the same distribution and seed as Stride's but comes
from Python's generator, so the exact sequence differs from Stride's.
A query that fails or exceeds --timeout in the isolated runs is left out of
that system's mix (and listed in the output).
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from duckdb_isolated import isolation_schedule, schema_name, stride_binary

ROOT = Path(__file__).resolve().parent.parent
TPCH_KEYS = {
    "region": ["r_regionkey"],
    "nation": ["n_nationkey"],
    "part": ["p_partkey"],
    "supplier": ["s_suppkey"],
    "partsupp": ["ps_partkey", "ps_suppkey"],
    "customer": ["c_custkey"],
    "orders": ["o_orderkey"],
    "lineitem": ["l_orderkey", "l_linenumber"],
}
TPCH_INDEXES = ["create index on lineitem (l_partkey, l_suppkey)", "create index on orders (o_custkey)"]


class Instances:
    """Query texts as Stride's benchmarks submit them, from `stride bench
    instances`: per instance stream ("isolated", "arrivals", "spin"), schema
    and query, the texts of occurrences 0, 1, 2, …"""

    def __init__(self, stride, sfs, seed, fixed):
        self.stride, self.sfs, self.seed, self.fixed = stride, sfs, seed, fixed
        self.streams = {}  # stream -> {schema: {query: [sql, ...]}}
        self.order = {}  # schema -> query names in Stride's order

    def fetch(self, stream, count):
        """Makes sure `stream` has at least `count` instances per query."""
        have = self.streams.get(stream)
        if have and min(len(t) for qs in have.values() for t in qs.values()) >= count:
            return
        cmd = [self.stride, "--tpch", ",".join(str(sf) for sf in self.sfs), "bench", "instances",
               "--stream", stream, "--count", str(max(count, 1)), "--arrival-seed", str(self.seed)]
        if self.fixed:
            cmd.append("--fixed-params")
        doc = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        self.streams[stream] = doc["schemas"]
        self.order = {c["schema"]: c["queries"] for c in doc["classes"]}

    def sql(self, stream, schema, query, k):
        """The k-th occurrence's text (cycling when fewer were fetched)."""
        texts = self.streams[stream][schema][query]
        return texts[k % len(texts)]

    def queries(self, schema):
        """The query names of a schema, in Stride's order (after a fetch)."""
        return list(self.order[schema])


def export_data(args, sfs):
    """Parquet files of every scale factor under --data (reused when present)."""
    data = Path(args.data)
    missing = [sf for sf in sfs if not (data / schema_name("", sf) / "lineitem.parquet").exists()]
    if missing:
        stride = stride_binary(args.stride)
        flag = ",".join(str(sf) for sf in missing)
        subprocess.run([stride, "--tpch", flag, "--no-pin", "export", "--dir", str(data)], check=True)
    return data


# ---------------------------------------------------------------- systems


class DuckDB:
    name = "duckdb"

    def __init__(self, args, data, schemas):
        import duckdb

        self.version = f"DuckDB {duckdb.__version__}"
        self.con = duckdb.connect()
        self.con.execute(f"SET threads = {args.threads}")
        for schema in schemas:
            self.con.execute(f"CREATE SCHEMA {schema}")
            for parquet in sorted((data / schema).glob("*.parquet")):
                self.con.execute(
                    f'CREATE TABLE {schema}."{parquet.stem}" AS SELECT * FROM read_parquet(\'{parquet}\')'
                )
        self.timeout = args.timeout

    def run(self, schema, sql):
        cur = self.con.cursor()
        try:
            cur.execute(f"USE {schema}")
            return len(cur.execute(sql).fetchall())
        finally:
            cur.close()

    def close(self):
        self.con.close()


class Postgres:
    """A private PostgreSQL cluster under --data/pg, loaded once and reused."""

    name = "postgres"

    def __init__(self, args, data, schemas):
        import duckdb
        import psycopg

        self.psycopg = psycopg
        self.port = args.pg_port
        self.timeout_ms = int(args.timeout * 1000)
        bindir = pg_bindir()
        pgdata = (data / "pg").resolve()
        self.sockdir = pgdata / "sock"
        self.user = pg_os_user()
        run_as = ["runuser", "-u", self.user, "--"] if self.user else []
        self.pg_ctl = run_as + [str(bindir / "pg_ctl"), "-D", str(pgdata / "cluster")]
        if not (pgdata / "cluster" / "PG_VERSION").exists():
            shutil.rmtree(pgdata, ignore_errors=True)
            (pgdata / "sock").mkdir(parents=True)
            if self.user:
                shutil.chown(pgdata, self.user)
                shutil.chown(pgdata / "sock", self.user)
            subprocess.run(run_as + [str(bindir / "initdb"), "-D", str(pgdata / "cluster"), "-U", "postgres",
                                     "--no-sync", "-A", "trust"], check=True, stdout=subprocess.DEVNULL)
        opts = (f"-p {self.port} -k {self.sockdir} -c listen_addresses='' -c shared_buffers={args.pg_shared_buffers} "
                f"-c work_mem={args.pg_work_mem} -c max_connections=300 -c jit=off "
                f"-c max_parallel_workers_per_gather={args.threads}")
        subprocess.run(self.pg_ctl + ["-o", opts, "-l", str(pgdata / "log"), "-w", "start"], check=True,
                       stdout=subprocess.DEVNULL)
        self.version = self.connect(None).execute("select version()").fetchone()[0].split(",")[0]
        con = self.connect(None)
        con.autocommit = True
        have = {r[0] for r in con.execute("select schema_name from information_schema.schemata")}
        for schema in schemas:
            if schema in have:
                continue
            print(f"postgres: loading {schema} …", file=sys.stderr)
            con.execute(f"create schema {schema}_loading")
            con.execute(f"set search_path = {schema}_loading")
            duck = duckdb.connect()
            for parquet in sorted((data / schema).glob("*.parquet")):
                table = parquet.stem
                rel = duck.sql(f"select * from read_parquet('{parquet}')")
                cols = ", ".join(f'{c} {pg_type(t)}' for c, t in zip(rel.columns, rel.types))
                con.execute(f"create table {table} ({cols})")
                csv = pgdata / f"{schema}.{table}.csv"
                duck.execute(f"copy (select * from read_parquet('{parquet}')) to '{csv}' (header false)")
                with con.cursor().copy(f"copy {table} from stdin (format csv)") as copy, open(csv, "rb") as f:
                    while chunk := f.read(1 << 20):
                        copy.write(chunk)
                csv.unlink()
                if table in TPCH_KEYS:
                    con.execute(f"alter table {table} add primary key ({', '.join(TPCH_KEYS[table])})")
            for ix in TPCH_INDEXES:
                con.execute(ix)
            con.execute("analyze")
            con.execute(f"alter schema {schema}_loading rename to {schema}")
        self.pool = {}
        self.lock = threading.Lock()

    def connect(self, schema):
        con = self.psycopg.connect(host=str(self.sockdir), port=self.port, user="postgres", dbname="postgres",
                                   autocommit=True)
        con.execute(f"set statement_timeout = {self.timeout_ms}")
        if schema:
            con.execute(f"set search_path = {schema}")
        return con

    def run(self, schema, sql):
        with self.lock:
            idle = self.pool.get(schema, [])
            con = idle.pop() if idle else None
        if con is None or con.closed:
            con = self.connect(schema)
        try:
            cur = con.execute(sql)
            return len(cur.fetchall())
        finally:
            with self.lock:
                self.pool.setdefault(schema, []).append(con)

    def close(self):
        for cons in self.pool.values():
            for c in cons:
                c.close()
        subprocess.run(self.pg_ctl + ["-m", "fast", "-w", "stop"], check=False, stdout=subprocess.DEVNULL)


def pg_bindir():
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    sys.exit("PostgreSQL's server programs (initdb, pg_ctl) are missing: bash scripts/setup.sh --peers")


def pg_os_user():
    """PostgreSQL refuses to run as root: run its programs as `postgres`."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam("postgres")
    except KeyError:
        sys.exit("running as root needs the OS user 'postgres' (Debian's postgresql package creates it)")
    return "postgres"


def pg_type(duck_type):
    t = str(duck_type).upper()
    if t.startswith("DECIMAL"):
        return t.replace("DECIMAL", "numeric")
    return {"BIGINT": "bigint", "INTEGER": "integer", "SMALLINT": "smallint", "DOUBLE": "double precision",
            "FLOAT": "real", "VARCHAR": "text", "DATE": "date", "BOOLEAN": "boolean",
            "TIMESTAMP": "timestamp"}.get(t, "text")


# ---------------------------------------------------------------- workloads


class Mix:
    def __init__(self, classes):
        # classes: [(name, schema, weight, [query name])]; texts from Instances
        self.classes = classes

    def draw(self, rng):
        total = sum(c[2] for c in self.classes)
        x = rng.random() * total
        ci = len(self.classes) - 1
        for i, c in enumerate(self.classes):
            if x < c[2]:
                ci = i
                break
            x -= c[2]
        return ci, rng.randrange(len(self.classes[ci][3]))

    def mean_isolated_ms(self, iso):
        total = sum(c[2] for c in self.classes)
        return sum(c[2] / total * statistics.fmean(iso[c[1]][q]["median_ms"] for q in c[3]) for c in self.classes)

    def to_json(self):
        return [{"name": n, "schema": s, "weight": w, "queries": list(qs)} for n, s, w, qs in self.classes]


def isolated(system, mix, runs, timeout_s, instances, order="interleaved"):
    out, dropped = {}, []
    for name, schema, _, queries in mix.classes:
        out.setdefault(schema, {})
        times = [[] for _ in queries]
        rows = [0] * len(queries)
        made = [0] * len(queries)  # runs so far: the next run's instance
        failed = {}
        for i, measured in isolation_schedule(len(queries), 1, runs, order):
            if i in failed:
                continue
            q = queries[i]
            sql = instances.sql("isolated", schema, q, made[i])
            made[i] += 1
            t = time.perf_counter()
            try:
                rows[i] = system.run(schema, sql)
            except Exception as e:  # noqa: BLE001 - any failure drops the query
                failed[i] = str(e).splitlines()[0]
                continue
            ms = (time.perf_counter() - t) * 1e3
            if ms > timeout_s * 1e3:
                failed[i] = f"slower than --timeout ({ms:.0f} ms)"
            elif measured:
                times[i].append(ms)
        for i, q in enumerate(queries):
            if i in failed:
                dropped.append(f"{schema}.{q}: {failed[i]}")
                print(f"  {system.name} {schema}.{q}: left out ({failed[i]})", file=sys.stderr)
                continue
            med = statistics.median(times[i])
            out[schema][q] = {"median_ms": med, "min_ms": min(times[i]), "max_ms": max(times[i]), "rows": rows[i]}
            print(f"  {system.name} {schema}.{q}: {med:.1f} ms", file=sys.stderr)
    return out, dropped


def sample(query, cls, arrival, start, end, iso_ms, warmup, error):
    lat = (end - arrival) * 1e3
    return {"query": query, "class": cls, "arrival_s": arrival, "start_s": start, "end_s": end, "latency_ms": lat,
            "isolated_ms": iso_ms, "slowdown": lat / iso_ms if iso_ms else None, "warmup": warmup, "error": error}


def summarize(samples, seconds):
    """Per-class summaries as Stride writes them (the report recomputes them from samples)."""
    def dist(v):
        if not v:
            return {"count": 0}
        v = sorted(v)
        pick = lambda p: v[max(1, min(len(v), math.ceil(p * len(v)))) - 1]  # noqa: E731
        return {"count": len(v), "mean": statistics.fmean(v), "p50": pick(0.5), "p95": pick(0.95),
                "p99": pick(0.99), "max": v[-1],
                "geomean": math.exp(statistics.fmean(math.log(max(x, 1e-9)) for x in v))}

    classes = {}
    for cls in sorted({s["class"] for s in samples}):
        ok = [s for s in samples if s["class"] == cls and not s["warmup"] and s["error"] is None]
        classes[cls] = {"count": len(ok), "throughput_qps": len(ok) / seconds if seconds > 0 else None,
                        "latency_ms": dist([s["latency_ms"] for s in ok]),
                        "slowdown": dist([s["slowdown"] for s in ok if s["slowdown"] is not None])}
    return {"classes": classes}


def poisson(system, mix, iso, load, duration, warmup, seed, instances):
    mean_ms = mix.mean_isolated_ms(iso)
    lam = load / (mean_ms / 1e3)
    rng = random.Random(seed)
    schedule, t = [], 0.0
    seen = {}
    while True:
        t += -math.log(1.0 - rng.random()) / lam
        if t >= duration:
            break
        ci, qi = mix.draw(rng)
        k = seen.get((ci, qi), 0)  # the k-th arrival of this query: instance k
        seen[(ci, qi)] = k + 1
        schedule.append((t, ci, qi, k))
    instances.fetch("arrivals", max(seen.values(), default=1))
    samples, lock, threads = [], threading.Lock(), []
    host_start = host_cpu()
    t0 = time.perf_counter()

    def one(at, ci, qi, k):
        name, schema, _, queries = mix.classes[ci]
        q = queries[qi]
        sql = instances.sql("arrivals", schema, q, k)
        start = time.perf_counter() - t0
        err = None
        try:
            system.run(schema, sql)
        except Exception as e:  # noqa: BLE001 - recorded as the sample's error
            err = str(e).splitlines()[0]
        end = time.perf_counter() - t0
        with lock:
            samples.append(sample(q, name, at, start, end, iso[schema][q]["median_ms"], at < warmup, err))

    for at, ci, qi, k in schedule:
        delay = at - (time.perf_counter() - t0)
        if delay > 0:
            time.sleep(delay)
        th = threading.Thread(target=one, args=(at, ci, qi, k), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    host = host_shares(host_start, host_cpu())
    samples.sort(key=lambda s: s["arrival_s"])
    run = {"kind": "poisson", "system": system.name, "version": system.version, "policy": "", "load": load,
           "lambda_qps": lam, "mean_isolated_ms": mean_ms, "seed": seed,
           "params": "fixed" if instances.fixed else "drawn", "duration_s": duration,
           "warmup_s": warmup, "measured_s": duration - warmup, "wall_s": wall, "classes": mix.to_json(),
           "samples": samples, "host_cpu": host}
    run["summary"] = summarize(samples, duration - warmup)
    return run


def host_cpu():
    """The machine's CPU ticks so far (the `cpu` line of /proc/stat): user,
    kernel (system, irq, softirq), idle (with iowait) and steal, the time the
    hypervisor ran something else; None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    v += [0] * (8 - len(v))
    return {"user": v[0] + v[1], "kernel": v[2] + v[5] + v[6], "idle": v[3] + v[4], "steal": v[7]}


def host_shares(a, b):
    """Shares of the ticks between two host_cpu() readings, as Stride's
    bench reports them (`host_cpu` in its JSON)."""
    if a is None or b is None:
        return None
    d = {k: max(0, b[k] - a[k]) for k in a}
    total = max(1, sum(d.values()))
    return {f"{k}_share": d[k] / total for k in ("user", "kernel", "idle", "steal")}


def spin(system, mix, iso, clients, duration, seed, instances, window=3):
    warmup = max(0.0, min(duration * 0.2, duration - 1.0))
    samples, lock = [], threading.Lock()
    submitted = {}  # (class, query) -> submissions so far: the next instance
    t0 = time.perf_counter()

    def client(c):
        rng = random.Random(seed * 1000 + c)
        while time.perf_counter() - t0 < duration:
            ci, qi = mix.draw(rng)
            name, schema, _, queries = mix.classes[ci]
            q = queries[qi]
            with lock:
                k = submitted.get((ci, qi), 0)
                submitted[(ci, qi)] = k + 1
            sql = instances.sql("spin", schema, q, k)
            start = time.perf_counter() - t0
            err = None
            try:
                system.run(schema, sql)
            except Exception as e:  # noqa: BLE001
                err = str(e).splitlines()[0]
            end = time.perf_counter() - t0
            with lock:
                samples.append(sample(q, name, start, start, end, iso[schema][q]["median_ms"],
                                      end < warmup or end >= duration, err))

    threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    secs = max(1, int(duration))
    per_second = [0] * secs
    for s in samples:
        if s["error"] is None and 0 <= s["end_s"] < secs:
            per_second[int(s["end_s"])] += 1
    moving = [sum(per_second[max(0, i + 1 - window):i + 1]) / (i + 1 - max(0, i + 1 - window)) for i in range(secs)]
    frm = min(math.ceil(warmup), secs - 1)
    stable = per_second[frm:]
    mean = statistics.fmean(stable)
    sem = math.sqrt(statistics.variance(stable) / len(stable)) if len(stable) > 1 else 0.0
    samples.sort(key=lambda s: s["end_s"])
    run = {"kind": "spin", "system": system.name, "version": system.version, "policy": "", "clients": clients,
           "seed": seed, "params": "fixed" if instances.fixed else "drawn", "duration_s": duration, "warmup_s": warmup, "classes": mix.to_json(),
           "throughput": {"mean_qps": mean, "sem_qps": sem, "stable_from_s": frm, "stable_to_s": secs,
                          "window_s": window, "per_second": per_second, "moving_average": moving},
           "samples": samples}
    run["summary"] = summarize(samples, secs - frm)
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpch", default="0.1,1", help="one or two TPC-H scale factors (short,long)")
    ap.add_argument("--systems", default="duckdb,postgres")
    ap.add_argument("--loads", default="0.9", help="load factors α, comma-separated")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds of arrivals per Poisson run")
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--short-weight", type=float, default=3.0)
    ap.add_argument("--arrival-seed", type=int, default=1,
                    help="seed of the arrivals and of the substitution parameters' draws")
    ap.add_argument("--fixed-params", action="store_true",
                    help="every submission with the validation parameters (Stride's --fixed-params)")
    ap.add_argument("--spin-instances", type=int, default=64,
                    help="instances per query that spin cycles through")
    ap.add_argument("--isolated-runs", type=int, default=3)
    ap.add_argument("--isolated-order", choices=["interleaved", "repeated"], default="interleaved",
                    help="isolated runs round by round over the queries, or back to back per query")
    ap.add_argument("--spin-duration", type=float, default=10.0, help="0: no spin run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="DuckDB threads / PostgreSQL workers per gather")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds; slower queries are left out of the mix")
    ap.add_argument("--data", default=str(ROOT / "bench-out" / "data"), help="Parquet export (and PostgreSQL cluster)")
    ap.add_argument("--stride", help="path of the stride binary (default: cargo build --release)")
    ap.add_argument("--pg-port", type=int, default=55432)
    ap.add_argument("--pg-shared-buffers", default="4GB")
    ap.add_argument("--pg-work-mem", default="256MB")
    ap.add_argument("--out", default=str(ROOT / "bench-out" / "peers.json"))
    args = ap.parse_args()

    sfs = sorted({float(x) for x in args.tpch.split(",")})
    if len(sfs) not in (1, 2):
        sys.exit("--tpch: name one or two scale factors")
    loads = [float(x) for x in args.loads.split(",")]
    if any(not (l > 0 and math.isfinite(l)) for l in loads):
        sys.exit("--loads: every load must be a positive number")
    if args.isolated_runs < 1:
        sys.exit("--isolated-runs must be at least 1")
    if not (0 <= args.warmup_s < args.duration):
        sys.exit("need 0 <= --warmup-s < --duration")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in ("duckdb", "postgres")]
    if unknown:
        sys.exit(f"--systems: unknown {unknown} (expected duckdb, postgres)")

    data = export_data(args, sfs)
    schemas = [schema_name("", sf) for sf in sfs]
    instances = Instances(stride_binary(args.stride), sfs, args.arrival_seed, args.fixed_params)
    instances.fetch("isolated", args.isolated_runs + 1)
    if args.spin_duration > 0:
        instances.fetch("spin", args.spin_instances)
    if len(sfs) == 2:
        base = [("short", schemas[0], args.short_weight, instances.queries(schemas[0])),
                ("long", schemas[1], 1.0, instances.queries(schemas[1]))]
    else:
        base = [("all", schemas[0], 1.0, instances.queries(schemas[0]))]

    doc = {"kind": "peers", "runs": [], "isolated": {}, "left_out": {}, "versions": {}}
    for name in systems:
        print(f"{name}: loading {', '.join(schemas)} …", file=sys.stderr)
        system = DuckDB(args, data, schemas) if name == "duckdb" else Postgres(args, data, schemas)
        try:
            doc["versions"][name] = system.version
            print(f"{name}: isolated latencies (1 warm-up + {args.isolated_runs} runs per query)", file=sys.stderr)
            full = Mix(base)
            iso, dropped = isolated(system, full, args.isolated_runs, args.timeout, instances, args.isolated_order)
            mix = Mix([(n, s, w, [q for q in qs if q in iso[s]]) for n, s, w, qs in base])
            if any(not c[3] for c in mix.classes):
                sys.exit(f"{name}: a class has no query left")
            doc["isolated"][name] = {"kind": "isolated", "system": name, "runs": args.isolated_runs,
                                       "order": args.isolated_order, "schemas": iso,
                                       "params": "fixed" if args.fixed_params else "drawn",
                                       "params_seed": None if args.fixed_params else args.arrival_seed}
            doc["left_out"][name] = dropped
            for load in loads:
                run = poisson(system, mix, iso, load, args.duration, args.warmup_s, args.arrival_seed, instances)
                line = "; ".join(f"{c}: n={s['count']} slowdown mean {s['slowdown'].get('mean', float('nan')):.2f} "
                                 f"p95 {s['slowdown'].get('p95', float('nan')):.2f}"
                                 for c, s in run["summary"]["classes"].items())
                failed = sum(1 for s in run["samples"] if s["error"])
                host = run["host_cpu"]
                steal = f"; host steal {100 * host['steal_share']:.1f} %" if host else ""
                print(f"{name:<8} α={load:<5} {line}" + (f" ({failed} failed)" if failed else "") + steal)
                doc["runs"].append(run)
            if args.spin_duration > 0:
                run = spin(system, mix, iso, args.clients, args.spin_duration, args.arrival_seed, instances)
                tp = run["throughput"]
                print(f"{name:<8} spin C={args.clients}: {tp['mean_qps']:.2f} ± {2 * tp['sem_qps']:.2f} completions/s")
                doc["runs"].append(run)
        finally:
            system.close()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    import json

    out.write_text(json.dumps(doc))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
