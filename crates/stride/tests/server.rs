//! The PostgreSQL wire-protocol server driven by real clients: tokio-postgres
//! (extended protocol, binary results), psql and pgbench (simple protocol),
//! and raw sockets sending malformed, truncated and hostile input.
//!
//! One server with TPC-H SF 0.1 serves every test of this file.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use stride_server::{Server, ServerConfig, Shared};
use tokio_postgres::types::Type;
use tokio_postgres::{Client, NoTls, Row};

/// A query that runs far longer than any test waits (a self-join on a
/// seven-valued key: ~5·10^10 result rows at SF 0.1).
const ENDLESS: &str =
    "select count(*) from lineitem a join lineitem b on a.l_linenumber = b.l_linenumber";

struct Fixture {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

fn server() -> &'static Fixture {
    static SERVER: OnceLock<Fixture> = OnceLock::new();
    SERVER.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_tpch(0.1).expect("generate TPC-H SF 0.1");
        engine.set_default_schema("sf0_1").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let runtime = stride_server::runtime_builder()
                .worker_threads(2)
                .build()
                .unwrap();
            runtime.block_on(async move {
                let config = ServerConfig {
                    listen: "127.0.0.1:0".parse().unwrap(),
                    ..Default::default()
                };
                let server = Server::bind(engine, config).await.unwrap();
                tx.send((server.local_addr().unwrap(), server.shared()))
                    .unwrap();
                server.serve().await.unwrap();
            });
        });
        let (addr, shared) = rx.recv().unwrap();
        Fixture { addr, shared }
    })
}

/// The connection still answers queries (after an error, a cancel).
async fn still_usable(client: &Client) {
    let n: i64 = client
        .query_one("select count(*) from region", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 5);
}

use common::client::runtime;

async fn connect(user: &str) -> Client {
    common::client::connect(server().addr, user).await
}

/// A result cell as text, decoded from the binary format by its type.
fn cell(row: &Row, i: usize) -> String {
    let t = row.columns()[i].type_().clone();
    let text = match t {
        Type::INT2 => row.get::<_, Option<i16>>(i).map(|v| v.to_string()),
        Type::INT4 => row.get::<_, Option<i32>>(i).map(|v| v.to_string()),
        Type::INT8 => row.get::<_, Option<i64>>(i).map(|v| v.to_string()),
        Type::FLOAT4 => row.get::<_, Option<f32>>(i).map(|v| v.to_string()),
        Type::FLOAT8 => row.get::<_, Option<f64>>(i).map(|v| v.to_string()),
        Type::NUMERIC => row.get::<_, Option<Decimal>>(i).map(|v| v.to_string()),
        Type::BOOL => row.get::<_, Option<bool>>(i).map(|v| v.to_string()),
        Type::DATE => row
            .get::<_, Option<chrono::NaiveDate>>(i)
            .map(|v| v.to_string()),
        Type::TEXT => row.get::<_, Option<String>>(i),
        other => panic!("unexpected result type {other}"),
    };
    text.unwrap_or_default()
}

