//! Policies compared in the simulator ([`stride_sched::sim`]), which runs the
//! scheduler's own policy code with a virtual clock. Everything here is
//! deterministic: workloads and the lottery are seeded.

use std::time::Duration;

use stride_sched::policy::{Rng, ThresholdParams};
use stride_sched::sim::{simulate, simulate_ps, SimConfig, SimJob, SimResult, SimTaskSet};
use stride_sched::tuning::{tune, Tracker};
use stride_sched::{DecayParams, GroupFacts, Policy};

const T_MAX: f64 = 0.002;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn stride() -> Policy {
    Policy::Stride(DecayParams::default())
}

fn user(priority: f64) -> GroupFacts {
    GroupFacts {
        user_priority: priority,
        ..GroupFacts::default()
    }
}

/// Seed 000 §2.2.4: one server; job A of size 3 arrives at 0, job B of size
/// 1 at 1; quantum 1 (time units are seconds here).
///
/// Derivation (T = completion − arrival, S = T / size):
/// * FCFS: A runs 0–3, B 3–4. T_A = 3, T_B = 3 → E[T] = 3;
///   S_A = 1, S_B = 3 → E[S] = 2.
/// * PS, quantum 1, a newcomer served after the jobs already there: A runs
///   0–1 and 1–2, B 2–3, A 3–4. T_A = 4, T_B = 2 → E[T] = 3;
///   S_A = 4/3, S_B = 2 → E[S] = 5/3. Fluid PS gives the same: A alone 0–1,
///   then both at rate 1/2, B done at 3, A at 4.
/// * SRPT: at t = 1, B (1 left) preempts A (2 left): A 0–1, B 1–2, A 2–4.
///   T_A = 4, T_B = 1 → E[T] = 5/2; S_A = 4/3, S_B = 1 → E[S] = 7/6.
#[test]
fn seed_000_two_job_example() {
    let jobs = vec![
        SimJob::serial(0.0, 3.0).with_exact_estimates(),
        SimJob::serial(1.0, 1.0).with_exact_estimates(),
    ];
    let run = |policy: Policy| simulate(&jobs, &SimConfig::new(policy, 1, 1.0));
    let check = |name: &str, r: &SimResult, t: f64, s: f64| {
        eprintln!(
            "{name:>10}: E[T] = {:.4}  E[S] = {:.4}",
            r.mean_latency(),
            r.mean_slowdown()
        );
        assert!(
            close(r.mean_latency(), t),
            "{name} E[T] {}",
            r.mean_latency()
        );
        assert!(
            close(r.mean_slowdown(), s),
            "{name} E[S] {}",
            r.mean_slowdown()
        );
    };

    let fcfs = run(Policy::Fifo);
    check("FCFS", &fcfs, 3.0, 2.0);
    assert_eq!(fcfs.jobs[1].completion, Some(4.0));

    // PS: the fluid reference and the fair policy at quantum granularity.
    check("PS (fluid)", &simulate_ps(&jobs, 1, None), 3.0, 5.0 / 3.0);
    let fair = run(Policy::Fair);
    check("PS (fair)", &fair, 3.0, 5.0 / 3.0);
    assert_eq!(fair.jobs[1].first_run, Some(2.0));

    let srpt = run(Policy::Srpt);
    check("SRPT", &srpt, 2.5, 7.0 / 6.0);
    assert_eq!(srpt.jobs[1].completion, Some(2.0));
    // Without estimates SRPT falls back to least attained service, which
    // decides the same here (A has had 1 unit, B none).
    let las: Vec<SimJob> = jobs
        .iter()
        .map(|j| j.clone().with_facts(GroupFacts::default()))
        .collect();
    let r = simulate(&las, &SimConfig::new(Policy::Srpt, 1, 1.0));
    check("SRPT/LAS", &r, 2.5, 7.0 / 6.0);
    // IF-SRPT with two jobs of the same class is SRPT.
    check("IF-SRPT", &run(Policy::IfSrpt), 2.5, 7.0 / 6.0);
}

