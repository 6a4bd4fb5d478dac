//! Shared scans (issue 21, `stride_exec::shared`): concurrent queries over
//! one table snapshot that attach to one pass answer exactly as they do
//! alone — TPC-H Q1, Q3, Q5, Q6 and SSB templates with drawn parameters, at
//! 1, 2, 63, 64, 65 and 200 concurrent members, on 1 and 2 workers with
//! tiny morsels —; a member cancelled or failing mid-pass leaves the
//! others' answers right; `stride.batches` and the settings.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use stride::workload;
use stride_sql::Engine;

const TPCH: [&str; 4] = ["q1", "q6", "q3", "q5"];
const SSB: [&str; 4] = ["q1.1", "q2.1", "q3.1", "q4.1"];

/// An engine with `workers` workers and fixed morsels of `morsel_rows`
/// rows, TPC-H and SSB at SF 0.001 loaded; sharing off by default with the
/// given cycle and maximum batch size.
fn engine(workers: usize, morsel_rows: usize, cycle: Duration, max_batch: usize) -> Arc<Engine> {
    let engine = Engine::new(stride_sql::EngineConfig {
        scheduler: stride_sched::SchedulerConfig {
            workers,
            pin_workers: false,
            morsels: stride_sched::MorselPolicy::Fixed(morsel_rows),
            ..Default::default()
        },
        sharing: stride_exec::SharingConfig {
            mode: stride_exec::SharingMode::Off,
            cycle,
            max_batch,
            // The pass's morsels as tiny as the engine's.
            min_morsel_rows: 1,
        },
        ..Default::default()
    });
    engine.load_tpch(0.001).expect("TPC-H SF 0.001");
    engine.load_ssb(0.001, 42).expect("SSB SF 0.001");
    engine
}

/// `n` query instances (schema, name, SQL), cycling through `names` with
/// parameters drawn from `seed`.
fn instances(names: &[&str], n: usize, seed: u64) -> Vec<(String, String)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let name = names[i % names.len()];
            let q = if name.contains('.') {
                workload::ssb_instance(name, &mut rng)
            } else {
                workload::tpch_instance(name, 0.001, &mut rng)
            }
            .unwrap();
            (name.to_string(), q.sql)
        })
        .collect()
}

fn schema_of(name: &str) -> &'static str {
    if name.contains('.') {
        "ssb_sf0_001"
    } else {
        "sf0_001"
    }
}

/// Each instance's rows with sharing off, one at a time.
fn alone(engine: &Arc<Engine>, queries: &[(String, String)]) -> HashMap<String, Vec<Vec<String>>> {
    let mut out = HashMap::new();
    for (name, sql) in queries {
        if out.contains_key(sql) {
            continue;
        }
        let mut session = engine.session();
        session.set_default_schema(schema_of(name)).unwrap();
        let batches = session
            .query(sql)
            .unwrap_or_else(|e| panic!("{name}: {e}\n{sql}"));
        out.insert(sql.clone(), common::rows_as_text(&batches.batches));
    }
    out
}

