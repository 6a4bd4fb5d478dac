//! Memory governance over the wire: sorts, aggregates, hash joins' build
//! sides and join outputs larger than a query's share spill to disk and
//! give the answer they give without a limit (the result streams to the
//! client, tests/streaming.rs); what cannot spill (one partition larger
//! than the share) fails alone with
//! 53200 and hands back what it held, while other clients' queries go on;
//! a cross join whose client stops reading pauses with bounded memory; the
//! limits are settings and a view.
//!
//! One server with TPC-H SF 0.01 under a 256 MiB server-wide limit and a
//! 32 MiB share per query serves every test of this file, spilling into a
//! directory of its own; the tests take turns (a lock), so that each can
//! check that the pool and the spill directory are empty after it.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio_postgres::Client;

const SERVER_LIMIT: usize = 256 << 20;
const QUERY_LIMIT: usize = 32 << 20;

fn server() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| common::client::tpch_server(SERVER_LIMIT, QUERY_LIMIT, temp_parent()))
}

/// The directory the test server makes its spill area in.
fn temp_parent() -> std::path::PathBuf {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("stride-memory-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
    .clone()
}

/// Nothing is left in the spill area once every query ended: no query's
/// directory (the area's marker file aside), no bytes counted on disk.
fn spill_area_is_empty() {
    let area = server().engine.runtime().spill_area();
    let left: Vec<_> = std::fs::read_dir(area.dir())
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".stride-spill")
                .collect()
        })
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "left in {}: {left:?}",
        area.dir().display()
    );
    assert_eq!(area.bytes_on_disk(), 0);
}

/// Serializes the tests of this file.
fn turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

use common::client::{runtime, TestServer};

async fn connect() -> Client {
    common::client::connect(server().addr, "stride").await
}

fn code(e: &tokio_postgres::Error) -> String {
    e.code().map(|c| c.code().to_string()).unwrap_or_default()
}

async fn fails_with(client: &Client, sql: &str, sqlstate: &str) -> String {
    let err = client
        .simple_query(sql)
        .await
        .expect_err("the statement must fail");
    assert_eq!(code(&err), sqlstate, "{sql}: {err}");
    err.as_db_error().unwrap().message().to_string()
}

async fn count(client: &Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.unwrap().get(0)
}

/// Every query's memory went back to the pool (a finished query's account
/// is dropped when its statement ends, just before the reply is sent).
fn pool_returns_to_empty() {
    let pool = server().engine.runtime().memory();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pool.used() != 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(
        pool.used(),
        0,
        "bytes still charged after every query ended"
    );
}

/// A cross join read by a client that stops reading: the query pauses
/// for it (`stride_sched::pause`) and holds a bounded share of memory and
/// disk — as PostgreSQL, the server does not hold the result the client
/// has not read —, 8 other clients' short queries go on meanwhile, and
/// the client's disconnect cancels the query and frees everything.
#[test]
fn a_cross_join_its_client_stops_reading_pauses_while_short_queries_go_on() {
    let _turn = turn();
    runtime().block_on(async {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut shorts = Vec::new();
        for i in 0..8 {
            let stop = stop.clone();
            shorts.push(tokio::spawn(async move {
                let client = connect().await;
                let mut ran = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) || ran == 0 {
                    let key = 1 + (i * 37 + ran) % 500;
                    let n = count(
                        &client,
                        &format!("select count(*) from lineitem where l_orderkey = {key}"),
                    )
                    .await;
                    assert!((0..=7).contains(&n));
                    assert_eq!(count(&client, "select count(*) from region").await, 5);
                    ran += 1;
                }
                ran
            }));
        }
        let watcher = connect().await;
        let marker = "/* cross join, stalled reader */";
        // 60 175² rows: hundreds of GiB. The client reads its first row,
        // then nothing: the socket fills and the query pauses.
        let mut reader = common::client::raw_client(server().addr);
        reader
            .write_all(&common::wire::query_message(&format!(
                "select * from lineitem a, lineitem b {marker}"
            )))
            .unwrap();
        let got = common::wire::read_until(&mut reader, b'D');
        assert_eq!(got.last().map(|m| m.0), Some(b'D'), "{got:?}");
        let mut peak_memory = 0;
        let mut peak_disk = 0;
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            peak_memory = peak_memory.max(server().engine.runtime().memory().used());
            peak_disk = peak_disk.max(server().engine.runtime().spill_area().bytes_on_disk());
        }
        let state = common::client::state_of(&watcher, marker).await;
        assert_eq!(state, "running", "paused, not failed");
        // The join's share plus the short queries' (each far below it).
        assert!(
            peak_memory <= QUERY_LIMIT + (8 << 20),
            "{peak_memory} bytes charged while the client did not read"
        );
        // Nothing but the running tasks' last morsels can reach the disk:
        // after the first (one row), morsels of one probe row (60 175
        // result rows of 32 columns, some 20 MB), one per worker. Without
        // the pause the backlog would grow to its bound (8 shares, 256 MiB)
        // within seconds and fail the query with 53200.
        assert!(
            peak_disk <= 2 * QUERY_LIMIT as u64,
            "{peak_disk} bytes of the result parked on disk"
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for s in shorts {
            assert!(s.await.unwrap() > 0);
        }
        drop(reader);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let state = common::client::state_of(&watcher, marker).await;
            if state != "running" {
                assert_eq!(state, "cancelled", "the disconnect stopped it");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "still running after the disconnect"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(count(&watcher, "select count(*) from nation").await, 25);
    });
    pool_returns_to_empty();
    spill_area_is_empty();
}