/// The fair policy at quantum granularity approximates fluid processor
/// sharing; SRPT beats both on mean latency (it is optimal on one server).
#[test]
fn fair_approximates_processor_sharing_and_srpt_minimizes_mean_latency() {
    let mut rng = Rng::new(7);
    let mut t = 0.0;
    let jobs: Vec<SimJob> = (0..200)
        .map(|_| {
            t += rng.next_exp() * 0.05;
            let work = 0.005 + rng.next_exp() * 0.04;
            SimJob::serial(t, work).with_exact_estimates()
        })
        .collect();
    let ps = simulate_ps(&jobs, 1, None);
    let fair = simulate(&jobs, &SimConfig::new(Policy::Fair, 1, 0.0005));
    let srpt = simulate(&jobs, &SimConfig::new(Policy::Srpt, 1, 0.0005));
    let fifo = simulate(&jobs, &SimConfig::new(Policy::Fifo, 1, 0.0005));
    eprintln!(
        "mean latency: PS {:.4}  fair {:.4}  SRPT {:.4}  FIFO {:.4}",
        ps.mean_latency(),
        fair.mean_latency(),
        srpt.mean_latency(),
        fifo.mean_latency()
    );
    let rel = (fair.mean_latency() - ps.mean_latency()).abs() / ps.mean_latency();
    assert!(rel < 0.03, "fair vs PS: {rel}");
    assert!(srpt.mean_latency() < ps.mean_latency());
    assert!(srpt.mean_latency() < fifo.mean_latency());
    assert_eq!(ps.completed(), 200);
    assert_eq!(fair.completed(), 200);
}

/// Seed 001 §3.2, principle (1): two queries arriving together — the
/// shorter finishes first, with the priorities decaying identically.
#[test]
fn decaying_priorities_finish_the_shorter_of_two_simultaneous_queries_first() {
    // Listed long first, so FIFO serves the long one first.
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(0.4)]),
        SimJob::new(0.0, vec![SimTaskSet::elastic(0.04)]),
    ];
    let cfg = |p| SimConfig::new(p, 2, T_MAX);
    let st = simulate(&jobs, &cfg(stride()));
    let fifo = simulate(&jobs, &cfg(Policy::Fifo));
    let (long, short) = (&st.jobs[0], &st.jobs[1]);
    assert!(short.completion < long.completion);
    assert!(fifo.jobs[1].completion > fifo.jobs[0].completion);
    // Equal shares until the short one is done: 0.04 s of work each on 2
    // workers → the short one completes at 0.04, about twice its isolated
    // latency, and far earlier than behind the long one (0.22).
    assert!(close(short.completion.unwrap(), 0.04), "{short:?}");
    assert!(close(long.completion.unwrap(), 0.22));
    assert!(close(fifo.jobs[1].completion.unwrap(), 0.22));
}

/// Seed 001 §3.2: a short query arriving while a long one runs overtakes it
/// under decaying priorities (the long one has decayed to p_min); fair
/// scheduling only gives it half of the workers.
#[test]
fn decaying_priorities_give_a_newly_arriving_short_query_low_latency() {
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(2.0)]),
        SimJob::new(0.5, vec![SimTaskSet::elastic(0.04)]),
    ];
    let cfg = |p| SimConfig::new(p, 2, T_MAX);
    let st = simulate(&jobs, &cfg(stride()));
    let fair = simulate(&jobs, &cfg(Policy::Fair));
    let fifo = simulate(&jobs, &cfg(Policy::Fifo));
    let slow = |r: &SimResult, i: usize| r.jobs[i].slowdown().unwrap();
    eprintln!(
        "short query slowdown: stride {:.3}  fair {:.3}  fifo {:.3}; long: stride {:.4}  fair {:.4}",
        slow(&st, 1),
        slow(&fair, 1),
        slow(&fifo, 1),
        slow(&st, 0),
        slow(&fair, 0)
    );
    // The long query sits at p_min = 100 against the newcomer's p0 = 10^4:
    // the newcomer gets ~99 % of the workers until its own priority decays.
    assert!(slow(&st, 1) < 1.25, "stride {}", slow(&st, 1));
    assert!(slow(&fair, 1) > 1.9, "fair {}", slow(&fair, 1));
    assert!(slow(&fifo, 1) > 20.0);
    // The long one barely notices: it ends when all the work is done either
    // way (both policies are work-conserving).
    assert!(close(st.jobs[0].completion.unwrap(), 1.02));
    assert!(close(fair.jobs[0].completion.unwrap(), 1.02));
}

