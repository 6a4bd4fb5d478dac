//! Self-tuning of the decay parameters (seed 001 §4): tracking,
//! self-simulation and directional search.
//!
//! Every `t_r` ([`TuningConfig::refresh`], 60 s) one worker attaches a
//! [`Tracker`] for `t_t` ([`TuningConfig::track`], 20 s) and logs the CPU
//! time of every task it runs, per resource group, with the group's arrival
//! ([`Tracker::record`]). The workload is symmetric across workers, so one
//! worker's share stands for the whole ([`Tracker::finish`] →
//! [`TrackedWorkload`]). The tracking worker then stops taking tasks, runs
//! [`tune`] and pushes the result to all workers, e.g.
//! `scheduler.set_policy(policy.with_decay(result.params))`.
//!
//! [`tune`] minimizes the mean slowdown (seed 001 equation (3)) of the tracked
//! workload simulated on one thread ([`crate::sim`], one serial job per
//! tracked group, quantum = `t_max`, with the scheduler's time slice
//! [`crate::SchedulerConfig::slice`], which the seed does not have) over
//! `(λ, d_start)`, keeping `p0` and `p_min`:
//!
//! * start values: `d_start` = the smallest values for which 5 %, 10 %, …,
//!   35 % of the tracked quanta run before the decay sets in
//!   ([`TrackedWorkload::d_start_candidates`]); `λ0` = the previous optimum
//!   (the `start` argument; 0.9 on the first run);
//! * per start value a local search on `λ`: step width `α0 = 1`, directions
//!   `D = {+0.05, −0.05}`; each step evaluates `λ + α·d` for `d ∈ D` inside
//!   `[0, 1]`; if every point costs more than the current `λ`, `α ← 0.5·α`,
//!   otherwise `λ` moves to the cheapest point and `α ← 1.5·α`; always
//!   exactly 7 steps, so the cost of tuning is predictable;
//! * the result is the cheapest point found, the start parameters included
//!   (tuning never makes the simulated cost worse).
//!
//! **In the running scheduler** ([`crate::SchedulerConfig::tuning`], off by
//! default): worker 0 owns a [`TuningDriver`]. Before each of its decisions
//! it polls the driver with the time since the scheduler started. The
//! refresh periods are counted from the moment decaying priorities came
//! into force (`t_0`: the first poll that found `Policy::Stride`, again after
//! any other policy was in force — a server started under SRPT and switched
//! to stride scheduling is tuned `t_t` after the switch, not only in the
//! period after next). At the start of the `k`-th period (`t_0 + k·t_r`) it
//! attaches a [`Tracker`], records every task it runs until
//! `t_0 + k·t_r + t_t`, then — unpinned, taking no task — runs [`tune`] from
//! its current decay parameters and pushes the result through the
//! scheduler's `set_policy` path if the policy is still `Policy::Stride`
//! (other policies are left alone). Each run is kept as a [`TuningReport`]
//! (the last [`TUNING_REPORTS`], `Scheduler::tuning_reports`). The other
//! workers never notice tracking or tuning, except for worker 0's absence
//! while it optimizes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::group::ResourceGroupId;
use crate::policy::{DecayParams, Policy};
use crate::sim::{isolated_latency, simulate_with_isolated, SimConfig, SimJob};

/// Fractions of the tracked quanta that must run undecayed (seed: 5 %, 10 %,
/// …, 35 %), one `d_start` start value each.
pub const UNDECAYED_FRACTIONS: [f64; 7] = [0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35];
/// Search steps per start value (seed: 7).
pub const SEARCH_STEPS: usize = 7;
/// Initial step width `α0`.
pub const ALPHA0: f64 = 1.0;
/// Search directions `D = {+0.05, −0.05}`.
pub const DIRECTIONS: [f64; 2] = [0.05, -0.05];

/// Tracking and refresh intervals (seed 001 §4: `t_t` = 20 s, `t_r` = 60 s).
#[derive(Debug, Clone, PartialEq)]
pub struct TuningConfig {
    /// `t_t`: how long one worker tracks.
    pub track: Duration,
    /// `t_r`: a tracking run starts every `refresh`.
    pub refresh: Duration,
}

impl Default for TuningConfig {
    fn default() -> Self {
        TuningConfig {
            track: Duration::from_secs(20),
            refresh: Duration::from_secs(60),
        }
    }
}

