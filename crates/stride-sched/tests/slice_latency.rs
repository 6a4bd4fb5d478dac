//! Time slices and newcomers under decaying priorities, in the simulator
//! (modelled: 2 workers, `t_max` = 2 ms, 0.5 ms morsels with preemption
//! points, no cache model). The workload is seed 001's two-class mix at load
//! α = 0.9: three short queries (4–30 ms of CPU) to one long one
//! (100–1000 ms), each three elastic task sets, Poisson arrivals.
//!
//! Two rules are held here (docs/experiments.md, "Newcomers under stride
//! scheduling"): a slice never makes a newcomer of higher priority wait for
//! a decayed query's whole slice ([`stride_sched::decision`]'s
//! `slice_continues`), and a newcomer is ranked by the virtual time at
//! which its next quantum would end, so it does not wait for one quantum of
//! every decayed query that sits at the virtual time it enters at.
//!
//! A third, the variant `stride-queue` (docs/experiments.md, "Decayed
//! queries queue"): queries that have decayed to the floor run one after
//! another ([`FloorOrder::Queue`]) rather than sharing the workers, which
//! in the model lowers the long class's mean latency a little and leaves
//! the short class as it was.

use stride_sched::policy::Rng;
use stride_sched::sim::{simulate, SimConfig, SimJob, SimTaskSet};
use stride_sched::{DecayParams, FloorOrder, Policy};

const SHORT_SHARE: f64 = 0.75;

struct Mix {
    jobs: Vec<SimJob>,
    short: Vec<bool>,
}

fn mix(seed: u64, load: f64, secs: f64) -> Mix {
    let mut rng = Rng::new(seed);
    let (short_mean, long_mean) = (0.017, 0.55);
    let mean = SHORT_SHARE * short_mean + (1.0 - SHORT_SHARE) * long_mean;
    let lambda = load * 2.0 / mean;
    let (mut t, mut jobs, mut short) = (0.0, Vec::new(), Vec::new());
    loop {
        t += rng.next_exp() / lambda;
        if t >= secs {
            break;
        }
        let is_short = rng.next_f64() < SHORT_SHARE;
        let work = if is_short {
            0.004 + 0.026 * rng.next_f64()
        } else {
            0.1 + 0.9 * rng.next_f64()
        };
        let sets = [0.2, 0.5, 0.3].map(|f| SimTaskSet::elastic(work * f));
        jobs.push(SimJob::new(t, sets.to_vec()));
        short.push(is_short);
    }
    Mix { jobs, short }
}

/// Mean slowdown of the short and the long class.
fn classes(m: &Mix, policy: Policy, slice: Option<f64>) -> (f64, f64) {
    let mut cfg = SimConfig::new(policy, 2, 0.002);
    cfg.preemption = true;
    cfg.morsel = Some(0.0005);
    cfg.slice = slice;
    let r = simulate(&m.jobs, &cfg);
    classes_of(&r, &m.short)
}

fn classes_of(r: &stride_sched::SimResult, short: &[bool]) -> (f64, f64) {
    let mut sums = [(0.0, 0usize); 2];
    for (o, &is_short) in r.jobs.iter().zip(short) {
        let s = o.slowdown().expect("every job completes");
        let c = &mut sums[usize::from(!is_short)];
        c.0 += s;
        c.1 += 1;
    }
    (sums[0].0 / sums[0].1 as f64, sums[1].0 / sums[1].1 as f64)
}

#[test]
fn slices_cost_newcomers_nothing_under_decaying_priorities() {
    for seed in [1, 2] {
        let m = mix(seed, 0.9, 30.0);
        let stride = Policy::Stride(DecayParams::default());
        let (plain, plain_long) = classes(&m, stride.clone(), None);
        let (sliced, sliced_long) = classes(&m, stride, Some(0.05));
        eprintln!(
            "seed {seed}: stride short {plain:.2} / {sliced:.2} with 50 ms slices, long {plain_long:.2} / {sliced_long:.2}"
        );
        // Before the rule, 50 ms slices doubled the short class's slowdown
        // (1.72 → 3.55 on this mix).
        assert!(
            sliced <= plain * 1.1,
            "slices cost the short class: {plain:.2} → {sliced:.2}"
        );
        assert!(sliced_long <= plain_long * 1.1);
    }
}

