//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

pub mod binary;
pub mod client;
pub mod wire;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};

/// Formats every cell of `batches` as text: NULL as `NULL`, everything else as
/// Arrow displays it (ISO dates, decimals with their scale).
pub fn rows_as_text(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let options = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for batch in batches {
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for r in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(r).to_string()).collect());
        }
    }
    rows
}

/// Parses CSV text (RFC 4180: quoted fields may hold commas, quotes and newlines).
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                '"' => quoted = false,
                other => field.push(other),
            }
        } else {
            match c {
                '"' => quoted = true,
                ',' => row.push(std::mem::take(&mut field)),
                '\n' => {
                    row.push(std::mem::take(&mut field));
                    rows.push(std::mem::take(&mut row));
                }
                '\r' => {}
                other => field.push(other),
            }
        }
    }
    if !field.is_empty() || !row.is_empty() {
        row.push(field);
        rows.push(row);
    }
    rows
}

/// Number of digits after the decimal point of a numeric text.
fn scale_of(s: &str) -> i32 {
    s.split_once('.').map_or(0, |(_, f)| f.len() as i32)
}

/// Whether two cells agree: equal text (trailing blanks ignored), or numbers
/// equal within 1e-9 relative, or equal at the precision `actual` is printed
/// with: a decimal result of scale s matches a reference within one unit of
/// its last digit (DataFusion's decimal division truncates at the result
/// scale, where DuckDB returns a double).
pub fn cells_match(actual: &str, expected: &str) -> bool {
    let (a, e) = (actual.trim_end(), expected.trim_end());
    if a == e {
        return true;
    }
    match (a.parse::<f64>(), e.parse::<f64>()) {
        (Ok(x), Ok(y)) => {
            let diff = (x - y).abs();
            let rel = diff <= 1e-9 * x.abs().max(y.abs());
            let at_scale = diff < 10f64.powi(-scale_of(a)) * (1.0 + 1e-9) + 1e-12 * y.abs();
            rel || at_scale
        }
        _ => false,
    }
}

/// Compares rows as multisets (each expected row matched to a distinct actual row).
pub fn match_rows(actual: &[Vec<String>], expected: &[Vec<String>]) -> Result<(), String> {
    if actual.len() != expected.len() {
        return Err(format!(
            "{} rows, expected {}",
            actual.len(),
            expected.len()
        ));
    }
    let mut used = vec![false; actual.len()];
    for (i, exp) in expected.iter().enumerate() {
        // Fast path: the row at the same position.
        let same = |a: &Vec<String>| {
            a.len() == exp.len() && a.iter().zip(exp).all(|(x, y)| cells_match(x, y))
        };
        if !used[i] && same(&actual[i]) {
            used[i] = true;
            continue;
        }
        match (0..actual.len()).find(|&j| !used[j] && same(&actual[j])) {
            Some(j) => used[j] = true,
            None => return Err(format!("expected row {i} {exp:?} not found in the result")),
        }
    }
    Ok(())
}

/// Compares two cells for ordering: numerically when both are numbers.
pub fn compare_cells(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Equal),
        _ => a.cmp(b),
    }
}

/// Checks that `rows` are sorted by `keys` (column index, descending).
pub fn check_sorted(rows: &[Vec<String>], keys: &[(usize, bool)]) -> Result<(), String> {
    for w in rows.windows(2) {
        for &(col, desc) in keys {
            let ord = compare_cells(&w[0][col], &w[1][col]);
            let ord = if desc { ord.reverse() } else { ord };
            match ord {
                std::cmp::Ordering::Less => break,
                std::cmp::Ordering::Greater => {
                    return Err(format!("rows out of order: {:?} before {:?}", w[0], w[1]))
                }
                std::cmp::Ordering::Equal => continue,
            }
        }
    }
    Ok(())
}

/// Compares a query's result with a reference CSV answer (header row first):
/// column count, rows as a multiset with numeric tolerance, and the order
/// `order` (output column, descending) that the query's ORDER BY fixes.
/// Returns the result rows as text for further checks.
pub fn check_answer(
    name: &str,
    out: &stride_sql::QueryOutput,
    csv_path: &str,
    order: &[(usize, bool)],
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let actual = rows_as_text(&out.batches);
    let text = std::fs::read_to_string(csv_path).unwrap_or_else(|e| panic!("{csv_path}: {e}"));
    let mut expected = parse_csv(&text);
    let header = expected.remove(0);
    assert_eq!(
        out.schema.fields().len(),
        header.len(),
        "{name}: column count"
    );
    if let Err(e) = match_rows(&actual, &expected) {
        panic!(
            "{name}: {e}\nactual (first rows): {:?}",
            &actual[..actual.len().min(5)]
        );
    }
    if let Err(e) = check_sorted(&actual, order) {
        panic!("{name}: {e}");
    }
    (actual, expected)
}

/// An engine for the answer tests: `workers` unpinned workers, adaptive
/// morsels, stride scheduling with decaying priorities (the FIFO default runs
/// in the sqllogictest files).
pub fn test_engine(workers: usize) -> Arc<stride_sql::Engine> {
    stride_sql::Engine::new(stride_sql::EngineConfig {
        scheduler: stride_sched::SchedulerConfig {
            workers,
            pin_workers: false,
            policy: stride_sched::Policy::Stride(Default::default()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// ORDER BY of each TPC-H query as (output column, descending).
pub const TPCH_ORDER: [&[(usize, bool)]; 22] = [
    &[(0, false), (1, false)],
    &[(0, true), (2, false), (1, false), (3, false)],
    &[(1, true), (2, false)],
    &[(0, false)],
    &[(1, true)],
    &[],
    &[(0, false), (1, false), (2, false)],
    &[(0, false)],
    &[(0, false), (1, true)],
    &[(2, true)],
    &[(1, true)],
    &[(0, false)],
    &[(1, true), (0, true)],
    &[],
    &[(0, false)],
    &[(3, true), (0, false), (1, false), (2, false)],
    &[],
    &[(4, true), (3, false)],
    &[],
    &[(0, false)],
    &[(1, true), (0, false)],
    &[(0, false)],
];

/// A directory for this test process's files, `stride-<name>-<pid>` under
/// the system's temporary directory, created empty. Directories of the same
/// name left by earlier runs whose process is gone are removed first: test
/// binaries keep their scratch directory for the whole run (servers read
/// from it until the process exits), so no run can remove its own.
pub fn scratch_dir(name: &str) -> std::path::PathBuf {
    let tmp = std::env::temp_dir();
    let prefix = format!("stride-{name}-");
    if let Ok(entries) = std::fs::read_dir(&tmp) {
        for entry in entries.flatten() {
            let file_name = entry.file_name();
            let Some(pid) = file_name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    let dir = tmp.join(format!("{prefix}{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
