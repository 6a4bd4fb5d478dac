//! Live results (issue 14): a portal executed with a row limit, a cursor
//! and `COPY … TO STDOUT` stream their query's result instead of holding
//! it — a result far past the query's memory share arrives whole, the
//! query pausing between fetches; closing the portal or cursor early, a
//! Sync or transaction end, and a disconnect cancel the query and return
//! its memory and spill files; more open cursors than scheduler slots do
//! not block a new query; a client that stops reading is stopped at its
//! statement timeout or CancelRequest although its socket is full.
//!
//! One server with TPC-H SF 0.01 serves most tests; they take turns (a
//! lock) so that each can check that the pool and the spill area are
//! empty after it.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::client::{back_to_baseline, runtime, state_of, TestServer};
use common::wire;
use tokio_postgres::{Client, SimpleQueryMessage};

/// How long a client that stopped reading may leave its socket full after
/// its statement was stopped.
const STALLED: Duration = Duration::from_millis(300);

fn server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let config = stride_server::ServerConfig {
            stalled_client_timeout: STALLED,
            ..common::client::test_config()
        };
        common::client::shared_tpch_server("portal", config)
    })
}

fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

async fn connect() -> Client {
    common::client::connect(server().addr, "stride").await
}

/// The state of the query marked `marker` (a table alias: the log shows a
/// prepared statement as its parsed text, without comments) once it is no
/// longer running — or not yet logged: a statement just sent may still be
/// parsed — (at most 10 s later).
async fn final_state(client: &Client, marker: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_opt(
                "select state from stride.queries where query like $1 \
                 order by query_id desc limit 1",
                &[&format!("%{marker}%")],
            )
            .await
            .unwrap();
        let state: Option<String> = row.map(|r| r.get(0));
        match state {
            Some(s) if s != "running" => return s,
            Some(s) if Instant::now() > deadline => return s,
            None if Instant::now() > deadline => return "not logged".into(),
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Pauses and spilled bytes of the finished query marked `marker`.
async fn pauses_and_spill(client: &Client, marker: &str) -> (i64, i64) {
    let row = client
        .query_one(
            "select pauses, spilled_bytes from stride.queries \
             where query like $1 and state = 'done' order by query_id desc limit 1",
            &[&format!("%{marker}%")],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Count and checksums of lineitem's (orderkey, linenumber, comment),
/// computed by the server.
async fn expected(client: &Client) -> (i64, i64, i64) {
    let row = client
        .query_one(
            "select count(*), cast(sum(l_orderkey * 10 + l_linenumber) as bigint), \
             cast(sum(length(l_comment)) as bigint) from lineitem",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn add(sum: &mut (i64, i64, i64), key: i64, line: i64, comment: &str) {
    sum.0 += 1;
    sum.1 += key * 10 + line;
    sum.2 += comment.chars().count() as i64;
}

/// The rows some 3 MB in memory: past a share of 1 MB, whose queue is a
/// quarter of it.
const ROWS: &str = "select l_orderkey, l_linenumber, l_comment from lineitem";

#[test]
fn a_portal_fetches_a_result_past_the_share_in_pieces_its_query_paused_between() {
    let _turn = turn();
    runtime().block_on(async {
        let mut client = connect().await;
        let want = expected(&client).await;
        client
            .batch_execute("set stride.query_memory_limit = '1MB'")
            .await
            .unwrap();
        let marker = "portal_pieces";
        let tx = client.transaction().await.unwrap();
        let statement = tx.prepare(&format!("{ROWS} as {marker}")).await.unwrap();
        let portal = tx.bind(&statement, &[]).await.unwrap();
        let mut got = (0, 0, 0);
        let mut executes = 0;
        loop {
            let rows = tx.query_portal(&portal, 5000).await.unwrap();
            executes += 1;
            for r in &rows {
                add(
                    &mut got,
                    r.get::<_, i64>(0),
                    r.get::<_, i32>(1).into(),
                    r.get::<_, &str>(2),
                );
            }
            if rows.len() < 5000 {
                break;
            }
            if executes == 2 {
                // Between two Executes the query waits, live.
                let other = connect().await;
                assert_eq!(state_of(&other, marker).await, "running");
            }
        }
        assert_eq!(got, want, "every row, once");
        assert!(executes > 5, "{executes} Executes");
        tx.commit().await.unwrap();
        let other = connect().await;
        assert_eq!(final_state(&other, marker).await, "done");
        let (pauses, spilled) = pauses_and_spill(&other, marker).await;
        assert!(pauses > 0, "the query never paused for its portal");
        assert!(
            spilled < 1 << 20,
            "{spilled} bytes of the result parked on disk ({pauses} pauses)"
        );
    });
    back_to_baseline(&server().engine);
}

#[test]
fn closing_a_portal_ending_its_transaction_or_leaving_cancels_its_query() {
    let _turn = turn();
    runtime().block_on(async {
        let other = connect().await;
        for (how, marker) in [
            ("close", "portal_close"),
            ("commit", "portal_commit"),
            ("disconnect", "portal_disconnect"),
        ] {
            let mut client = connect().await;
            client
                .batch_execute("set stride.query_memory_limit = '1MB'")
                .await
                .unwrap();
            let tx = client.transaction().await.unwrap();
            let statement = tx.prepare(&format!("{ROWS} as {marker}")).await.unwrap();
            let portal = tx.bind(&statement, &[]).await.unwrap();
            assert_eq!(tx.query_portal(&portal, 100).await.unwrap().len(), 100);
            assert_eq!(state_of(&other, marker).await, "running", "{how}");
            match how {
                "close" => {
                    drop(portal);
                    // The Close goes out before this query's messages.
                    tx.simple_query("select 1").await.unwrap();
                    assert_eq!(final_state(&other, marker).await, "cancelled", "{how}");
                    tx.commit().await.unwrap();
                }
                "commit" => {
                    tx.commit().await.unwrap();
                    assert_eq!(final_state(&other, marker).await, "cancelled", "{how}");
                }
                _ => {
                    drop(tx);
                    drop(client);
                    assert_eq!(final_state(&other, marker).await, "cancelled", "{how}");
                }
            }
        }
    });
    back_to_baseline(&server().engine);
}

#[test]
fn sync_outside_a_transaction_block_ends_the_unnamed_portal() {
    let _turn = turn();
    let mut stream = common::client::raw_client(server().addr);
    let marker = "unnamed_portal";
    stream
        .write_all(&wire::limited_messages(&format!("{ROWS} as {marker}"), 10))
        .unwrap();
    let got = wire::read_until(&mut stream, b'Z');
    let tags: Vec<u8> = got.iter().map(|m| m.0).filter(|&t| t != b'D').collect();
    assert_eq!(tags, vec![b'1', b'2', b's', b'Z'], "{got:?}");
    assert_eq!(got.iter().filter(|m| m.0 == b'D').count(), 10);
    runtime().block_on(async {
        let other = connect().await;
        assert_eq!(final_state(&other, marker).await, "cancelled");
    });
    // The portal is gone.
    let mut execute = vec![0u8];
    execute.extend_from_slice(&10i32.to_be_bytes());
    let mut again = wire::message(b'E', &execute);
    again.extend(wire::sync_message());
    stream.write_all(&again).unwrap();
    let got = wire::read_until(&mut stream, b'Z');
    let error = got.iter().find(|m| m.0 == b'E').expect("an error");
    assert_eq!(wire::sqlstate_of(&error.1), "34000");
    back_to_baseline(&server().engine);
}

#[test]
fn a_bind_over_the_unnamed_portal_in_a_block_cancels_its_query() {
    let _turn = turn();
    let mut stream = common::client::raw_client(server().addr);
    stream.write_all(&wire::query_message("begin")).unwrap();
    wire::read_until(&mut stream, b'Z');
    let first = "unnamed_first";
    stream
        .write_all(&wire::limited_messages(&format!("{ROWS} as {first}"), 10))
        .unwrap();
    wire::read_until(&mut stream, b'Z');
    runtime().block_on(async {
        let other = connect().await;
        // In a block, Sync leaves the portal (and its query) alone.
        assert_eq!(state_of(&other, first).await, "running");
    });
    let second = "unnamed_second";
    stream
        .write_all(&wire::limited_messages(&format!("{ROWS} as {second}"), 10))
        .unwrap();
    let got = wire::read_until(&mut stream, b'Z');
    assert_eq!(got.iter().filter(|m| m.0 == b'D').count(), 10);
    runtime().block_on(async {
        let other = connect().await;
        assert_eq!(final_state(&other, first).await, "cancelled");
        assert_eq!(state_of(&other, second).await, "running");
    });
    stream.write_all(&wire::query_message("rollback")).unwrap();
    wire::read_until(&mut stream, b'Z');
    runtime().block_on(async {
        let other = connect().await;
        assert_eq!(final_state(&other, second).await, "cancelled");
    });
    back_to_baseline(&server().engine);
}

/// A client program reading lineitem's (orderkey, linenumber, comment)
/// under a 1 MB share, run with `args` then the server's address and the
/// share: it prints the rows' count and checksums, then the server's.
/// Checks that they agree and that the query marked `marker` ran to its
/// end pausing for its client, with little parked on disk.
fn client_reads_past_the_share(program: &str, args: &[&str], marker: &str, what: &str) {
    let addr = server().addr;
    let mut cmd = std::process::Command::new(program);
    cmd.args(args)
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg("1MB");
    let out = common::client::run_program(cmd, what);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0], lines[1], "fetched rows against count/sum: {out}");
    runtime().block_on(async {
        let other = connect().await;
        assert_eq!(final_state(&other, marker).await, "done");
        let (pauses, spilled) = pauses_and_spill(&other, marker).await;
        assert!(pauses > 0, "{what}: the query never paused");
        assert!(
            spilled < 1 << 20,
            "{spilled} bytes parked ({pauses} pauses)"
        );
    });
    back_to_baseline(&server().engine);
}

fn client_program(name: &str) -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn psycopg_named_cursor_reads_a_result_past_the_share() {
    let _turn = turn();
    // The script appends this to its query: the marker as a table alias.
    let alias = "as psycopg_cursor";
    let script = client_program("psycopg_cursor_stream.py");
    client_reads_past_the_share(
        "python3",
        &[&script, alias],
        "psycopg_cursor",
        "psycopg (named cursor)",
    );
}

#[test]
fn jdbc_fetch_size_reads_a_result_past_the_share() {
    let _turn = turn();
    let program = client_program("JdbcFetchSize.java");
    client_reads_past_the_share(
        "java",
        &["-cp", "/usr/share/java/postgresql.jar", &program],
        "jdbc_fetch",
        "pgjdbc (fetch size)",
    );
}

/// The values of a simple query's rows, first column.
fn first_column(messages: &[SimpleQueryMessage]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn cursors_read_the_snapshot_of_their_declare_and_stop_with_their_session() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        let other = connect().await;
        client
            .batch_execute(
                "create table cursor_snap (id int); insert into cursor_snap values (1), (2)",
            )
            .await
            .unwrap();
        client
            .batch_execute(
                "begin; declare plain cursor for select id from cursor_snap order by id; \
                 declare held cursor with hold for select id from cursor_snap order by id",
            )
            .await
            .unwrap();
        other
            .batch_execute("insert into cursor_snap values (3)")
            .await
            .unwrap();
        let first = client.simple_query("fetch 1 from plain").await.unwrap();
        assert_eq!(first_column(&first), ["1"]);
        let rest = client.simple_query("fetch all from plain").await.unwrap();
        assert_eq!(first_column(&rest), ["2"], "rows of DECLARE's snapshot");
        client.batch_execute("commit").await.unwrap();
        // The held cursor outlives its transaction, still on its snapshot.
        other
            .batch_execute("insert into cursor_snap values (4)")
            .await
            .unwrap();
        let held = client.simple_query("fetch all from held").await.unwrap();
        assert_eq!(first_column(&held), ["1", "2"]);
        let gone = client.simple_query("fetch 1 from plain").await.unwrap_err();
        assert_eq!(gone.code().unwrap().code(), "34000");
        // A held cursor over a large result, read a little, then the
        // session goes: its query is cancelled.
        let marker = "held_then_gone";
        client
            .batch_execute(&format!(
                "set stride.query_memory_limit = '1MB'; \
                 declare big cursor with hold for {ROWS} as {marker}"
            ))
            .await
            .unwrap();
        let some = client.simple_query("fetch 10 from big").await.unwrap();
        assert_eq!(first_column(&some).len(), 10);
        assert_eq!(state_of(&other, marker).await, "running");
        drop(client);
        assert_eq!(final_state(&other, marker).await, "cancelled");
        other.batch_execute("drop table cursor_snap").await.unwrap();
    });
    back_to_baseline(&server().engine);
}

#[test]
fn a_fetch_stopped_by_its_timeout_ends_the_cursor_and_its_query() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        let other = connect().await;
        let marker = "slow_cursor";
        client
            .batch_execute(&format!(
                "declare slow cursor with hold for \
                 select count(*) from lineitem as {marker}, lineitem as b"
            ))
            .await
            .unwrap();
        client
            .batch_execute("set statement_timeout = 300")
            .await
            .unwrap();
        let started = Instant::now();
        let err = client.simple_query("fetch 1 from slow").await.unwrap_err();
        assert_eq!(err.code().unwrap().code(), "57014");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(final_state(&other, marker).await, "cancelled");
        let gone = client.simple_query("fetch 1 from slow").await.unwrap_err();
        assert_eq!(gone.code().unwrap().code(), "34000");
    });
    back_to_baseline(&server().engine);
}