fn answer(n: usize) -> Vec<Vec<String>> {
    let path = format!("{}/tests/tpch-answers/q{n}.csv", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut rows = common::parse_csv(&text);
    rows.remove(0);
    rows
}

#[test]
fn tpch_answers_over_the_extended_protocol_with_binary_results() {
    runtime().block_on(async {
        let client = connect("tpch").await;
        for (n, query) in stride::workload::tpch(0.1).iter().enumerate() {
            let n = n + 1;
            let rows = client
                .query(query.sql.as_str(), &[])
                .await
                .unwrap_or_else(|e| panic!("q{n}: {e}"));
            let actual: Vec<Vec<String>> = rows
                .iter()
                .map(|r| (0..r.len()).map(|i| cell(r, i)).collect())
                .collect();
            common::match_rows(&actual, &answer(n)).unwrap_or_else(|e| panic!("q{n}: {e}"));
            common::check_sorted(&actual, common::TPCH_ORDER[n - 1])
                .unwrap_or_else(|e| panic!("q{n}: {e}"));
        }
    });
}

fn psql(args: &[&str]) -> std::process::Output {
    let addr = server().addr;
    Command::new("psql")
        .args(["-h", &addr.ip().to_string(), "-p", &addr.port().to_string()])
        .args(["-U", "psql", "-d", "stride", "-X", "--no-psqlrc"])
        .args(args)
        .output()
        .expect("psql must be installed (`.ci/run` installs postgresql-client)")
}

#[test]
fn tpch_answers_through_psql_simple_protocol() {
    for (n, query) in stride::workload::tpch(0.1).iter().enumerate() {
        let n = n + 1;
        let out = psql(&[
            "-A",
            "-t",
            "-F",
            "\t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            &query.sql,
        ]);
        assert!(
            out.status.success(),
            "q{n}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let actual: Vec<Vec<String>> = text
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect();
        common::match_rows(&actual, &answer(n)).unwrap_or_else(|e| panic!("q{n}: {e}"));
        common::check_sorted(&actual, common::TPCH_ORDER[n - 1])
            .unwrap_or_else(|e| panic!("q{n}: {e}"));
    }
}

#[test]
fn psql_reports_errors_and_the_session_goes_on() {
    let out = psql(&[
        "-c",
        "select * from no_such_table",
        "-c",
        "selec 1",
        "-c",
        "select n_name from nation where n_nationkey = 7",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stderr.contains("no_such_table"), "{stderr}");
    assert!(stderr.contains("syntax error"), "{stderr}");
    assert!(stdout.contains("GERMANY"), "{stdout}");
}

/// `sql` fails with SQLSTATE `code` through the simple and the extended
/// protocol, and the connection goes on.
async fn fails_with_code(client: &Client, sql: &str, code: &str) {
    let err = client.simple_query(sql).await.expect_err(sql);
    let db = err.as_db_error().unwrap_or_else(|| panic!("{sql}: {err}"));
    assert_eq!(db.code().code(), code, "{sql}: {}", db.message());
    let err = client.query(sql, &[]).await.expect_err(sql);
    assert_eq!(err.code().map(|c| c.code()), Some(code), "{sql}: {err}");
    still_usable(client).await;
}

#[test]
fn errors_carry_sqlstates_and_leave_the_connection_usable() {
    runtime().block_on(async {
        let client = connect("errors").await;
        let cases = [
            ("selec 1", "42601"),
            ("select * from no_such_table", "42P01"),
            ("select no_such_column from nation", "42703"),
            (
                "select n_name, count(*) over (order by n_name groups current row) from nation",
                "0A000",
            ),
            ("set stride.no_such_setting = 1", "42704"),
            ("set stride.user_priority = -1", "22023"),
        ];
        for (sql, code) in cases {
            fails_with_code(&client, sql, code).await;
        }
    });
}

/// Each kind of "no such thing", "already there" and refused setting has
/// its own SQLSTATE, as PostgreSQL answers it, through both protocols.
#[test]
fn each_error_kind_answers_its_own_sqlstate() {
    runtime().block_on(async {
        let client = connect("kinds").await;
        let cases = [
            ("drop schema nosuch", "3F000"),
            ("select * from nosuch.nation", "3F000"),
            ("select nosuchcol from nation", "42703"),
            ("select nosuchfn(1)", "42883"),
            ("select n_name, nosuchfn(n_nationkey) from nation", "42883"),
            ("select * from nosuch", "42P01"),
            ("create table nation (x int)", "42P07"),
            ("create schema sf0_1", "42P06"),
            ("drop schema sf0_1", "2BP01"),
            ("select n_name from nation a, nation b", "42702"),
            ("set nosuch_param = 1", "42704"),
            ("set statement_timeout = 'abc'", "22023"),
            ("set stride.workers = 3", "55P02"),
            ("drop role nosuch", "42704"),
        ];
        for (sql, code) in cases {
            fails_with_code(&client, sql, code).await;
        }
        // The refused statements changed nothing.
        let n: i64 = client
            .query_one("select count(*) from nation", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 25);
    });
}

#[test]
fn parameters_are_typed_by_the_statement_and_bound_in_binary() {
    runtime().block_on(async {
        let client = connect("params").await;
        let stmt = client
            .prepare("select count(*) from lineitem where l_quantity < $1 and l_shipdate <= $2 and l_returnflag = $3")
            .await
            .unwrap();
        assert_eq!(stmt.params(), &[Type::NUMERIC, Type::DATE, Type::TEXT]);
        let date = chrono::NaiveDate::from_ymd_opt(1995, 6, 17).unwrap();
        let literal: i64 = client
            .query_one(
                "select count(*) from lineitem where l_quantity < 24.5 and l_shipdate <= date '1995-06-17' and l_returnflag = 'R'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let bound: i64 = client
            .query_one(&stmt, &[&Decimal::new(245, 1), &date, &"R"])
            .await
            .unwrap()
            .get(0);
        assert!(literal > 0);
        assert_eq!(bound, literal);
        // Re-executing the prepared statement with other values.
        let none: i64 = client
            .query_one(&stmt, &[&Decimal::new(0, 0), &date, &"R"])
            .await
            .unwrap()
            .get(0);
        assert_eq!(none, 0);
        // NULL parameters and a parameter of an integer column.
        let rows = client
            .query("select n_name from nation where n_nationkey = $1", &[&Option::<i64>::None])
            .await
            .unwrap();
        assert!(rows.is_empty());
        let row = client
            .query_one("select n_name from nation where n_nationkey = $1", &[&7i64])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "GERMANY");
        // Wrong arity is an error, the connection goes on.
        assert!(client.query(&stmt, &[]).await.is_err());
        still_usable(&client).await;
        // A parameter used only under a cast takes the cast's type (as
        // PostgreSQL infers it); casts that disagree, or a use beside the
        // cast, leave it text.
        for (sql, types) in [
            ("select $1::int + 1, $2::bytea", &[Type::INT4, Type::BYTEA][..]),
            ("select $1::date, $1::date", &[Type::DATE][..]),
            ("select $1::int, $1::text", &[Type::TEXT][..]),
            ("select $1::interval, $2::time", &[Type::INTERVAL, Type::TIME][..]),
            ("select n_name from nation where n_nationkey = $1::int", &[Type::INT4][..]),
        ] {
            let stmt = client.prepare(sql).await.unwrap();
            assert_eq!(stmt.params(), types, "{sql}");
        }
        let row = client
            .query_one("select $1::int, $2::bytea", &[&42i32, &&b"\x00hi"[..]])
            .await
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), 42);
        assert_eq!(row.get::<_, Vec<u8>>(1), b"\x00hi");
    });
}

#[test]
fn result_types_in_text_and_binary() {
    runtime().block_on(async {
        let client = connect("types").await;
        let sql =
            "select cast(1 as smallint), cast(2 as int), cast(3 as bigint), cast(1.5 as real), \
                   cast(2.25 as double), cast(-12.345 as decimal(10,3)), 'x', date '1998-12-01', \
                   cast('2020-01-02 03:04:05.5' as timestamp), true, null";
        let row = client.query_one(sql, &[]).await.unwrap();
        assert_eq!(row.get::<_, i16>(0), 1);
        assert_eq!(row.get::<_, i32>(1), 2);
        assert_eq!(row.get::<_, i64>(2), 3);
        assert_eq!(row.get::<_, f32>(3), 1.5);
        assert_eq!(row.get::<_, f64>(4), 2.25);
        assert_eq!(row.get::<_, Decimal>(5).to_string(), "-12.345");
        assert_eq!(row.get::<_, String>(6), "x");
        assert_eq!(
            row.get::<_, chrono::NaiveDate>(7),
            chrono::NaiveDate::from_ymd_opt(1998, 12, 1).unwrap()
        );
        let ts: chrono::NaiveDateTime = row.get(8);
        assert_eq!(ts.to_string(), "2020-01-02 03:04:05.500");
        assert!(row.get::<_, bool>(9));
        assert_eq!(row.get::<_, Option<String>>(10), None);
        // The simple protocol sends text.
        let msgs = client.simple_query(sql).await.unwrap();
        let row = msgs
            .iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .unwrap();
        let texts: Vec<Option<&str>> = (0..11).map(|i| row.get(i)).collect();
        assert_eq!(
            texts,
            [
                Some("1"),
                Some("2"),
                Some("3"),
                Some("1.5"),
                Some("2.25"),
                Some("-12.345"),
                Some("x"),
                Some("1998-12-01"),
                Some("2020-01-02 03:04:05.500"),
                Some("t"),
                None
            ]
        );
    });
}

#[test]
fn settings_and_system_views() {
    runtime().block_on(async {
        let client = connect("settings").await;
        let show = |rows: Vec<tokio_postgres::SimpleQueryMessage>| -> String {
            rows.iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(
            show(client.simple_query("show server_version").await.unwrap()),
            "16.0"
        );
        assert_eq!(
            show(client.simple_query("show client_encoding").await.unwrap()),
            "UTF8"
        );
        let workers = show(client.simple_query("show stride.workers").await.unwrap());
        assert_eq!(workers, "2");
        client
            .simple_query("set stride.user_priority = 3")
            .await
            .unwrap();
        assert_eq!(
            show(
                client
                    .simple_query("show stride.user_priority")
                    .await
                    .unwrap()
            ),
            "3"
        );
        client
            .simple_query("set application_name = 'stride-test'")
            .await
            .unwrap();
        client
            .simple_query("select count(*) from orders where o_orderstatus = 'F'")
            .await
            .unwrap();
        let row = client
            .query_one(
                "select state, usename, user_priority, tasks, morsels, cpu_ms \
                 from stride.queries where query like '%o_orderstatus%' and usename = 'settings'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), "done");
        assert_eq!(row.get::<_, String>(1), "settings");
        assert_eq!(row.get::<_, f64>(2), 3.0);
        assert!(row.get::<_, i64>(3) > 0, "tasks");
        assert!(row.get::<_, i64>(4) > 0, "morsels");
        assert!(row.get::<_, f64>(5) > 0.0, "cpu");
        let workers: i64 = client
            .query_one("select count(*) from stride.workers", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(workers, 2);
        // Transactions blocks are accepted (every statement commits alone).
        client
            .batch_execute("begin; select 1; commit")
            .await
            .unwrap();
    });
}

#[test]
fn a_cancel_request_stops_the_running_query() {
    runtime().block_on(async {
        let client = connect("cancel").await;
        let token = client.cancel_token();
        let canceller = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            token.cancel_query(NoTls).await.unwrap();
        });
        let start = Instant::now();
        let err = client.query(ENDLESS, &[]).await.expect_err("cancelled");
        assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(20));
        canceller.await.unwrap();
        still_usable(&client).await;
    });
}

#[test]
fn statement_timeout_cancels_a_long_query() {
    runtime().block_on(async {
        let client = connect("timeout").await;
        client
            .simple_query("set statement_timeout = 300")
            .await
            .unwrap();
        let start = Instant::now();
        let err = client.query(ENDLESS, &[]).await.expect_err("timed out");
        assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(20));
        // Short statements are unaffected.
        still_usable(&client).await;
    });
}

