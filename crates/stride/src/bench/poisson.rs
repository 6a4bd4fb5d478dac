//! The open-loop Poisson benchmark (seed 001 §5.1, seed 000 §4.1): queries
//! arrive with exponentially distributed gaps at rate λ = α / d, d the mean
//! isolated duration of a drawn query; each arrival is sent at once from its
//! own thread, whatever is still running, and its latency counts from the
//! arrival time (queueing included).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::driver::Target;
use super::mix::{Isolated, Mix};
use super::progress::Progress;
use super::stats::{points, summarize_run, Sample};

/// One run's settings.
#[derive(Debug, Clone)]
pub struct PoissonConfig {
    /// Load factor α.
    pub load: f64,
    /// Arrivals are generated for this many seconds.
    pub duration_s: f64,
    /// Arrivals before this time are run but not measured.
    pub warmup_s: f64,
    pub seed: u64,
    /// Print a progress line every second.
    pub progress: bool,
}

/// One scheduled query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    /// Seconds after the run's start.
    pub at: f64,
    pub class: usize,
    pub query: usize,
}

/// The arrival schedule: the seed fixes the sequence of queries and of
/// unit-mean exponential gaps; λ only scales time, so runs at different loads
/// (and under different policies) see the same queries in the same order.
pub fn arrivals(mix: &Mix, lambda: f64, duration_s: f64, seed: u64) -> Vec<Arrival> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let mut t = 0.0;
    loop {
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / lambda;
        if t >= duration_s {
            return out;
        }
        let (class, query) = mix.draw(&mut rng);
        out.push(Arrival {
            at: t,
            class,
            query,
        });
    }
}

/// A finished run: its samples and its JSON document.
pub struct PoissonRun {
    /// The instant sample times count from.
    pub t0: Instant,
    pub samples: Vec<Sample>,
    pub json: Value,
}

pub fn run(
    target: &Arc<Target>,
    mix: &Mix,
    iso: &Isolated,
    cfg: &PoissonConfig,
    policy: &str,
) -> Result<PoissonRun> {
    if !(cfg.load > 0.0 && cfg.load.is_finite()) {
        bail!("the load must be a positive number (got {})", cfg.load);
    }
    if !(cfg.duration_s > 0.0) || cfg.warmup_s < 0.0 || cfg.warmup_s >= cfg.duration_s {
        bail!(
            "need 0 <= warm-up ({} s) < duration ({} s)",
            cfg.warmup_s,
            cfg.duration_s
        );
    }
    let mean_ms = mix.mean_isolated_ms(iso)?;
    let lambda = cfg.load / (mean_ms / 1e3);
    let schedule = arrivals(mix, lambda, cfg.duration_s, cfg.seed);
    let samples = Arc::new(Mutex::new(Vec::with_capacity(schedule.len())));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let progress = Progress::start(
        cfg.progress,
        format!("poisson {policy} α={}", cfg.load),
        cfg.duration_s,
        in_flight.clone(),
    );
    let t0 = Instant::now();
    let mut threads = Vec::with_capacity(schedule.len());
    for a in &schedule {
        let due = t0 + Duration::from_secs_f64(a.at);
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
        let class = &mix.classes[a.class];
        let query = &class.queries[a.query];
        let (schema, name, class_name, sql) = (
            class.schema.clone(),
            query.name.clone(),
            class.name.clone(),
            query.sql.clone(),
        );
        let isolated_ms = iso.median_ms(&schema, &name).ok();
        let (target, samples, in_flight, done) = (
            target.clone(),
            samples.clone(),
            in_flight.clone(),
            progress.done.clone(),
        );
        let at = a.at;
        in_flight.fetch_add(1, Ordering::Relaxed);
        let thread = std::thread::Builder::new()
            .name("bench-query".into())
            .stack_size(8 << 20)
            .spawn(move || {
                let start = t0.elapsed().as_secs_f64();
                let result = target.acquire(&schema).and_then(|mut conn| {
                    let r = conn.run(&target, &sql);
                    target.release(&schema, conn);
                    r
                });
                let end = t0.elapsed().as_secs_f64();
                in_flight.fetch_sub(1, Ordering::Relaxed);
                done.fetch_add(1, Ordering::Relaxed);
                samples
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Sample {
                        query: name,
                        class: class_name,
                        arrival: at,
                        start,
                        end,
                        latency_ms: (end - at) * 1e3,
                        isolated_ms,
                        // Set below, once the run is over.
                        warmup: false,
                        error: result.err().map(|e| format!("{e:#}")),
                    });
            })?;
        threads.push(thread);
        progress.arrived.fetch_add(1, Ordering::Relaxed);
    }
    for t in threads {
        if t.join().is_err() {
            bail!("a query thread panicked");
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    progress.stop();
    let mut samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    for s in &mut samples {
        s.warmup = s.arrival < cfg.warmup_s;
    }
    samples.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    let failed: Vec<&Sample> = samples.iter().filter(|s| s.error.is_some()).collect();
    if let Some(first) = failed.first() {
        eprintln!(
            "warning: {} of {} queries failed; first: {}.{}: {}",
            failed.len(),
            samples.len(),
            first.class,
            first.query,
            first.error.as_deref().unwrap_or("")
        );
    }
    let mut json = json!({
        "kind": "poisson",
        "system": target.system(),
        "policy": policy,
        "load": cfg.load,
        "lambda_qps": lambda,
        "mean_isolated_ms": mean_ms,
        "seed": cfg.seed,
        "duration_s": cfg.duration_s,
        "warmup_s": cfg.warmup_s,
        "measured_s": cfg.duration_s - cfg.warmup_s,
        "wall_s": wall,
        "workers": target.workers(),
        "classes": mix.to_json(),
        "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
    });
    let summary = summarize_run(&points(&json), cfg.duration_s - cfg.warmup_s);
    json["summary"] = summary.to_json();
    Ok(PoissonRun { t0, samples, json })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::mix::{Class, Mix};
    use stride::workload::Query;

    fn mix() -> Mix {
        let q = |n: &str| Query {
            name: n.into(),
            sql: String::new(),
        };
        Mix {
            classes: vec![
                Class {
                    name: "short".into(),
                    schema: "a".into(),
                    weight: 3.0,
                    queries: vec![q("q1"), q("q2")],
                },
                Class {
                    name: "long".into(),
                    schema: "b".into(),
                    weight: 1.0,
                    queries: vec![q("q1")],
                },
            ],
        }
    }

    #[test]
    fn arrivals_have_the_rate_and_scale_with_load() {
        let m = mix();
        let a = arrivals(&m, 50.0, 200.0, 3);
        let rate = a.len() as f64 / 200.0;
        assert!((rate - 50.0).abs() < 2.0, "rate {rate}");
        assert!(a.windows(2).all(|w| w[0].at <= w[1].at));
        let mean_gap = a.last().unwrap().at / a.len() as f64;
        assert!((mean_gap - 0.02).abs() < 0.001);
        // Same seed, twice the rate: the same queries at half the times.
        let b = arrivals(&m, 100.0, 100.0, 3);
        assert!(b.len().abs_diff(a.len()) <= 1);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.class, x.query), (y.class, y.query));
            assert!((x.at / 2.0 - y.at).abs() < 1e-9);
        }
        assert_ne!(arrivals(&m, 50.0, 10.0, 4), arrivals(&m, 50.0, 10.0, 3));
    }
}
