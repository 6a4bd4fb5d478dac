//! Real drivers over the wire: psycopg (Python) and pgjdbc (Java) as pooled
//! applications run them, asyncpg (Python, binary throughout), every statement prepared on the server and
//! re-executed while another connection inserts rows, drops the table and
//! creates it again. A prepared statement must see every committed insert,
//! fail with 42P01 once its table is gone, and read the new table after.
//!
//! The drivers' programs are in `tests/clients/`; `scripts/setup.sh`
//! installs the drivers (psycopg and asyncpg from PyPI, Java and pgjdbc from
//! Debian).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

fn new_server() -> SocketAddr {
    let engine = common::test_engine(2);
    let config = stride_server::ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    common::client::serve(engine, config, 2)
}

fn server() -> SocketAddr {
    static SERVER: OnceLock<SocketAddr> = OnceLock::new();
    *SERVER.get_or_init(new_server)
}

/// Runs a driver's program against the shared test server; its standard output.
fn run(program: &str, args: &[&str], what: &str) -> String {
    run_on(server(), program, args, what)
}

/// Runs a driver's program against the server at `addr`.
fn run_on(addr: SocketAddr, program: &str, args: &[&str], what: &str) -> String {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string());
    common::client::run_program(cmd, what)
}

fn program(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
        .display()
        .to_string()
}

/// Each insert is seen: counts 1..5 and running sums of 10, 20, … 50.
const SEEN: &str = "seen 1:10 2:30 3:60 4:100 5:150";

#[test]
fn psycopg_prepared_statements_see_every_write_and_ddl() {
    let out = run(
        "python3",
        &[&program("psycopg_prepared.py")],
        "psycopg (prepare_threshold=0)",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            SEEN,
            "prepared yes",
            "dropped 42P01",
            "recreated 1:7",
            // PostgreSQL: "cached plan must not change result type".
            "retyped 0A000",
        ],
        "{out}"
    );
}

#[test]
fn psycopg_cached_plans_take_each_executions_values_and_see_writes() {
    // A server of its own: the plan cache's counts are engine-wide, and the
    // other tests' statements, run at the same time, could evict the shape.
    let out = run_on(
        new_server(),
        "python3",
        &[&program("psycopg_plan_cache.py")],
        "psycopg (plan cache)",
    );
    let lines: Vec<&str> = out.lines().collect();
    let mut expected = Vec::new();
    for label in ["prepared", "simple"] {
        for seen in ["apple:1.50", "banana:2.00", "-", "cherry:9.99"] {
            expected.push(format!("{label} {seen}"));
        }
    }
    expected.extend(
        [
            "prepared on the server yes",
            // Four runs of one shape: a miss, three hits.
            "simple shape hits 3",
            "dropped simple 42P01",
            // The simple protocol plans the shape anew; the prepared
            // statement's plan must not change its result type.
            "retyped simple apple:many",
            "retyped prepared 0A000",
        ]
        .map(String::from),
    );
    assert_eq!(lines, expected, "{out}");
}

#[test]
fn jdbc_prepared_statements_see_every_write_and_ddl() {
    let out = run(
        "java",
        &[
            "-cp",
            "/usr/share/java/postgresql.jar",
            &program("JdbcPrepared.java"),
        ],
        "pgjdbc (prepareThreshold=1)",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines, [SEEN, "dropped 42P01", "recreated 1:7"], "{out}");
}

/// asyncpg: every value in binary both ways (bytea, time and interval
/// included), parameters typed by their casts (`$1::int`), prepared
/// statements re-executed, executemany, a rolled-back transaction, a
/// portal fetched in pieces, COPY both ways, and errors as typed
/// exceptions, each answered at once (asyncpg waits for a failed Parse's
/// answer before it sends Sync).
#[test]
fn asyncpg_round_trips_binary_values_and_gets_typed_errors() {
    let out = run("python3", &[&program("asyncpg_app.py")], "asyncpg");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "version True 16",
            "row (1, 2, 3, 1.5, 2.5, 'x', True, datetime.date(2020, 1, 2), \
             datetime.datetime(2020, 1, 2, 3, 4, 5, 250000), Decimal('12.34'), None, b'hi', \
             datetime.time(3, 4, 5, 500000), \
             datetime.timedelta(days=428, seconds=14706, microseconds=500000), \
             datetime.timedelta(days=-1, seconds=7200))",
            "params True []",
            "count 20",
            "prepared [0, 4, 9, 19, 19]",
            "stored True 03:03:00 3 days, 0:00:03",
            "cursor [0, 1, 2] 10 [13, 14, 15, 16, 17, 18, 19]",
            "copy COPY 1 19\titem 19\t\\\\x13ec|200\tcopied\t\\\\x015c|",
            "error UndefinedTableError 42P01",
            "error PostgresSyntaxError 42601",
            "error DivisionByZeroError 22012",
            "error InvalidDatetimeFormatError 22007",
            "after errors 42",
        ],
        "{out}"
    );
}