// ---- raw protocol ---------------------------------------------------------

use common::wire::{message, query_message, read_until, sqlstate_of, startup_packet};

fn raw_connect() -> TcpStream {
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&startup_packet("raw")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(
        msgs.first().map(|m| m.0),
        Some(b'R'),
        "authentication first"
    );
    assert!(msgs.iter().any(|m| m.0 == b'K'), "backend key data");
    s
}

/// The server answers a fresh client (it survived whatever came before).
fn server_still_serves() {
    let mut s = raw_connect();
    s.write_all(&query_message("select count(*) from nation"))
        .unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'D'), "{msgs:?}");
}

#[test]
fn malformed_and_truncated_messages_close_only_their_connection() {
    // A length below 4.
    let mut s = raw_connect();
    s.write_all(&[b'Q', 0, 0, 0, 2]).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(msgs.last().map(|m| m.0), Some(b'E'));
    assert_eq!(sqlstate_of(&msgs.last().unwrap().1), "08P01");
    // An unknown message type.
    let mut s = raw_connect();
    s.write_all(&message(b'!', b"hello")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(sqlstate_of(&msgs.last().unwrap().1), "08P01");
    // A Bind whose counts lie about its length.
    let mut s = raw_connect();
    s.write_all(&message(b'B', &[0, 0, 0, 0x7f, 0xff])).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(sqlstate_of(&msgs.last().unwrap().1), "08P01");
    // A message cut off in the middle, then the client vanishes.
    let mut s = raw_connect();
    let q = query_message("select 1");
    s.write_all(&q[..q.len() - 3]).unwrap();
    drop(s);
    // A startup packet of garbage, and one that is cut off.
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.write_all(&[0, 0, 0, 12, 1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(msgs.first().map(|m| m.0), Some(b'E'));
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.write_all(&[0, 0, 0, 100, 0, 3]).unwrap();
    drop(s);
    // An absurd length in the startup packet.
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.write_all(&[0x7f, 0xff, 0xff, 0xff]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(
        msgs.first().map(|m| sqlstate_of(&m.1)),
        Some("08P01".into())
    );
    server_still_serves();
}

#[test]
fn an_unknown_protocol_version_is_refused() {
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut packet = 8i32.to_be_bytes().to_vec();
    packet.extend_from_slice(&(2i32 << 16).to_be_bytes());
    s.write_all(&packet).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].0, b'E');
    assert_eq!(sqlstate_of(&msgs[0].1), "08P01");
    assert!(String::from_utf8_lossy(&msgs[0].1).contains("unsupported frontend protocol 2.0"));
    // An SSL request is answered 'N' and the startup goes on in plain text.
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut ssl = 8i32.to_be_bytes().to_vec();
    ssl.extend_from_slice(&80_877_103i32.to_be_bytes());
    s.write_all(&ssl).unwrap();
    let mut answer = [0u8; 1];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"N");
    s.write_all(&startup_packet("after-ssl")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(msgs.last().map(|m| m.0), Some(b'Z'));
}

#[test]
fn a_huge_query_text_is_answered_and_an_oversized_message_refused() {
    // 8 MiB of query text (a comment) is within the limit and runs.
    let mut s = raw_connect();
    let sql = format!("select 42 -- {}", "x".repeat(8 << 20));
    s.write_all(&query_message(&sql)).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'D'), "a row");
    // A length beyond the 64 MiB limit is refused without reading it.
    let mut s = raw_connect();
    s.write_all(&[b'Q', 0x10, 0, 0, 0]).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert_eq!(sqlstate_of(&msgs.last().unwrap().1), "08P01");
    server_still_serves();
}

