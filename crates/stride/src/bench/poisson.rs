//! The open-loop Poisson benchmark (seed 001 §5.1, seed 000 §4.1): queries
//! arrive with exponentially distributed gaps at rate λ = α / d, d the mean
//! isolated duration of a drawn query; each arrival is sent when it is due
//! by a client thread that was waiting for it ([`Pool`]), whatever is still
//! running, and its latency counts from the arrival time (queueing
//! included). Each arrival is an instance of its query: the `k`-th arrival
//! of a query is instance `k` of stream [`ARRIVALS`] ([`instances`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::driver::{attach_server_stats, Target};
use super::machine::{HostCpu, HostShares};
use super::mix::{Isolated, Mix, ARRIVALS};
use super::phases::Breakdown;
use super::progress::Progress;
use super::stats::{estimation_errors, points, summarize_run, Sample};

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

/// The text of each arrival of `schedule`: its query's next instance of
/// stream [`ARRIVALS`] (the validation text with `--fixed-params`). Drawn
/// before the run starts, so that no client spends time on it.
pub fn instances(mix: &Mix, schedule: &[Arrival]) -> Vec<String> {
    let mut seen: std::collections::HashMap<(usize, usize), u64> = Default::default();
    schedule
        .iter()
        .map(|a| {
            let k = seen.entry((a.class, a.query)).or_default();
            let sql = mix.sql(a.class, a.query, ARRIVALS, *k);
            *k += 1;
            sql
        })
        .collect()
}

/// A finished run: its samples and its JSON document.
pub struct PoissonRun {
    /// The instant sample times count from.
    pub t0: Instant,
    pub samples: Vec<Sample>,
    pub json: Value,
    /// How the machine's CPUs spent the run (arrivals and drain).
    pub host: Option<HostShares>,
}

/// Client threads started before the first arrival.
const INITIAL_CLIENTS: usize = 4;

/// The benchmark's clients: threads that each take the next arrival of the
/// schedule, sleep until it is due, send it and wait for its result, like
/// the connections of a real client. A client that sends a query while no
/// other client is waiting for an arrival first starts another client, so
/// that an arrival never waits for a free client (only, in a burst, for a
/// new one to start: a thread's start waits for a core, up to an OS time
/// slice under load, which is why clients are not started per arrival).
struct Pool {
    target: Arc<Target>,
    mix: Mix,
    iso: Isolated,
    schedule: Vec<Arrival>,
    /// The text of each arrival ([`instances`]).
    sql: Vec<String>,
    t0: Instant,
    /// Index of the next arrival no client has taken.
    next: AtomicUsize,
    /// Clients between queries (waiting for their arrival to be due).
    idle: AtomicUsize,
    threads: Mutex<Vec<std::thread::JoinHandle<Result<()>>>>,
    samples: Mutex<Vec<Sample>>,
    in_flight: Arc<AtomicUsize>,
    arrived: Arc<AtomicUsize>,
    done: Arc<AtomicUsize>,
}

impl Pool {
    fn spawn_client(pool: &Arc<Pool>) -> Result<()> {
        let p = pool.clone();
        let handle = std::thread::Builder::new()
            .name("bench-client".into())
            .stack_size(8 << 20)
            .spawn(move || p.client())?;
        pool.threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(handle);
        Ok(())
    }