impl TuningConfig {
    /// Whether `elapsed` (since the scheduler started) lies in a tracking
    /// window `[k·t_r, k·t_r + t_t)`.
    pub fn tracking(&self, elapsed: Duration) -> bool {
        if self.refresh.is_zero() {
            return true;
        }
        let into = elapsed.as_nanos() % self.refresh.as_nanos();
        into < self.track.as_nanos()
    }

    /// The index `k` of the refresh period `elapsed` falls into.
    pub fn period(&self, elapsed: Duration) -> u64 {
        if self.refresh.is_zero() {
            return 0;
        }
        (elapsed.as_nanos() / self.refresh.as_nanos()) as u64
    }
}

/// One resource group as the tracking worker saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedGroup {
    pub group: ResourceGroupId,
    /// Arrival, relative to the start of tracking (groups that arrived
    /// earlier count as arriving at the start).
    pub arrival: Duration,
    /// CPU time the tracking worker spent on the group.
    pub work: Duration,
    /// Tasks (quanta) the tracking worker ran for the group.
    pub tasks: u32,
}

/// Execution time per resource group on one worker during `t_t`.
#[derive(Debug, Clone, PartialEq)]
pub struct TrackedWorkload {
    /// The task target duration `t_max` (the simulation's quantum).
    pub quantum: Duration,
    /// The scheduler's time slice ([`crate::SchedulerConfig::slice`]),
    /// which the simulation applies as the workers do, so that tuning
    /// scores the scheduler that runs.
    pub slice: Option<Duration>,
    /// In arrival order.
    pub groups: Vec<TrackedGroup>,
}

/// Logs the execution time one worker spends on each resource group; a plain
/// struct the worker owns while it tracks (no locking, no allocation per
/// task beyond the first task of a group).
#[derive(Debug, Clone)]
pub struct Tracker {
    quantum: Duration,
    slice: Option<Duration>,
    start: Duration,
    index: HashMap<ResourceGroupId, usize>,
    groups: Vec<TrackedGroup>,
}

impl Tracker {
    /// A tracker for tasks of target duration `t_max`, started at `start`,
    /// on the same clock as the arrivals passed to [`Tracker::record`] (e.g.
    /// time since the scheduler started).
    pub fn new(t_max: Duration, start: Duration) -> Self {
        Tracker {
            quantum: t_max,
            slice: None,
            start,
            index: HashMap::new(),
            groups: Vec::new(),
        }
    }

    /// The workload is run with time slices of `slice`
    /// ([`TrackedWorkload::slice`]).
    pub fn with_slice(mut self, slice: Option<Duration>) -> Self {
        self.slice = slice;
        self
    }

    /// The tracking worker ran a task of `group` (which arrived at
    /// `arrival`) for `ran`.
    pub fn record(&mut self, group: ResourceGroupId, arrival: Duration, ran: Duration) {
        let i = *self.index.entry(group).or_insert_with(|| {
            self.groups.push(TrackedGroup {
                group,
                arrival: arrival.saturating_sub(self.start),
                work: Duration::ZERO,
                tasks: 0,
            });
            self.groups.len() - 1
        });
        let g = &mut self.groups[i];
        g.work += ran;
        g.tasks += 1;
    }

    /// Groups seen so far.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// The tracked workload, in arrival order.
    pub fn finish(self) -> TrackedWorkload {
        let mut groups = self.groups;
        groups.sort_by_key(|g| (g.arrival, g.group));
        TrackedWorkload {
            quantum: self.quantum,
            slice: self.slice,
            groups,
        }
    }
}

impl TrackedWorkload {
    /// Quanta each group needs in the simulation (`⌈work / t_max⌉`).
    fn quanta(&self) -> Vec<u64> {
        let q = self.quantum.as_secs_f64().max(1e-12);
        self.groups
            .iter()
            .map(|g| (g.work.as_secs_f64() / q - 1e-9).ceil().max(0.0) as u64)
            .collect()
    }

