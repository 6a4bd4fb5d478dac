//! Samples (one per finished query) and their summaries: count, mean, p50,
//! p95, p99 and max of latency and slowdown, geometric mean latency and
//! throughput, per class and per query; and the error of the CPU-time
//! estimates the scheduler was given ([`estimation_errors`]). Summaries are
//! computed from the samples' JSON form, so that results written by other
//! drivers (`scripts/peers.py`) are summarized by the same code.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::phases::Phases;

/// One query of a run.
#[derive(Debug, Clone)]
pub struct Sample {
    pub query: String,
    pub class: String,
    /// Seconds since the run's start: when the query arrived (Poisson) or was
    /// submitted (spin, isolated).
    pub arrival: f64,
    /// When the driver actually sent it.
    pub start: f64,
    pub end: f64,
    /// `end - arrival`, in milliseconds (queueing included).
    pub latency_ms: f64,
    pub isolated_ms: Option<f64>,
    /// Arrived during the warm-up: excluded from summaries.
    pub warmup: bool,
    pub error: Option<String>,
    /// Where the time went (in-process only).
    pub phases: Option<Phases>,
    /// The phases of the query's isolated run of median latency.
    pub isolated_phases: Option<Phases>,
    /// The resource groups that ran it (in-process only): what names its
    /// tasks in a trace.
    pub groups: Vec<u64>,
    /// The request's tag on a Stride server, by which its CPU time and
    /// estimate are read back after a wire run (not serialized).
    pub server_tag: Option<u64>,
    /// The CPU time of its tasks that the scheduler was told to expect
    /// (SRPT's remaining-work estimate at submission; `None` when the
    /// engine gave no estimate).
    pub estimated_cpu_ms: Option<f64>,
    /// The CPU time its tasks took, what the estimate predicts (in-process
    /// directly; over the wire from a Stride server's `stride.queries`).
    pub task_cpu_ms: Option<f64>,
}

impl Sample {
    pub fn slowdown(&self) -> Option<f64> {
        self.isolated_ms
            .filter(|&i| i > 0.0)
            .map(|i| self.latency_ms / i)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "query": self.query, "class": self.class,
            "arrival_s": self.arrival, "start_s": self.start, "end_s": self.end,
            "latency_ms": self.latency_ms, "isolated_ms": self.isolated_ms,
            "slowdown": self.slowdown(), "warmup": self.warmup, "error": self.error,
            "phases": self.phases.map(Phases::to_json),
            "isolated_phases": self.isolated_phases.map(Phases::to_json),
            "groups": self.groups,
            "estimated_cpu_ms": self.estimated_cpu_ms, "task_cpu_ms": self.task_cpu_ms,
        })
    }
}

/// Distribution statistics of one metric.
#[derive(Debug, Clone, Copy, Default)]
pub struct Dist {
    pub count: usize,
    pub mean: f64,
    pub geomean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Dist {
    pub fn of(values: &[f64]) -> Dist {
        if values.is_empty() {
            return Dist::default();
        }
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len() as f64;
        Dist {
            count: v.len(),
            mean: v.iter().sum::<f64>() / n,
            geomean: (v.iter().map(|x| x.max(1e-9).ln()).sum::<f64>() / n).exp(),
            p50: percentile(&v, 0.50),
            p95: percentile(&v, 0.95),
            p99: percentile(&v, 0.99),
            max: v[v.len() - 1],
        }
    }

    pub fn to_json(self) -> Value {
        json!({"count": self.count, "mean": self.mean, "geomean": self.geomean,
            "p50": self.p50, "p95": self.p95, "p99": self.p99, "max": self.max})
    }
}

/// Latency and slowdown of a set of samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub latency: Dist,
    pub slowdown: Dist,
    pub errors: usize,
    /// Completions per second over the measured window.
    pub throughput: f64,
}

impl Summary {
    pub fn to_json(self) -> Value {
        json!({"count": self.latency.count, "errors": self.errors,
            "throughput_qps": self.throughput,
            "latency_ms": self.latency.to_json(), "slowdown": self.slowdown.to_json()})
    }
}

/// A sample as read back from JSON (what summaries and plots need).
#[derive(Debug, Clone)]
pub struct Point {
    pub query: String,
    pub class: String,
    pub latency_ms: f64,
    pub slowdown: Option<f64>,
    pub failed: bool,
}

/// The measured (non-warm-up) samples of a run's JSON.
pub fn points(run: &Value) -> Vec<Point> {
    let Some(samples) = run.get("samples").and_then(Value::as_array) else {
        return Vec::new();
    };
    samples
        .iter()
        .filter(|s| !s.get("warmup").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|s| {
            Some(Point {
                query: s.get("query")?.as_str()?.to_string(),
                class: s.get("class")?.as_str()?.to_string(),
                latency_ms: s.get("latency_ms")?.as_f64()?,
                slowdown: s.get("slowdown").and_then(Value::as_f64),
                failed: s.get("error").is_some_and(|e| !e.is_null()),
            })
        })
        .collect()
}

