//! `stride bench sched-overhead`: the cost of one scheduling decision of the
//! lock-free stride core (seed 001 §2.3), with 1 and 2 workers and 1, 16 and
//! 128 active resource groups whose tasks do no work (see
//! `stride_sched::overhead` for what one sample covers), and that cost as a
//! share of a task of `t_max` = 2 ms.

use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct SchedOverheadArgs {
    /// Decisions measured per configuration.
    #[arg(long, default_value_t = 200_000)]
    samples: usize,
    /// Worker counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    workers: Vec<usize>,
    /// Active resource-group counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,16,128")]
    groups: Vec<usize>,
}

/// Target task duration the overhead share is computed against.
const T_MAX_NS: f64 = 2_000_000.0;

pub fn run(args: &SchedOverheadArgs) -> Result<()> {
    if args.samples == 0 || args.workers.contains(&0) || args.groups.contains(&0) {
        bail!("--samples, --workers and --groups must be at least 1");
    }
    println!("scheduling decision (stride policy, tasks that do no work; t_max = 2 ms)");
    println!(
        "{:>7} {:>6} {:>10} {:>8} {:>9} {:>14}",
        "workers", "groups", "median_ns", "p99_ns", "samples", "share_of_t_max"
    );
    let mut medians = Vec::new();
    for &workers in &args.workers {
        for &groups in &args.groups {
            let o = stride_sched::measure_decision_overhead(workers, groups, args.samples);
            println!(
                "{workers:>7} {groups:>6} {:>10} {:>8} {:>9} {:>13.4}%",
                o.median_ns,
                o.p99_ns,
                o.samples,
                o.median_ns as f64 / T_MAX_NS * 100.0
            );
            println!(
                "decision_ns_median={} workers={workers} groups={groups} decision_ns_p99={}",
                o.median_ns, o.p99_ns
            );
            medians.push(o.median_ns);
        }
    }
    medians.sort_unstable();
    let worst = medians.last().copied().unwrap_or(0);
    println!(
        "decision_ns_median={} (worst configuration; target < 200 ns; overhead at t_max = 2 ms: {:.4}%)",
        worst,
        worst as f64 / T_MAX_NS * 100.0
    );
    Ok(())
}