    fn client(self: Arc<Self>) -> Result<()> {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let (Some(a), Some(sql)) = (self.schedule.get(i), self.sql.get(i)) else {
                return Ok(());
            };
            let due = self.t0 + Duration::from_secs_f64(a.at);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if self.idle.fetch_sub(1, Ordering::Relaxed) == 1 {
                Pool::spawn_client(&self)?;
                self.idle.fetch_add(1, Ordering::Relaxed);
            }
            self.send(a, sql);
            self.idle.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn send(&self, a: &Arrival, sql: &str) {
        let class = &self.mix.classes[a.class];
        let query = &class.queries[a.query];
        let isolated = self.iso.get(&class.schema, &query.name).ok();
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.arrived.fetch_add(1, Ordering::Relaxed);
        let start = self.t0.elapsed().as_secs_f64();
        let target = &self.target;
        let result = target.acquire(&class.schema).and_then(|mut conn| {
            let r = conn.run(target, sql);
            target.release(&class.schema, conn);
            r
        });
        let end = self.t0.elapsed().as_secs_f64();
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::Relaxed);
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Sample {
                query: query.name.clone(),
                class: class.name.clone(),
                arrival: a.at,
                start,
                end,
                latency_ms: (end - a.at) * 1e3,
                isolated_ms: isolated.map(|s| s.median_ms),
                // Set once the run is over.
                warmup: false,
                phases: result.as_ref().ok().and_then(|r| r.phases),
                isolated_phases: isolated.and_then(|s| s.phases),
                groups: result
                    .as_ref()
                    .map(|r| r.groups.clone())
                    .unwrap_or_default(),
                estimated_cpu_ms: result.as_ref().ok().and_then(|r| r.estimated_cpu_ms),
                task_cpu_ms: result.as_ref().ok().and_then(|r| r.task_cpu_ms),
                server_tag: result.as_ref().ok().and_then(|r| r.tag),
                error: result.err().map(|e| format!("{e:#}")),
            });
    }
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
    if cfg.duration_s.is_nan()
        || cfg.duration_s <= 0.0
        || cfg.warmup_s < 0.0
        || cfg.warmup_s >= cfg.duration_s
    {
        bail!(
            "need 0 <= warm-up ({} s) < duration ({} s)",
            cfg.warmup_s,
            cfg.duration_s
        );
    }
    let mean_ms = mix.mean_isolated_ms(iso)?;
    let lambda = cfg.load / (mean_ms / 1e3);
    let schedule = arrivals(mix, lambda, cfg.duration_s, cfg.seed);
    let sql = instances(mix, &schedule);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let progress = Progress::start(
        cfg.progress,
        format!("poisson {policy} α={}", cfg.load),
        cfg.duration_s,
        in_flight.clone(),
    );
    let pool = Arc::new(Pool {
        target: target.clone(),
        mix: mix.clone(),
        iso: iso.clone(),
        schedule,
        sql,
        t0: Instant::now(),
        next: AtomicUsize::new(0),
        idle: AtomicUsize::new(INITIAL_CLIENTS),
        threads: Mutex::new(Vec::new()),
        samples: Mutex::new(Vec::new()),
        in_flight,
        arrived: progress.arrived.clone(),
        done: progress.done.clone(),
    });
    let t0 = pool.t0;
    let host_at_start = HostCpu::now();
    for _ in 0..INITIAL_CLIENTS {
        Pool::spawn_client(&pool)?;
    }
    // Clients push the handles of the clients they start before they end,
    // so once the list is empty every client has ended.
    loop {
        let next = pool.threads.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let Some(thread) = next else { break };
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.context("starting a benchmark client")),
            Err(_) => bail!("a benchmark client panicked"),
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let host = host_at_start
        .zip(HostCpu::now())
        .map(|(a, b)| b.shares_since(&a));
    progress.stop();
    let mut samples = std::mem::take(&mut *pool.samples.lock().unwrap_or_else(|e| e.into_inner()));
    for s in &mut samples {
        s.warmup = s.arrival < cfg.warmup_s;
    }
    samples.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    let server = target
        .server_stats()
        .context("reading the server's stride.queries")?;
    attach_server_stats(&mut samples, &server);
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
        "allocator_purge": target.allocator_purge(),
        "huge_pages": target.huge_pages(),
        "host_cpu": host.map(HostShares::to_json),
        "estimates": target.engine().map(|e| e.runtime().history().mode().name()),
        "classes": mix.to_json(),
        "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
    });
    mix.params.annotate(&mut json);
    let summary = summarize_run(&points(&json), cfg.duration_s - cfg.warmup_s);
    json["summary"] = summary.to_json();
    json["phases"] = Breakdown::of_run(&json).to_json();
    json["estimation"] = estimation_errors(&json)
        .into_iter()
        .map(|(class, e)| (class, e.to_json()))
        .collect::<serde_json::Map<_, _>>()
        .into();
    Ok(PoissonRun {
        t0,
        samples,
        json,
        host,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::mix::{Class, Mix, Params};
    use stride::workload::{Query, Workload};

    fn mix() -> Mix {
        let q = |n: &str| Query {
            name: n.into(),
            sql: String::new(),
            params: Vec::new(),
        };
        Mix {
            classes: vec![
                Class {
                    name: "short".into(),
                    schema: "a".into(),
                    weight: 3.0,
                    queries: vec![q("q1"), q("q2")],
                    workload: Workload::Tpch { scale: 0.1 },
                },
                Class {
                    name: "long".into(),
                    schema: "b".into(),
                    weight: 1.0,
                    queries: vec![q("q1")],
                    workload: Workload::Tpch { scale: 1.0 },
                },
            ],
            params: Params::Drawn { seed: 5 },
        }
    }

    /// Runs the benchmark on a small in-process table: every arrival is sent
    /// exactly once, by the pool, and measured with its phases.
    #[test]
    fn every_arrival_is_sent_once_and_measured() {
        let engine = stride_sql::Engine::new(stride_sql::EngineConfig {
            scheduler: stride_sched::SchedulerConfig {
                workers: 2,
                pin_workers: false,
                ..Default::default()
            },
            ..Default::default()
        });
        let mut session = engine.session();
        session
            .execute(
                "create table t as select * from (values (1, 'a'), (2, 'b'), (3, 'a')) as v(x, y)",
            )
            .unwrap();
        let target = Arc::new(Target::Engine(engine.clone()));
        let q = |n: &str, sql: &str| Query {
            name: n.into(),
            sql: sql.into(),
            params: Vec::new(),
        };
        let mix = Mix {
            classes: vec![
                Class {
                    name: "short".into(),
                    schema: String::new(),
                    weight: 3.0,
                    queries: vec![q("q1", "select count(*) from t")],
                    workload: Workload::Ssb,
                },
                Class {
                    name: "long".into(),
                    schema: String::new(),
                    weight: 1.0,
                    queries: vec![q("q2", "select y, sum(x) from t group by y")],
                    workload: Workload::Ssb,
                },
            ],
            // SSB has no q1 or q2: the queries run as given.
            params: Params::Drawn { seed: 1 },
        };
        let mut iso = Isolated::default();
        for (schema, name) in [("", "q1"), ("", "q2")] {
            iso.by_schema.entry(schema.into()).or_default().insert(
                name.into(),
                crate::bench::mix::IsoStat {
                    median_ms: 2.0,
                    min_ms: 2.0,
                    max_ms: 2.0,
                    rows: 1,
                    phases: Some(crate::bench::phases::Phases {
                        planning_ms: 0.5,
                        queued_ms: 0.0,
                        running_ms: 1.5,
                        waking_ms: 0.0,
                        cpu_ms: 2.5,
                    }),
                },
            );
        }
        // λ = 1.5 / 2 ms = 750 queries/s: bursts that outrun the first clients.
        let cfg = PoissonConfig {
            load: 1.5,
            duration_s: 0.3,
            warmup_s: 0.05,
            seed: 7,
            progress: false,
        };
        let expected = arrivals(&mix, 750.0, cfg.duration_s, cfg.seed);
        assert!(expected.len() > 100, "{} arrivals", expected.len());
        let run = run(&target, &mix, &iso, &cfg, "fifo").unwrap();
        assert_eq!(run.samples.len(), expected.len());
        for (s, a) in run.samples.iter().zip(&expected) {
            assert_eq!(s.arrival, a.at, "each arrival exactly once, in order");
            assert!(s.error.is_none(), "{:?}", s.error);
            assert!(s.start >= s.arrival && s.end >= s.start);
            let p = s.phases.expect("in-process samples carry phases");
            assert!(p.running_ms >= 0.0 && p.planning_ms > 0.0);
            assert!(p.total_ms() <= s.latency_ms + 1e-6);
            assert!(p.cpu_ms > 0.0, "its tasks took worker time");
            assert!(s.task_cpu_ms.is_some_and(|c| c > 0.0));
            assert_eq!(s.groups.len(), 1, "one statement, one resource group");
            assert_eq!(s.warmup, s.arrival < cfg.warmup_s);
        }
        // Each query ran as its own resource group: what the trace names.
        let mut groups: Vec<u64> = run.samples.iter().flat_map(|s| s.groups.clone()).collect();
        groups.sort_unstable();
        groups.dedup();
        assert_eq!(groups.len(), run.samples.len());
        let breakdown = &run.json["phases"];
        let measured = run
            .samples
            .iter()
            .filter(|s| !s.warmup && s.class == "short");
        assert_eq!(
            breakdown["short"]["under_load"]["count"].as_u64(),
            Some(measured.count() as u64)
        );
        assert_eq!(
            breakdown["short"]["isolated"]["running_ms"].as_f64(),
            Some(1.5)
        );
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

    #[test]
    fn arrivals_of_a_query_are_its_successive_instances() {
        let m = mix();
        let a = arrivals(&m, 50.0, 20.0, 3);
        let sql = instances(&m, &a);
        assert_eq!(sql.len(), a.len());
        // The k-th arrival of (class, query) is instance k of the stream,
        // whatever the load: at twice the rate the same texts arrive.
        let mut k = std::collections::HashMap::new();
        for (arrival, text) in a.iter().zip(&sql) {
            let n = k.entry((arrival.class, arrival.query)).or_insert(0u64);
            assert_eq!(*text, m.sql(arrival.class, arrival.query, ARRIVALS, *n));
            *n += 1;
        }
        let b = arrivals(&m, 100.0, 10.0, 3);
        let n = a.len().min(b.len()) - 1;
        assert_eq!(instances(&m, &b)[..n], sql[..n]);
        // Q1 instances differ from one arrival to the next.
        let q1: Vec<&String> = a
            .iter()
            .zip(&sql)
            .filter(|(x, _)| (x.class, x.query) == (0, 0))
            .map(|(_, s)| s)
            .take(10)
            .collect();
        assert!(q1.windows(2).any(|w| w[0] != w[1]));
    }
}
