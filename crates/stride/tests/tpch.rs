//! All 22 TPC-H queries at SF 0.1 against the reference answers
//! (`tests/tpch-answers`, computed by DuckDB on the same tpchgen data).
//!
//! Rows are compared as multisets with numeric tolerance, and the order of the
//! result is checked against each query's ORDER BY keys.

mod common;

use std::sync::{Arc, OnceLock};

use stride_sql::Engine;

fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_tpch(0.1).expect("generate TPC-H SF 0.1");
        engine
    })
}

fn check(n: usize) {
    let queries = stride::workload::tpch(0.1);
    let query = &queries[n - 1];
    let mut session = engine().session();
    session.set_default_schema("sf0_1").unwrap();
    let out = session
        .query(&query.sql)
        .unwrap_or_else(|e| panic!("q{n} failed: {e}"));
    let path = format!("{}/tests/tpch-answers/q{n}.csv", env!("CARGO_MANIFEST_DIR"));
    common::check_answer(&format!("q{n}"), &out, &path, common::TPCH_ORDER[n - 1]);
}

macro_rules! tpch_tests {
    ($($name:ident => $n:expr),* $(,)?) => {
        $(#[test] fn $name() { check($n); })*
    };
}

tpch_tests!(
    q01 => 1, q02 => 2, q03 => 3, q04 => 4, q05 => 5, q06 => 6, q07 => 7, q08 => 8,
    q09 => 9, q10 => 10, q11 => 11, q12 => 12, q13 => 13, q14 => 14, q15 => 15,
    q16 => 16, q17 => 17, q18 => 18, q19 => 19, q20 => 20, q21 => 21, q22 => 22,
);