    /// The smallest `d_start` for which at least each fraction in
    /// [`UNDECAYED_FRACTIONS`] of the tracked quanta run before the decay
    /// sets in (a group needing `q` quanta runs `min(q, d_start)` of them
    /// undecayed); ascending, without duplicates.
    pub fn d_start_candidates(&self) -> Vec<u32> {
        let mut quanta = self.quanta();
        quanta.sort_unstable();
        let total: u64 = quanta.iter().sum();
        if total == 0 {
            return Vec::new();
        }
        // Undecayed quanta for onset d: Σ min(q_i, d), monotone in d.
        let undecayed = |d: u64| -> u64 { quanta.iter().map(|&q| q.min(d)).sum() };
        let max_q = *quanta.last().unwrap_or(&0);
        let mut out: Vec<u32> = UNDECAYED_FRACTIONS
            .iter()
            .map(|&f| {
                let need = f * total as f64;
                let (mut lo, mut hi) = (0u64, max_q);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if undecayed(mid) as f64 >= need {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                lo.min(u64::from(u32::MAX)) as u32
            })
            .collect();
        out.dedup();
        out
    }

    /// The tracked workload as simulator jobs: one serial job per group.
    pub fn to_sim_jobs(&self) -> Vec<SimJob> {
        self.groups
            .iter()
            .map(|g| SimJob::serial(g.arrival.as_secs_f64(), g.work.as_secs_f64()))
            .collect()
    }
}

/// The outcome of one tuning run.
#[derive(Debug, Clone, PartialEq)]
pub struct TuningResult {
    /// The best parameters found (the start ones if nothing was better).
    pub params: DecayParams,
    /// Mean simulated slowdown with the start parameters.
    pub cost_before: f64,
    /// Mean simulated slowdown with `params`.
    pub cost_after: f64,
    /// Simulations run.
    pub evaluations: usize,
    /// Wall-clock time the tuning took (the cost of self-tuning).
    pub elapsed: Duration,
}

impl TuningResult {
    /// The decaying-priority policy with the tuned parameters.
    pub fn policy(&self) -> Policy {
        Policy::Stride(self.params.clone())
    }
}

/// Tuning runs the scheduler keeps ([`crate::Scheduler::tuning_reports`]).
pub const TUNING_REPORTS: usize = 64;

/// One tuning run of the running scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct TuningReport {
    /// When the run finished, since the scheduler started.
    pub at: Duration,
    /// The decay parameters the search started from (those in force).
    pub params_before: DecayParams,
    /// The parameters found (pushed to the workers if the policy was still
    /// `Policy::Stride`).
    pub params_after: DecayParams,
    /// Mean simulated slowdown of the tracked workload with `params_before`.
    pub cost_before: f64,
    /// ... and with `params_after` (`<= cost_before`).
    pub cost_after: f64,
    /// Simulations run.
    pub evaluations: usize,
    /// Wall-clock time of the optimization (tracking costs nothing extra).
    pub elapsed: Duration,
    /// `elapsed` as a share of the processing time of one refresh period
    /// (`t_r · workers`): the cost of self-tuning (seed 001 §4: < 0.01 %).
    pub share_of_processing: f64,
    /// Resource groups in the tracked workload.
    pub groups: usize,
}

/// Worker 0's tracking schedule (see the module docs): decides, from the
/// time since the scheduler started, when to attach a tracker and when its
/// workload is ready for tuning.
#[derive(Debug)]
pub(crate) struct TuningDriver {
    track: Duration,
    refresh: Duration,
    t_max: Duration,
    /// The scheduler's time slice, handed to each tracker.
    slice: Option<Duration>,
    /// The tracker of the running window and the window's end.
    tracking: Option<(Tracker, Duration)>,
    /// When decaying priorities came into force (`t_0`), since the
    /// scheduler started; `None` while another policy is in force.
    since: Option<Duration>,
    /// The last refresh period (counted from `since`) that was tracked.
    done: Option<u64>,
}

impl TuningDriver {
    pub(crate) fn new(config: &TuningConfig, t_max: Duration, slice: Option<Duration>) -> Self {
        let track = config.track.max(Duration::from_micros(1));
        TuningDriver {
            track,
            refresh: config.refresh.max(track),
            t_max,
            slice,
            tracking: None,
            since: None,
            done: None,
        }
    }

    pub(crate) fn refresh(&self) -> Duration {
        self.refresh
    }

    /// Whether a tracker is attached (tasks should be recorded).
    pub(crate) fn is_tracking(&self) -> bool {
        self.tracking.is_some()
    }

    /// The worker ran a task of `group` (arrived at `arrival`) for `ran`.
    pub(crate) fn record(&mut self, group: ResourceGroupId, arrival: Duration, ran: Duration) {
        if let Some((tracker, _)) = &mut self.tracking {
            tracker.record(group, arrival, ran);
        }
    }

