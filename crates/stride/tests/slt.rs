//! sqllogictest-style SQL tests: every file in `tests/slt/` runs under several
//! scheduler configurations (1 and 2 workers, tiny and adaptive morsels), and
//! once more with every sort, aggregate and buffer spilling every batch to
//! disk, each on a fresh engine.
//!
//! File format (a subset of sqllogictest):
//!
//! ```text
//! # comment
//! statement ok
//! CREATE TABLE t (a INT)
//!
//! statement error <text the error message must contain>
//! SELECT * FROM missing
//!
//! query <one letter per column: I integer, T text, R real/decimal, D date, B bool> [rowsort]
//! SELECT a FROM t
//! ----
//! 1
//! ```
//!
//! Result cells are separated by one space; NULL prints as `NULL` and the empty
//! string as `(empty)`. `rowsort` sorts the result rows (as text) before comparing.

mod common;

use std::path::Path;

use stride_exec::placement::{Affinity, Placement};
use stride_sched::SchedulerConfig;
use stride_sql::{Engine, EngineConfig, StatementOutput};

#[derive(Debug)]
enum Record {
    Statement {
        line: usize,
        sql: String,
        error: Option<String>,
    },
    Query {
        line: usize,
        sql: String,
        columns: usize,
        rowsort: bool,
        expected: Vec<String>,
    },
}

fn parse(text: &str) -> Vec<Record> {
    let lines: Vec<&str> = text.lines().collect();
    let mut records = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_end();
        if line.is_empty() || line.starts_with('#') {
            i += 1;
            continue;
        }
        let start = i + 1;
        let header: Vec<&str> = line.split_whitespace().collect();
        i += 1;
        let mut sql = Vec::new();
        while i < lines.len() && !lines[i].trim().is_empty() && lines[i].trim_end() != "----" {
            sql.push(lines[i]);
            i += 1;
        }
        let sql = sql.join("\n");
        match header[0] {
            "statement" => {
                let error = match header.get(1) {
                    Some(&"ok") => None,
                    Some(&"error") => {
                        Some(line.splitn(3, ' ').nth(2).unwrap_or("").trim().to_string())
                    }
                    other => panic!("line {start}: bad statement header {other:?}"),
                };
                records.push(Record::Statement {
                    line: start,
                    sql,
                    error,
                });
            }
            "query" => {
                let columns = header.get(1).map_or(0, |t| t.len());
                let rowsort = header.get(2) == Some(&"rowsort");
                let mut expected = Vec::new();
                if i < lines.len() && lines[i].trim_end() == "----" {
                    i += 1;
                    while i < lines.len() && !lines[i].trim().is_empty() {
                        expected.push(lines[i].trim_end().to_string());
                        i += 1;
                    }
                }
                records.push(Record::Query {
                    line: start,
                    sql,
                    columns,
                    rowsort,
                    expected,
                });
            }
            other => panic!("line {start}: unknown record type {other:?}"),
        }
    }
    records
}

