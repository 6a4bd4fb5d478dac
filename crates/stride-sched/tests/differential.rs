//! The worker loop and the simulator make the same decisions.
//!
//! Both drive the same decision core (`decision.rs`), but each around its own
//! model of events: the worker loop over the lock-free slots, masks, pins and
//! admission, timing tasks with a clock; the simulator over a model of the
//! slots in virtual time. This test holds the two together. A seeded random
//! workload (jobs of one to three task sets, arrivals spread over time, more
//! jobs than slots) runs twice:
//!
//! * on a real [`Scheduler`] with one worker and a [`Clock::Virtual`]: each
//!   task advances the virtual clock by the morsels it models instead of
//!   spending them, submits the jobs whose arrival time the clock passed,
//!   and stops at its quantum, when its task set runs dry, or at a
//!   preemption point ([`TaskContext::preempt_requested`]);
//! * in [`stride_sched::sim`] with the same quantum, morsels, slots and
//!   policy.
//!
//! Every task (job, task set, start, length) and every completion time must
//! be identical, under every policy (a custom [`RankRule`] among them), with
//! and without preemption points.
//! One worker makes the real run deterministic; with more, the interleaving
//! of real threads decides ties the simulator cannot know.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use stride_sched::policy::{RankContext, Rng, StrideState as StridePolicyState};
use stride_sched::sim::{simulate, SimConfig, SimJob, SimTaskSet};
use stride_sched::{
    Clock, CustomPolicy, DecayParams, FinalizeContext, FollowUps, MorselPolicy, Policy,
    QueryHandle, RankRule, Scheduler, SchedulerConfig, TaskContext, TaskError, TaskOutcome,
    TaskSetWork, ThresholdParams, VirtualClock, WorkerOsPriority,
};

/// Morsel length (virtual ns); every amount of work is a multiple of it.
const MORSEL: u64 = 250_000;
/// The quantum `t_max`: four morsels.
const QUANTUM: u64 = 4 * MORSEL;
const SLOTS: usize = 3;

/// One task as both sides report it: job, task set, start and length (ns).
type TaskLine = (usize, usize, u64, u64);

/// What the real run shares with its tasks.
struct Harness {
    clock: Arc<VirtualClock>,
    workload: Vec<SimJob>,
    /// Arrivals not submitted yet: (time ns, job), in time order.
    pending: Mutex<VecDeque<(u64, usize)>>,
    handles: Mutex<Vec<QueryHandle>>,
    tasks: Mutex<Vec<TaskLine>>,
    /// Completion time (ns) per job.
    completions: Mutex<Vec<Option<u64>>>,
    scheduler: OnceLock<Weak<Scheduler>>,
}

impl Harness {
    /// Submits every job whose arrival time the clock has reached.
    fn submit_due(self: &Arc<Self>) {
        let now = ns(self.clock.now());
        let mut pending = self.pending.lock().unwrap();
        while pending.front().is_some_and(|&(at, _)| at <= now) {
            let (_, job) = pending.pop_front().unwrap();
            let scheduler = self.scheduler.get().and_then(Weak::upgrade).unwrap();
            let spec = &self.workload[job];
            let sets: Vec<Arc<dyn TaskSetWork>> = spec
                .task_sets
                .iter()
                .enumerate()
                .map(|(set, t)| {
                    Arc::new(Modelled {
                        harness: self.clone(),
                        job,
                        set,
                        last: set + 1 == spec.task_sets.len(),
                        remaining: AtomicU64::new(ns_of_secs(t.work)),
                    }) as Arc<dyn TaskSetWork>
                })
                .collect();
            let handle = scheduler.submit_with(sets, spec.facts.clone());
            self.handles.lock().unwrap().push(handle);
        }
    }

    /// Runs the workload to its end. Only the first job is submitted from
    /// here, before the worker has anything to do; every later one is
    /// submitted by the task during which its arrival time passes, on the
    /// worker's own thread. (An arrival while the worker is idle could not
    /// be ordered against the worker's last look at a slot just freed: the
    /// workloads here keep the worker busy from the first arrival to the
    /// last completion.)
    fn drive(self: &Arc<Self>) {
        self.submit_due();
        loop {
            let handles = std::mem::take(&mut *self.handles.lock().unwrap());
            if handles.is_empty() {
                break;
            }
            for h in handles {
                h.wait().expect("a modelled query completes");
            }
        }
        assert!(
            self.pending.lock().unwrap().is_empty(),
            "an arrival fell into an idle period"
        );
    }
}

