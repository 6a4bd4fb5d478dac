//! The closed-loop "spin" benchmark (seed 000 §4.1): C clients each send a
//! query drawn from the mix as soon as their previous one completed, so the
//! system never runs dry. Completions are counted per second; the maximum
//! throughput is their mean over the stable window (after the warm-up), with
//! the standard error of the mean, and a moving average shows stability.
//! Each submission is an instance of its query: the `k`-th submission of a
//! query (over all clients) is instance `k` of stream [`SPIN`].

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Result};
use rand::SeedableRng;
use serde_json::{json, Value};

use super::driver::{attach_server_stats, Target};
use super::machine::{MachineProbe, MachineUse};
use super::mix::{Isolated, Mix, SPIN};
use super::progress::Progress;
use super::stats::{points, summarize_run, Sample};

#[derive(Debug, Clone)]
pub struct SpinConfig {
    pub clients: usize,
    pub duration_s: f64,
    /// Seconds excluded before the stable window starts.
    pub warmup_s: f64,
    /// Moving-average window in seconds.
    pub window_s: usize,
    pub seed: u64,
    pub progress: bool,
}

/// Completions per second over a run.
#[derive(Debug, Clone)]
pub struct Throughput {
    pub per_second: Vec<usize>,
    pub moving_average: Vec<f64>,
    pub mean_qps: f64,
    pub sem_qps: f64,
    pub stable_from_s: usize,
    pub stable_to_s: usize,
}

