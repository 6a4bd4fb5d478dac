//! All 22 TPC-H reference answers hold under every scheduling policy, with
//! the queries running concurrently so that the policy actually interleaves
//! them (one session per query, one thread per session).

mod common;

use std::sync::{Arc, OnceLock};

use stride_sched::Policy;
use stride_sql::Engine;

const POLICIES: [&str; 7] = [
    "fifo",
    "fair",
    "stride",
    "lottery",
    "srpt",
    "if-srpt",
    "threshold",
];

fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_tpch(0.1).expect("generate TPC-H SF 0.1");
        engine.set_default_schema("sf0_1").unwrap();
        engine
    })
}

fn run_all_concurrently(policy: &str) {
    let engine = engine();
    engine
        .runtime()
        .scheduler()
        .set_policy(Policy::parse(policy).expect("known policy"));
    let queries = stride::workload::tpch(0.1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = queries
            .iter()
            .enumerate()
            .map(|(i, q)| {
                scope.spawn(move || {
                    let n = i + 1;
                    let mut session = engine.session();
                    let out = session
                        .query(&q.sql)
                        .unwrap_or_else(|e| panic!("{policy} q{n}: {e}"));
                    let path =
                        format!("{}/tests/tpch-answers/q{n}.csv", env!("CARGO_MANIFEST_DIR"));
                    common::check_answer(
                        &format!("{policy} q{n}"),
                        &out,
                        &path,
                        common::TPCH_ORDER[i],
                    );
                })
            })
            .collect();
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(
        engine.runtime().scheduler().policy().name(),
        Policy::parse(policy).unwrap().name()
    );
}

/// One test, the policies in turn: they share one engine and the policy is
/// engine-wide.
#[test]
fn tpch_answers_hold_under_every_policy_with_concurrent_queries() {
    for policy in POLICIES {
        run_all_concurrently(policy);
    }
}
