//! Hostile and careless input over the wire: statements that would overflow
//! a stack, integer overflow, prepared statements across writes and DDL,
//! server-side file access, invalid UTF-8, clients that never authenticate,
//! cancels that arrive before a statement reaches its thread, functions
//! asked for values beyond 1 GB. After each
//! probe the server must still serve, with the right SQLSTATE returned.
//!
//! One server with TPC-H SF 0.01 serves every test of this file.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use stride_server::ServerConfig;
use tokio_postgres::Client;

struct Fixture {
    addr: SocketAddr,
    import_dir: std::path::PathBuf,
}

const AUTH_TIMEOUT: Duration = Duration::from_secs(2);

fn server() -> &'static Fixture {
    static SERVER: OnceLock<Fixture> = OnceLock::new();
    SERVER.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_tpch(0.01).expect("generate TPC-H SF 0.01");
        engine.set_default_schema("sf0_01").unwrap();
        let import_dir = common::scratch_dir("hostile");
        std::fs::write(import_dir.join("ok.csv"), "a,b\n1,x\n2,y\n").unwrap();
        let import_dir = import_dir.canonicalize().unwrap();
        engine
            .runtime()
            .set_file_access(stride_sql::FileAccess::Under(import_dir.clone()));
        let config = ServerConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            authentication_timeout: AUTH_TIMEOUT,
            ..Default::default()
        };
        let addr = common::client::serve(engine, config, 2);
        Fixture { addr, import_dir }
    })
}

use common::client::runtime;

