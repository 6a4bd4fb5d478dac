//! Results stream over the wire: rows leave while the query runs, so a
//! result many times the query's memory share arrives whole (instead of
//! failing with 53200), the first rows reach a client that has not read
//! the rest while the statement is still running, ORDER BY and
//! LIMIT/OFFSET keep their order, a client that leaves mid-stream stops
//! its query and gives its memory back, a statement timeout that fires
//! mid-stream is an ErrorResponse after the rows already sent, and a slow
//! client pauses its query rather than letting the result pile up.
//!
//! One server with TPC-H SF 0.01 serves every test; the tests take turns
//! (a lock) so that each can check that the pool and the spill area are
//! empty after it.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::client::{runtime, state_of, TestServer};
use common::wire;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The share the streaming tests run with: far below their results.
const SMALL_SHARE: &str = "256kB";

fn server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("stride-stream-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        common::client::tpch_server(256 << 20, 32 << 20, dir)
    })
}

fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connect() -> Client {
    common::client::connect(server().addr, "stride").await
}

/// Every query's memory went back to the pool and no spill file is left.
fn back_to_baseline() {
    let engine = &server().engine;
    let deadline = Instant::now() + Duration::from_secs(10);
    while (engine.runtime().memory().used() != 0
        || engine.runtime().spill_area().bytes_on_disk() != 0)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(engine.runtime().memory().used(), 0, "bytes still charged");
    assert_eq!(
        engine.runtime().spill_area().bytes_on_disk(),
        0,
        "spill files left"
    );
}

/// Four copies of lineitem: about 240,000 rows, some 30 MB as text.
const BIG: &str = "select l_orderkey, l_linenumber, l_comment from lineitem \
     union all select l_orderkey, l_linenumber, l_comment from lineitem \
     union all select l_orderkey, l_linenumber, l_comment from lineitem \
     union all select l_orderkey, l_linenumber, l_comment from lineitem";

/// Row count and checksums of `BIG`, computed by the server.
async fn expected(client: &Client) -> (i64, i64, i64) {
    let row = client
        .query_one(
            "select 4 * count(*), \
             cast(4 * sum(l_orderkey * 10 + l_linenumber) as bigint), \
             cast(4 * sum(length(l_comment)) as bigint) from lineitem",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Count and checksums of rows (orderkey, linenumber, comment) as text.
fn checksum<'a>(rows: impl Iterator<Item = [&'a str; 3]>) -> (i64, i64, i64) {
    rows.fold((0, 0, 0), |(n, keys, chars), [k, l, c]| {
        let key: i64 = k.parse().unwrap();
        let line: i64 = l.parse().unwrap();
        (
            n + 1,
            keys + key * 10 + line,
            chars + c.chars().count() as i64,
        )
    })
}

#[test]
fn a_result_far_past_the_share_streams_whole_in_both_protocols() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        let want = expected(&client).await;
        client
            .batch_execute(&format!("set stride.query_memory_limit = '{SMALL_SHARE}'"))
            .await
            .unwrap();
        // Simple query protocol.
        let messages = client.simple_query(BIG).await.unwrap();
        let rows: Vec<_> = messages
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(r),
                _ => None,
            })
            .collect();
        let got = checksum(
            rows.iter()
                .map(|r| [r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap()]),
        );
        assert_eq!(got, want, "simple query");
        let tag = messages.iter().find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        });
        assert_eq!(tag, Some(want.0 as u64));
        // Extended query protocol (binary results).
        let rows = client.query(BIG, &[]).await.unwrap();
        let text: Vec<(String, String, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, i64>(0).to_string(),
                    r.get::<_, i32>(1).to_string(),
                    r.get::<_, String>(2),
                )
            })
            .collect();
        let got = checksum(
            text.iter()
                .map(|(a, b, c)| [a.as_str(), b.as_str(), c.as_str()]),
        );
        assert_eq!(got, want, "extended query");
        // The query really ran past its share: the union's inputs (UNION
        // ALL materializes them) spilled.
        let spilled: i64 = client
            .query_one(
                "select spilled_bytes from stride.queries where query like '%union all%' \
                 and state = 'done' order by query_id desc limit 1",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(spilled > 0, "the union's inputs spilled");
    });
    back_to_baseline();
}