/// A task set that models its work in virtual time.
struct Modelled {
    harness: Arc<Harness>,
    job: usize,
    set: usize,
    last: bool,
    /// Work not yet done, ns (only the one worker touches it).
    remaining: AtomicU64,
}

impl TaskSetWork for Modelled {
    fn name(&self) -> String {
        format!("job {} set {}", self.job, self.set)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        let h = &self.harness;
        let start = ns(h.clock.now());
        let mut ran = 0;
        let outcome = loop {
            let left = self.remaining.load(Ordering::Relaxed);
            if left == 0 {
                break TaskOutcome::Exhausted;
            }
            let morsel = MORSEL.min(left);
            self.remaining.store(left - morsel, Ordering::Relaxed);
            h.clock.advance(Duration::from_nanos(morsel));
            ran += morsel;
            h.submit_due();
            if left == morsel {
                break TaskOutcome::Exhausted;
            }
            if ran >= QUANTUM || ctx.preempt_requested() {
                break TaskOutcome::Yielded;
            }
        };
        h.tasks
            .lock()
            .unwrap()
            .push((self.job, self.set, start, ran));
        Ok(outcome)
    }

    fn finalize(&self, _: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        if self.last {
            self.harness.completions.lock().unwrap()[self.job] = Some(ns(self.harness.clock.now()));
        }
        Ok(FollowUps::new())
    }
}

fn ns(d: Duration) -> u64 {
    d.as_nanos() as u64
}

fn ns_of_secs(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A seeded workload: `jobs` jobs of one to three task sets of one to twelve
/// morsels each, arriving at distinct multiples of the morsel, each before
/// the work that arrived ahead of it is done (one worker is never idle
/// between the first arrival and the last completion).
fn workload(seed: u64, jobs: usize) -> Vec<SimJob> {
    let mut rng = Rng::new(seed);
    let mut draw = |n: u64| (rng.next_f64() * n as f64).ceil().max(1.0) as u64;
    let (mut at, mut backlog_end) = (0, 0);
    (0..jobs)
        .map(|j| {
            if j > 0 {
                at = (at + draw(8) * MORSEL).min(backlog_end - MORSEL);
            }
            let sets: Vec<u64> = (0..draw(3)).map(|_| draw(12) * MORSEL).collect();
            backlog_end += sets.iter().sum::<u64>();
            let sets = sets
                .into_iter()
                .map(|w| SimTaskSet::elastic(secs(w)))
                .collect();
            SimJob::new(secs(at), sets).with_exact_estimates()
        })
        .collect()
}

/// The workload on a real scheduler with one worker and a virtual clock.
/// How both sides are configured beyond the policy.
#[derive(Debug, Clone, Copy)]
struct Setup {
    preemption: bool,
    /// Time slice of proportional-share policies, in ns.
    slice: Option<u64>,
}

fn run_real(policy: &Policy, setup: Setup, jobs: &[SimJob]) -> (Vec<TaskLine>, Vec<u64>) {
    let (clock, handle) = Clock::virtual_pair();
    let scheduler = Arc::new(Scheduler::new(SchedulerConfig {
        workers: 1,
        pin_workers: false,
        t_max: Duration::from_nanos(QUANTUM),
        morsels: MorselPolicy::Fixed(1),
        policy: policy.clone(),
        slots: SLOTS,
        preemption: setup.preemption,
        worker_os_priority: WorkerOsPriority::Normal,
        worker_os_slice: None,
        handover_morsel: None,
        slice: setup.slice.map(Duration::from_nanos),
        clock,
        ..SchedulerConfig::default()
    }));
    let harness = Arc::new(Harness {
        clock: handle,
        workload: jobs.to_vec(),
        pending: Mutex::new(
            jobs.iter()
                .enumerate()
                .map(|(j, spec)| (ns_of_secs(spec.arrival), j))
                .collect(),
        ),
        handles: Mutex::new(Vec::new()),
        tasks: Mutex::new(Vec::new()),
        completions: Mutex::new(vec![None; jobs.len()]),
        scheduler: OnceLock::new(),
    });
    let _ = harness.scheduler.set(Arc::downgrade(&scheduler));
    harness.drive();
    let tasks = std::mem::take(&mut *harness.tasks.lock().unwrap());
    let completions = harness
        .completions
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.expect("every job completed"))
        .collect();
    (tasks, completions)
}

