//! Isolated latency: each query alone on the engine, `warmup` unmeasured
//! runs then `runs` measured ones on one connection per schema; the median
//! is the query's base latency. With drawn parameters every run is another
//! instance of the query (stream [`ISOLATED`]), so the median is over
//! instances: the base latency of the query number, against which every
//! instance's slowdown is measured.
//!
//! The order of the runs is a choice ([`Order`]). Repeating one query back to
//! back measures it with its own data and hash tables still in the caches,
//! which no query in a mix ever finds; interleaving (round by round, each
//! query once per round) measures each query after the others, as it runs
//! in a mix at low load, and spreads a noisy second of the machine over
//! every query instead of a few.
//!
//! In-process, each query's planning (parse, bind, optimize, lower) is
//! printed too: its first run's — the plan cache's miss when the engine's
//! cache was cold — and the median of its measured runs, which hit the
//! cache where their statement's shape repeats (see
//! `stride-sql/src/engine/plan_cache.rs`).

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result};

use super::driver::Target;
use super::mix::{IsoStat, Isolated, Params, ISOLATED};
use super::phases::Phases;
use super::stats::Sample;
use stride::workload::{Query, Workload};

/// One schema's queries.
pub struct Suite<'a> {
    pub schema: &'a str,
    pub queries: &'a [Query],
    /// What draws the queries' instances.
    pub workload: Workload,
}

/// In which order a schema's isolated runs are made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Order {
    /// Round by round: each round runs every query of the schema once, in
    /// the suite's order; no query follows itself.
    #[default]
    Interleaved,
    /// Each query's runs back to back (warm caches: a lower bound).
    Repeated,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Interleaved => "interleaved",
            Order::Repeated => "repeated",
        }
    }
}

/// How isolated latencies are measured.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Substitution parameters: fixed, or drawn per run.
    pub params: Params,
    /// Unmeasured runs per query (made in the same order as measured ones).
    pub warmup: usize,
    /// Measured runs per query.
    pub runs: usize,
    pub order: Order,
    /// Print a table per schema.
    pub print: bool,
}

/// The order of one schema's runs: (query index, measured) pairs, each
/// query's warm-up runs before its measured ones.
fn schedule(queries: usize, plan: &Plan) -> Vec<(usize, bool)> {
    let (warmup, runs) = (plan.warmup, plan.warmup + plan.runs);
    match plan.order {
        Order::Interleaved => (0..runs)
            .flat_map(|r| (0..queries).map(move |q| (q, r >= warmup)))
            .collect(),
        Order::Repeated => (0..queries)
            .flat_map(|q| (0..runs).map(move |r| (q, r >= warmup)))
            .collect(),
    }
}