/// Rows from the middle of an ordering.
const LIMITED: &str = "select l_orderkey, l_linenumber from lineitem \
     order by l_orderkey desc, l_linenumber limit 5000 offset 777";

/// The (orderkey, linenumber) rows of `sql`, in the order they came.
async fn keys(client: &Client, sql: &str) -> Vec<(i64, i32)> {
    let rows = client.query(sql, &[]).await.unwrap();
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

#[test]
fn order_by_and_limit_offset_stream_in_order() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        let count: i64 = client
            .query_one("select count(*) from lineitem", &[])
            .await
            .unwrap()
            .get(0);
        let reference = keys(&client, LIMITED).await;
        // A sort needs room for its runs: a share it can spill in, still
        // far below the sorted result.
        client
            .batch_execute("set stride.query_memory_limit = '4MB'")
            .await
            .unwrap();
        let sorted: Vec<(i64, i32, String)> = client
            .query(
                &format!("select * from ({BIG}) order by l_orderkey desc, l_linenumber"),
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(sorted.len() as i64, 4 * count);
        assert!(
            sorted
                .windows(2)
                .all(|w| (-w[0].0, w[0].1) <= (-w[1].0, w[1].1)),
            "ORDER BY order lost"
        );
        assert_eq!(keys(&client, LIMITED).await, reference);
    });
    back_to_baseline();
}

fn raw_client() -> TcpStream {
    common::client::raw_client(server().addr)
}

/// Sends a simple query and reads up to its first DataRow.
fn first_row(stream: &mut TcpStream, sql: &str) -> Vec<(u8, Vec<u8>)> {
    stream.write_all(&wire::query_message(sql)).unwrap();
    let got = wire::read_until(stream, b'D');
    assert_eq!(got.last().map(|m| m.0), Some(b'D'), "{got:?}");
    got
}

#[test]
fn the_first_rows_arrive_while_the_statement_still_runs() {
    let _turn = turn();
    let mut stream = raw_client();
    stream
        .write_all(&wire::query_message(&format!(
            "set stride.query_memory_limit = '{SMALL_SHARE}'"
        )))
        .unwrap();
    wire::read_until(&mut stream, b'Z');
    let marker = "/* first rows */";
    first_row(&mut stream, &format!("{BIG} {marker}"));
    // The client reads no further: before streaming, a first row could
    // only come after the statement had ended.
    let state = runtime().block_on(async { state_of(&connect().await, marker).await });
    assert_eq!(state, "running", "the statement ended before its first row");
    // Read the rest: every row comes, then the tag.
    let rest = wire::read_until(&mut stream, b'Z');
    let rows = 1 + rest.iter().filter(|m| m.0 == b'D').count();
    let want = runtime().block_on(async { expected(&connect().await).await });
    assert_eq!(rows as i64, want.0);
    let tag = rest.iter().find(|m| m.0 == b'C').expect("CommandComplete");
    assert_eq!(
        String::from_utf8_lossy(&tag.1).trim_end_matches('\0'),
        format!("SELECT {}", want.0)
    );
    let state = runtime().block_on(async { state_of(&connect().await, marker).await });
    assert_eq!(state, "done");
    back_to_baseline();
}