/// Every row of `sql`'s result as text (NULL as `None`).
async fn rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e} {:?}", e.as_db_error()))
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

/// The bytes the last query that ended spilled, from `stride.queries` (the
/// tests take turns: it is the test's own last query).
async fn last_spilled_bytes(client: &Client) -> i64 {
    let row = client
        .query_one(
            "select spilled_bytes from stride.queries where state = 'done' \
             and query not like '%spilled_bytes%' order by query_id desc limit 1",
            &[],
        )
        .await
        .unwrap();
    row.get(0)
}

/// Two sessions: one with the default 32 MB share, one with `share`.
async fn roomy_and_small(share: &str) -> (Client, Client) {
    let small = connect().await;
    small
        .batch_execute(&format!("set stride.query_memory_limit = '{share}'"))
        .await
        .unwrap();
    (connect().await, small)
}

/// Runs `sql` on `roomy`, then on `small`, whose share is too small for
/// it: the same non-empty rows come back, `small`'s run spilled, and its
/// files are gone. `roomy`'s run is its last query afterwards.
async fn spills_with_the_same_rows(roomy: &Client, small: &Client, sql: &str) {
    let got = rows(small, sql).await;
    let spilled = last_spilled_bytes(small).await;
    assert!(spilled > 0, "{sql}: spilled {spilled}");
    spill_area_is_empty();
    let expected = rows(roomy, sql).await;
    assert!(!expected.is_empty(), "{sql}");
    assert_eq!(got, expected, "{sql}");
}

/// A big sort, a big GROUP BY, a join whose output is materialized and a
/// join feeding a sort: ~1-8 MB of state each, small results.
const SPILLERS: [&str; 4] = [
    "select l_orderkey, l_linenumber, l_comment from lineitem \
     order by l_comment desc, l_orderkey, l_linenumber offset 59900",
    "select l_orderkey, l_partkey, sum(l_quantity), count(*) from lineitem \
     group by l_orderkey, l_partkey having sum(l_quantity) > 49 order by 1, 2",
    "select count(*), count(o_orderkey), sum(l_quantity), sum(o_totalprice) \
     from lineitem full join orders on l_orderkey = o_orderkey",
    "select l_orderkey, l_linenumber, o_orderdate, l_comment \
     from lineitem join orders on l_orderkey = o_orderkey \
     order by l_comment, l_orderkey, l_linenumber offset 60100",
];

#[test]
fn sorts_aggregates_and_joins_past_their_share_spill_and_give_the_same_rows() {
    let _turn = turn();
    runtime().block_on(async {
        let (roomy, small) = roomy_and_small("1MB").await;
        for sql in SPILLERS {
            spills_with_the_same_rows(&roomy, &small, sql).await;
            assert_eq!(last_spilled_bytes(&roomy).await, 0, "within 32 MB: {sql}");
        }
        let row = roomy
            .query_one("select spilled_bytes, temp_bytes from stride.memory", &[])
            .await
            .unwrap();
        assert!(row.get::<_, i64>(0) > 0);
        assert_eq!(row.get::<_, i64>(1), 0);
    });
    pool_returns_to_empty();
    spill_area_is_empty();
}