#[test]
fn a_client_killed_mid_result_or_mid_query_frees_its_resources() {
    // Killed while a large result streams.
    let mut s = raw_connect();
    s.write_all(&query_message("select * from lineitem"))
        .unwrap();
    let mut some = [0u8; 4096];
    s.read_exact(&mut some).unwrap();
    drop(s);
    // Killed while its query runs: the query is cancelled on the scheduler.
    let mut s = raw_connect();
    s.write_all(&query_message(ENDLESS)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut s = raw_connect();
        s.write_all(&query_message(
            "select state from stride.queries where query like '%l_linenumber = b.l_linenumber' and usename = 'raw' order by query_id desc limit 1",
        ))
        .unwrap();
        let msgs = read_until(&mut s, b'Z');
        let state = msgs
            .iter()
            .find(|m| m.0 == b'D')
            .map(|m| String::from_utf8_lossy(&m.1[6..]).into_owned())
            .unwrap_or_default();
        drop(s);
        if state == "cancelled" {
            break;
        }
        assert!(Instant::now() < deadline, "query not cancelled: {state:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server_still_serves();
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[test]
fn two_hundred_concurrent_connections_each_run_a_short_query() {
    let shared = server().shared.clone();
    let rt = runtime();
    // Warm the allocator and the server once, then take the baseline.
    rt.block_on(async {
        let c = connect("warm").await;
        c.query("select count(*) from nation", &[]).await.unwrap();
    });
    let baseline_rss = rss_bytes();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..200 {
            tasks.push(tokio::spawn(async move {
                let client = connect(&format!("c{i}")).await;
                let key = i % 25;
                let row = client
                    .query_one(
                        "select n_name from nation where n_nationkey = $1",
                        &[&(key as i64)],
                    )
                    .await
                    .unwrap();
                let name: String = row.get(0);
                (client, name)
            }));
        }
        let mut clients = Vec::new();
        for t in tasks {
            let (client, name) = t.await.unwrap();
            assert!(!name.is_empty());
            clients.push(client);
        }
        assert!(shared.connections() >= 200, "{}", shared.connections());
        drop(clients);
    });
    // Connections return to the baseline (other tests may hold a few).
    let deadline = Instant::now() + Duration::from_secs(20);
    while shared.connections() > 20 {
        assert!(
            Instant::now() < deadline,
            "{} connections left",
            shared.connections()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let grown = rss_bytes().saturating_sub(baseline_rss);
    assert!(grown < 256 << 20, "RSS grew by {} MiB", grown >> 20);
}

#[test]
fn pgbench_runs_a_custom_script() {
    let addr = server().addr;
    let dir = std::env::temp_dir().join(format!("stride-pgbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("q.sql");
    std::fs::write(
        &script,
        "\\set key random(0, 24)\nselect n_name from nation where n_nationkey = :key;\n",
    )
    .unwrap();
    let out = Command::new("pgbench")
        .args(["-n", "-f", script.to_str().unwrap(), "-c", "4", "-T", "2"])
        .args([
            "-h",
            &addr.ip().to_string(),
            "-p",
            &addr.port().to_string(),
            "-U",
            "bench",
            "stride",
        ])
        .output()
        .expect("pgbench must be installed (`.ci/run` installs postgresql-client)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let processed: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(processed > 10, "{stdout}");
    assert!(stdout.contains("latency average"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}
