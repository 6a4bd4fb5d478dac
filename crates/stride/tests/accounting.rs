//! Per-query accounting as the engine exposes it: recorded per-pipeline costs
//! feeding SRPT, priorities over time in `stride.queries`, and self-tuning
//! runs in `stride.tuning`.

mod common;

use std::time::{Duration, Instant};

use stride_sched::{DecayParams, Policy, SchedulerConfig, TuningConfig};
use stride_sql::{Engine, EngineConfig};

fn cell(out: &stride_sql::QueryOutput, col: usize) -> String {
    common::rows_as_text(&out.batches)[0][col].clone()
}

#[test]
fn a_query_that_ran_before_has_per_pipeline_estimates() {
    let engine = common::test_engine(2);
    engine.load_tpch(0.01).unwrap();
    let mut session = engine.session();
    session.set_default_schema("sf0_01").unwrap();
    let sql = "select o_orderpriority, count(*) from orders join lineitem on o_orderkey = l_orderkey group by 1";
    // Keyed by the plan text, recorded costs as they are.
    engine
        .runtime()
        .history()
        .set_mode(stride_sql::history::EstimateMode::Plan);
    let plan = session.plan_query(sql).unwrap();
    let key = stride_sql::history::PlanKey::exact(&plan);
    assert!(engine.runtime().history().estimates(&key).is_none());
    let out = session.query(sql).unwrap();
    assert_eq!(out.stats.estimated_cpu, None, "nothing recorded yet");
    let estimates = engine
        .runtime()
        .history()
        .estimates(&key)
        .expect("recorded");
    assert_eq!(estimates.len(), out.stats.task_sets);
    assert_eq!(out.stats.task_set_cpu.len(), out.stats.task_sets);
    let total: Duration = estimates.iter().map(|e| e.work).sum();
    assert_eq!(total, out.stats.cpu_time);
    // The lineitem scan had many morsels: every worker could take part.
    assert!(estimates.iter().any(|e| e.elastic), "{estimates:?}");
    // The next run is told what the first one cost, and stride.queries
    // shows it beside the CPU time.
    let again = session.query(sql).unwrap();
    assert_eq!(again.stats.estimated_cpu, Some(out.stats.cpu_time));
    let view = session
        .query(
            "select estimated_cpu_ms, cpu_ms from stride.queries \
             where query like '%o_orderpriority%' and state = 'done' and estimated_cpu_ms is not null",
        )
        .unwrap();
    let estimated: f64 = cell(&view, 0).parse().unwrap();
    assert!((estimated - out.stats.cpu_time.as_secs_f64() * 1e3).abs() < 1e-6);
}

#[test]
fn stride_queries_shows_a_one_statement_request_as_sent() {
    let engine = common::test_engine(2);
    let mut session = engine.session();
    // As pg_stat_activity: comments kept (benchmarks tag requests so), the
    // trailing semicolon dropped; the statements of a longer request each
    // as their own text.
    session
        .query("/* stride-bench 7 */ select 40 + 2;")
        .unwrap();
    session.execute("select 1; /* lost */ select 2").unwrap();
    let view = session
        .query("select query from stride.queries where state = 'done' order by query_id")
        .unwrap();
    let texts: Vec<String> = common::rows_as_text(&view.batches)
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    assert_eq!(texts[0], "/* stride-bench 7 */ select 40 + 2");
    assert_eq!(texts[1..3], ["SELECT 1", "SELECT 2"]);
}

#[test]
fn stride_queries_shows_the_priority_decaying_over_time() {
    let engine = common::test_engine(2);
    engine.load_tpch(0.1).unwrap();
    let mut session = engine.session();
    session.set_default_schema("sf0_1").unwrap();
    // Long enough for each worker's view of the group to pass d_start = 5
    // quanta of 2 ms (a join: a lineitem scan alone is too short for that on
    // a fast machine).
    session
        .query(
            "select l_returnflag, sum(l_extendedprice * (1 - l_discount)) \
             from lineitem join orders on l_orderkey = o_orderkey \
             join customer on o_custkey = c_custkey group by 1",
        )
        .unwrap();
    let out = session
        .query(
            "select final_priority, priority_trace, min_morsel_tuples <= max_morsel_tuples \
             from stride.queries where query like '%l_returnflag%' and state = 'done'",
        )
        .unwrap();
    let final_priority: f64 = cell(&out, 0).parse().unwrap();
    assert!(
        final_priority < 1e4,
        "decayed from p0 = 1e4: {final_priority}"
    );
    let trace = cell(&out, 1);
    let first = trace.split(' ').next().unwrap();
    assert!(first.ends_with(":10000"), "starts at p0: {trace}");
    assert_eq!(cell(&out, 2), "true");
}

#[test]
fn self_tuning_runs_show_in_stride_tuning() {
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers: 2,
            pin_workers: false,
            policy: Policy::Stride(DecayParams::default()),
            tuning: Some(TuningConfig {
                track: Duration::from_millis(300),
                refresh: Duration::from_millis(400),
            }),
            ..Default::default()
        },
        ..Default::default()
    });
    engine.load_tpch(0.01).unwrap();
    let queries = stride::workload::tpch(0.01);
    let start = Instant::now();
    // Keep the workers busy with a mix of queries until a tuning run is
    // listed (or give up after 20 s).
    loop {
        std::thread::scope(|scope| {
            for q in queries.iter().take(8) {
                let engine = &engine;
                scope.spawn(move || {
                    let mut s = engine.session();
                    s.set_default_schema("sf0_01").unwrap();
                    s.query(&q.sql).unwrap();
                });
            }
        });
        let mut s = engine.session();
        let out = s
            .query("select count(*), min(cost_after <= cost_before), max(elapsed_ms) from stride.tuning")
            .unwrap();
        if cell(&out, 0) != "0" {
            assert_eq!(cell(&out, 1), "true");
            let elapsed: f64 = cell(&out, 2).parse().unwrap();
            assert!(elapsed > 0.0);
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no tuning run");
    }
}