/// Summary of points over a window of `seconds`.
pub fn summarize(points: &[&Point], seconds: f64) -> Summary {
    let ok: Vec<&&Point> = points.iter().filter(|p| !p.failed).collect();
    let lat: Vec<f64> = ok.iter().map(|p| p.latency_ms).collect();
    let slow: Vec<f64> = ok.iter().filter_map(|p| p.slowdown).collect();
    Summary {
        latency: Dist::of(&lat),
        slowdown: Dist::of(&slow),
        errors: points.len() - ok.len(),
        throughput: if seconds > 0.0 {
            ok.len() as f64 / seconds
        } else {
            f64::NAN
        },
    }
}

/// Summaries of a run: overall, per class, per class and query.
pub struct RunSummary {
    pub all: Summary,
    pub classes: BTreeMap<String, Summary>,
    pub queries: BTreeMap<(String, String), Summary>,
}

pub fn summarize_run(points: &[Point], seconds: f64) -> RunSummary {
    let all: Vec<&Point> = points.iter().collect();
    let mut by_class: BTreeMap<String, Vec<&Point>> = BTreeMap::new();
    let mut by_query: BTreeMap<(String, String), Vec<&Point>> = BTreeMap::new();
    for p in points {
        by_class.entry(p.class.clone()).or_default().push(p);
        by_query
            .entry((p.class.clone(), p.query.clone()))
            .or_default()
            .push(p);
    }
    RunSummary {
        all: summarize(&all, seconds),
        classes: by_class
            .into_iter()
            .map(|(k, v)| (k, summarize(&v, seconds)))
            .collect(),
        queries: by_query
            .into_iter()
            .map(|(k, v)| (k, summarize(&v, seconds)))
            .collect(),
    }
}

/// How far the CPU-time estimates of one class's queries were from the
/// CPU time they took: the distribution of |ln(estimated / actual)| (0: exact;
/// ln 2 ≈ 0.69: off by a factor of two).
#[derive(Debug, Clone, Copy, Default)]
pub struct EstimationError {
    /// Measured queries that took CPU time.
    pub queries: usize,
    /// Of those, the queries the scheduler had an estimate for.
    pub estimated: usize,
    pub median: f64,
    pub p90: f64,
    /// Geometric mean of estimated / actual: above 1 the estimates were too
    /// high on the whole, below 1 too low.
    pub bias: f64,
}

impl EstimationError {
    pub fn to_json(self) -> Value {
        json!({"queries": self.queries, "estimated": self.estimated,
            "abs_log_error_p50": self.median, "abs_log_error_p90": self.p90,
            "bias": self.bias})
    }
}

/// The estimation error per class of a run's measured, successful samples
/// (in-process, or over the wire to a Stride server, whose `stride.queries`
/// gives them: samples without `task_cpu_ms` count nowhere).
pub fn estimation_errors(run: &Value) -> BTreeMap<String, EstimationError> {
    let mut by_class: BTreeMap<String, (usize, Vec<f64>)> = BTreeMap::new();
    let samples = run.get("samples").and_then(Value::as_array);
    for s in samples.into_iter().flatten() {
        let skip = s.get("warmup").and_then(Value::as_bool).unwrap_or(false)
            || s.get("error").is_some_and(|e| !e.is_null());
        let actual = s.get("task_cpu_ms").and_then(Value::as_f64);
        let (Some(class), Some(actual)) = (s.get("class").and_then(Value::as_str), actual) else {
            continue;
        };
        if skip || actual <= 0.0 {
            continue;
        }
        let entry = by_class.entry(class.to_string()).or_default();
        entry.0 += 1;
        if let Some(est) = s.get("estimated_cpu_ms").and_then(Value::as_f64) {
            entry.1.push((est.max(1e-6) / actual).ln());
        }
    }
    by_class
        .into_iter()
        .map(|(class, (queries, logs))| {
            let mut abs: Vec<f64> = logs.iter().map(|l| l.abs()).collect();
            abs.sort_by(f64::total_cmp);
            let bias = if logs.is_empty() {
                f64::NAN
            } else {
                (logs.iter().sum::<f64>() / logs.len() as f64).exp()
            };
            let e = EstimationError {
                queries,
                estimated: logs.len(),
                median: percentile(&abs, 0.5),
                p90: percentile(&abs, 0.9),
                bias,
            };
            (class, e)
        })
        .collect()
}

/// Prints [`estimation_errors`] as a table (nothing when no sample had CPU
/// times, e.g. over the wire to another system).
pub fn print_estimation_errors(
    out: &mut impl std::io::Write,
    errors: &BTreeMap<String, EstimationError>,
) -> std::io::Result<()> {
    if errors.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nCPU-time estimates (|ln(estimated / actual)|; bias: geometric mean of estimated / actual):"
    )?;
    writeln!(
        out,
        "{:<8} {:>8} {:>10} {:>8} {:>8} {:>8}",
        "class", "queries", "estimated", "p50", "p90", "bias"
    )?;
    for (class, e) in errors {
        writeln!(
            out,
            "{:<8} {:>8} {:>10} {:>8.2} {:>8.2} {:>8.2}",
            class, e.queries, e.estimated, e.median, e.p90, e.bias
        )?;
    }
    Ok(())
}