#[test]
fn copy_to_stdout_streams_a_result_past_the_share() {
    let _turn = turn();
    runtime().block_on(async {
        use futures_util::StreamExt;
        let client = connect().await;
        let want = expected(&client).await;
        client
            .batch_execute("set stride.query_memory_limit = '1MB'")
            .await
            .unwrap();
        let marker = "copy_stream";
        for sql in [
            format!("copy ({ROWS} as {marker}) to stdout"),
            "copy lineitem (l_orderkey, l_linenumber, l_comment) to stdout".to_string(),
        ] {
            let stream = client.copy_out(sql.as_str()).await.unwrap();
            futures_util::pin_mut!(stream);
            let mut data = Vec::new();
            while let Some(chunk) = stream.next().await {
                data.extend_from_slice(&chunk.unwrap());
            }
            let text = String::from_utf8(data).unwrap();
            let mut got = (0, 0, 0);
            for line in text.lines() {
                let mut fields = line.split('\t');
                let key: i64 = fields.next().unwrap().parse().unwrap();
                let number: i64 = fields.next().unwrap().parse().unwrap();
                add(&mut got, key, number, fields.next().unwrap());
            }
            assert_eq!(got, want, "{sql}");
        }
        // Held whole, the rows would have failed with 53200.
        assert_eq!(final_state(&client, marker).await, "done");
    });
    back_to_baseline(&server().engine);
}

