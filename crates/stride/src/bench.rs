//! `stride bench …`: benchmark commands. Each drives the in-process engine or,
//! with `--pg host:port[/db]`, any PostgreSQL-protocol server, the same way.
//!
//! One concern per file under `bench/`: `driver` (where queries go), `mix`
//! (query classes, isolated latencies), `isolated`, `poisson` (open loop),
//! `spin` (closed loop), `stats` (samples and summaries), `progress`,
//! `sweep` (policies × loads), `report` and `plot` (report.md and SVG
//! figures), `trace` (Perfetto timelines), `mixed`, `sched_overhead`.
//!
//! Every benchmark submits query *instances* with drawn substitution
//! parameters unless `--fixed-params` is given (see `mix`); `bench
//! instances` prints them for other drivers.

mod driver;
mod isolated;
mod machine;
mod mix;
mod mixed;
mod numa;
mod phases;
mod plot;
mod poisson;
mod progress;
mod report;
mod sched_overhead;
mod spin;
mod stats;
mod sweep;
mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::Value;
use stride::workload::{Query, Workload};
use stride_sched::Tracer;

use crate::GlobalArgs;
use driver::{Target, TargetArgs};
use mix::{Isolated, Mix, MixArgs, Params};

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Median latency of each query run alone (after warm-up), per schema.
    Isolated(IsolatedArgs),
    /// Open-loop Poisson arrivals at load α (seed 001 §5.1): latency and
    /// slowdown per class and query.
    Poisson(PoissonArgs),
    /// Closed loop: C clients always resubmitting (seed 000 "spin"):
    /// completions per second.
    Spin(SpinArgs),
    /// Poisson runs for every (policy, load), spin per policy; writes
    /// results.json, report.md and SVG figures into --out.
    Sweep(sweep::SweepArgs),
    /// Rewrites report.md and the figures from a sweep's results.json (and peers).
    Report(ReportArgs),
    /// A short query's latency while a long query keeps the workers busy
    /// (one session each), compared with its isolated latency.
    Mixed(mixed::MixedArgs),
    /// The cost of one scheduling decision (median and p99 ns) with 1 and 2
    /// workers and 1, 16 and 128 active resource groups.
    SchedOverhead(sched_overhead::SchedOverheadArgs),
    /// The query instances (SQL text) a benchmark submits, as JSON: the
    /// first --count instances of each query in one instance stream (for
    /// drivers outside this binary, e.g. scripts/peers.py).
    Instances(InstancesArgs),
    /// Placements and affinities on the engine's topology (needs two or
    /// more nodes, e.g. --topology fake:nodes=2,cores-per-node=1, and a
    /// loaded lineitem): local/remote/stolen morsels per affinity, busy
    /// share per node under a 80/20 skew, latency fairness of RR vs PP.
    Numa(numa::NumaArgs),
}

