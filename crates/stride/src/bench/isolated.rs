//! Isolated latency: each query alone, `warmup` unmeasured runs then `runs`
//! measured ones on one connection; the median is the query's base latency.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result};

use super::driver::Target;
use super::mix::{IsoStat, Isolated};
use super::stats::Sample;
use stride::workload::Query;

/// One schema's queries.
pub struct Suite<'a> {
    pub schema: &'a str,
    pub queries: &'a [Query],
}

/// Measures every query of every suite; prints a table per schema when
/// `print` is set. Each run is also returned as a sample (for traces), its
/// times in seconds since `t0`.
pub fn measure(
    target: &Target,
    t0: Instant,
    suites: &[Suite<'_>],
    warmup: usize,
    runs: usize,
    print: bool,
    samples: &mut Vec<Sample>,
) -> Result<Isolated> {
    let mut iso = Isolated {
        by_schema: HashMap::new(),
        system: target.system(),
        runs,
    };
    for suite in suites {
        let mut conn = target.acquire(suite.schema)?;
        if print {
            println!("\nschema {}", suite.schema);
            println!(
                "{:<6} {:>10} {:>10} {:>10} {:>8}",
                "query", "median_ms", "min_ms", "max_ms", "rows"
            );
        }
        let (mut sum, mut log_sum) = (0.0, 0.0);
        for q in suite.queries {
            for _ in 0..warmup {
                conn.run(target, &q.sql)
                    .with_context(|| format!("{}.{} (warm-up)", suite.schema, q.name))?;
            }
            // (latency, phases) of each run.
            let mut times = Vec::with_capacity(runs);
            let mut rows = 0;
            for _ in 0..runs {
                let start = t0.elapsed().as_secs_f64();
                let t = Instant::now();
                let info = conn
                    .run(target, &q.sql)
                    .with_context(|| format!("{}.{}", suite.schema, q.name))?;
                rows = info.rows;
                let ms = t.elapsed().as_secs_f64() * 1e3;
                times.push((ms, info.phases));
                samples.push(Sample {
                    query: q.name.clone(),
                    class: suite.schema.to_string(),
                    arrival: start,
                    start,
                    end: start + ms / 1e3,
                    latency_ms: ms,
                    isolated_ms: None,
                    warmup: false,
                    error: None,
                    phases: info.phases,
                    isolated_phases: None,
                });
            }
            times.sort_by(|a, b| a.0.total_cmp(&b.0));
            let median = times[times.len() / 2];
            let stat = IsoStat {
                median_ms: median.0,
                min_ms: times[0].0,
                max_ms: times[times.len() - 1].0,
                rows,
                phases: median.1,
            };
            sum += stat.median_ms;
            log_sum += stat.median_ms.max(1e-6).ln();
            if print {
                println!(
                    "{:<6} {:>10.2} {:>10.2} {:>10.2} {:>8}",
                    q.name, stat.median_ms, stat.min_ms, stat.max_ms, stat.rows
                );
            }
            iso.by_schema
                .entry(suite.schema.to_string())
                .or_default()
                .insert(q.name.clone(), stat);
        }
        target.release(suite.schema, conn);
        if print && !suite.queries.is_empty() {
            println!(
                "sum_of_medians_ms={:.1} geomean_ms={:.2} queries={}",
                sum,
                (log_sum / suite.queries.len() as f64).exp(),
                suite.queries.len()
            );
        }
    }
    // Fill in the samples' base latencies now that medians are known.
    for s in samples.iter_mut() {
        let stat = iso.get(&s.class, &s.query).ok();
        s.isolated_ms = stat.map(|st| st.median_ms);
        s.isolated_phases = stat.and_then(|st| st.phases);
    }
    Ok(iso)
}