    /// Called before a decision at `now` (since the scheduler started);
    /// `stride`: the policy has decay parameters. Attaches a tracker at the
    /// start of a period; returns the tracked workload once its window is
    /// over (none if nothing was tracked or the policy is not stride).
    pub(crate) fn poll(&mut self, now: Duration, stride: bool) -> Option<TrackedWorkload> {
        if !stride {
            // Another policy: the window (if any) is dropped, and the
            // periods count afresh when stride scheduling returns.
            self.tracking = None;
            self.since = None;
            self.done = None;
            return None;
        }
        if let Some((_, end)) = &self.tracking {
            if now < *end {
                return None;
            }
            let (tracker, _) = self.tracking.take()?;
            return (!tracker.is_empty()).then(|| tracker.finish());
        }
        let since = *self.since.get_or_insert(now);
        let into = now.saturating_sub(since);
        let period = (into.as_nanos() / self.refresh.as_nanos()) as u64;
        if self.done != Some(period) {
            let period_start =
                since + Duration::from_nanos((self.refresh.as_nanos() * u128::from(period)) as u64);
            if now < period_start + self.track {
                self.done = Some(period);
                self.tracking = Some((
                    Tracker::new(self.t_max, now).with_slice(self.slice),
                    period_start + self.track,
                ));
            }
        }
        None
    }
}

/// Evaluates the cost function (mean simulated slowdown) with memoization.
struct Evaluator<'a> {
    jobs: &'a [SimJob],
    isolated: Vec<f64>,
    quantum: f64,
    slice: Option<f64>,
    base: &'a DecayParams,
    cache: HashMap<(u32, u64), f64>,
    evaluations: usize,
}

impl Evaluator<'_> {
    fn cost(&mut self, d_start: u32, lambda: f64) -> f64 {
        if let Some(&c) = self.cache.get(&(d_start, lambda.to_bits())) {
            return c;
        }
        let params = DecayParams {
            lambda,
            d_start,
            ..self.base.clone()
        };
        let mut cfg = SimConfig::new(Policy::Stride(params), 1, self.quantum);
        cfg.slice = self.slice;
        let c = simulate_with_isolated(self.jobs, &cfg, &self.isolated).mean_slowdown();
        self.evaluations += 1;
        self.cache.insert((d_start, lambda.to_bits()), c);
        c
    }
}