#[derive(Args, Debug)]
pub struct IsolatedArgs {
    /// Measured runs per query.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Unmeasured warm-up runs per query.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Order of the runs: round by round over the queries, or each query's
    /// runs back to back.
    #[arg(long, value_enum, default_value_t = isolated::Order::default())]
    order: isolated::Order,
    /// Only these queries (e.g. q1,q6).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<String>,
    /// Seed of the substitution parameters' draws (the same seed as
    /// `--arrival-seed` of poisson, spin and sweep draws the same instances).
    #[arg(long, default_value_t = 1)]
    params_seed: u64,
    #[command(flatten)]
    target: TargetArgs,
    /// Write the latencies as JSON (input of `--isolated` of poisson, spin, sweep).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace of the workers (in-process only).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PoissonArgs {
    /// Load factor α: λ = α / mean isolated duration.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    /// Seconds of arrivals.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Arrivals in the first seconds are not measured.
    #[arg(long, default_value_t = 2.0)]
    warmup_s: f64,
    #[command(flatten)]
    mix: MixArgs,
    #[command(flatten)]
    target: TargetArgs,
    /// Write the run (summary and every sample) as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace of the workers (in-process only).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Also print one line per query.
    #[arg(long)]
    per_query: bool,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
pub struct SpinArgs {
    /// Clients, each with one query in flight at all times.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Seconds to run.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Seconds before the stable window starts.
    #[arg(long, default_value_t = 3.0)]
    warmup_s: f64,
    /// Moving-average window in seconds.
    #[arg(long, default_value_t = 5)]
    window: usize,
    #[command(flatten)]
    mix: MixArgs,
    /// Do not measure isolated latencies first (no slowdowns then).
    #[arg(long)]
    no_isolated: bool,
    #[command(flatten)]
    target: TargetArgs,
    /// Write the run (throughput per second and every sample) as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write a Chrome/Perfetto trace of the workers (in-process only).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// No progress line.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args, Debug)]
pub struct InstancesArgs {
    /// Query classes: tpch (short = smallest --tpch SF, long = largest) or ssb.
    #[arg(long, value_enum, default_value = "tpch")]
    classes: mix::Benchmark,
    /// Only these queries (e.g. q1,q6).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<String>,
    /// Seed of the draws (a benchmark's --arrival-seed).
    #[arg(long = "arrival-seed", default_value_t = 1)]
    seed: u64,
    /// The instance stream: isolated runs (warm-up runs included), Poisson
    /// arrivals, spin submissions, or bench mixed's short and long queries.
    #[arg(long, default_value = mix::ARRIVALS,
        value_parser = [mix::ISOLATED, mix::ARRIVALS, mix::SPIN, mix::MIXED_SHORT, mix::MIXED_LONG])]
    stream: String,
    /// Instances per query: occurrences 0 … COUNT-1 of each query.
    #[arg(long, default_value_t = 10)]
    count: u64,
    /// Write the JSON here instead of standard output.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// A sweep's results.json.
    #[arg(long, value_name = "FILE")]
    results: PathBuf,
    /// Peers' results (scripts/peers.py) to set beside Stride's policies.
    #[arg(long, value_name = "FILE")]
    peers: Option<PathBuf>,
    /// Directory for report.md and the figures (default: next to results.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(cmd: &BenchCommand, global: &GlobalArgs) -> Result<()> {
    match cmd {
        BenchCommand::Isolated(args) => isolated_cmd(args, global),
        BenchCommand::Poisson(args) => poisson_cmd(args, global),
        BenchCommand::Spin(args) => spin_cmd(args, global),
        BenchCommand::Sweep(args) => sweep::run(args, global),
        BenchCommand::Report(args) => {
            let results = report::read_json(&args.results)?;
            let peers = args.peers.as_deref().map(report::read_json).transpose()?;
            let out = match &args.out {
                Some(o) => o.clone(),
                None => args
                    .results
                    .parent()
                    .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
            };
            report::write(&results, peers.as_ref(), &out)?;
            eprintln!("wrote {}", out.join("report.md").display());
            Ok(())
        }
        BenchCommand::Mixed(args) => mixed::mixed(args, global),
        BenchCommand::SchedOverhead(args) => sched_overhead::run(args),
        BenchCommand::Instances(args) => instances_cmd(args, global),
        BenchCommand::Numa(args) => {
            let (engine, session) =
                crate::start_traced(global, &crate::explicit_data_dir(global)?, None)?;
            numa::run(args, &engine, session)
        }
    }
}

/// The system under test: the server named by `--pg`, or the engine with
/// the data of `global` generated (and a tracer attached when asked).
fn target(
    args: &TargetArgs,
    global: &GlobalArgs,
    tracer: Option<&Arc<Tracer>>,
) -> Result<Arc<Target>> {
    let target = if args.pg.is_some() {
        if tracer.is_some() {
            bail!("--trace needs the in-process engine (not --pg)");
        }
        let t = Target::connect_pg(args)?;
        if let Some(policy) = &global.policy {
            t.set_policy(policy)?;
        }
        t
    } else {
        let (engine, _) =
            crate::start_traced(global, &crate::explicit_data_dir(global)?, tracer.cloned())?;
        Target::Engine(engine)
    };
    Ok(Arc::new(target))
}

