//! `stride bench sweep`: the Poisson benchmark for every (policy, load) with
//! the same seed (so the same queries arrive in the same order, time scaled
//! by λ), then spin per policy; writes `results.json`, `report.md` and the
//! figures.
//!
//! Isolated latencies, the denominators of every slowdown, are measured
//! again before each policy's runs by default (`--isolated-every policy`):
//! on a machine whose speed drifts over a sweep of many minutes, a slowdown
//! divided by a latency measured long before says as much about the drift
//! as about the policy. `--isolated-every once` (or `--isolated FILE`)
//! measures them once, so every policy sees the same λ.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use super::driver::{Target, TargetArgs};
use super::mix::{self, Mix, MixArgs};
use super::{poisson, report, spin, stats};
use crate::GlobalArgs;

/// When the sweep measures isolated latencies.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolatedEvery {
    /// Once, before the first policy.
    Once,
    /// Before each policy's runs.
    Policy,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Policies to compare.
    #[arg(long, value_delimiter = ',', default_value = "fifo,fair,stride,srpt")]
    policies: Vec<String>,
    /// Load factors α.
    #[arg(long, value_delimiter = ',', default_value = "0.7,0.8,0.9,0.95,1.0")]
    loads: Vec<f64>,
    /// Output directory (results.json, report.md, *.svg).
    #[arg(long)]
    out: PathBuf,
    /// Seconds of arrivals per Poisson run.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Arrivals in the first seconds of each run are not measured.
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    /// Seconds of spin per policy (0: no spin runs).
    #[arg(long, default_value_t = 10.0)]
    spin_duration: f64,
    /// When to measure isolated latencies (ignored with --isolated FILE,
    /// which fixes them).
    #[arg(long, value_enum, default_value = "policy")]
    isolated_every: IsolatedEvery,
    /// Spin clients.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Peers' results (scripts/peers.py) to set beside Stride's in the report.
    #[arg(long, value_name = "FILE")]
    peers: Option<PathBuf>,
    /// A line of caveats to put at the top of the report.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    mix: MixArgs,
    #[command(flatten)]
    target: TargetArgs,
    /// No progress lines.
    #[arg(long)]
    quiet: bool,
}

pub fn run(args: &SweepArgs, global: &GlobalArgs) -> Result<()> {
    if args.policies.is_empty() || args.loads.is_empty() {
        bail!("name at least one policy and one load");
    }
    for p in &args.policies {
        if stride_sched::Policy::parse(p).is_none() {
            bail!("unknown policy \"{p}\" (expected fifo, fair, stride, stride-queue, lottery, srpt, if-srpt or threshold)");
        }
    }
    if let Some(l) = args.loads.iter().find(|l| !(**l > 0.0 && l.is_finite())) {
        bail!("--loads: {l} is not a positive load");
    }
    // Fail on a bad peers file before spending minutes on the runs.
    let peers = args.peers.as_deref().map(report::read_json).transpose()?;
    let mix = Arc::new(Mix::new(global, &args.mix)?);
    let target = super::target(
        &args.target,
        &mix::with_data(global, args.mix.classes),
        None,
    )?;
    if let Target::Pg(_) = &*target {
        // Over the wire the policy is switched with SET stride.policy.
        target
            .set_policy(&args.policies[0])
            .context("the sweep needs a Stride server to switch policies")?;
    }
    let remeasure = args.isolated_every == IsolatedEvery::Policy && args.mix.isolated.is_none();
    let mut iso = super::isolated_for(&target, &mix, &args.mix)?;
    let first_iso = iso.to_json();
    let mut iso_by_policy = serde_json::Map::new();
    let mut runs: Vec<Value> = Vec::new();
    for (i, policy) in args.policies.iter().enumerate() {
        target.set_policy(policy)?;
        if remeasure && i > 0 {
            iso = super::isolated_for(&target, &mix, &args.mix)?;
        }
        iso_by_policy.insert(policy.clone(), iso.to_json());
        for &load in &args.loads {
            let cfg = poisson::PoissonConfig {
                load,
                duration_s: args.duration,
                warmup_s: args.warmup_s,
                seed: args.mix.seed,
                progress: !args.quiet,
            };
            let run = poisson::run(&target, &mix, &iso, &cfg, policy)?;
            let s = stats::summarize_run(&stats::points(&run.json), args.duration - args.warmup_s);
            let errors = stats::estimation_errors(&run.json);
            let line: Vec<String> = s
                .classes
                .iter()
                .map(|(c, s)| {
                    let estimates = errors
                        .get(c)
                        .filter(|e| e.estimated > 0)
                        .map_or_else(String::new, |e| {
                            format!(", estimate |ln| p50 {:.2} p90 {:.2}", e.median, e.p90)
                        });
                    format!(
                        "{c}: n={} mean {:.1} ms, slowdown mean {:.2} p95 {:.2}{estimates}",
                        s.latency.count, s.latency.mean, s.slowdown.mean, s.slowdown.p95
                    )
                })
                .collect();
            println!("{policy:<8} α={load:<5} {}", line.join("; "));
            runs.push(run.json);
        }
        if args.spin_duration > 0.0 {
            let cfg = spin::SpinConfig {
                clients: args.clients,
                duration_s: args.spin_duration,
                warmup_s: (args.spin_duration * 0.2)
                    .min(args.spin_duration - 1.0)
                    .max(0.0),
                window_s: 3,
                seed: args.mix.seed,
                progress: !args.quiet,
            };
            let run = spin::run(&target, &mix, Some(&iso), &cfg, policy)?;
            println!(
                "{policy:<8} spin C={}: {:.2} ± {:.2} completions/s; {}",
                args.clients,
                run.throughput.mean_qps,
                2.0 * run.throughput.sem_qps,
                run.work.line()
            );
            runs.push(run.json);
        }
    }
    let results = json!({
        "kind": "sweep",
        "system": target.system(),
        "workers": target.workers(),
        "allocator_purge": target.allocator_purge(),
        "huge_pages": target.huge_pages(),
        "policies": args.policies,
        "loads": args.loads,
        "duration_s": args.duration,
        "warmup_s": args.warmup_s,
        "seed": args.mix.seed,
        "params": mix.params.name(),
        "classes": mix.to_json(),
        "note": args.note,
        "isolated": first_iso,
        "isolated_every": if remeasure { "policy" } else { "once" },
        "isolated_by_policy": Value::Object(iso_by_policy),
        "runs": runs,
    });
    super::write_json(&args.out.join("results.json"), &results)?;
    report::write(&results, peers.as_ref(), &args.out)?;
    eprintln!("wrote {}", args.out.join("report.md").display());
    Ok(())
}