/// Hash joins whose build side (SF 0.01 `lineitem` with its comments,
/// several MB) is larger than a 1 MB share: inner joins on one, two and
/// string keys, with a non-equi condition, outer joins on both sides,
/// semi and anti joins, joins feeding an aggregate, joins inside the
/// branches of a UNION ALL and one fed by a UNION ALL (each branch a
/// pipeline of its own into the shared probe, whose deferred rows only the
/// last branch drains) — and TPC-H Q9, Q18 and Q21 at shares small enough
/// that they spill (at SF 0.01).
const GRACE_JOINS: [&str; 11] = [
    "select count(*), sum(q), sum(c) from ( \
     select a.l_quantity q, length(b.l_comment) c from lineitem a join lineitem b \
     on a.l_orderkey = b.l_orderkey and a.l_linenumber = b.l_linenumber where a.l_linenumber <= 3 \
     union all \
     select a.l_quantity, length(b.l_comment) from lineitem a join lineitem b \
     on a.l_orderkey = b.l_orderkey and a.l_linenumber = b.l_linenumber where a.l_linenumber > 3)",
    "select count(*), sum(u.l_linenumber), sum(length(b.l_comment)) from \
     (select l_orderkey, l_linenumber from lineitem where l_linenumber % 2 = 0 \
      union all select l_orderkey, l_linenumber from lineitem where l_linenumber % 2 = 1) u \
     join lineitem b on u.l_orderkey = b.l_orderkey and u.l_linenumber = b.l_linenumber",
    "select count(*), sum(a.l_quantity), sum(length(b.l_comment)) from lineitem a \
     join lineitem b on a.l_orderkey = b.l_orderkey and a.l_linenumber = b.l_linenumber",
    "select count(*), min(a.l_orderkey), max(b.l_orderkey) from lineitem a \
     join lineitem b on a.l_comment = b.l_comment",
    "select count(*), sum(b.l_linenumber) from lineitem a \
     join lineitem b on a.l_orderkey = b.l_orderkey and a.l_linenumber < b.l_linenumber \
     and a.l_comment <> b.l_comment",
    "select count(*), count(b.l_orderkey), count(a.l_orderkey) from \
     (select * from lineitem where l_linenumber <= 5) a \
     full join (select * from lineitem where l_linenumber >= 3) b \
     on a.l_orderkey = b.l_orderkey and a.l_linenumber = b.l_linenumber \
     and a.l_comment like '%a%'",
    "select count(*), count(b.l_comment) from orders \
     left join (select * from lineitem where l_linenumber = 2) b on o_orderkey = b.l_orderkey",
    "select count(*), count(o_orderkey) from lineitem \
     right join (select * from orders where o_orderkey % 3 = 0) o on o_orderkey = l_orderkey",
    "select count(*), sum(o_totalprice) from orders where exists \
     (select 1 from lineitem where l_orderkey = o_orderkey and l_comment like '%ly%')",
    "select count(*), sum(o_totalprice) from orders where not exists \
     (select 1 from lineitem where l_orderkey = o_orderkey and l_comment like '%ly%')",
    "select a.l_returnflag, b.l_linestatus, count(*), sum(a.l_extendedprice) \
     from lineitem a join lineitem b on a.l_orderkey = b.l_orderkey \
     and a.l_linenumber = b.l_linenumber group by 1, 2 order by 1, 2",
];