/// A query whose text result (some 30 MB) is far larger than the
/// sockets' buffers.
const HUGE: &str = "select l_orderkey, l_comment, l_comment, l_comment from lineitem \
     union all select l_orderkey, l_comment, l_comment, l_comment from lineitem \
     union all select l_orderkey, l_comment, l_comment, l_comment from lineitem \
     union all select l_orderkey, l_comment, l_comment, l_comment from lineitem";

/// Waits until the query marked `marker` no longer runs; returns its state
/// and when that was seen.
fn ended(marker: &str) -> (String, Instant) {
    runtime().block_on(async {
        let other = connect().await;
        let state = final_state(&other, marker).await;
        (state, Instant::now())
    })
}

/// Reads what the server still sends until it closes the connection;
/// whether it did (within 10 s).
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn a_client_that_stops_reading_is_stopped_at_its_statement_timeout() {
    let _turn = turn();
    let mut stream = common::client::raw_client(server().addr);
    stream
        .write_all(&wire::query_message("set statement_timeout = 1000"))
        .unwrap();
    wire::read_until(&mut stream, b'Z');
    let marker = "stops_reading";
    let sent = Instant::now();
    stream
        .write_all(&wire::query_message(&format!("{HUGE} as {marker}")))
        .unwrap();
    // Nothing is read: the socket fills and the server's write waits.
    let (state, at) = ended(marker);
    let after = at.duration_since(sent);
    assert_eq!(state, "cancelled");
    eprintln!("stopped {after:?} after the query was sent (timeout 1 s)");
    assert!(
        after < Duration::from_millis(1500),
        "the statement ended {after:?} after it was sent"
    );
    // Reading nothing for longer than `STALLED`, the client is
    // disconnected.
    std::thread::sleep(3 * STALLED);
    assert!(
        closed_by_server(&mut stream),
        "the stalled connection stays open"
    );
    back_to_baseline(&server().engine);
}