/// Measures every query of every suite. Each measured run is also returned
/// as a sample (for traces), its times in seconds since `t0`.
pub fn measure(
    target: &Target,
    t0: Instant,
    suites: &[Suite<'_>],
    plan: &Plan,
    samples: &mut Vec<Sample>,
) -> Result<Isolated> {
    anyhow::ensure!(
        plan.runs > 0,
        "isolated latencies need at least one measured run"
    );
    let mut iso = Isolated {
        by_schema: HashMap::new(),
        system: target.system(),
        runs: plan.runs,
        order: plan.order.name().into(),
        params: Some(plan.params),
    };
    let print = plan.print;
    for suite in suites {
        let mut conn = target.acquire(suite.schema)?;
        let cache_before = target.engine().map(|e| e.plan_cache().stats());
        if print {
            println!("\nschema {}", suite.schema);
            println!(
                "{:<6} {:>10} {:>10} {:>10} {:>8} {:>13} {:>12}",
                "query", "median_ms", "min_ms", "max_ms", "rows", "plan_first_ms", "plan_med_ms"
            );
        }
        // Per query: the planning of its first run (warm-up or not).
        let mut first_plan: Vec<Option<f64>> = vec![None; suite.queries.len()];
        // Per query: (latency, phases) of each measured run, and its rows.
        let mut times: Vec<Vec<(f64, Option<Phases>)>> = vec![Vec::new(); suite.queries.len()];
        let mut rows = vec![0; suite.queries.len()];
        // Runs made of each query so far: the instance number of the next.
        let mut made = vec![0u64; suite.queries.len()];
        for (i, measured) in schedule(suite.queries.len(), plan) {
            let q = &suite.queries[i];
            let sql = plan
                .params
                .sql(suite.workload, suite.schema, q, ISOLATED, made[i]);
            made[i] += 1;
            let start = t0.elapsed().as_secs_f64();
            let t = Instant::now();
            let info = conn.run(target, &sql).with_context(|| {
                let what = if measured { "" } else { " (warm-up)" };
                format!("{}.{}{what}", suite.schema, q.name)
            })?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if made[i] == 1 {
                first_plan[i] = info.phases.map(|p| p.planning_ms);
            }
            if !measured {
                continue;
            }
            rows[i] = info.rows;
            times[i].push((ms, info.phases));
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
                groups: info.groups,
                estimated_cpu_ms: info.estimated_cpu_ms,
                task_cpu_ms: info.task_cpu_ms,
                server_tag: None,
            });
        }
        let (mut sum, mut log_sum) = (0.0, 0.0);
        let (mut firsts, mut cached) = (Vec::new(), Vec::new());
        for (i, q) in suite.queries.iter().enumerate() {
            let times = &mut times[i];
            let mut planning: Vec<f64> = times
                .iter()
                .filter_map(|(_, p)| p.map(|p| p.planning_ms))
                .collect();
            let plan_median = median_of(&mut planning);
            firsts.extend(first_plan[i]);
            cached.extend(plan_median);
            times.sort_by(|a, b| a.0.total_cmp(&b.0));
            let median = times[times.len() / 2];
            let stat = IsoStat {
                median_ms: median.0,
                min_ms: times[0].0,
                max_ms: times[times.len() - 1].0,
                rows: rows[i],
                phases: median.1,
            };
            sum += stat.median_ms;
            log_sum += stat.median_ms.max(1e-6).ln();
            if print {
                let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"));
                println!(
                    "{:<6} {:>10.2} {:>10.2} {:>10.2} {:>8} {:>13} {:>12}",
                    q.name,
                    stat.median_ms,
                    stat.min_ms,
                    stat.max_ms,
                    stat.rows,
                    opt(first_plan[i]),
                    opt(plan_median)
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
            if let (Some(first), Some(med), Some(before)) =
                (median_of(&mut firsts), median_of(&mut cached), cache_before)
            {
                let after = target
                    .engine()
                    .map(|e| e.plan_cache().stats())
                    .unwrap_or(before);
                println!(
                    "planning (parse+plan) median over queries: first_run_ms={first:.3} \
                     measured_runs_ms={med:.3} plan_cache_hits={} misses={} size={}",
                    after.hits - before.hits,
                    after.misses - before.misses,
                    after.capacity
                );
            }
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

/// The median of `values` (the upper one of an even count); `None` when
/// there are none.
fn median_of(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(warmup: usize, runs: usize, order: Order) -> Plan {
        Plan {
            params: Params::Fixed,
            warmup,
            runs,
            order,
            print: false,
        }
    }

    #[test]
    fn interleaved_runs_go_round_by_round_after_a_warm_up_round() {
        let s = schedule(3, &plan(1, 2, Order::Interleaved));
        let q: Vec<usize> = s.iter().map(|&(q, _)| q).collect();
        assert_eq!(q, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert!(s[..3].iter().all(|&(_, m)| !m));
        assert!(s[3..].iter().all(|&(_, m)| m));
        // No query directly follows itself when there are several.
        assert!(s.windows(2).all(|w| w[0].0 != w[1].0));
    }

    #[test]
    fn repeated_runs_keep_each_query_together() {
        let s = schedule(2, &plan(1, 3, Order::Repeated));
        assert_eq!(
            s,
            [
                (0, false),
                (0, true),
                (0, true),
                (0, true),
                (1, false),
                (1, true),
                (1, true),
                (1, true)
            ]
        );
    }

    #[test]
    fn every_query_gets_exactly_its_runs() {
        for order in [Order::Interleaved, Order::Repeated] {
            for (queries, warmup, runs) in [(1, 0, 1), (5, 2, 3), (22, 1, 5)] {
                let s = schedule(queries, &plan(warmup, runs, order));
                for q in 0..queries {
                    let measured = s.iter().filter(|&&(x, m)| x == q && m).count();
                    let warm = s.iter().filter(|&&(x, m)| x == q && !m).count();
                    assert_eq!((measured, warm), (runs, warmup), "{order:?} q{q}");
                }
            }
        }
    }
}