async fn connect(user: &str) -> Client {
    common::client::connect(server().addr, user).await
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// The connection still answers queries.
async fn still_usable(client: &Client) {
    assert_eq!(count(client, "select count(*) from region").await, 5);
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

async fn fails_with(client: &Client, sql: &str, sqlstate: &str) -> tokio_postgres::Error {
    let err = client
        .simple_query(sql)
        .await
        .expect_err("the statement must fail");
    assert_eq!(code(&err), sqlstate, "{}: {err}", &sql[..sql.len().min(80)]);
    err
}

#[test]
fn statements_deep_enough_to_overflow_a_stack_fail_alone_or_run() {
    runtime().block_on(async {
        let client = connect("deep").await;
        // ~1000 alternatives: runs (PostgreSQL runs it too).
        let ors = (0..1000)
            .map(|i| format!("n_nationkey = {i}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let sql = format!("select count(*) from nation where {ors}");
        assert_eq!(count(&client, &sql).await, 25);
        // 5000 conjuncts: run.
        let ands = (0..5000)
            .map(|_| "n_nationkey >= 0".to_string())
            .collect::<Vec<_>>()
            .join(" and ");
        let sql = format!("select count(*) from nation where {ands}");
        assert_eq!(count(&client, &sql).await, 25);
        // A 500-branch UNION ALL.
        let union = (0..500)
            .map(|i| format!("select {i} as x"))
            .collect::<Vec<_>>()
            .join(" union all ");
        let sql = format!("select count(*) from ({union}) u");
        assert_eq!(count(&client, &sql).await, 500);
        // A prepared statement with 1000 parameters.
        let params = (1..=1000)
            .map(|i| format!("${i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!("select count(*) from nation where n_nationkey in ({params})");
        let values: Vec<i64> = (0..1000).collect();
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
            .iter()
            .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        let n: i64 = client.query_one(&sql, &refs).await.unwrap().get(0);
        assert_eq!(n, 25);
        // Beyond what any stack may hold: 54001, the connection goes on.
        let sum = vec!["n_nationkey"; 20_000].join(" + ");
        fails_with(&client, &format!("select {sum} from nation"), "54001").await;
        let parens = format!("select {}1{}", "(".repeat(5000), ")".repeat(5000));
        fails_with(&client, &parens, "54001").await;
        let tokens = format!("select 1 where {}", "1 = 1 or ".repeat(200_000));
        fails_with(&client, &format!("{tokens} 1 = 1"), "54001").await;
        still_usable(&client).await;
    });
}

#[test]
fn integer_overflow_is_an_error_and_sums_do_not_wrap() {
    runtime().block_on(async {
        let client = connect("ints").await;
        fails_with(&client, "select 9223372036854775807 + 1", "22003").await;
        fails_with(
            &client,
            "select cast(2147483647 as int) * cast(2 as int)",
            "22003",
        )
        .await;
        fails_with(
            &client,
            "select n_nationkey + 9223372036854775807 from nation",
            "22003",
        )
        .await;
        client
            .batch_execute(
                "create table big (v bigint); \
                 insert into big values (9223372036854775807), (9223372036854775807)",
            )
            .await
            .unwrap();
        let rows = client.simple_query("select sum(v) from big").await.unwrap();
        let value = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some("18446744073709551614"));
        client.batch_execute("drop table big").await.unwrap();
        still_usable(&client).await;
    });
}

#[test]
fn decimal_division_fails_with_22012_and_22003_and_keeps_16_digits() {
    runtime().block_on(async {
        let client = connect("decimals").await;
        fails_with(&client, "select 1.50 / 0", "22012").await;
        fails_with(
            &client,
            "select n_nationkey / cast(n_regionkey - n_regionkey as decimal(10,2)) from nation",
            "22012",
        )
        .await;
        fails_with(
            &client,
            "select cast(10000000000000000000000 as decimal(38,0)) / 0.0001",
            "22003",
        )
        .await;
        // The quotient in binary (a prepared statement) and in text.
        let sql = "select cast(2 as decimal(10,2)) / 3 where $1 > 0";
        let row = client.query_one(sql, &[&1i64]).await.unwrap();
        let binary: rust_decimal::Decimal = row.get(0);
        assert_eq!(binary.to_string(), "0.6666666666666667");
        let rows = client
            .simple_query("select -7.5 / 2, 1.0 / 8")
            .await
            .unwrap();
        let text = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((r.get(0).unwrap().to_string(), r.get(1).unwrap().to_string()))
            }
            _ => None,
        });
        assert_eq!(
            text,
            Some(("-3.7500000000000000".into(), "0.1250000000000000".into()))
        );
        still_usable(&client).await;
    });
}

#[test]
fn prepared_statements_see_current_data() {
    runtime().block_on(async {
        let writer = connect("writer").await;
        let reader = connect("reader").await;
        writer
            .batch_execute("create table live (k bigint); insert into live values (1)")
            .await
            .unwrap();
        let count = reader
            .prepare("select count(*) from live where k >= $1")
            .await
            .unwrap();
        let run = || async { reader.query_one(&count, &[&0i64]).await };
        assert_eq!(run().await.unwrap().get::<_, i64>(0), 1);
        for expected in 2..=4 {
            writer
                .batch_execute(&format!("insert into live values ({expected})"))
                .await
                .unwrap();
            assert_eq!(run().await.unwrap().get::<_, i64>(0), expected);
        }
        // Dropped: the relation is gone (42P01).
        writer.batch_execute("drop table live").await.unwrap();
        let err = run().await.expect_err("the table was dropped");
        assert_eq!(code(&err), "42P01", "{err}");
        // Recreated with other columns: the cached plan cannot be kept.
        writer
            .batch_execute("create table live (k text)")
            .await
            .unwrap();
        let err = run().await.expect_err("the table changed");
        assert_eq!(code(&err), "0A000", "{err}");
        // Recreated alike: the statement works again.
        writer
            .batch_execute(
                "drop table live; create table live (k bigint); insert into live values (7)",
            )
            .await
            .unwrap();
        assert_eq!(run().await.unwrap().get::<_, i64>(0), 1);
        writer.batch_execute("drop table live").await.unwrap();
        still_usable(&reader).await;
    });
}

#[test]
fn deallocate_and_discard_drop_prepared_statements() {
    runtime().block_on(async {
        let client = connect("dealloc").await;
        let stmt = client.prepare("select count(*) from region").await.unwrap();
        assert_eq!(
            client.query_one(&stmt, &[]).await.unwrap().get::<_, i64>(0),
            5
        );
        // tokio-postgres names its statements s0, s1, …: drop them all.
        client.batch_execute("DEALLOCATE ALL").await.unwrap();
        let err = client.query_one(&stmt, &[]).await.expect_err("deallocated");
        assert_eq!(code(&err), "26000", "{err}");
        fails_with(&client, "DEALLOCATE no_such_statement", "26000").await;
        let stmt = client.prepare("select 1::bigint").await.unwrap();
        client
            .batch_execute("SET statement_timeout = '5s'; DISCARD ALL")
            .await
            .unwrap();
        assert!(client.query_one(&stmt, &[]).await.is_err());
        let rows = client.simple_query("SHOW statement_timeout").await.unwrap();
        let value = rows.iter().find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        });
        assert_eq!(value.as_deref(), Some("0"), "DISCARD ALL resets settings");
        still_usable(&client).await;
    });
}