/// Seed 000 §3.2.2 (Figure 3.4): an elastic job E (5 units of work, any
/// parallelism) and an inelastic job I (6 units, one worker at a time)
/// arrive together on 4 workers. SRPT serves E first (5 < 6): E takes all 4
/// workers, I waits a quantum and ends at 7. IF-SRPT defers E: I starts at
/// once on one worker and ends at 6, E soaks up the other 3 workers and
/// still ends at 2. Mean latency 4.5 → 4, makespan 7 → 6.
#[test]
fn if_srpt_defers_elastic_work_behind_inelastic_work() {
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(5.0)]).with_exact_estimates(),
        SimJob::new(0.0, vec![SimTaskSet::inelastic(6.0, 1)]).with_exact_estimates(),
    ];
    let cfg = |p| SimConfig::new(p, 4, 1.0);
    let srpt = simulate(&jobs, &cfg(Policy::Srpt));
    let if_srpt = simulate(&jobs, &cfg(Policy::IfSrpt));
    let done = |r: &SimResult, i: usize| r.jobs[i].completion.unwrap();
    assert_eq!(srpt.jobs[1].first_run, Some(1.0));
    assert_eq!((done(&srpt, 0), done(&srpt, 1)), (2.0, 7.0));
    assert_eq!(if_srpt.jobs[1].first_run, Some(0.0));
    assert_eq!((done(&if_srpt, 0), done(&if_srpt, 1)), (2.0, 6.0));
    assert!(close(srpt.mean_latency(), 4.5));
    assert!(close(if_srpt.mean_latency(), 4.0));

    // THRESHOLD: 2 groups on 4 workers is low load (IF-SRPT) at the default
    // threshold; with a threshold of 1/4 of the workers it is high load
    // (SRPT).
    let low = simulate(&jobs, &cfg(Policy::parse("threshold").unwrap()));
    assert_eq!(low.jobs, if_srpt.jobs);
    let high = simulate(
        &jobs,
        &cfg(Policy::Threshold(ThresholdParams { load: 0.25 })),
    );
    assert_eq!(high.jobs, srpt.jobs);
}

/// Lottery: each decision's winner is drawn with probability proportional
/// to its tickets (1 : 2 : 3 by user priority).
#[test]
fn lottery_shares_follow_the_tickets() {
    let jobs: Vec<SimJob> = [1.0, 2.0, 3.0]
        .iter()
        .map(|&p| SimJob::serial(0.0, 1e6).with_facts(user(p)))
        .collect();
    let mut cfg = SimConfig::new(Policy::Lottery, 1, 1.0);
    cfg.seed = 2024;
    cfg.horizon = Some(60_000.0);
    let r = simulate(&jobs, &cfg);
    let total = r.decisions() as f64;
    assert!(total >= 60_000.0);
    for (job, tickets) in r.jobs.iter().zip([1.0, 2.0, 3.0]) {
        let share = job.decisions as f64 / total;
        eprintln!(
            "tickets {tickets}: share {share:.4} (expected {:.4})",
            tickets / 6.0
        );
        assert!((share - tickets / 6.0).abs() < 0.01, "share {share}");
    }
    // A different seed gives a different (but equally fair) sequence.
    cfg.seed = 2025;
    let other = simulate(&jobs, &cfg);
    assert_ne!(other.jobs[0].decisions, r.jobs[0].decisions);
}

/// Seed 001 §3.2 custom priorities (2): a user of priority 2 gets twice the
/// CPU share of a user of priority 1 under fair, and under the seed's
/// decaying priorities once both have decayed (p0 and p_min both scaled):
/// as the seed (`stride`) and with decayed queries queued (`stride-queue`),
/// where different users' floors are different queues.
#[test]
fn user_priorities_scale_the_share() {
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(100.0)]).with_facts(user(2.0)),
        SimJob::new(0.0, vec![SimTaskSet::elastic(100.0)]).with_facts(user(1.0)),
    ];
    let share = |policy: &Policy| {
        let mut cfg = SimConfig::new(policy.clone(), 2, T_MAX);
        cfg.horizon = Some(30.0);
        let r = simulate(&jobs, &cfg);
        let ratio = r.jobs[0].cpu / r.jobs[1].cpu;
        eprintln!("{}: CPU share ratio {ratio:.3}", policy.name());
        ratio
    };
    for policy in [
        Policy::Fair,
        stride(),
        Policy::parse("stride-queue").unwrap(),
    ] {
        let ratio = share(&policy);
        assert!((ratio - 2.0).abs() < 0.05, "{}: {ratio}", policy.name());
    }
    // A static priority keeps p0: the static query beats a decayed one.
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(100.0)]),
        SimJob::new(0.0, vec![SimTaskSet::elastic(100.0)]).with_facts(GroupFacts {
            static_priority: true,
            ..GroupFacts::default()
        }),
    ];
    let mut cfg = SimConfig::new(stride(), 2, T_MAX);
    cfg.horizon = Some(10.0);
    let r = simulate(&jobs, &cfg);
    let ratio = r.jobs[1].cpu / r.jobs[0].cpu;
    assert!(ratio > 50.0, "static vs decayed: {ratio}");
}

