//! Prints the scheduling-decision overhead (median and p99 per decision) of
//! the lock-free core for 1 and 2 workers × 1, 16 and 128 active groups:
//!
//! ```text
//! cargo run --release -p stride-sched --example decision_overhead [samples]
//! ```
//!
//! See `stride_sched::overhead` for what one sample covers.

fn main() {
    let samples = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    println!("workers  groups  median_ns  p99_ns  samples");
    for workers in [1, 2] {
        for groups in [1, 16, 128] {
            let o = stride_sched::measure_decision_overhead(workers, groups, samples);
            println!(
                "{workers:>7}  {groups:>6}  {:>9}  {:>6}  {:>7}",
                o.median_ns, o.p99_ns, o.samples
            );
        }
    }
}