impl RunSummary {
    pub fn to_json(&self) -> Value {
        let mut classes = serde_json::Map::new();
        for (k, s) in &self.classes {
            classes.insert(k.clone(), s.to_json());
        }
        let mut queries = serde_json::Map::new();
        for ((c, q), s) in &self.queries {
            queries.insert(format!("{c}/{q}"), s.to_json());
        }
        json!({"all": self.all.to_json(), "classes": Value::Object(classes),
            "queries": Value::Object(queries)})
    }

    /// A plain-text table: one line per class, then per query.
    pub fn print(&self, out: &mut impl std::io::Write, per_query: bool) -> std::io::Result<()> {
        writeln!(
            out,
            "{:<14} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "class/query",
            "count",
            "mean_ms",
            "p50_ms",
            "p95_ms",
            "p99_ms",
            "max_ms",
            "gmean_ms",
            "sd_mean",
            "sd_p95",
            "sd_max",
            "qps"
        )?;
        let line = |out: &mut dyn std::io::Write, name: &str, s: &Summary| {
            writeln!(
                out,
                "{:<14} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2}{}",
                name,
                s.latency.count,
                s.latency.mean,
                s.latency.p50,
                s.latency.p95,
                s.latency.p99,
                s.latency.max,
                s.latency.geomean,
                s.slowdown.mean,
                s.slowdown.p95,
                s.slowdown.max,
                s.throughput,
                if s.errors > 0 {
                    format!("  ({} failed)", s.errors)
                } else {
                    String::new()
                }
            )
        };
        line(out, "all", &self.all)?;
        for (c, s) in &self.classes {
            line(out, c, s)?;
        }
        if per_query {
            let mut keys: Vec<_> = self.queries.keys().collect();
            keys.sort_by_key(|(c, q)| (c.clone(), super::mix::query_order(q)));
            for k in keys {
                line(out, &format!("{}/{}", k.0, k.1), &self.queries[k])?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_means() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        let d = Dist::of(&v);
        assert_eq!(d.count, 100);
        assert_eq!(d.p50, 50.0);
        assert_eq!(d.p95, 95.0);
        assert_eq!(d.p99, 99.0);
        assert_eq!(d.max, 100.0);
        assert!((d.mean - 50.5).abs() < 1e-9);
        let g = Dist::of(&[1.0, 100.0]);
        assert!((g.geomean - 10.0).abs() < 1e-9);
        assert_eq!(Dist::of(&[]).count, 0);
    }

    #[test]
    fn summaries_from_json_skip_warmup_and_errors() {
        let s = |q: &str, lat: f64, warm: bool, err: Option<&str>| {
            Sample {
                query: q.into(),
                class: "short".into(),
                arrival: 0.0,
                start: 0.0,
                end: lat / 1e3,
                latency_ms: lat,
                isolated_ms: Some(10.0),
                warmup: warm,
                error: err.map(str::to_string),
                phases: None,
                isolated_phases: None,
                groups: Vec::new(),
                estimated_cpu_ms: None,
                task_cpu_ms: None,
                server_tag: None,
            }
            .to_json()
        };
        let run = json!({"samples": [s("q1", 20.0, false, None), s("q1", 40.0, false, None),
            s("q6", 1000.0, true, None), s("q6", 5.0, false, Some("boom"))]});
        let pts = points(&run);
        assert_eq!(pts.len(), 3);
        let sum = summarize_run(&pts, 2.0);
        let short = &sum.classes["short"];
        assert_eq!(short.latency.count, 2);
        assert_eq!(short.errors, 1);
        assert!((short.slowdown.mean - 3.0).abs() < 1e-9);
        assert!((short.throughput - 1.0).abs() < 1e-9);
    }

    #[test]
    fn estimation_errors_per_class() {
        let s = |class: &str, est: Option<f64>, cpu: Option<f64>, warm: bool| {
            json!({"class": class, "query": "q1", "warmup": warm, "error": null,
                "estimated_cpu_ms": est, "task_cpu_ms": cpu})
        };
        let run = json!({"samples": [
            s("short", Some(20.0), Some(10.0), false),  // ln 2
            s("short", Some(10.0), Some(10.0), false),  // 0
            s("short", Some(5.0), Some(10.0), false),   // ln 2, too low
            s("short", None, Some(10.0), false),        // no estimate
            s("short", Some(1000.0), Some(1.0), true),  // warm-up: ignored
            s("long", Some(100.0), Some(100.0), false),
            s("wire", None, None, false),               // no CPU: ignored
        ]});
        let e = estimation_errors(&run);
        assert_eq!(e.len(), 2);
        let short = e["short"];
        assert_eq!((short.queries, short.estimated), (4, 3));
        assert!((short.median - 2f64.ln()).abs() < 1e-9);
        assert!((short.p90 - 2f64.ln()).abs() < 1e-9);
        assert!((short.bias - 1.0).abs() < 1e-9, "over and under cancel");
        assert_eq!(e["long"].median, 0.0);
    }
}