#[test]
fn decaying_priorities_run_newcomers_nearly_alone() {
    for seed in [1, 2] {
        let m = mix(seed, 0.9, 30.0);
        let (stride, _) = classes(&m, Policy::Stride(DecayParams::default()), Some(0.05));
        let (fair, _) = classes(&m, Policy::Fair, Some(0.05));
        eprintln!("seed {seed}: short class, stride {stride:.2}, fair {fair:.2}");
        // Ranked by the start of their next quantum, newcomers waited one
        // quantum of every decayed query at the virtual time (1.72 on this
        // mix without slices); ranked by its end they run first (1.1–1.2).
        assert!(
            stride < 1.35,
            "short class under stride scheduling: {stride:.2}"
        );
        assert!(
            stride < fair / 2.0,
            "stride {stride:.2} against fair {fair:.2}"
        );
    }
}

fn stride(floor: FloorOrder) -> Policy {
    Policy::Stride(DecayParams {
        floor,
        ..DecayParams::default()
    })
}

#[test]
fn decayed_queries_that_queue_lower_the_long_class_and_leave_the_short_one() {
    let (mut share, mut queue) = ((0.0, 0.0), (0.0, 0.0));
    for seed in [1, 2, 5] {
        let m = mix(seed, 0.9, 30.0);
        let s = classes(&m, stride(FloorOrder::Share), Some(0.05));
        let q = classes(&m, stride(FloorOrder::Queue), Some(0.05));
        eprintln!(
            "seed {seed}: short {:.2} / {:.2}, long {:.2} / {:.2} (share / queue)",
            s.0, q.0, s.1, q.1
        );
        share = (share.0 + s.0, share.1 + s.1);
        queue = (queue.0 + q.0, queue.1 + q.1);
    }
    // On this mix a long query spends a good part of its work above the
    // floor (its first ~100 ms of CPU per worker), so queueing at the floor
    // lowers the long class's mean slowdown, summed over the three seeds,
    // by about 2 % (modelled: 19.7 -> 19.3; seed 5 alone is 8 % worse);
    // the burst below shows the mechanism.
    assert!(
        queue.1 < share.1 * 0.99,
        "long class: share {:.2}, queue {:.2}",
        share.1,
        queue.1
    );
    assert!(
        queue.0 < share.0 * 1.05,
        "short class: share {:.2}, queue {:.2}",
        share.0,
        queue.0
    );
}

/// Six long queries of 1 s of CPU arrive together, a short one (10 ms)
/// every 50 ms for 2 s.
#[test]
fn under_a_burst_of_long_queries_the_first_to_decay_finishes_first() {
    let mut jobs = Vec::new();
    let mut short = Vec::new();
    for i in 0..6 {
        let work = 1.0;
        let sets = [0.2, 0.5, 0.3].map(|f| SimTaskSet::elastic(work * f));
        jobs.push(SimJob::new(0.001 * f64::from(i), sets.to_vec()));
        short.push(false);
    }
    for i in 0..40 {
        let sets = [0.5, 0.5].map(|f| SimTaskSet::elastic(0.01 * f));
        jobs.push(SimJob::new(0.05 * f64::from(i) + 0.02, sets.to_vec()));
        short.push(true);
    }
    let run = |floor| {
        let mut cfg = SimConfig::new(stride(floor), 2, 0.002);
        cfg.preemption = true;
        cfg.morsel = Some(0.0005);
        cfg.slice = Some(0.05);
        let r = simulate(&jobs, &cfg);
        let long_ends: Vec<f64> = r.jobs[..6]
            .iter()
            .map(|o| o.completion.expect("every job completes"))
            .collect();
        (classes_of(&r, &short), long_ends)
    };
    let ((share_short, share_long), share_ends) = run(FloorOrder::Share);
    let ((queue_short, queue_long), queue_ends) = run(FloorOrder::Queue);
    eprintln!("share: short {share_short:.2}, long {share_long:.2}, ends {share_ends:.2?}");
    eprintln!("queue: short {queue_short:.2}, long {queue_long:.2}, ends {queue_ends:.2?}");
    // Each spends its first ~200 ms of CPU above the floor, all six
    // alike; then, sharing, the six end together, and queued, one after
    // another (~0.4 s apart on two workers).
    let last = |ends: &[f64]| ends.iter().cloned().fold(0.0, f64::max);
    let first = |ends: &[f64]| ends.iter().cloned().fold(f64::INFINITY, f64::min);
    assert!(
        first(&share_ends) > 0.95 * last(&share_ends),
        "{share_ends:?}"
    );
    assert!(
        first(&queue_ends) < 0.5 * last(&queue_ends),
        "{queue_ends:?}"
    );
    assert!(
        queue_long < 0.8 * share_long,
        "{share_long:.2} / {queue_long:.2}"
    );
    assert!(
        queue_short < share_short * 1.05,
        "{share_short:.2} / {queue_short:.2}"
    );
}