/// The same workload in the simulator.
fn run_sim(policy: &Policy, setup: Setup, jobs: &[SimJob]) -> (Vec<TaskLine>, Vec<u64>) {
    let mut cfg = SimConfig::new(policy.clone(), 1, secs(QUANTUM));
    cfg.preemption = setup.preemption;
    cfg.slice = setup.slice.map(secs);
    cfg.morsel = Some(secs(MORSEL));
    cfg.slots = Some(SLOTS);
    cfg.record = true;
    // The scheduler's workers seed their random streams like this.
    cfg.seed = 0x5EED;
    let r = simulate(jobs, &cfg);
    let tasks = r
        .tasks
        .iter()
        .map(|t| (t.job, t.task_set, ns_of_secs(t.start), ns_of_secs(t.ran)))
        .collect();
    let completions = r
        .jobs
        .iter()
        .map(|j| ns_of_secs(j.completion.expect("every job completed")))
        .collect();
    (tasks, completions)
}

fn policies() -> Vec<Policy> {
    vec![
        Policy::Fifo,
        Policy::Fair,
        Policy::Stride(DecayParams::default()),
        Policy::Lottery,
        Policy::Srpt,
        Policy::IfSrpt,
        Policy::Threshold(ThresholdParams::default()),
        Policy::Custom(CustomPolicy::new(Lifo)),
    ]
}

/// A policy from outside the crate: the latest arrival first.
struct Lifo;

impl RankRule for Lifo {
    fn name(&self) -> &'static str {
        "lifo"
    }

    fn rank(&self, state: &StridePolicyState, _: &mut RankContext<'_>) -> f64 {
        -(state.arrival as f64)
    }
}

#[test]
fn the_worker_loop_and_the_simulator_make_the_same_decisions() {
    for seed in 1..=6u64 {
        let jobs = workload(seed, 16);
        for policy in policies() {
            let mut by_slice = Vec::new();
            for (preemption, slice) in [(false, None), (true, None), (true, Some(3 * QUANTUM))] {
                let setup = Setup { preemption, slice };
                let real = run_real(&policy, setup, &jobs);
                let sim = run_sim(&policy, setup, &jobs);
                if preemption {
                    by_slice.push(real.0.clone());
                }
                assert!(!real.0.is_empty());
                assert_eq!(
                    real.0, sim.0,
                    "tasks differ: seed {seed}, {policy:?}, {setup:?}"
                );
                assert_eq!(
                    real.1, sim.1,
                    "completions differ: seed {seed}, {policy:?}, {setup:?}"
                );
            }
            if matches!(policy, Policy::Fair) {
                // Not vacuous: slices change the fair policy's turns.
                assert_ne!(
                    by_slice[0], by_slice[1],
                    "seed {seed}: slices changed nothing"
                );
            }
        }
    }
}

#[test]
fn preemption_points_cut_tasks_short_in_both() {
    // A long job, then a short one arriving one morsel into a quantum: with
    // preemption points the long job's task ends at the next morsel
    // boundary, without them at the end of its quantum.
    let jobs = vec![
        SimJob::new(0.0, vec![SimTaskSet::elastic(secs(40 * MORSEL))]).with_exact_estimates(),
        SimJob::new(
            secs(MORSEL + MORSEL / 2),
            vec![SimTaskSet::elastic(secs(MORSEL))],
        )
        .with_exact_estimates(),
    ];
    for preemption in [false, true] {
        let setup = Setup {
            preemption,
            slice: None,
        };
        let (real, _) = run_real(&Policy::Srpt, setup, &jobs);
        let (sim, _) = run_sim(&Policy::Srpt, setup, &jobs);
        assert_eq!(real, sim);
        let first = real[0];
        let expected = if preemption { 2 * MORSEL } else { QUANTUM };
        assert_eq!((first.0, first.3), (0, expected), "{real:?}");
        assert_eq!(real[1].0, 1, "the short job runs next: {real:?}");
    }
}
