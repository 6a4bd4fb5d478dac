//! Query instances with drawn substitution parameters: every instance of
//! every TPC-H and SSB query parses, plans and runs on generated data, and
//! the instances the benchmarks draw do not all cost the same.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use stride::workload::{self, Workload};
use stride_sql::Engine;

/// TPC-H SF 0.01 (schema sf0_01) and SSB SF 0.01 (schema ssb_sf0_01).
fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_tpch(0.01).expect("generate TPC-H SF 0.01");
        engine.load_ssb(0.01, 42).expect("generate SSB SF 0.01");
        engine
    })
}

/// Runs `instances` drawn instances of each query of `workload` on
/// `schema`; returns the rows of each, by query.
fn run_all(workload: Workload, schema: &str, instances: usize, seed: u64) -> Vec<Vec<usize>> {
    let mut session = engine().session();
    session.set_default_schema(schema).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    workload
        .queries()
        .iter()
        .map(|q| {
            (0..instances)
                .map(|_| {
                    let inst = workload.instance(&q.name, &mut rng).unwrap();
                    let params: Vec<String> = inst
                        .params
                        .iter()
                        .map(|p| format!("{}={}", p.name, p.value))
                        .collect();
                    session
                        .query(&inst.sql)
                        .unwrap_or_else(|e| {
                            panic!(
                                "{} ({}) failed: {e}\n{}",
                                q.name,
                                params.join(" "),
                                inst.sql
                            )
                        })
                        .num_rows()
                })
                .collect()
        })
        .collect()
}

#[test]
fn every_tpch_instance_runs() {
    let rows = run_all(Workload::Tpch { scale: 0.01 }, "sf0_01", 4, 11);
    assert_eq!(rows.len(), 22);
    // Parameters change answers: Q1 always has its 4 groups, but Q3's top 10
    // or Q10's top 20 depend on segment and dates, and most queries return
    // rows for most instances.
    assert!(rows[0].iter().all(|&r| r == 4), "q1: {:?}", rows[0]);
    let nonempty: usize = rows.iter().flatten().filter(|&&r| r > 0).count();
    assert!(nonempty * 4 >= 22 * 4 * 3, "{rows:?}");
}

#[test]
fn every_ssb_instance_runs() {
    let rows = run_all(Workload::Ssb, "ssb_sf0_01", 4, 12);
    assert_eq!(rows.len(), 13);
    // Flight 1 always aggregates to one row.
    for q in &rows[..3] {
        assert!(q.iter().all(|&r| r == 1), "{rows:?}");
    }
}

#[test]
fn validation_instances_answer_as_the_files() {
    // The validation text of each query is what `queries/` holds, so the
    // answer tests (tests/tpch.rs, tests/ssb.rs) check exactly these.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../queries");
    for q in workload::tpch(0.1) {
        let file = std::fs::read_to_string(format!("{root}/tpch/{}.sql", q.name)).unwrap();
        assert_eq!(q.sql, file, "{}", q.name);
    }
    for q in workload::ssb() {
        let file = std::fs::read_to_string(format!("{root}/ssb/{}.sql", q.name)).unwrap();
        assert_eq!(q.sql.replace("\"date\"", "date"), file, "{}", q.name);
    }
}

/// The shapes (`stride_sql::history::shape`) of `n` instances of each query
/// of `workload` on `schema`: how many instances had each, by query.
fn shapes(workload: Workload, schema: &str, n: usize) -> Vec<HashMap<String, usize>> {
    let mut session = engine().session();
    session.set_default_schema(schema).unwrap();
    let mut rng = SmallRng::seed_from_u64(13);
    workload
        .queries()
        .iter()
        .map(|q| {
            let mut shapes = HashMap::new();
            for _ in 0..n {
                let inst = workload.instance(&q.name, &mut rng).unwrap();
                let plan = session.plan_query(&inst.sql).unwrap();
                *shapes.entry(stride_sql::history::shape(&plan)).or_insert(0) += 1;
            }
            shapes
        })
        .collect()
}

#[test]
fn instances_of_a_query_share_its_shape() {
    // What lets SRPT's history generalize: the instances of a query share
    // one plan shape (a literal may move a cardinality estimate enough to
    // flip a join's build side, a shape of its own, hence "most"), and
    // different queries have different shapes.
    for (workload, schema, queries) in [
        (Workload::Tpch { scale: 0.01 }, "sf0_01", 22),
        (Workload::Ssb, "ssb_sf0_01", 13),
    ] {
        let by_query = shapes(workload, schema, 8);
        for (i, s) in by_query.iter().enumerate() {
            let most = s.values().max().copied().unwrap_or(0);
            assert!(most >= 6, "{schema} query {}: {:?}", i + 1, s.values());
        }
        let distinct: HashSet<&String> = by_query.iter().flat_map(|s| s.keys()).collect();
        assert!(
            distinct.len() >= queries,
            "{schema}: {} shapes",
            distinct.len()
        );
    }
}