/// Directional search for the decay parameters of `workload`, starting from
/// `start` (see the module docs).
pub fn tune(workload: &TrackedWorkload, start: &DecayParams) -> TuningResult {
    let began = Instant::now();
    let jobs = workload.to_sim_jobs();
    let quantum = workload.quantum.as_secs_f64();
    if jobs.is_empty() || quantum <= 0.0 {
        return TuningResult {
            params: start.clone(),
            cost_before: 0.0,
            cost_after: 0.0,
            evaluations: 0,
            elapsed: began.elapsed(),
        };
    }
    let isolated = jobs
        .iter()
        .map(|j| isolated_latency(j, 1, quantum))
        .collect();
    let mut eval = Evaluator {
        jobs: &jobs,
        isolated,
        quantum,
        slice: workload.slice.map(|s| s.as_secs_f64()),
        base: start,
        cache: HashMap::new(),
        evaluations: 0,
    };
    let lambda0 = start.lambda.clamp(0.0, 1.0);
    let cost_before = eval.cost(start.d_start, start.lambda);
    let mut best = (cost_before, start.d_start, start.lambda);
    for d_start in workload.d_start_candidates() {
        let mut lambda = lambda0;
        let mut cost = eval.cost(d_start, lambda);
        let mut alpha = ALPHA0;
        for _ in 0..SEARCH_STEPS {
            let mut step: Option<(f64, f64)> = None;
            for dir in DIRECTIONS {
                let candidate = lambda + alpha * dir;
                if !(0.0..=1.0).contains(&candidate) {
                    continue;
                }
                let c = eval.cost(d_start, candidate);
                if step.is_none_or(|(_, best_c)| c < best_c) {
                    step = Some((candidate, c));
                }
            }
            match step {
                // Not every point costs more: move to the cheapest.
                Some((candidate, c)) if c <= cost => {
                    lambda = candidate;
                    cost = c;
                    alpha *= 1.5;
                }
                _ => alpha *= 0.5,
            }
        }
        if cost < best.0 {
            best = (cost, d_start, lambda);
        }
    }
    TuningResult {
        params: DecayParams {
            lambda: best.2,
            d_start: best.1,
            ..start.clone()
        },
        cost_before,
        cost_after: best.0,
        evaluations: eval.evaluations,
        elapsed: began.elapsed(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn workload(groups: &[(u64, u64)]) -> TrackedWorkload {
        let mut t = Tracker::new(2 * MS, Duration::ZERO);
        for (id, &(arrival, work)) in groups.iter().enumerate() {
            for _ in 0..work / 2 {
                t.record(id as u64, Duration::from_millis(arrival), 2 * MS);
            }
        }
        t.finish()
    }

    #[test]
    fn tracker_sums_work_per_group_and_clamps_arrivals_to_the_start() {
        let mut t = Tracker::new(2 * MS, 100 * MS);
        t.record(7, 150 * MS, 2 * MS);
        t.record(3, 40 * MS, 2 * MS);
        t.record(7, 150 * MS, MS);
        assert_eq!(t.len(), 2);
        let w = t.finish();
        assert_eq!(w.groups.len(), 2);
        assert_eq!(w.groups[0].group, 3);
        assert_eq!(w.groups[0].arrival, Duration::ZERO);
        assert_eq!(w.groups[1].arrival, 50 * MS);
        assert_eq!(w.groups[1].work, 3 * MS);
        assert_eq!(w.groups[1].tasks, 2);
        let jobs = w.to_sim_jobs();
        assert!((jobs[1].arrival - 0.05).abs() < 1e-12);
        assert!((jobs[1].work() - 0.003).abs() < 1e-12);
    }

    #[test]
    fn d_start_candidates_cover_five_to_thirty_five_percent() {
        // Ten groups of 10 quanta and one of 900: 1000 quanta in all.
        let mut groups = vec![(0, 20); 10];
        groups.push((0, 1800));
        let w = workload(&groups);
        // Σ min(q, d) = 11·d for d ≤ 10 and 100 + d beyond: 5 % = 50 → d = 5;
        // 10 % = 100 → 10; 15 % → 50; 20 % → 100; 25 % → 150; …; 35 % → 250.
        assert_eq!(w.d_start_candidates(), vec![5, 10, 50, 100, 150, 200, 250]);
        // Identical groups: 5 % of 10 quanta → 1, …, 35 % → 4 (deduplicated).
        assert_eq!(
            workload(&[(0, 20); 4]).d_start_candidates(),
            vec![1, 2, 3, 4]
        );
        assert!(workload(&[]).d_start_candidates().is_empty());
    }

    #[test]
    fn tuning_never_worsens_the_start_and_counts_its_simulations() {
        let w = workload(&[(0, 400), (10, 20), (30, 20), (60, 20), (100, 200)]);
        let start = DecayParams::default();
        let r = tune(&w, &start);
        assert!(r.cost_after <= r.cost_before);
        assert!(r.cost_after >= 1.0);
        // 1 start point + per candidate at most 1 + 2·7 simulations.
        let candidates = w.d_start_candidates().len();
        assert!(r.evaluations > candidates, "{}", r.evaluations);
        assert!(r.evaluations <= 1 + candidates * (1 + 2 * SEARCH_STEPS));
        assert_eq!(r.policy(), Policy::Stride(r.params.clone()));
        assert_eq!(r.params.p0, start.p0);
        assert_eq!(r.params.p_min, start.p_min);
        assert!((0.0..=1.0).contains(&r.params.lambda));
    }

    #[test]
    fn tuning_scores_the_scheduler_with_its_time_slice() {
        // Both arrive at once; the long one is first in arrival order. A
        // 50 ms slice lets it run 50 ms before the short one gets a turn.
        let plain = workload(&[(0, 400), (0, 20)]);
        let sliced = TrackedWorkload {
            slice: Some(50 * MS),
            ..plain.clone()
        };
        let start = DecayParams::default();
        let (r_plain, r_sliced) = (tune(&plain, &start), tune(&sliced, &start));
        let jobs = sliced.to_sim_jobs();
        let isolated: Vec<f64> = jobs.iter().map(|j| isolated_latency(j, 1, 0.002)).collect();
        let mut cfg = SimConfig::new(Policy::Stride(start.clone()), 1, 0.002);
        cfg.slice = Some(0.05);
        let expected = simulate_with_isolated(&jobs, &cfg, &isolated).mean_slowdown();
        assert!(
            (r_sliced.cost_before - expected).abs() < 1e-9,
            "{} vs {expected}",
            r_sliced.cost_before
        );
        assert!(
            r_sliced.cost_before > r_plain.cost_before,
            "the slice made no difference: {} vs {}",
            r_sliced.cost_before,
            r_plain.cost_before
        );
    }

    #[test]
    fn an_empty_workload_keeps_the_start() {
        let r = tune(&workload(&[]), &DecayParams::default());
        assert_eq!(r.params, DecayParams::default());
        assert_eq!(r.evaluations, 0);
    }

    #[test]
    fn the_driver_tracks_at_the_start_of_each_period_and_hands_over_the_workload() {
        let config = TuningConfig {
            track: 20 * MS,
            refresh: 60 * MS,
        };
        let mut d = TuningDriver::new(&config, 2 * MS, Some(10 * MS));
        // Not stride: nothing is tracked.
        assert!(d.poll(MS, false).is_none());
        assert!(!d.is_tracking());
        // Stride from 2 ms on: the periods count from there.
        assert!(d.poll(2 * MS, true).is_none());
        assert!(d.is_tracking());
        d.record(1, Duration::ZERO, 2 * MS);
        d.record(2, 5 * MS, 2 * MS);
        assert!(d.poll(21 * MS, true).is_none());
        let w = d.poll(22 * MS, true).expect("window over");
        assert_eq!(w.groups.len(), 2);
        assert_eq!(w.groups[1].arrival, 3 * MS);
        assert_eq!(
            w.slice,
            Some(10 * MS),
            "the scheduler's slice travels along"
        );
        // Nothing more in this period; a window missed entirely (the worker
        // was busy past its end) is skipped.
        assert!(d.poll(30 * MS, true).is_none());
        assert!(!d.is_tracking());
        assert!(d.poll(100 * MS, true).is_none());
        assert!(!d.is_tracking());
        assert!(d.poll(125 * MS, true).is_none());
        assert!(d.is_tracking());
        // An empty window gives no workload.
        assert!(d.poll(141 * MS, true).is_none());
        assert!(d.is_tracking());
        assert!(d.poll(142 * MS, true).is_none());
        assert!(!d.is_tracking());
    }

    #[test]
    fn the_driver_counts_periods_from_when_stride_scheduling_came_into_force() {
        let config = TuningConfig {
            track: 20 * MS,
            refresh: 60 * MS,
        };
        let mut d = TuningDriver::new(&config, 2 * MS, None);
        // Another policy for the first 70 ms: nothing tracked.
        assert!(d.poll(MS, false).is_none());
        assert!(d.poll(70 * MS, false).is_none());
        assert!(!d.is_tracking());
        // Stride from 75 ms: tracked at once, tuned 20 ms later (not in the
        // window of the scheduler-aligned period that starts at 120 ms).
        assert!(d.poll(75 * MS, true).is_none());
        assert!(d.is_tracking());
        d.record(1, 74 * MS, 2 * MS);
        assert!(d.poll(94 * MS, true).is_none());
        assert!(d.poll(95 * MS, true).is_some());
        // The next window opens a refresh later, at 135 ms.
        assert!(d.poll(130 * MS, true).is_none());
        assert!(!d.is_tracking());
        assert!(d.poll(135 * MS, true).is_none());
        assert!(d.is_tracking());
        // Leaving stride scheduling drops the window; coming back starts a
        // new one at once.
        assert!(d.poll(140 * MS, false).is_none());
        assert!(d.poll(141 * MS, false).is_none());
        assert!(!d.is_tracking());
        assert!(d.poll(150 * MS, true).is_none());
        assert!(d.is_tracking());
    }

    #[test]
    fn tracking_windows_repeat_every_refresh() {
        let c = TuningConfig::default();
        assert!(c.tracking(Duration::from_secs(0)));
        assert!(c.tracking(Duration::from_secs(19)));
        assert!(!c.tracking(Duration::from_secs(20)));
        assert!(!c.tracking(Duration::from_secs(59)));
        assert!(c.tracking(Duration::from_secs(61)));
        assert_eq!(c.period(Duration::from_secs(61)), 1);
    }
}