#[test]
fn hash_joins_past_their_share_partition_to_disk_and_give_the_same_rows() {
    let _turn = turn();
    runtime().block_on(async {
        let (roomy, small) = roomy_and_small("1MB").await;
        for sql in GRACE_JOINS {
            spills_with_the_same_rows(&roomy, &small, sql).await;
            assert_eq!(last_spilled_bytes(&roomy).await, 0, "within 32 MB: {sql}");
        }
        for (q, share) in [("q9", "512kB"), ("q18", "512kB"), ("q21", "128kB")] {
            small
                .batch_execute(&format!("set stride.query_memory_limit = '{share}'"))
                .await
                .unwrap();
            let sql = std::fs::read_to_string(format!(
                "{}/../../queries/tpch/{q}.sql",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            spills_with_the_same_rows(&roomy, &small, &sql).await;
        }
    });
    pool_returns_to_empty();
    spill_area_is_empty();
}

#[test]
fn what_cannot_spill_fails_with_53200_and_runs_again_within_its_share() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        client
            .batch_execute("set stride.query_memory_limit = '64kB'")
            .await
            .unwrap();
        // A hash join's build side goes to partitions on disk, but one
        // partition of this one is still larger than the share.
        let join = "select count(*), max(a.l_comment) from lineitem a \
                    join lineitem b on a.l_comment = b.l_comment";
        let message = fails_with(&client, join, "53200").await;
        assert!(message.contains("grace hash join partition"), "{message}");
        // The result streams to the client (tests/streaming.rs): far past
        // the share, it arrives whole.
        let streamed = client
            .query("select l_comment from lineitem", &[])
            .await
            .unwrap()
            .len();
        assert_eq!(
            streamed as i64,
            count(&client, "select count(*) from lineitem").await
        );
        // A spilled aggregate merges a partition at a time, and its groups
        // stream out: even at this share it finishes.
        let aggregate = "select l_orderkey, l_linenumber, count(*) from lineitem group by 1, 2";
        let groups = client.query(aggregate, &[]).await.unwrap().len();
        assert_eq!(
            groups as i64,
            count(&client, "select count(*) from lineitem").await
        );
        // Without GROUP BY there is one group to hold.
        let distinct = "select length(string_agg(l_comment, ',')) from lineitem";
        let message = fails_with(&client, distinct, "53200").await;
        assert!(message.contains("aggregate"), "{message}");
        spill_area_is_empty();
        // Within the default share they all run.
        client
            .batch_execute("set stride.query_memory_limit = default")
            .await
            .unwrap();
        let groups = client.query(aggregate, &[]).await.unwrap().len();
        assert_eq!(
            groups as i64,
            count(&client, "select count(*) from lineitem").await
        );
        assert!(count(&client, join).await >= 60175);
    });
    pool_returns_to_empty();
    spill_area_is_empty();
}

#[test]
fn temp_file_limit_fails_a_query_whose_spill_files_pass_it_with_53400() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        client
            .batch_execute("set stride.query_memory_limit = '1MB'; set temp_file_limit = '256kB'")
            .await
            .unwrap();
        let row = client.query_one("show temp_file_limit", &[]).await.unwrap();
        assert_eq!(row.get::<_, String>(0), "256kB");
        let message = fails_with(&client, SPILLERS[0], "53400").await;
        assert!(message.contains("temp_file_limit (256kB)"), "{message}");
        spill_area_is_empty();
        client
            .batch_execute("set temp_file_limit = -1")
            .await
            .unwrap();
        assert_eq!(rows(&client, SPILLERS[0]).await.len(), 275);
        fails_with(&client, "set temp_file_limit = 'lots'", "22023").await;
    });
    pool_returns_to_empty();
    spill_area_is_empty();
}

#[test]
fn the_limits_are_settings_and_a_view() {
    let _turn = turn();
    runtime().block_on(async {
        let client = connect().await;
        let show = |name: &'static str| {
            let client = &client;
            async move {
                let row = client
                    .query_one(&format!("show {name}"), &[])
                    .await
                    .unwrap();
                row.get::<_, String>(0)
            }
        };
        assert_eq!(show("stride.memory_limit").await, "256MB");
        assert_eq!(show("stride.query_memory_limit").await, "32MB");
        assert_eq!(
            show("stride.temp_directory").await,
            temp_parent().display().to_string()
        );
        assert_eq!(show("temp_file_limit").await, "-1");
        let row = client
            .query_one(
                "select memory_limit_bytes, query_memory_limit_bytes, refused_charges \
                 from stride.memory",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, i64>(0), SERVER_LIMIT as i64);
        assert_eq!(row.get::<_, i64>(1), QUERY_LIMIT as i64);
        let refusals_before: i64 = row.get(2);
        // Lowering the server's limit below one query's need fails that
        // query with the server's limit named (one aggregate group holding
        // every comment cannot spill).
        client
            .batch_execute("set stride.memory_limit = '1MB'")
            .await
            .unwrap();
        let message = fails_with(
            &client,
            "select length(string_agg(l_comment, ',')) from lineitem",
            "53200",
        )
        .await;
        assert!(message.contains("stride.memory_limit"), "{message}");
        client
            .batch_execute("set stride.memory_limit = '256MB'")
            .await
            .unwrap();
        let refusals: i64 = client
            .query_one("select refused_charges from stride.memory", &[])
            .await
            .unwrap()
            .get(0);
        assert!(refusals > refusals_before);
        // Bad sizes are refused with 22023.
        fails_with(&client, "set stride.query_memory_limit = 'lots'", "22023").await;
        fails_with(&client, "set stride.memory_limit = '0'", "22023").await;
    });
    pool_returns_to_empty();
}