#[test]
fn server_files_are_readable_only_under_the_import_directory() {
    runtime().block_on(async {
        let client = connect("files").await;
        let create = |loc: &str| format!("create external table f stored as csv location '{loc}'");
        for outside in [
            "/etc/shadow",
            "/etc/passwd",
            "/no/such/file",
            "/dev/zero",
            "../x.csv",
        ] {
            let err = fails_with(&client, &create(outside), "42501").await;
            // The refusal does not tell whether the file exists.
            assert!(!err.to_string().contains("No such file"), "{err}");
        }
        client.batch_execute(&create("ok.csv")).await.unwrap();
        assert_eq!(count(&client, "select count(*) from f").await, 2);
        let inside = server().import_dir.join("ok.csv");
        client.batch_execute("drop table f").await.unwrap();
        client
            .batch_execute(&create(inside.to_str().unwrap()))
            .await
            .unwrap();
        client.batch_execute("drop table f").await.unwrap();
    });
}

// ---- raw protocol ---------------------------------------------------------

use common::wire::{message, query_bytes, read_until, sqlstate_of, startup_packet};

fn raw_connect() -> TcpStream {
    let mut s = TcpStream::connect(server().addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(&startup_packet("raw")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'K'), "backend key data");
    s
}

fn server_still_serves() {
    let mut s = raw_connect();
    s.write_all(&query_bytes(b"select count(*) from nation"))
        .unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'D'), "{msgs:?}");
}

#[test]
fn invalid_utf8_fails_the_statement_and_keeps_the_connection() {
    let mut s = raw_connect();
    s.write_all(&query_bytes(b"select '\xff\xfe'")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    let error = msgs.iter().find(|m| m.0 == b'E').expect("an error");
    assert_eq!(sqlstate_of(&error.1), "22021");
    assert_eq!(msgs.last().map(|m| m.0), Some(b'Z'), "ready again");
    // Same connection, next statement.
    s.write_all(&query_bytes(b"select 1")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'D'), "{msgs:?}");
    // In the extended protocol: an error, then messages up to Sync skipped.
    let mut parse = b"\0select '\xff'\0".to_vec();
    parse.extend_from_slice(&0i16.to_be_bytes());
    s.write_all(&message(b'P', &parse)).unwrap();
    s.write_all(&message(b'S', &[])).unwrap();
    let msgs = read_until(&mut s, b'Z');
    let error = msgs.iter().find(|m| m.0 == b'E').expect("an error");
    assert_eq!(sqlstate_of(&error.1), "22021");
    s.write_all(&query_bytes(b"select 2")).unwrap();
    let msgs = read_until(&mut s, b'Z');
    assert!(msgs.iter().any(|m| m.0 == b'D'), "{msgs:?}");
}

/// An error in an extended-protocol exchange is sent at once, before the
/// client's Sync: asyncpg prepares with Parse, Describe and Flush and waits
/// for the answer before it sends anything else.
#[test]
fn an_extended_protocol_error_is_sent_before_sync() {
    let mut s = raw_connect();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    for (sql, sqlstate) in [
        ("select * from no_such_table", "42P01"),
        ("selec 1", "42601"),
    ] {
        let mut parse = b"stmt\0".to_vec();
        parse.extend_from_slice(sql.as_bytes());
        parse.push(0);
        parse.extend_from_slice(&0i16.to_be_bytes());
        s.write_all(&message(b'P', &parse)).unwrap();
        s.write_all(&message(b'D', b"Sstmt\0")).unwrap();
        s.write_all(&message(b'H', &[])).unwrap();
        // The error arrives without a Sync (read_until returns at the
        // timeout, without it, if the server waits for one).
        let msgs = read_until(&mut s, b'E');
        let error = msgs
            .last()
            .filter(|m| m.0 == b'E')
            .expect("an error before Sync");
        assert_eq!(sqlstate_of(&error.1), sqlstate, "{sql}");
        // Messages up to Sync are still skipped: the Describe of the
        // failed statement answers nothing, Sync answers ReadyForQuery.
        s.write_all(&message(b'D', b"Sstmt\0")).unwrap();
        s.write_all(&message(b'S', &[])).unwrap();
        let msgs = read_until(&mut s, b'Z');
        assert_eq!(
            msgs.iter().map(|m| m.0).collect::<Vec<_>>(),
            [b'Z'],
            "{sql}: {msgs:?}"
        );
    }
    server_still_serves();
}