fn render(out: &stride_sql::QueryOutput) -> Vec<String> {
    common::rows_as_text(&out.batches)
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|c| {
                    if c.is_empty() {
                        "(empty)".to_string()
                    } else {
                        c
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// One configuration the files run under.
#[derive(Debug, Clone, Copy)]
struct RunConfig {
    workers: usize,
    /// Fixed morsels of this many rows; `None`: adaptive.
    morsel_rows: Option<usize>,
    force_spill: bool,
    /// A synthetic topology (`nodes=N,cores-per-node=M`) with its scan
    /// placement and affinity; `None`: the machine's, defaults.
    numa: Option<(&'static str, Placement, Affinity)>,
}

fn run_file(path: &Path, config: RunConfig) -> (Vec<String>, u64) {
    let RunConfig {
        workers,
        morsel_rows,
        force_spill,
        numa,
    } = config;
    let text = std::fs::read_to_string(path).unwrap();
    let mut topology = stride_sched::Topology::machine();
    let mut scans = stride_sql::ScanDefaults::default();
    if let Some((spec, placement, affinity)) = numa {
        topology = std::sync::Arc::new(stride_sched::Topology::from_spec(spec).unwrap());
        scans.placement = placement;
        scans.affinity = affinity;
    }
    let engine = Engine::new(EngineConfig {
        scheduler: SchedulerConfig {
            workers,
            // The adaptive-morsel run also uses the fair policy.
            policy: if morsel_rows.is_none() {
                stride_sched::Policy::Fair
            } else {
                stride_sched::Policy::Fifo
            },
            morsels: match morsel_rows {
                Some(n) => stride_sched::MorselPolicy::Fixed(n),
                None => stride_sched::MorselPolicy::Adaptive(Default::default()),
            },
            pin_workers: false,
            topology,
            ..SchedulerConfig::default()
        },
        spill: stride_sql::SpillConfig {
            force: force_spill,
            ..Default::default()
        },
        scans,
        ..Default::default()
    });
    let mut session = engine.session();
    let name = path.file_name().unwrap().to_string_lossy().to_string();
    let mut failures = Vec::new();
    for record in parse(&text) {
        match record {
            Record::Statement { line, sql, error } => match (session.execute(&sql), error) {
                (Ok(_), None) => {}
                (Err(e), None) => failures.push(format!("{name}:{line}: statement failed: {e}")),
                (Ok(_), Some(_)) => failures.push(format!(
                    "{name}:{line}: statement succeeded, expected an error"
                )),
                (Err(e), Some(want)) => {
                    if !e.to_string().to_lowercase().contains(&want.to_lowercase()) {
                        failures.push(format!(
                            "{name}:{line}: error \"{e}\" does not contain \"{want}\""
                        ));
                    }
                }
            },
            Record::Query {
                line,
                sql,
                columns,
                rowsort,
                expected,
            } => {
                let out = match session.execute(&sql) {
                    Ok(mut outs) => match outs.pop() {
                        Some(StatementOutput::Query(q)) => q,
                        other => {
                            failures.push(format!("{name}:{line}: not a query result: {other:?}"));
                            continue;
                        }
                    },
                    Err(e) => {
                        failures.push(format!("{name}:{line}: query failed: {e}"));
                        continue;
                    }
                };
                if out.schema.fields().len() != columns {
                    failures.push(format!(
                        "{name}:{line}: {} columns, the header declares {columns}",
                        out.schema.fields().len()
                    ));
                }
                let mut actual = render(&out);
                let mut expected = expected;
                if rowsort {
                    actual.sort();
                    expected.sort();
                }
                if actual != expected {
                    failures.push(format!(
                        "{name}:{line}: result differs\n  expected: {expected:?}\n  actual:   {actual:?}"
                    ));
                }
            }
        }
    }
    let area = engine.runtime().spill_area();
    if area.bytes_on_disk() != 0 {
        failures.push(format!(
            "{name}: {} bytes left in spill files",
            area.bytes_on_disk()
        ));
    }
    (failures, area.spilled_bytes())
}

#[test]
fn sqllogictest_files() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    // `STRIDE_SLT=name` runs only the files whose name contains `name`
    // (while working on one); unset, every file runs.
    if let Ok(only) = std::env::var("STRIDE_SLT") {
        files.retain(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().contains(&only))
        });
    }
    files.sort();
    assert!(!files.is_empty(), "no .slt files in {}", dir.display());
    // Tiny fixed morsels on 1 and 2 workers, and adaptive morsels (seed 001
    // §3.1); then tiny morsels with every spillable operator spilling; then
    // tables placed over synthetic nodes (logical: this machine has one),
    // scanned with each affinity — four nodes with three workers leave one
    // node without workers.
    let plain = |workers, morsel_rows, force_spill| RunConfig {
        workers,
        morsel_rows,
        force_spill,
        numa: None,
    };
    let numa = |workers, spec, placement, affinity| RunConfig {
        workers,
        morsel_rows: Some(2),
        force_spill: false,
        numa: Some((spec, placement, affinity)),
    };
    let configs = [
        plain(1, Some(2), false),
        plain(2, Some(3), false),
        plain(2, None, false),
        plain(2, Some(3), true),
        numa(
            2,
            "nodes=2,cores-per-node=1",
            Placement::Partitioned,
            Affinity::Bound,
        ),
        numa(
            3,
            "nodes=4,cores-per-node=1",
            Placement::Partitioned,
            Affinity::Target,
        ),
        numa(
            2,
            "nodes=2,cores-per-node=1",
            Placement::RoundRobin,
            Affinity::Auto,
        ),
    ];
    let mut failures = Vec::new();
    let mut checked = 0;
    let mut spilled_files = 0;
    for file in &files {
        for &config in &configs {
            let (file_failures, spilled) = run_file(file, config);
            if config.force_spill && spilled > 0 {
                spilled_files += 1;
            }
            for f in file_failures {
                failures.push(format!(
                    "[{} workers, {} morsels{}{}] {f}",
                    config.workers,
                    config
                        .morsel_rows
                        .map_or("adaptive".to_string(), |n| format!("{n}-row")),
                    if config.force_spill { ", spilling" } else { "" },
                    config
                        .numa
                        .map_or(String::new(), |(spec, p, a)| format!(", {spec} {p} {a}")),
                ));
            }
            checked += 1;
        }
    }
    // Files whose statements all fail, or use no breaker, spill nothing.
    assert!(
        spilled_files * 4 >= files.len() * 3,
        "{spilled_files} of {} files spilled",
        files.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures in {checked} file runs:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
