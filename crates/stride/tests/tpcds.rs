//! The 99 TPC-DS queries at SF 0.01 against the reference answers
//! (`tests/tpcds-answers`, computed by DuckDB on the same data exported to
//! Parquet by `scripts/tpcds_crosscheck.py`).
//!
//! Rows are compared as multisets (numbers within the tolerance of
//! `common::cells_match`) and, for the 90 queries that end in ORDER BY, also
//! position by position (DuckDB sorted by the same keys; ties in them would
//! show up here as `OrderDiffers`, none does at SF 0.01). Queries
//! Stride cannot run yet are listed in [`FAILING`] with the exact error
//! they give, and answers known to differ in [`DIFFERENT`] with why: the test
//! fails when a query's outcome is not the listed one, so neither list can
//! grow (or shrink) silently.
//!
//! `STRIDE_TPCDS_SF` and `STRIDE_TPCDS_ANSWERS` (a folder written by
//! `scripts/tpcds_crosscheck.py --sf SF --out DIR`) repeat the comparison
//! at another scale factor; the lists then are not enforced, the outcome of
//! every query is printed.

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

/// Queries that end in an error today, with the exact error.
const FAILING: &[(&str, &str)] = &[
    // Not a missing feature: at SF 0.01 the class `mystery` of `Books` has
    // one item, with revenue 0.00, so its window sum is 0 and
    // `0 * 100.0000 / 0` divides by zero. PostgreSQL raises the error too
    // (SQLSTATE 22012, which this one carries); DuckDB returns NaN.
    ("q12", "Arrow error: Divide by zero error"),
];

/// Queries whose answer differs from DuckDB's, with the cause. None since
/// decimal division keeps PostgreSQL's 16 significant digits, rounded
/// (`stride_sql::decimal_division`): q61 and q66 at SF 0.01, q58 and q83 at
/// SF 1 had differed by the truncated 6 or 8 fractional digits of
/// DataFusion's quotient (DuckDB divides decimals in double precision).
const DIFFERENT: &[(&str, &str)] = &[];

/// What happened to one query.
#[derive(Debug, PartialEq)]
enum Outcome {
    Match,
    Error(String),
    Differs(String),
    /// The same rows, in another order than DuckDB's although the query
    /// ends in ORDER BY: the first position where they differ.
    OrderDiffers(usize),
}

/// Whether `ORDER BY` occurs outside all parentheses (not in a subquery,
/// a CTE or a window).
fn has_top_level_order_by(sql: &str) -> bool {
    let lower = sql.to_ascii_lowercase();
    let mut depth = 0i32;
    for (i, c) in lower.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            'o' if depth == 0 && lower[i..].starts_with("order by") => return true,
            _ => {}
        }
    }
    false
}

/// With a final ORDER BY, the first position where the rows differ from
/// DuckDB's (which sorts by the same keys).
fn first_out_of_order(
    sql: &str,
    actual: &[Vec<String>],
    expected: &[Vec<String>],
) -> Option<usize> {
    if !has_top_level_order_by(sql) {
        return None;
    }
    actual.iter().zip(expected).position(|(a, e)| {
        a.len() != e.len() || !a.iter().zip(e).all(|(x, y)| common::cells_match(x, y))
    })
}

fn run_all(sf: f64, answers: &str) -> BTreeMap<String, Outcome> {
    let engine = common::test_engine(2);
    let t = Instant::now();
    let schema = engine.load_tpcds(sf).expect("generate TPC-DS");
    eprintln!("generated TPC-DS SF {sf} in {:.1?}", t.elapsed());
    let mut outcomes = BTreeMap::new();
    for query in stride::workload::tpcds() {
        let mut session = engine.session();
        session.set_default_schema(&schema).unwrap();
        let t = Instant::now();
        let outcome = match session.query(&query.sql) {
            Err(e) => Outcome::Error(e.to_string()),
            Ok(out) => {
                let path = format!("{answers}/{}.csv", query.name);
                let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
                let mut expected = common::parse_csv(&text);
                let header = expected.remove(0);
                let actual = common::rows_as_text(&out.batches);
                if out.schema.fields().len() != header.len() {
                    Outcome::Differs(format!(
                        "{} columns, expected {}",
                        out.schema.fields().len(),
                        header.len()
                    ))
                } else {
                    match common::match_rows(&actual, &expected) {
                        Ok(()) => match first_out_of_order(&query.sql, &actual, &expected) {
                            None => Outcome::Match,
                            Some(row) => Outcome::OrderDiffers(row),
                        },
                        Err(e) => Outcome::Differs(e),
                    }
                }
            }
        };
        eprintln!("{}: {:?} in {:.1?}", query.name, outcome, t.elapsed());
        outcomes.insert(query.name, outcome);
    }
    outcomes
}

#[test]
fn tpcds_queries_match_duckdb() {
    let custom = std::env::var("STRIDE_TPCDS_ANSWERS").ok();
    let sf: f64 = std::env::var("STRIDE_TPCDS_SF")
        .ok()
        .map(|s| s.parse().expect("STRIDE_TPCDS_SF: a number"))
        .unwrap_or(0.01);
    let answers = custom
        .clone()
        .unwrap_or_else(|| format!("{}/tests/tpcds-answers", env!("CARGO_MANIFEST_DIR")));
    let outcomes = run_all(sf, &answers);
    let matched = outcomes.values().filter(|o| **o == Outcome::Match).count();
    eprintln!("{matched} of {} queries match DuckDB", outcomes.len());
    assert_eq!(outcomes.len(), 99);
    if custom.is_some() {
        for (name, outcome) in &outcomes {
            if *outcome != Outcome::Match {
                println!("{name}: {outcome:?}");
            }
        }
        return;
    }
    let mut wrong = Vec::new();
    for (name, outcome) in &outcomes {
        let failing = FAILING.iter().find(|(q, _)| q == name);
        let different = DIFFERENT.iter().find(|(q, _)| q == name);
        match (outcome, failing, different) {
            (Outcome::Match, None, None) => {}
            (Outcome::Error(e), Some((_, listed)), None) if e == listed => {}
            (Outcome::Differs(_), None, Some(_)) => {}
            _ => wrong.push(format!(
                "{name}: {outcome:?}, listed as {:?}",
                failing.or(different)
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "outcomes other than listed:\n{}",
        wrong.join("\n")
    );
}