#[test]
fn clients_that_never_start_up_are_dropped_after_the_authentication_timeout() {
    // A client that sends nothing after connecting is dropped after the
    // authentication timeout.
    let start = Instant::now();
    let mut idle = TcpStream::connect(server().addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 64];
    let n = idle.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let waited = start.elapsed();
    assert!(
        waited >= AUTH_TIMEOUT - Duration::from_millis(100) && waited < AUTH_TIMEOUT * 5,
        "{waited:?}"
    );
    server_still_serves();
}

#[test]
fn a_cancel_that_comes_before_the_statement_starts_is_kept() {
    // In-process: the server arms the interrupt before the request reaches a
    // thread; a cancel in between must stop the request when it starts.
    let engine = common::test_engine(1);
    let mut session = engine.session();
    let interrupt = session.interrupt();
    interrupt.arm(None);
    interrupt.cancel();
    let err = session.execute("select 1").unwrap_err();
    assert!(matches!(err, stride_sql::SqlError::Cancelled), "{err}");
    // The next request is not affected.
    session.execute("select 1").unwrap();
    // A deadline that passed while waiting for a thread: a timeout.
    interrupt.arm(Some(Instant::now()));
    let err = session.execute("select 1").unwrap_err();
    assert!(matches!(err, stride_sql::SqlError::Timeout), "{err}");
    session.execute("select 1").unwrap();
    // Without arming, an old cancel does not leak into a new request.
    interrupt.cancel();
    session.execute("select 1").unwrap();
}

#[test]
fn functions_refuse_values_larger_than_one_gigabyte() {
    runtime().block_on(async {
        let client = connect("values").await;
        for sql in [
            // Constant arguments (folded while planning) and column arguments.
            "select length(repeat('x', 2000000000))",
            "select length(repeat('xy', 600000000))",
            "select max(length(repeat(n_name, n_nationkey * 100000000))) from nation",
            "select length(lpad('x', 300000000))",
            "select length(rpad('x', 300000000, 'ab'))",
        ] {
            let err = fails_with(&client, sql, "54000").await;
            let message = err.as_db_error().map(|d| d.message()).unwrap_or_default();
            assert!(
                message.starts_with("requested length too large"),
                "{message}"
            );
        }
        // Within the limit, and NULL or negative counts, as before.
        assert_eq!(
            count(&client, "select length(repeat('ab', 1000))::bigint").await,
            2000
        );
        assert_eq!(
            count(
                &client,
                "select sum(length(repeat(n_name, n_nationkey)))::bigint from nation"
            )
            .await,
            count(
                &client,
                "select sum(length(n_name) * n_nationkey)::bigint from nation"
            )
            .await
        );
        assert_eq!(
            count(&client, "select length(repeat('ab', -3))::bigint").await,
            0
        );
        assert_eq!(
            count(&client, "select length(lpad('ab', 10, 'xyz'))::bigint").await,
            10
        );
        let null: Option<i64> = client
            .query_one("select length(repeat('ab', null::bigint))::bigint", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(null, None);
        still_usable(&client).await;
    });
    server_still_serves();
}

#[test]
fn a_timeout_lands_inside_a_join_whose_rows_match_millions() {
    // Each probe row of a self-join on l_returnflag matches about a third of
    // lineitem: one morsel produces tens of millions of rows, the whole
    // join about 10^9. The timeout must stop it mid-morsel, not after it.
    runtime().block_on(async {
        let client = connect("timeout").await;
        client
            .simple_query("set statement_timeout = 300")
            .await
            .unwrap();
        let start = Instant::now();
        fails_with(
            &client,
            "select count(*) from lineitem a join lineitem b on a.l_returnflag = b.l_returnflag",
            "57014",
        )
        .await;
        let took = start.elapsed();
        assert!(
            took < Duration::from_secs(10),
            "the timeout landed after {took:?}"
        );
        client
            .simple_query("set statement_timeout = 0")
            .await
            .unwrap();
        still_usable(&client).await;
    });
    server_still_serves();
}
