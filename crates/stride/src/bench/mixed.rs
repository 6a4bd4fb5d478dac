//! `stride bench mixed`: a short query's latency while a long one keeps the
//! workers busy (one session each), compared with its isolated latency.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use stride::workload;

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
    let find = |sf: f64, name: &str| {
        workload::tpch(sf)
            .into_iter()
            .find(|q| q.name == name)
            .ok_or_else(|| anyhow::anyhow!("no TPC-H query named {name}"))
    };
    let (short_q, long_q) = (find(small, &args.short)?, find(large, &args.long)?);
    let (engine, mut short_session) = crate::start(global)?;
    short_session.set_default_schema(&stride_storage::scale_factor_schema("", small))?;
    let run_short = |session: &mut stride_sql::Session| -> Result<Vec<Duration>> {
        let mut times = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let t = Instant::now();
            session.query(&short_q.sql)?;
            times.push(t.elapsed());
        }
        times.sort();
        Ok(times)
    };
    short_session.query(&short_q.sql)?; // warm-up
    let alone = run_short(&mut short_session)?;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut long_session = engine.session();
    long_session.set_default_schema(&stride_storage::scale_factor_schema("", large))?;
    let background = {
        let stop = stop.clone();
        let sql = long_q.sql.clone();
        std::thread::spawn(move || -> Result<Vec<Duration>> {
            let mut times = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
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
        "policy {}, {} workers: short {} (sf {small}) while long {} (sf {large}) runs",
        engine.scheduler().config().policy.name(),
        engine.scheduler().config().workers,
        short_q.name,
        long_q.name
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
