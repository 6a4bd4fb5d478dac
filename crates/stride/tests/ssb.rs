//! The 13 Star Schema Benchmark queries at SF 0.1 (seed 42) against the
//! reference answers (`tests/ssb-answers`, computed by DuckDB on the same data
//! exported to Parquet by `scripts/ssb_crosscheck.py`).
//!
//! Rows are compared as multisets (exactly: all values are integers or
//! strings), and the order of the result is checked
//! against each query's ORDER BY keys.

mod common;

use std::sync::{Arc, OnceLock};

use stride_sql::Engine;

/// ORDER BY of each query (q1.1 … q4.3) as (output column, descending).
const ORDER: [&[(usize, bool)]; 13] = [
    // q1.1 – q1.3: a single aggregate row.
    &[],
    &[],
    &[],
    // q2.x: sum(lo_revenue), d_year, p_brand1 — order by d_year, p_brand1.
    &[(1, false), (2, false)],
    &[(1, false), (2, false)],
    &[(1, false), (2, false)],
    // q3.x: c_*, s_*, d_year, revenue — order by d_year asc, revenue desc.
    &[(2, false), (3, true)],
    &[(2, false), (3, true)],
    &[(2, false), (3, true)],
    &[(2, false), (3, true)],
    // q4.1: d_year, c_nation, profit — order by d_year, c_nation.
    &[(0, false), (1, false)],
    // q4.2: d_year, s_nation, p_category, profit — order by the first three.
    &[(0, false), (1, false), (2, false)],
    // q4.3: d_year, s_city, p_brand1, profit — order by the first three.
    &[(0, false), (1, false), (2, false)],
];

fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let engine = common::test_engine(2);
        engine.load_ssb(0.1, 42).expect("generate SSB SF 0.1");
        engine
    })
}

/// Runs the query at index `i` of `stride::workload::ssb()`.
fn check(i: usize) {
    let queries = stride::workload::ssb();
    let query = &queries[i];
    let name = &query.name;
    let mut session = engine().session();
    session.set_default_schema("ssb_sf0_1").unwrap();
    let out = session
        .query(&query.sql)
        .unwrap_or_else(|e| panic!("{name} failed: {e}"));
    let path = format!(
        "{}/tests/ssb-answers/{name}.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let (actual, expected) = common::check_answer(name, &out, &path, ORDER[i]);
    // SSB answers are integers and strings: beyond `match_rows` (whose 1e-9
    // relative tolerance would let a sum near 4e10 be off by ~40), the rows
    // must be equal text.
    let sorted = |rows: &[Vec<String>]| {
        let mut rows: Vec<Vec<String>> = rows
            .iter()
            .map(|r| r.iter().map(|c| c.trim_end().to_string()).collect())
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(
        sorted(&actual),
        sorted(&expected),
        "{name}: rows differ as text"
    );
}

macro_rules! ssb_tests {
    ($($name:ident => $i:expr),* $(,)?) => {
        $(#[test] fn $name() { check($i); })*
    };
}

ssb_tests!(
    q1_1 => 0, q1_2 => 1, q1_3 => 2,
    q2_1 => 3, q2_2 => 4, q2_3 => 5,
    q3_1 => 6, q3_2 => 7, q3_3 => 8, q3_4 => 9,
    q4_1 => 10, q4_2 => 11, q4_3 => 12,
);