/// Isolated latencies: read from `--isolated FILE`, or measured now.
fn isolated_for(target: &Target, mix: &Mix, args: &MixArgs) -> Result<Isolated> {
    if let Some(path) = &args.isolated {
        let iso = Isolated::read(path)?;
        if let Some(p) = iso.params.filter(|p| p.name() != mix.params.name()) {
            eprintln!(
                "warning: {} holds isolated latencies of {} parameters, this run submits {} ones",
                path.display(),
                p.name(),
                mix.params.name()
            );
        }
        for c in &mix.classes {
            for q in &c.queries {
                iso.median_ms(&c.schema, &q.name)
                    .with_context(|| format!("in {}", path.display()))?;
            }
        }
        return Ok(iso);
    }
    if args.isolated_runs == 0 {
        bail!("--isolated-runs must be at least 1");
    }
    eprintln!(
        "measuring isolated latencies (1 warm-up + {} runs per query, {})…",
        args.isolated_runs,
        args.isolated_order.name()
    );
    let suites: Vec<isolated::Suite> = mix
        .classes
        .iter()
        .map(|c| isolated::Suite {
            schema: &c.schema,
            queries: &c.queries,
            workload: c.workload,
        })
        .collect();
    let t0 = Instant::now();
    let plan = isolated::Plan {
        params: mix.params,
        warmup: 1,
        runs: args.isolated_runs,
        order: args.isolated_order,
        print: true,
    };
    isolated::measure(target, t0, &suites, &plan, &mut Vec::new())
}

fn write_json(path: &Path, v: &Value) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string(v)?;
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// A tracer when `--trace` was given, and (about) the instant its clock starts.
fn new_tracer(path: &Option<PathBuf>) -> Option<(Arc<Tracer>, Instant)> {
    path.as_ref().map(|_| (Tracer::new(), Instant::now()))
}