#[test]
fn a_client_that_leaves_mid_stream_stops_its_query() {
    let _turn = turn();
    let marker = "/* leaves */";
    {
        let mut stream = raw_client();
        first_row(&mut stream, &format!("{BIG} {marker}"));
        // Gone, with most of the result unsent.
    }
    runtime().block_on(async {
        let client = connect().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut state = state_of(&client, marker).await;
        while state == "running" && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            state = state_of(&client, marker).await;
        }
        assert_eq!(state, "cancelled");
        // The server still serves.
        let one: i64 = client.query_one("select 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    });
    back_to_baseline();
}

#[test]
fn a_timeout_mid_stream_is_an_error_after_the_rows_sent() {
    let _turn = turn();
    let mut stream = raw_client();
    stream
        .write_all(&wire::query_message("set statement_timeout = 1500"))
        .unwrap();
    wire::read_until(&mut stream, b'Z');
    first_row(&mut stream, BIG);
    // The client stalls past the timeout; the server waits on the socket.
    std::thread::sleep(Duration::from_millis(2500));
    let rest = wire::read_until(&mut stream, b'Z');
    let tags: Vec<u8> = rest.iter().map(|m| m.0).filter(|&t| t != b'D').collect();
    assert_eq!(tags, vec![b'E', b'Z'], "an error, then ready");
    let error = rest.iter().find(|m| m.0 == b'E').unwrap();
    assert_eq!(wire::sqlstate_of(&error.1), "57014");
    let rows = 1 + rest.iter().filter(|m| m.0 == b'D').count();
    let want = runtime().block_on(async { expected(&connect().await).await });
    assert!((rows as i64) < want.0, "the rest was not sent");
    // The connection goes on.
    stream
        .write_all(&wire::query_message("set statement_timeout = 0; select 1"))
        .unwrap();
    let after = wire::read_until(&mut stream, b'Z');
    assert!(after.iter().any(|m| m.0 == b'D'), "{after:?}");
    back_to_baseline();
}

#[test]
fn psycopg_fetches_a_result_far_past_the_share() {
    let _turn = turn();
    let addr = server().addr;
    let program =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/psycopg_stream.py");
    let mut cmd = std::process::Command::new("python3");
    cmd.arg(program)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(SMALL_SHARE);
    let out = common::client::run_program(cmd, "psycopg (big result)");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], lines[1], "streamed rows against count/sum: {out}");
    back_to_baseline();
}

/// A client that reads slowly: the query pauses for it instead of parking
/// the result on disk (`stride_sched::pause`), and still gets every row.
#[test]
fn a_slow_client_pauses_its_query_instead_of_parking_the_result() {
    let _turn = turn();
    let mut stream = raw_client();
    stream
        .write_all(&wire::query_message(
            "set stride.query_memory_limit = '2MB'",
        ))
        .unwrap();
    wire::read_until(&mut stream, b'Z');
    let marker = "/* slow reader */";
    stream
        .write_all(&wire::query_message(&format!(
            "select * from lineitem {marker}"
        )))
        .unwrap();
    // 4 ms of sleep per 1000 rows read: far slower than the query.
    let mut messages = Vec::new();
    loop {
        let batch = wire::read_messages(&mut stream, 1000);
        let done = batch.iter().any(|m| m.0 == b'Z');
        messages.extend(batch);
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(4));
    }
    let rows = messages.iter().filter(|m| m.0 == b'D').count();
    let (pauses, spilled, state) = runtime().block_on(async {
        let client = connect().await;
        let want: i64 = client
            .query_one("select count(*) from lineitem", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows as i64, want, "every row arrived");
        let row = client
            .query_one(
                "select pauses, spilled_bytes, state from stride.queries \
                 where query like $1 order by query_id desc limit 1",
                &[&format!("%{marker}%")],
            )
            .await
            .unwrap();
        (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, String>(2),
        )
    });
    assert_eq!(state, "done");
    assert!(pauses > 0, "the query never paused for its client");
    // The result is some 9 MB in memory, its queue 512 kB (a quarter of
    // the share): without the pause nearly all of it would park on disk.
    // What may park is one first morsel, sized before the stream knew its
    // bytes per row.
    assert!(
        spilled < 1 << 20,
        "{spilled} bytes of the result parked on disk ({pauses} pauses)"
    );
    back_to_baseline();
}
