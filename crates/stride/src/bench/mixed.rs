//! `stride bench mixed`: a short query's latency while a long one keeps the
//! workers busy (one session each), compared with its isolated latency.
//! Run `i` of the short query is instance `i` of stream [`MIXED_SHORT`],
//! alone and under load alike (the validation text with `--fixed-params`);
//! the long query's runs are the instances of [`MIXED_LONG`].

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use stride::workload::Workload;

use super::mix::{Params, MIXED_LONG, MIXED_SHORT};
use crate::GlobalArgs;

#[derive(Args, Debug)]
pub struct MixedArgs {
    /// TPC-H query run repeatedly in the background, on the largest --tpch scale factor.
    #[arg(long, default_value = "q9")]
    long: String,
    /// TPC-H query whose latency is measured, on the smallest --tpch scale factor.
    #[arg(long, default_value = "q6")]
    short: String,
    /// Measured runs of the short query.
    #[arg(long, default_value_t = 30)]
    runs: usize,
    /// Seed of the substitution parameters' draws.
    #[arg(long, default_value_t = 1)]
    params_seed: u64,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn mixed(args: &MixedArgs, global: &GlobalArgs) -> Result<()> {
    let (Some(small), Some(large)) = (
        global.tpch.iter().copied().reduce(f64::min),
        global.tpch.iter().copied().reduce(f64::max),
    ) else {
        bail!("name two TPC-H scale factors, e.g. --tpch 0.1,1");
    };
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let params = Params::new(global.fixed_params, args.params_seed);
    let find = |sf: f64, name: &str| {
        let workload = Workload::Tpch { scale: sf };
        workload
            .queries()
            .into_iter()
            .find(|q| q.name == name)
            .map(|q| (q, workload))
            .ok_or_else(|| anyhow::anyhow!("no TPC-H query named {name}"))
    };
    let ((short_q, short_w), (long_q, long_w)) =
        (find(small, &args.short)?, find(large, &args.long)?);
    let short_schema = stride_storage::scale_factor_schema("", small);
    let long_schema = stride_storage::scale_factor_schema("", large);
    // Run i of the short query: instance i + 1 (instance 0 warms up).
    let short_sql: Vec<String> = (0..=args.runs as u64)
        .map(|k| params.sql(short_w, &short_schema, &short_q, MIXED_SHORT, k))
        .collect();
    let (engine, mut short_session) =
        crate::start_traced(global, &crate::explicit_data_dir(global)?, None)?;
    short_session.set_default_schema(&short_schema)?;
    let run_short = |session: &mut stride_sql::Session| -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(args.runs);
        for sql in &short_sql[1..] {
            let t = Instant::now();
            session.query(sql)?;
            times.push(t.elapsed());
        }
        times.sort();
        Ok(times)
    };
    short_session.query(&short_sql[0])?; // warm-up
    let alone = run_short(&mut short_session)?;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut long_session = engine.session();
    long_session.set_default_schema(&long_schema)?;
    let long_name = long_q.name.clone();
    let background = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<Vec<Duration>> {
            let mut times = Vec::new();
            let mut k = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let sql = params.sql(long_w, &long_schema, &long_q, MIXED_LONG, k);
                k += 1;
                let t = Instant::now();
                long_session.query(&sql)?;
                times.push(t.elapsed());
            }
            Ok(times)
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let loaded = run_short(&mut short_session);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut long_times = background
        .join()
        .map_err(|_| anyhow::anyhow!("background query thread panicked"))??;
    let loaded = loaded?;
    long_times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "policy {}, {} workers, {} parameters: short {} (sf {small}) while long {} (sf {large}) runs",
        engine.runtime().scheduler().config().policy.name(),
        engine.runtime().scheduler().config().workers,
        params.name(),
        short_q.name,
        long_name
    );
    println!(
        "short alone:  p50 {:.2} ms  p95 {:.2} ms",
        ms(percentile(&alone, 0.5)),
        ms(percentile(&alone, 0.95))
    );
    println!(
        "short loaded: p50 {:.2} ms  p95 {:.2} ms  slowdown_p50={:.2}",
        ms(percentile(&loaded, 0.5)),
        ms(percentile(&loaded, 0.95)),
        percentile(&loaded, 0.5).as_secs_f64() / percentile(&alone, 0.5).as_secs_f64()
    );
    if !long_times.is_empty() {
        println!(
            "long loaded:  p50 {:.2} ms over {} runs",
            ms(percentile(&long_times, 0.5)),
            long_times.len()
        );
    }
    Ok(())
}