/// Runs every query on a session of its own, all at once, sharing scans;
/// returns each one's outcome in order.
fn together(
    engine: &Arc<Engine>,
    queries: &[(String, String)],
) -> Vec<Result<Vec<Vec<String>>, stride_sql::SqlError>> {
    let start = Arc::new(Barrier::new(queries.len()));
    std::thread::scope(|scope| {
        let handles: Vec<_> = queries
            .iter()
            .map(|(name, sql)| {
                let start = start.clone();
                scope.spawn(move || {
                    let mut session = engine.session();
                    session.set_default_schema(schema_of(name)).unwrap();
                    session.execute("set stride.sharing = scans").unwrap();
                    start.wait();
                    session
                        .query(sql)
                        .map(|out| common::rows_as_text(&out.batches))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The finished batches after `after` as (table, members, detached, failed).
fn batches_since(engine: &Arc<Engine>, after: u64) -> Vec<(String, i64, i64, i64)> {
    let out = engine
        .session()
        .query(&format!(
            "select table_name, members, detached, failed from stride.batches \
             where batch > {after} and state = 'done' order by batch"
        ))
        .unwrap();
    common::rows_as_text(&out.batches)
        .into_iter()
        .map(|r| {
            (
                r[0].clone(),
                r[1].parse().unwrap(),
                r[2].parse().unwrap(),
                r[3].parse().unwrap(),
            )
        })
        .collect()
}

fn last_batch(engine: &Arc<Engine>) -> u64 {
    let out = engine
        .session()
        .query("select coalesce(max(batch), 0) from stride.batches")
        .unwrap();
    common::rows_as_text(&out.batches)[0][0].parse().unwrap()
}

fn same_rows(name: &str, sql: &str, actual: &[Vec<String>], expected: &[Vec<String>]) {
    if let Err(e) = common::match_rows(actual, expected) {
        panic!("{name}: shared answer differs from the answer alone: {e}\n{sql}");
    }
}

/// Answers with sharing on equal answers alone, at each member count, and
/// the members of one snapshot's scans went through batches.
fn members_answer_as_alone(names: &[&str], table: &str, seed: u64) {
    for workers in [1, 2] {
        for members in [1, 2, 63, 64, 65, 200] {
            // Batches start when full (the cycle is long: no start by the
            // clock) and divide the members, so that their sizes are known.
            let max_batch = match members {
                65 => 13,
                200 => 40,
                n => n,
            };
            let cycle = Duration::from_secs(600);
            let engine = engine(workers, 7, cycle, max_batch);
            let queries = instances(names, members, seed + members as u64);
            let expected = alone(&engine, &queries);
            let before = last_batch(&engine);
            let outcomes = together(&engine, &queries);
            for ((name, sql), outcome) in queries.iter().zip(outcomes) {
                let rows = outcome.unwrap_or_else(|e| panic!("{name} shared: {e}\n{sql}"));
                same_rows(name, sql, &rows, &expected[sql]);
            }
            let batches = batches_since(&engine, before);
            let shared: i64 = batches.iter().filter(|b| b.0 == table).map(|b| b.1).sum();
            assert_eq!(
                shared, members as i64,
                "[{workers} workers, {members} members] every query went through one batch: {batches:?}"
            );
            assert!(
                batches.iter().all(|b| b.1 as usize == max_batch),
                "[{workers} workers, {members} members] full batches of {max_batch}: {batches:?}"
            );
        }
    }
}

#[test]
fn tpch_members_answer_as_alone() {
    members_answer_as_alone(&TPCH, "lineitem", 7);
}

#[test]
fn ssb_members_answer_as_alone() {
    members_answer_as_alone(&SSB, "lineorder", 11);
}

/// A member cancelled while its batch's pass runs gets "cancelled"; the
/// others' answers are right and the batch shows it detached.
#[test]
fn a_member_cancelled_mid_pass_leaves_the_others_right() {
    for workers in [1, 2] {
        // One-row morsels: the pass is long enough to be cancelled inside.
        let engine = engine(workers, 1, Duration::from_secs(600), 6);
        let queries = instances(&["q1", "q6"], 6, 5);
        let expected = alone(&engine, &queries);
        let before = last_batch(&engine);
        let interrupts: Vec<_> = (0..queries.len()).map(|_| engine.session()).collect();
        let victim = interrupts[0].interrupt();
        let outcomes = std::thread::scope(|scope| {
            let handles: Vec<_> = interrupts
                .into_iter()
                .zip(&queries)
                .map(|(mut session, (name, sql))| {
                    scope.spawn(move || {
                        session.set_default_schema(schema_of(name)).unwrap();
                        session.execute("set stride.sharing = scans").unwrap();
                        session
                            .query(sql)
                            .map(|out| common::rows_as_text(&out.batches))
                    })
                })
                .collect();
            // The pass is the only group once all six attached.
            let deadline = Instant::now() + Duration::from_secs(60);
            while engine.runtime().scheduler().active_groups() == 0 {
                assert!(Instant::now() < deadline, "the batch never started");
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            victim.cancel();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .collect::<Vec<_>>()
        });
        let mut outcomes = outcomes.into_iter();
        let first = outcomes.next().unwrap();
        assert!(
            matches!(first, Err(stride_sql::SqlError::Cancelled)),
            "[{workers} workers] the cancelled member: {first:?}"
        );
        for ((name, sql), outcome) in queries.iter().skip(1).zip(outcomes) {
            let rows = outcome.unwrap_or_else(|e| panic!("{name} shared: {e}\n{sql}"));
            same_rows(name, sql, &rows, &expected[sql]);
        }
        let batches = batches_since(&engine, before);
        assert_eq!(batches.len(), 1, "{batches:?}");
        assert_eq!((batches[0].1, batches[0].2), (6, 1), "{batches:?}");
    }
}

/// A member whose own operators fail mid-pass (division by zero) gets its
/// error; the others' answers are right.
#[test]
fn a_member_failing_mid_pass_leaves_the_others_right() {
    for workers in [1, 2] {
        let engine = engine(workers, 5, Duration::from_secs(600), 5);
        let mut queries = instances(&["q1", "q6"], 4, 9);
        queries.insert(
            2,
            (
                "failing".to_string(),
                "select sum(l_quantity / (l_linenumber - l_linenumber)) from lineitem".to_string(),
            ),
        );
        let expected = alone(
            &engine,
            &[
                queries[0].clone(),
                queries[1].clone(),
                queries[3].clone(),
                queries[4].clone(),
            ],
        );
        let before = last_batch(&engine);
        let outcomes = together(&engine, &queries);
        for ((name, sql), outcome) in queries.iter().zip(outcomes) {
            if name == "failing" {
                let err = outcome.expect_err("division by zero fails its member");
                assert!(err.to_string().contains("zero"), "{err}");
            } else {
                let rows = outcome.unwrap_or_else(|e| panic!("{name} shared: {e}\n{sql}"));
                same_rows(name, sql, &rows, &expected[sql]);
            }
        }
        let batches = batches_since(&engine, before);
        assert_eq!(batches, vec![("lineitem".to_string(), 5, 0, 1)]);
    }
}

/// `stride.sharing` per session (off by default), the engine-wide cycle
/// and batch size (superuser settings), and a query with sharing off never
/// joins a batch.
#[test]
fn sharing_settings_and_the_batches_view() {
    let engine = engine(2, 1024, Duration::ZERO, 64);
    let mut session = engine.session();
    session.set_default_schema("sf0_001").unwrap();
    let show = |session: &mut stride_sql::Session, what: &str| {
        let out = session.query(&format!("show {what}")).unwrap();
        common::rows_as_text(&out.batches)[0][0].clone()
    };
    assert_eq!(show(&mut session, "stride.sharing"), "default");
    session
        .query("select count(*) from lineitem where l_quantity > 10")
        .unwrap();
    assert_eq!(last_batch(&engine), 0, "sharing is off by default");
    session.execute("set stride.sharing = scans").unwrap();
    assert_eq!(show(&mut session, "stride.sharing"), "scans");
    assert!(session.execute("set stride.sharing = everything").is_err());
    session
        .query("select count(*) from lineitem where l_quantity > 10")
        .unwrap();
    let batches = batches_since(&engine, 0);
    assert_eq!(batches, vec![("lineitem".to_string(), 1, 0, 0)]);
    // A query without a breaker before its result shares nothing.
    session
        .query("select l_orderkey from lineitem where l_quantity > 49")
        .unwrap();
    assert_eq!(batches_since(&engine, 0).len(), 1);
    session.execute("set stride.sharing_cycle = '5ms'").unwrap();
    assert_eq!(show(&mut session, "stride.sharing_cycle"), "5ms");
    session.execute("set stride.sharing_max_batch = 3").unwrap();
    assert_eq!(show(&mut session, "stride.sharing_max_batch"), "3");
    assert!(session.execute("set stride.sharing_max_batch = 0").is_err());
    assert_eq!(engine.runtime().sharing().config().max_batch, 3);
    // The view's figures: one pass read the table once.
    let out = session
        .query(
            "select rows_read, morsels > 0, cycle, cpu_ms >= 0 from stride.batches where batch = 1",
        )
        .unwrap();
    assert_eq!(
        common::rows_as_text(&out.batches),
        vec![vec![
            "6005".to_string(),
            "true".into(),
            "1".into(),
            "true".into()
        ]]
    );
}

/// A member cancelled while its batch still forms leaves at once, and the
/// batch it leaves empty is dropped: the next queries form a batch of
/// their own.
#[test]
fn a_member_cancelled_while_its_batch_forms_leaves_nothing_behind() {
    let engine = engine(2, 64, Duration::from_secs(600), 2);
    let queries = instances(&["q6"], 3, 3);
    let expected = alone(&engine, &queries);
    let before = last_batch(&engine);
    let mut first = engine.session();
    first.set_default_schema("sf0_001").unwrap();
    first.execute("set stride.sharing = scans").unwrap();
    let interrupt = first.interrupt();
    let sql = queries[0].1.clone();
    let waiting = std::thread::spawn(move || first.query(&sql).map(|_| ()));
    // Alone in a batch of two with a long cycle, it waits until cancelled.
    std::thread::sleep(Duration::from_millis(500));
    interrupt.cancel();
    let outcome = waiting.join().unwrap();
    assert!(
        matches!(outcome, Err(stride_sql::SqlError::Cancelled)),
        "{outcome:?}"
    );
    let outcomes = together(&engine, &queries[1..]);
    for ((name, sql), outcome) in queries[1..].iter().zip(outcomes) {
        let rows = outcome.unwrap_or_else(|e| panic!("{name} shared: {e}\n{sql}"));
        same_rows(name, sql, &rows, &expected[sql]);
    }
    assert_eq!(
        batches_since(&engine, before),
        vec![("lineitem".to_string(), 2, 0, 0)]
    );
}