/// Seed 001 §3.2's example workload for one tracked worker: 90 % short
/// queries of 10 ms, 10 % long ones of 1 s, Poisson arrivals at load 0.9,
/// over a 20 s tracking interval.
fn two_class_tracked(seed: u64) -> stride_sched::TrackedWorkload {
    let mut rng = Rng::new(seed);
    let mean_work = 0.9 * 0.010 + 0.1 * 1.0;
    let rate = 0.9 / mean_work;
    let q = Duration::from_millis(2);
    let mut tracker = Tracker::new(q, Duration::ZERO);
    let mut t = 0.0;
    let mut id = 0u64;
    loop {
        t += rng.next_exp() / rate;
        if t >= 20.0 {
            break;
        }
        let work_ms = if rng.next_f64() <= 0.9 { 10 } else { 1000 };
        for _ in 0..work_ms / 2 {
            tracker.record(id, Duration::from_secs_f64(t), q);
        }
        id += 1;
    }
    tracker.finish()
}

/// Seed 001 §4: self-tuning finds decay parameters with a strictly lower
/// mean slowdown in the self-simulation than the start parameters.
#[test]
fn self_tuning_lowers_the_simulated_mean_slowdown() {
    let tracked = two_class_tracked(11);
    assert!(tracked.groups.len() > 100);
    let start = DecayParams::default();
    let result = tune(&tracked, &start);
    eprintln!(
        "tuning: {} groups, d_start candidates {:?}, {} simulations in {:.1} ms; \
         start (λ {}, d_start {}) cost {:.4} → tuned (λ {:.4}, d_start {}) cost {:.4}",
        tracked.groups.len(),
        tracked.d_start_candidates(),
        result.evaluations,
        result.elapsed.as_secs_f64() * 1e3,
        start.lambda,
        start.d_start,
        result.cost_before,
        result.params.lambda,
        result.params.d_start,
        result.cost_after
    );
    assert!(result.cost_after < result.cost_before);

    // Check independently with a fresh simulation of the tracked workload
    // (one worker), and against fair scheduling for reference.
    let jobs = tracked.to_sim_jobs();
    let cost = |p: Policy| simulate(&jobs, &SimConfig::new(p, 1, T_MAX)).mean_slowdown();
    let before = cost(Policy::Stride(start.clone()));
    let after = cost(result.policy());
    let fair = cost(Policy::Fair);
    eprintln!("re-simulated mean slowdown: fair {fair:.4}  start {before:.4}  tuned {after:.4}");
    assert!(close(before, result.cost_before));
    assert!(close(after, result.cost_after));
    assert!(after < before);
    assert!(after < fair);

    // The next tuning run starts from the previous optimum.
    let again = tune(&two_class_tracked(12), &result.params);
    assert!(again.cost_after <= again.cost_before);
}

/// The latest arrival first: a policy defined outside the crate.
struct Lifo;

impl stride_sched::RankRule for Lifo {
    fn name(&self) -> &'static str {
        "lifo"
    }

    fn rank(
        &self,
        state: &stride_sched::policy::StrideState,
        _: &mut stride_sched::policy::RankContext<'_>,
    ) -> f64 {
        -(state.arrival as f64)
    }
}

#[test]
fn a_custom_policy_plugs_in_without_touching_the_enum() {
    // One worker, three serial jobs of two quanta arriving together: LIFO
    // runs the last one first, to completion, then the others in reverse.
    let jobs: Vec<SimJob> = (0..3).map(|_| SimJob::serial(0.0, 2.0)).collect();
    let policy = Policy::Custom(stride_sched::CustomPolicy::new(Lifo));
    assert_eq!(policy.name(), "lifo");
    let r = simulate(&jobs, &SimConfig::new(policy, 1, 1.0));
    let completions: Vec<f64> = r.jobs.iter().map(|j| j.completion.unwrap()).collect();
    assert_eq!(completions, vec![6.0, 4.0, 2.0]);
}
