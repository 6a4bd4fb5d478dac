//! Chrome / Perfetto trace JSON of the workers' timelines (seed 001 Fig. 5):
//! one complete event (`ph: "X"`) per task and finalization step, `pid` 1,
//! `tid` the worker, named after the query when the benchmark knows which
//! query the resource group belongs to, and the queries themselves as
//! events on their own track (`pid` 2, one `tid` per query sample).
//!
//! In-process samples name the resource groups that ran them, and those
//! groups are labelled with the sample's query. Groups no sample names (a
//! run over the wire, uncorrelated subqueries run during planning) are
//! matched by time: labelled when exactly one sample was in flight for the
//! whole span of the group's tasks; otherwise they keep their id only.
//!
//! Every step's `args` carry the task set it belongs to: `task_set` (the
//! planned stage), `entry` (which of the group's installed task sets, so
//! that a stage's follow-ups are told apart) and `step` (the task set's
//! name, which the scheduler records with its finalization; a task set
//! still running when the trace was taken has none), and `cpu_us`, the CPU
//! time the worker's thread used in it (below `dur` when the OS ran other
//! threads meanwhile) and `faults`, the page faults it took.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};
use stride_sched::TaskRecord;

use super::stats::Sample;

/// Builds the trace document. `origin` is the tracer's clock start, `t0` the
/// instant the samples' times count from.
pub fn document(records: &[TaskRecord], origin: Instant, t0: Instant, samples: &[Sample]) -> Value {
    // Samples in the tracer's clock, microseconds.
    let shift_us = t0.saturating_duration_since(origin).as_secs_f64() * 1e6;
    let windows: Vec<(f64, f64, String)> = samples
        .iter()
        .map(|s| {
            (
                shift_us + s.start * 1e6,
                shift_us + s.end * 1e6,
                format!("{}/{}", s.class, s.query),
            )
        })
        .collect();
    let mut spans: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for r in records {
        let (a, b) = (r.start_ns as f64 / 1e3, r.end_ns as f64 / 1e3);
        let e = spans.entry(r.group).or_insert((a, b));
        e.0 = e.0.min(a);
        e.1 = e.1.max(b);
    }
    let mut names: BTreeMap<u64, String> = BTreeMap::new();
    for s in samples {
        for &g in &s.groups {
            names.insert(g, format!("{}/{}", s.class, s.query));
        }
    }
    let by_time: Vec<(u64, String)> = spans
        .iter()
        .filter(|(g, _)| !names.contains_key(g))
        .filter_map(|(&g, &(a, b))| {
            let mut hits = windows.iter().filter(|w| w.0 <= a && b <= w.1);
            match (hits.next(), hits.next()) {
                (Some(w), None) => Some((g, w.2.clone())),
                _ => None,
            }
        })
        .collect();
    names.extend(by_time);
    let steps: BTreeMap<(u64, u64), &str> = records
        .iter()
        .filter_map(|r| Some(((r.group, r.entry), r.name.as_deref()?)))
        .collect();
    let mut events = Vec::with_capacity(records.len() + samples.len() + 8);
    events.push(
        json!({"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "stride workers"}}),
    );
    events.push(json!({"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "queries"}}));
    let mut workers: Vec<usize> = records.iter().map(|r| r.worker).collect();
    workers.sort_unstable();
    workers.dedup();
    for w in workers {
        events.push(json!({"ph": "M", "pid": 1, "tid": w, "name": "thread_name",
            "args": {"name": format!("worker {w}")}}));
    }
    for r in records {
        let label = names.get(&r.group).map_or_else(
            || format!("group {}", r.group),
            |n| format!("{n} (group {})", r.group),
        );
        let name = if r.finalize {
            format!("{label} finalize")
        } else {
            label
        };
        events.push(json!({
            "ph": "X", "pid": 1, "tid": r.worker, "name": name,
            "cat": if r.finalize { "finalize" } else { "task" },
            "ts": r.start_ns as f64 / 1e3,
            "dur": (r.end_ns - r.start_ns) as f64 / 1e3,
            "args": {"group": r.group, "task_set": r.task_set, "entry": r.entry,
                "step": steps.get(&(r.group, r.entry)), "cpu_us": r.cpu_ns.map(|c| c as f64 / 1e3),
                "faults": r.faults,
                "morsels": r.morsels,
                "tuples": r.tuples, "query": names.get(&r.group)},
        }));
    }
    for (i, s) in samples.iter().enumerate() {
        events.push(json!({
            "ph": "X", "pid": 2, "tid": i, "name": format!("{}/{}", s.class, s.query),
            "cat": "query",
            "ts": shift_us + s.arrival * 1e6,
            "dur": (s.end - s.arrival) * 1e6,
            "args": {"latency_ms": s.latency_ms, "slowdown": s.slowdown(), "groups": s.groups,
                "send_ms": (s.start - s.arrival) * 1e3,
                "phases": s.phases.map(super::phases::Phases::to_json),
                "error": s.error},
        }));
    }
    json!({"traceEvents": events, "displayTimeUnit": "ms"})
}

pub fn write(
    path: &Path,
    records: &[TaskRecord],
    origin: Instant,
    t0: Instant,
    samples: &[Sample],
) -> Result<()> {
    let doc = document(records, origin, t0, samples);
    std::fs::write(path, serde_json::to_string(&doc)?)
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "wrote {} ({} task records; open in https://ui.perfetto.dev or chrome://tracing)",
        path.display(),
        records.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn groups_are_named_when_one_query_covers_them() {
        let origin = Instant::now();
        let t0 = origin + Duration::from_millis(10);
        let rec = |worker, group, s_ms: u64, e_ms: u64| TaskRecord {
            worker,
            start_ns: s_ms * 1_000_000,
            end_ns: e_ms * 1_000_000,
            group,
            task_set: 0,
            entry: 0,
            morsels: 2,
            tuples: 100,
            finalize: false,
            cpu_ns: Some(1_000_000),
            faults: Some(12),
            name: None,
        };
        // Sample q6 runs 11..20 ms on the tracer's clock (1..10 ms after t0).
        let sample = Sample {
            query: "q6".into(),
            class: "short".into(),
            arrival: 0.001,
            start: 0.001,
            end: 0.010,
            latency_ms: 9.0,
            isolated_ms: Some(3.0),
            warmup: false,
            error: None,
            phases: None,
            isolated_phases: None,
            groups: Vec::new(),
            estimated_cpu_ms: None,
            task_cpu_ms: None,
            server_tag: None,
        };
        let finalized = TaskRecord {
            finalize: true,
            name: Some("pipeline 0: scan → result".into()),
            morsels: 0,
            tuples: 0,
            ..rec(1, 7, 19, 20)
        };
        let records = [
            rec(0, 7, 12, 14),
            rec(1, 7, 13, 19),
            finalized,
            rec(0, 8, 30, 31),
        ];
        let doc = document(&records, origin, t0, std::slice::from_ref(&sample));
        let events = doc["traceEvents"].as_array().unwrap();
        let tasks: Vec<&Value> = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .collect();
        assert_eq!(tasks.len(), 4);
        assert_eq!(tasks[0]["name"], "short/q6 (group 7)");
        assert_eq!(tasks[2]["name"], "short/q6 (group 7) finalize");
        assert_eq!(tasks[3]["name"], "group 8");
        assert_eq!(tasks[1]["tid"], 1);
        assert_eq!(tasks[1]["dur"], 6000.0);
        assert_eq!(tasks[0]["args"]["tuples"], 100);
        // The finalization names its task set for the set's tasks too.
        assert_eq!(tasks[0]["args"]["step"], "pipeline 0: scan → result");
        assert_eq!(tasks[3]["args"]["step"], Value::Null);
        assert_eq!(tasks[0]["args"]["cpu_us"], 1000.0);
        assert_eq!(tasks[0]["args"]["faults"], 12);
        let query = events
            .iter()
            .find(|e| e["pid"] == 2 && e["ph"] == "X")
            .unwrap();
        assert_eq!(query["ts"], 11000.0);

        // A sample that names its groups labels them whatever the times:
        // group 8 runs outside every window, and group 7 now lies inside
        // two samples' windows, which time alone could not tell apart.
        let named = Sample {
            query: "q1".into(),
            groups: vec![8, 7],
            ..sample.clone()
        };
        let doc = document(&records, origin, t0, &[sample, named]);
        let names: Vec<&str> = doc["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X" && e["pid"] == 1)
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "short/q1 (group 7)",
                "short/q1 (group 7)",
                "short/q1 (group 7) finalize",
                "short/q1 (group 8)"
            ]
        );
    }
}
