//! `stride bench …`: benchmark commands.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use stride::workload::{self, Query};

use crate::GlobalArgs;

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Median latency of each query run alone (after warm-up), per generated schema.
    Isolated(IsolatedArgs),
}

#[derive(Args, Debug)]
pub struct IsolatedArgs {
    /// Measured runs per query.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Unmeasured warm-up runs per query.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Only these queries (e.g. q1,q6).
    #[arg(long, value_delimiter = ',')]
    queries: Vec<String>,
}

pub fn run(cmd: &BenchCommand, global: &GlobalArgs) -> Result<()> {
    match cmd {
        BenchCommand::Isolated(args) => isolated(args, global),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn isolated(args: &IsolatedArgs, global: &GlobalArgs) -> Result<()> {
    if global.tpch.is_empty() && global.ssb.is_empty() {
        bail!("name the data to run on: --tpch <SF> and/or --ssb <SF>");
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let (engine, mut session) = crate::start(global)?;
    let mut suites: Vec<(String, Vec<Query>)> = Vec::new();
    for &sf in &global.tpch {
        suites.push((
            stride_storage::scale_factor_schema("", sf),
            workload::tpch(sf),
        ));
    }
    for &sf in &global.ssb {
        suites.push((
            stride_storage::scale_factor_schema("ssb_", sf),
            workload::ssb(),
        ));
    }
    println!(
        "isolated latency: {} workers, {} warm-up + {} measured runs per query",
        engine.scheduler().config().workers,
        args.warmup,
        args.runs
    );
    for (schema, queries) in suites {
        session.set_default_schema(&schema)?;
        println!("\nschema {schema}");
        println!(
            "{:<6} {:>10} {:>10} {:>10} {:>8}",
            "query", "median_ms", "min_ms", "max_ms", "rows"
        );
        let mut sum = Duration::ZERO;
        let mut log_sum = 0.0;
        let mut count = 0;
        for q in queries {
            if !args.queries.is_empty() && !args.queries.contains(&q.name) {
                continue;
            }
            for _ in 0..args.warmup {
                session.query(&q.sql)?;
            }
            let mut times = Vec::with_capacity(args.runs);
            let mut rows = 0;
            for _ in 0..args.runs {
                let t = Instant::now();
                let out = session.query(&q.sql)?;
                times.push(t.elapsed());
                rows = out.num_rows();
            }
            let (min, max) = (times.iter().min().copied(), times.iter().max().copied());
            let med = median(times);
            sum += med;
            log_sum += med.as_secs_f64().max(1e-9).ln();
            count += 1;
            println!(
                "{:<6} {:>10.2} {:>10.2} {:>10.2} {:>8}",
                q.name,
                med.as_secs_f64() * 1e3,
                min.unwrap_or_default().as_secs_f64() * 1e3,
                max.unwrap_or_default().as_secs_f64() * 1e3,
                rows
            );
        }
        if count > 0 {
            println!(
                "sum_of_medians_ms={:.1} geomean_ms={:.2} queries={count}",
                sum.as_secs_f64() * 1e3,
                (log_sum / count as f64).exp() * 1e3
            );
        }
    }
    Ok(())
}