#[test]
fn a_cancel_request_reaches_a_client_that_stopped_reading() {
    let _turn = turn();
    let addr = server().addr;
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(&wire::startup_packet("stride")).unwrap();
    let hello = wire::read_until(&mut stream, b'Z');
    let key = &hello
        .iter()
        .find(|m| m.0 == b'K')
        .expect("BackendKeyData")
        .1;
    let marker = "cancelled_while_full";
    stream
        .write_all(&wire::query_message(&format!("{HUGE} as {marker}")))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    runtime().block_on(async {
        let other = connect().await;
        assert_eq!(state_of(&other, marker).await, "running");
    });
    let mut cancel = TcpStream::connect(addr).unwrap();
    let mut packet = 16i32.to_be_bytes().to_vec();
    packet.extend_from_slice(&80877102i32.to_be_bytes());
    packet.extend_from_slice(key);
    let sent = Instant::now();
    cancel.write_all(&packet).unwrap();
    let (state, at) = ended(marker);
    let after = at.duration_since(sent);
    assert_eq!(state, "cancelled");
    eprintln!("stopped {after:?} after the CancelRequest");
    assert!(after < Duration::from_millis(500), "took {after:?}");
    std::thread::sleep(3 * STALLED);
    assert!(
        closed_by_server(&mut stream),
        "the stalled connection stays open"
    );
    back_to_baseline(&server().engine);
}