/// Counts completions (`end` times, seconds) per second of `[0, duration)`.
pub fn throughput(ends: &[f64], duration_s: f64, warmup_s: f64, window: usize) -> Throughput {
    let secs = duration_s.floor().max(1.0) as usize;
    let mut per_second = vec![0usize; secs];
    for &e in ends {
        if e >= 0.0 && e < secs as f64 {
            per_second[e as usize] += 1;
        }
    }
    let window = window.max(1);
    let moving_average = (0..secs)
        .map(|i| {
            let from = (i + 1).saturating_sub(window);
            per_second[from..=i].iter().sum::<usize>() as f64 / (i + 1 - from) as f64
        })
        .collect();
    let from = (warmup_s.ceil() as usize).min(secs - 1);
    let stable: Vec<f64> = per_second[from..].iter().map(|&c| c as f64).collect();
    let n = stable.len() as f64;
    let mean = stable.iter().sum::<f64>() / n;
    let var = if stable.len() > 1 {
        stable.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    Throughput {
        per_second,
        moving_average,
        mean_qps: mean,
        sem_qps: (var / n).sqrt(),
        stable_from_s: from,
        stable_to_s: secs,
    }
}

/// A completion's end, its (tuples, morsels) where the request reports them
/// (in-process), and its server tag to read them back from a Stride server.
type Completion = (f64, u64, u64, Option<u64>);

pub struct SpinRun {
    /// The instant sample times count from.
    pub t0: Instant,
    pub samples: Vec<Sample>,
    pub json: Value,
    pub throughput: Throughput,
    /// The window's completions in units of work.
    pub work: WorkRate,
    /// How the workers were used in the stable window (`None` for a server
    /// that is not Stride).
    pub machine: Option<MachineUse>,
}

pub fn run(
    target: &Arc<Target>,
    mix: &Arc<Mix>,
    iso: Option<&Isolated>,
    cfg: &SpinConfig,
    policy: &str,
) -> Result<SpinRun> {
    if cfg.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if cfg.duration_s.is_nan()
        || cfg.duration_s < 1.0
        || cfg.warmup_s < 0.0
        || cfg.warmup_s >= cfg.duration_s
    {
        bail!(
            "need a duration of at least 1 s and 0 <= warm-up ({} s) < duration ({} s)",
            cfg.warmup_s,
            cfg.duration_s
        );
    }
    let samples = Arc::new(Mutex::new(Vec::new()));
    let in_flight = Arc::new(AtomicUsize::new(0));
    let progress = Progress::start(
        cfg.progress,
        format!("spin {policy} C={}", cfg.clients),
        cfg.duration_s,
        in_flight.clone(),
    );
    let iso = Arc::new(iso.cloned());
    // Submissions so far of each (class, query): the next instance number.
    let submitted: Arc<Vec<Vec<AtomicU64>>> = Arc::new(
        mix.classes
            .iter()
            .map(|c| c.queries.iter().map(|_| AtomicU64::new(0)).collect())
            .collect(),
    );
    let morsel_log: Arc<Mutex<Vec<Completion>>> = Arc::default();
    let t0 = Instant::now();
    let probe = MachineProbe::start(
        target.clone(),
        t0,
        std::time::Duration::from_secs_f64(cfg.warmup_s.ceil()),
        std::time::Duration::from_secs_f64(cfg.duration_s.floor()),
        std::time::Duration::from_millis(if target.engine().is_some() { 20 } else { 250 }),
    )?;
    let threads: Vec<_> = (0..cfg.clients)
        .map(|client| {
            let (target, mix, iso, samples, in_flight, submitted, morsel_log) = (
                target.clone(),
                mix.clone(),
                iso.clone(),
                samples.clone(),
                in_flight.clone(),
                submitted.clone(),
                morsel_log.clone(),
            );
            let (arrived, done) = (progress.arrived.clone(), progress.done.clone());
            let (duration, seed) = (cfg.duration_s, cfg.seed.wrapping_add(client as u64));
            std::thread::Builder::new()
                .name(format!("spin-{client}"))
                .stack_size(8 << 20)
                .spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
                    let mut mine = Vec::new();
                    let mut my_morsels = Vec::new();
                    while t0.elapsed().as_secs_f64() < duration {
                        let (c, q) = mix.draw(&mut rng);
                        let class = &mix.classes[c];
                        let query = &class.queries[q];
                        let k = submitted[c][q].fetch_add(1, Ordering::Relaxed);
                        let sql = mix.sql(c, q, SPIN, k);
                        arrived.fetch_add(1, Ordering::Relaxed);
                        in_flight.fetch_add(1, Ordering::Relaxed);
                        let start = t0.elapsed().as_secs_f64();
                        let result = target.acquire(&class.schema).and_then(|mut conn| {
                            let r = conn.run(&target, &sql);
                            target.release(&class.schema, conn);
                            r
                        });
                        let end = t0.elapsed().as_secs_f64();
                        in_flight.fetch_sub(1, Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Relaxed);
                        if let Ok(r) = &result {
                            my_morsels.push((end, r.tuples, r.morsels, r.tag));
                        }
                        mine.push(Sample {
                            query: query.name.clone(),
                            class: class.name.clone(),
                            arrival: start,
                            start,
                            end,
                            latency_ms: (end - start) * 1e3,
                            isolated_ms: iso
                                .as_ref()
                                .as_ref()
                                .and_then(|i| i.median_ms(&class.schema, &query.name).ok()),
                            warmup: false,
                            phases: result.as_ref().ok().and_then(|r| r.phases),
                            isolated_phases: iso
                                .as_ref()
                                .as_ref()
                                .and_then(|i| i.get(&class.schema, &query.name).ok())
                                .and_then(|s| s.phases),
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
                    morsel_log
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(my_morsels);
                    samples
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend(mine);
                })
        })
        .collect::<std::io::Result<_>>()?;
    for t in threads {
        if t.join().is_err() {
            bail!("a spin client panicked");
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    progress.stop();
    let mut samples = std::mem::take(&mut *samples.lock().unwrap_or_else(|e| e.into_inner()));
    samples.sort_by(|a, b| a.end.total_cmp(&b.end));
    for s in &mut samples {
        // Only completions inside the stable window count.
        s.warmup = s.end < cfg.warmup_s || s.end >= cfg.duration_s;
    }
    let ends: Vec<f64> = samples
        .iter()
        .filter(|s| s.error.is_none())
        .map(|s| s.end)
        .collect();
    let tp = throughput(&ends, cfg.duration_s, cfg.warmup_s, cfg.window_s);
    let in_window = |end: f64| end >= tp.stable_from_s as f64 && end < tp.stable_to_s as f64;
    let server = target.server_stats()?;
    attach_server_stats(&mut samples, &server);
    let work = WorkRate::of(&samples, tp.stable_from_s as f64, tp.stable_to_s as f64);
    let morsels = morsel_log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|m| in_window(m.0))
        .fold((0u64, 0u64), |(t, m), &(_, tuples, morsels, tag)| match tag
            .and_then(|tag| server.get(&tag))
        {
            Some(s) => (t + s.tuples, m + s.morsels),
            None => (t + tuples, m + morsels),
        });
    let machine = probe.finish(
        (morsels.1 > 0).then_some(morsels),
        target.engine().is_some(),
    )?;
    let mut json = json!({
        "kind": "spin",
        "system": target.system(),
        "policy": policy,
        "clients": cfg.clients,
        "seed": cfg.seed,
        "duration_s": cfg.duration_s,
        "warmup_s": cfg.warmup_s,
        "wall_s": wall,
        "workers": target.workers(),
        "allocator_purge": target.allocator_purge(),
        "huge_pages": target.huge_pages(),
        "estimates": target.engine().map(|e| e.runtime().history().mode().name()),
        "classes": mix.to_json(),
        "throughput": {
            "mean_qps": tp.mean_qps, "sem_qps": tp.sem_qps,
            "stable_from_s": tp.stable_from_s, "stable_to_s": tp.stable_to_s,
            "window_s": cfg.window_s,
            "per_second": tp.per_second, "moving_average": tp.moving_average,
        },
        "machine": machine.as_ref().map(MachineUse::to_json),
        "work": work.to_json(),
        "samples": samples.iter().map(Sample::to_json).collect::<Vec<_>>(),
    });
    mix.params.annotate(&mut json);
    let measured = (tp.stable_to_s - tp.stable_from_s) as f64;
    json["summary"] = summarize_run(&points(&json), measured).to_json();
    Ok(SpinRun {
        t0,
        samples,
        json,
        throughput: tp,
        work,
        machine,
    })
}

/// The work a run completed in its stable window, independent of which
/// queries it completed: completions per second depend on the mix a policy
/// happens to finish in a finite window (a policy that leaves long queries
/// half done at the window's end counts fewer completions for the same
/// work), so throughput is also stated in units of work.
#[derive(Debug, Clone, Default)]
pub struct WorkRate {
    /// Completions in the window with an isolated median.
    pub completions: usize,
    /// Sum of the window's completions' isolated medians, per second of
    /// window: 1.0 means the machine finished, each second, queries that
    /// take one second alone on it.
    pub isolated_s_per_s: Option<f64>,
    /// Task CPU time the window's completions used per millisecond of their
    /// isolated medians: the cost of a unit of work under this policy
    /// (compare policies; it is `workers × efficiency` for a query that
    /// keeps all workers busy alone). Over the completions whose CPU time
    /// is known (a Stride server keeps its last 1000 queries).
    pub cpu_per_isolated: Option<f64>,
    /// How many completions `cpu_per_isolated` is over.
    pub cpu_completions: usize,
}

impl WorkRate {
    pub fn of(samples: &[Sample], from_s: f64, to_s: f64) -> WorkRate {
        let window = to_s - from_s;
        let done: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.error.is_none() && s.end >= from_s && s.end < to_s)
            .filter(|s| s.isolated_ms.is_some())
            .collect();
        if done.is_empty() || window <= 0.0 {
            return WorkRate::default();
        }
        let isolated_ms: f64 = done.iter().filter_map(|s| s.isolated_ms).sum();
        let (cpu, cpu_isolated, cpu_completions) = done
            .iter()
            .filter_map(|s| Some((s.task_cpu_ms?, s.isolated_ms?)))
            .fold((0.0, 0.0, 0), |(c, i, n), (cpu, iso)| {
                (c + cpu, i + iso, n + 1)
            });
        WorkRate {
            completions: done.len(),
            isolated_s_per_s: Some(isolated_ms / 1e3 / window),
            cpu_per_isolated: (cpu_completions > 0).then(|| cpu / cpu_isolated),
            cpu_completions,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "completions": self.completions,
            "isolated_s_per_s": self.isolated_s_per_s,
            "cpu_per_isolated": self.cpu_per_isolated,
            "cpu_completions": self.cpu_completions,
        })
    }

    /// One line for a report; empty when no isolated medians are known.
    pub fn line(&self) -> String {
        let Some(rate) = self.isolated_s_per_s else {
            return String::new();
        };
        let cpu = self.cpu_per_isolated.map_or_else(String::new, |c| {
            format!(
                ", {c:.2} ms task CPU per isolated ms ({} of {} completions)",
                self.cpu_completions, self.completions
            )
        });
        format!("work: {rate:.3} isolated-seconds completed per second{cpu}")
    }
}

#[cfg(test)]
mod tests {
    use super::{throughput, WorkRate};
    use crate::bench::stats::Sample;

    fn done(end: f64, isolated_ms: f64, cpu_ms: Option<f64>) -> Sample {
        Sample {
            query: "q".into(),
            class: "short".into(),
            arrival: 0.0,
            start: 0.0,
            end,
            latency_ms: end * 1e3,
            isolated_ms: Some(isolated_ms),
            warmup: false,
            error: None,
            phases: None,
            isolated_phases: None,
            groups: Vec::new(),
            server_tag: None,
            estimated_cpu_ms: None,
            task_cpu_ms: cpu_ms,
        }
    }

    #[test]
    fn work_rate_counts_isolated_time_inside_the_window() {
        let mut failed = done(1.5, 1000.0, Some(1.0));
        failed.error = Some("boom".into());
        let samples = vec![
            done(0.5, 1000.0, Some(1.0)), // before the window
            done(1.2, 300.0, Some(600.0)),
            done(2.9, 100.0, Some(150.0)),
            failed,
            done(3.0, 1000.0, Some(1.0)), // at its end: outside
        ];
        let w = WorkRate::of(&samples, 1.0, 3.0);
        assert_eq!(w.completions, 2);
        assert!((w.isolated_s_per_s.unwrap() - 0.2).abs() < 1e-12);
        assert!((w.cpu_per_isolated.unwrap() - 750.0 / 400.0).abs() < 1e-12);
        assert!(w.line().contains("0.200 isolated-seconds"));

        // A completion without its CPU time: the ratio is over the others.
        let partial = vec![done(1.2, 300.0, Some(600.0)), done(1.3, 100.0, None)];
        let w = WorkRate::of(&partial, 1.0, 3.0);
        assert_eq!((w.cpu_per_isolated, w.cpu_completions), (Some(2.0), 1));
        assert!(w.line().contains("(1 of 2 completions)"), "{}", w.line());
        let none = vec![done(1.3, 100.0, None)];
        assert_eq!(WorkRate::of(&none, 1.0, 3.0).cpu_per_isolated, None);
        assert!(WorkRate::of(&[], 1.0, 3.0).line().is_empty());
    }

    #[test]
    fn counts_per_second_and_stable_mean() {
        // 2 completions in second 0, 4 in 1, 4 in 2, 6 in 3.
        let mut ends = vec![0.1, 0.2];
        ends.extend([1.1, 1.2, 1.3, 1.9]);
        ends.extend([2.0, 2.5, 2.6, 2.7]);
        ends.extend([3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 4.5]);
        let tp = throughput(&ends, 4.0, 1.0, 2);
        assert_eq!(tp.per_second, vec![2, 4, 4, 6]);
        assert_eq!(tp.moving_average, vec![2.0, 3.0, 4.0, 5.0]);
        assert_eq!(tp.stable_from_s, 1);
        assert!((tp.mean_qps - 14.0 / 3.0).abs() < 1e-9);
        assert!(tp.sem_qps > 0.0);
    }
}