fn isolated_cmd(args: &IsolatedArgs, global: &GlobalArgs) -> Result<()> {
    if global.tpch.is_empty() && global.ssb.is_empty() && global.tpcds.is_empty() {
        bail!("name the data to run on: --tpch <SF>, --ssb <SF> and/or --tpcds <SF>");
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let tracer = new_tracer(&args.trace);
    let target = target(&args.target, global, tracer.as_ref().map(|t| &t.0))?;
    let filter = |qs: Vec<Query>| -> Result<Vec<Query>> {
        for name in &args.queries {
            if !qs.iter().any(|q| &q.name == name) {
                bail!("--queries: no query named {name}");
            }
        }
        Ok(qs
            .into_iter()
            .filter(|q| args.queries.is_empty() || args.queries.contains(&q.name))
            .collect())
    };
    let mut suites: Vec<(String, Vec<Query>, Workload)> = Vec::new();
    for &sf in &global.tpch {
        let workload = Workload::Tpch { scale: sf };
        suites.push((
            stride_storage::scale_factor_schema("", sf),
            filter(workload.queries())?,
            workload,
        ));
    }
    for &sf in &global.ssb {
        suites.push((
            stride_storage::scale_factor_schema("ssb_", sf),
            filter(Workload::Ssb.queries())?,
            Workload::Ssb,
        ));
    }
    for &sf in &global.tpcds {
        suites.push((
            stride_storage::scale_factor_schema("tpcds_", sf),
            filter(Workload::Tpcds.queries())?,
            Workload::Tpcds,
        ));
    }
    let params = Params::new(global.fixed_params, args.params_seed);
    println!(
        "isolated latency ({}): {} workers, {} warm-up + {} measured runs per query, {}, {} parameters",
        target.system(),
        target
            .workers()
            .map_or_else(|| "?".to_string(), |w| w.to_string()),
        args.warmup,
        args.runs,
        args.order.name(),
        params.name()
    );
    let borrowed: Vec<isolated::Suite> = suites
        .iter()
        .map(|(s, q, w)| isolated::Suite {
            schema: s,
            queries: q,
            workload: *w,
        })
        .collect();
    let mut samples = Vec::new();
    let t0 = Instant::now();
    let plan = isolated::Plan {
        params,
        warmup: args.warmup,
        runs: args.runs,
        order: args.order,
        print: true,
    };
    let iso = isolated::measure(&target, t0, &borrowed, &plan, &mut samples)?;
    if let Some(path) = &args.json {
        let mut v = iso.to_json();
        v["workers"] = target.workers().into();
        v["allocator_purge"] = target.allocator_purge().into();
        v["huge_pages"] = target.huge_pages().into();
        write_json(path, &v)?;
    }
    if let (Some(path), Some((tracer, origin))) = (&args.trace, &tracer) {
        trace::write(path, &tracer.take(), *origin, t0, &samples)?;
    }
    Ok(())
}

fn poisson_cmd(args: &PoissonArgs, global: &GlobalArgs) -> Result<()> {
    let mix = Mix::new(global, &args.mix)?;
    let tracer = new_tracer(&args.trace);
    let target = target(
        &args.target,
        &mix::with_data(global, args.mix.classes),
        tracer.as_ref().map(|t| &t.0),
    )?;
    let iso = isolated_for(&target, &mix, &args.mix)?;
    let policy = target.policy_name()?;
    if let Some((t, _)) = &tracer {
        t.take(); // only the Poisson run goes into the trace
    }
    let cfg = poisson::PoissonConfig {
        load: args.load,
        duration_s: args.duration,
        warmup_s: args.warmup_s,
        seed: args.mix.seed,
        progress: !args.quiet,
    };
    let run = poisson::run(&target, &mix, &iso, &cfg, &policy)?;
    println!(
        "\npoisson ({}, policy {policy}, {} parameters{}): α = {}, λ = {:.2} queries/s (mean isolated {:.1} ms), {} arrivals in {} s, {} s warm-up excluded",
        target.system(),
        mix.params.name(),
        estimates_note(&target),
        args.load,
        run.json["lambda_qps"].as_f64().unwrap_or(f64::NAN),
        run.json["mean_isolated_ms"].as_f64().unwrap_or(f64::NAN),
        run.samples.len(),
        args.duration,
        args.warmup_s
    );
    let summary = stats::summarize_run(&stats::points(&run.json), args.duration - args.warmup_s);
    summary.print(&mut std::io::stdout(), args.per_query)?;
    stats::print_estimation_errors(&mut std::io::stdout(), &stats::estimation_errors(&run.json))?;
    if let Some(host) = run.host {
        println!("{} over the whole run", host.line());
    }
    if let Some(engine) = target.engine() {
        for w in engine.runtime().scheduler().worker_stats() {
            println!(
                "worker {}: {} tasks, {} ended at a preemption point, {} hand-over tasks, {} sleeps",
                w.worker, w.tasks, w.preemptions, w.handover_tasks, w.idle_sleeps
            );
        }
    }
    let breakdown = phases::Breakdown::of_run(&run.json);
    if !breakdown.is_empty() {
        println!("\nwhere the time went (under load, alone, and the difference):");
        breakdown.print(&mut std::io::stdout())?;
    }
    if let Some(path) = &args.json {
        let mut v = run.json.clone();
        v["isolated"] = iso.to_json();
        write_json(path, &v)?;
    }
    if let (Some(path), Some((tracer, origin))) = (&args.trace, &tracer) {
        trace::write(path, &tracer.take(), *origin, run.t0, &run.samples)?;
    }
    Ok(())
}

/// ", estimates MODE" for the in-process engine (the remaining-work
/// estimates SRPT and IF-SRPT get); empty over the wire.
fn estimates_note(target: &Target) -> String {
    target.engine().map_or_else(String::new, |e| {
        format!(", estimates {}", e.runtime().history().mode().name())
    })
}

fn instances_cmd(args: &InstancesArgs, global: &GlobalArgs) -> Result<()> {
    let mix_args = MixArgs {
        classes: args.classes,
        short_weight: 3.0,
        queries: args.queries.clone(),
        seed: args.seed,
        isolated: None,
        isolated_runs: 1,
        isolated_order: isolated::Order::default(),
    };
    let mix = Mix::new(global, &mix_args)?;
    let mut schemas = serde_json::Map::new();
    for (c, class) in mix.classes.iter().enumerate() {
        let mut queries = serde_json::Map::new();
        for (q, query) in class.queries.iter().enumerate() {
            let texts: Vec<Value> = (0..args.count)
                .map(|k| mix.sql(c, q, &args.stream, k).into())
                .collect();
            queries.insert(query.name.clone(), Value::Array(texts));
        }
        schemas.insert(class.schema.clone(), Value::Object(queries));
    }
    let mut doc = serde_json::json!({
        "kind": "instances",
        "stream": args.stream,
        "count": args.count,
        "classes": mix.to_json(),
        "schemas": Value::Object(schemas),
    });
    mix.params.annotate(&mut doc);
    match &args.json {
        Some(path) => write_json(path, &doc),
        None => {
            println!("{}", serde_json::to_string(&doc)?);
            Ok(())
        }
    }
}

fn spin_cmd(args: &SpinArgs, global: &GlobalArgs) -> Result<()> {
    let mix = Arc::new(Mix::new(global, &args.mix)?);
    let tracer = new_tracer(&args.trace);
    let target = target(
        &args.target,
        &mix::with_data(global, args.mix.classes),
        tracer.as_ref().map(|t| &t.0),
    )?;
    let iso = if args.no_isolated {
        None
    } else {
        Some(isolated_for(&target, &mix, &args.mix)?)
    };
    let policy = target.policy_name()?;
    if let Some((t, _)) = &tracer {
        t.take(); // only the spin run goes into the trace
    }
    let cfg = spin::SpinConfig {
        clients: args.clients,
        duration_s: args.duration,
        warmup_s: args.warmup_s,
        window_s: args.window,
        seed: args.mix.seed,
        progress: !args.quiet,
    };
    let run = spin::run(&target, &mix, iso.as_ref(), &cfg, &policy)?;
    let tp = &run.throughput;
    println!(
        "\nspin ({}, policy {policy}): {} clients, {} s; stable window {}–{} s: {:.2} ± {:.2} (2·SEM) completions/s",
        target.system(),
        args.clients,
        args.duration,
        tp.stable_from_s,
        tp.stable_to_s,
        tp.mean_qps,
        2.0 * tp.sem_qps
    );
    println!(
        "completions per second: {:?}\nmoving average ({} s): {}",
        tp.per_second,
        args.window,
        tp.moving_average
            .iter()
            .map(|v| format!("{v:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    if let Some(machine) = &run.machine {
        println!("{}", machine.line());
    }
    if !run.work.line().is_empty() {
        println!("{}", run.work.line());
    }
    let measured = (tp.stable_to_s - tp.stable_from_s) as f64;
    stats::summarize_run(&stats::points(&run.json), measured)
        .print(&mut std::io::stdout(), false)?;
    if let Some(path) = &args.json {
        write_json(path, &run.json)?;
    }
    if let (Some(path), Some((tracer, origin))) = (&args.trace, &tracer) {
        trace::write(path, &tracer.take(), *origin, run.t0, &run.samples)?;
    }
    Ok(())
}