/// A server whose scheduler has two slots: at most two queries admitted.
fn two_slot_server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = common::scratch_dir("slots-test");
        let engine = stride_sql::Engine::new(stride_sql::EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 2,
                pin_workers: false,
                slots: 2,
                ..Default::default()
            },
            memory: stride_sql::MemoryConfig {
                limit: 256 << 20,
                query_limit: 1 << 20,
            },
            spill: stride_sql::SpillConfig {
                temp_dir: Some(dir),
                file_limit: None,
                force: false,
            },
            ..Default::default()
        });
        engine.load_tpch(0.01).unwrap();
        engine.set_default_schema("sf0_01").unwrap();
        TestServer {
            addr: common::client::serve(engine.clone(), common::client::test_config(), 2),
            engine,
        }
    })
}

#[test]
fn more_open_cursors_than_scheduler_slots_leave_room_for_a_short_query() {
    let server = two_slot_server();
    runtime().block_on(async {
        // Four cursors on two slots: the third waits for the first two's
        // slots, the fourth takes the free one, and then both slots are
        // held by idle cursors when the short query comes.
        let mut cursors = Vec::new();
        for i in 0..4 {
            let client = common::client::connect(server.addr, "stride").await;
            let declare = if i == 0 {
                format!("declare c{i} cursor with hold for {ROWS}")
            } else {
                format!("begin; declare c{i} cursor for {ROWS}")
            };
            client.batch_execute(&declare).await.unwrap();
            let first = tokio::time::timeout(
                Duration::from_secs(20),
                client.simple_query(&format!("fetch 10 from c{i}")),
            )
            .await
            .expect("a cursor waited for a slot held by an idle cursor")
            .unwrap();
            assert_eq!(first_column(&first).len(), 10);
            cursors.push(client);
        }
        // Every cursor is open and idle; a short query still runs.
        let short = common::client::connect(server.addr, "stride").await;
        let parked = server.engine.runtime().spill_area().bytes_on_disk();
        let started = Instant::now();
        let count: i64 = tokio::time::timeout(
            Duration::from_secs(20),
            short.query_one("select count(*) from orders where o_orderkey % 7 = 3", &[]),
        )
        .await
        .expect("the short query waited for a slot held by an idle cursor")
        .unwrap()
        .get(0);
        assert!(count > 0);
        // It got a slot because an idle cursor's query ran on to its end.
        // Whether that parked rows on disk depends on how far the query had
        // got before it paused (rest that fits its queue parks nothing), so
        // the bytes parked are reported, not asserted; the rows the
        // displaced cursors give below are.
        eprintln!(
            "short query beside 4 idle cursors: {:?}, {} bytes parked meanwhile",
            started.elapsed(),
            server
                .engine
                .runtime()
                .spill_area()
                .bytes_on_disk()
                .saturating_sub(parked)
        );
        // The displaced cursors still give every row.
        let total: i64 = short
            .query_one("select count(*) from lineitem", &[])
            .await
            .unwrap()
            .get(0);
        for (i, client) in cursors.iter().enumerate() {
            let rest = client
                .simple_query(&format!("fetch all from c{i}"))
                .await
                .unwrap();
            assert_eq!(first_column(&rest).len() as i64 + 10, total, "cursor c{i}");
            client.batch_execute(&format!("close c{i}")).await.unwrap();
        }
        for client in &cursors[1..] {
            client.batch_execute("commit").await.unwrap();
        }
    });
    back_to_baseline(&server.engine);
}
