//! A scheduling simulator that drives the real policy code with a virtual
//! clock (DESIGN.md invariant 2; seed 001 §4 "self-simulation").
//!
//! A workload is a list of [`SimJob`]s — an arrival time and an ordered list
//! of task sets, each with its CPU work and the number of workers it can use
//! at once (its parallelism: 1 for an inelastic pipeline, unlimited for an
//! elastic one). `W` simulated workers take tasks of at most one quantum
//! (`t_max`) of work:
//!
//! * whenever a worker is free it serves the runnable job of minimal
//!   [`StrideState::rank`] (ties: earlier arrival) — a job is runnable when
//!   its active task set has work not yet handed out and fewer than its
//!   parallelism workers run it; the worker takes `min(quantum, unassigned)`
//!   of work, exactly like a real task that finds its source dry early;
//! * when the task returns, the job's state is [`StrideState::charge`]d with
//!   the time it ran; when the last task of a task set returns, the next task
//!   set is activated ([`StrideState::task_set_activated`]) or the job
//!   completes (finalization takes no time here);
//! * a new job [`StrideState::enter`]s with the virtual time (the smallest pass
//!   of the active jobs, as a worker's local view does when it learns of a
//!   new group).
//!
//! Events at the same instant are handled as the real scheduler would see
//! them: returning tasks are charged first, then arrivals are admitted, then
//! the free workers pick in worker order. When all work comes in multiples of
//! the quantum, every decision falls on a multiple of the quantum: the
//! simulation is the discrete-time loop of seed 001 §4 ("equally spaced
//! scheduling decisions"), generalized to work that does not fill a quantum.
//! Each job has one [`StrideState`] shared by all simulated workers (the
//! run-queue view; the lock-free core keeps one per worker, which for the
//! symmetric workloads simulated here ranks the same way).
//!
//! Outputs ([`SimResult`]): per job its completion, latency (completion −
//! arrival), isolated latency (the job alone on the same `W` workers, same
//! quantum) and slowdown (latency / isolated latency), CPU received and the
//! number of decisions that picked it; and the mean latency and mean slowdown
//! over the completed jobs. A `horizon` stops the simulation early (shares
//! of long-running jobs).
//!
//! **Processor sharing.** [`simulate_ps`] is the policy-independent
//! reference: fluid egalitarian processor sharing (EQUI, seed 000 §2.2.2) —
//! at every instant the `W` workers are divided equally among the active
//! jobs, a job never getting more than its active task set's parallelism (the
//! surplus is shared by the others). Its isolated latencies are fluid too
//! (work / min(parallelism, W) per task set). The `Fair` policy at quantum
//! granularity is round-robin processor sharing: on one worker it gives every
//! active job one quantum in turn, a newcomer joining behind the jobs already
//! there, and it converges to fluid PS as the quantum shrinks (both are tested
//! in `tests/policies.rs`; on seed 000's two-job example they coincide).

use std::time::Duration;

use crate::policy::{GroupFacts, Policy, RankContext, Rng, StrideState, TaskSetEstimate};

/// One task set (pipeline) of a simulated job.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTaskSet {
    /// CPU work in seconds (summed over workers).
    pub work: f64,
    /// Most workers that can run the task set at once (at least 1).
    pub parallelism: usize,
    /// Seed 000's classification, reported to the policy through the job's
    /// estimates ([`SimJob::with_exact_estimates`]).
    pub elastic: bool,
}

impl SimTaskSet {
    /// A task set every worker can help with.
    pub fn elastic(work: f64) -> Self {
        SimTaskSet {
            work,
            parallelism: usize::MAX,
            elastic: true,
        }
    }

    /// A task set at most `parallelism` workers can run at once.
    pub fn inelastic(work: f64, parallelism: usize) -> Self {
        SimTaskSet {
            work,
            parallelism: parallelism.max(1),
            elastic: false,
        }
    }
}

/// A simulated query (resource group).
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// Arrival time in seconds.
    pub arrival: f64,
    pub task_sets: Vec<SimTaskSet>,
    /// What the policy is told (user priority, static priority, estimates).
    pub facts: GroupFacts,
}

impl SimJob {
    pub fn new(arrival: f64, task_sets: Vec<SimTaskSet>) -> Self {
        SimJob {
            arrival,
            task_sets,
            facts: GroupFacts::default(),
        }
    }

    /// A job of one task set of `work` seconds that one worker runs.
    pub fn serial(arrival: f64, work: f64) -> Self {
        SimJob::new(arrival, vec![SimTaskSet::inelastic(work, 1)])
    }

    pub fn with_facts(mut self, facts: GroupFacts) -> Self {
        self.facts = facts;
        self
    }

    /// Tells the policy the exact work and class of every task set (an
    /// oracle for SRPT and IF-SRPT).
    pub fn with_exact_estimates(mut self) -> Self {
        self.facts.estimates = Some(
            self.task_sets
                .iter()
                .map(|t| TaskSetEstimate {
                    work: Duration::from_secs_f64(t.work.max(0.0)),
                    elastic: t.elastic,
                })
                .collect(),
        );
        self
    }

    /// Total CPU work in seconds.
    pub fn work(&self) -> f64 {
        self.task_sets.iter().map(|t| t.work).sum()
    }
}

/// How to simulate.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Simulated workers (at least 1).
    pub workers: usize,
    /// Scheduling quantum `t_max`, seconds.
    pub quantum: f64,
    pub policy: Policy,
    /// Seed of the simulated workers' random stream (lottery).
    pub seed: u64,
    /// Stop at this time (seconds); jobs still running stay incomplete.
    pub horizon: Option<f64>,
}

impl SimConfig {
    pub fn new(policy: Policy, workers: usize, quantum: f64) -> Self {
        SimConfig {
            workers,
            quantum,
            policy,
            seed: 0x51_u64,
            horizon: None,
        }
    }
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobOutcome {
    pub arrival: f64,
    /// When the first task of the job started.
    pub first_run: Option<f64>,
    /// When the job's last task set finished; `None` past the horizon.
    pub completion: Option<f64>,
    /// The job's latency alone on the same workers.
    pub isolated: f64,
    /// CPU seconds received.
    pub cpu: f64,
    /// Scheduling decisions (tasks started) that picked this job.
    pub decisions: u64,
}

impl JobOutcome {
    /// Completion − arrival.
    pub fn latency(&self) -> Option<f64> {
        self.completion.map(|c| c - self.arrival)
    }

    /// Latency / isolated latency.
    pub fn slowdown(&self) -> Option<f64> {
        self.latency().map(|l| l / self.isolated.max(1e-12))
    }
}

/// The outcome of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// One per job, in workload order.
    pub jobs: Vec<JobOutcome>,
    /// Time of the last event handled.
    pub end: f64,
}

impl SimResult {
    pub fn completed(&self) -> usize {
        self.jobs.iter().filter(|j| j.completion.is_some()).count()
    }

    /// Mean latency of the completed jobs (0 if none completed).
    pub fn mean_latency(&self) -> f64 {
        mean(self.jobs.iter().filter_map(JobOutcome::latency))
    }

    /// Mean slowdown of the completed jobs (seed 001's cost function (1)
    /// divided by the number of jobs; 0 if none completed).
    pub fn mean_slowdown(&self) -> f64 {
        mean(self.jobs.iter().filter_map(JobOutcome::slowdown))
    }

    /// Total decisions.
    pub fn decisions(&self) -> u64 {
        self.jobs.iter().map(|j| j.decisions).sum()
    }
}

fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Latency of `job` alone on `workers` workers with tasks of `quantum`
/// (the policy does not matter for a single job).
pub fn isolated_latency(job: &SimJob, workers: usize, quantum: f64) -> f64 {
    let alone = SimJob {
        arrival: 0.0,
        ..job.clone()
    };
    let cfg = SimConfig::new(Policy::Fifo, workers, quantum);
    let run = Engine::new(std::slice::from_ref(&alone), &cfg).run();
    run[0].completion.unwrap_or(0.0)
}

/// Simulates `workload` under `cfg.policy`; isolated latencies are computed
/// by simulating every job alone.
pub fn simulate(workload: &[SimJob], cfg: &SimConfig) -> SimResult {
    let isolated: Vec<f64> = workload
        .iter()
        .map(|j| isolated_latency(j, cfg.workers, cfg.quantum))
        .collect();
    simulate_with_isolated(workload, cfg, &isolated)
}

/// As [`simulate`] with precomputed isolated latencies (one per job), for
/// callers that simulate one workload under many policies (self-tuning).
pub fn simulate_with_isolated(workload: &[SimJob], cfg: &SimConfig, isolated: &[f64]) -> SimResult {
    assert_eq!(
        workload.len(),
        isolated.len(),
        "one isolated latency per job"
    );
    let mut engine = Engine::new(workload, cfg);
    let mut jobs = engine.run();
    for (j, &iso) in jobs.iter_mut().zip(isolated) {
        j.isolated = iso;
    }
    SimResult {
        jobs,
        end: engine.now,
    }
}

/// Per-job run-time state of the quantum simulator.
struct JobRt {
    state: Option<StrideState>,
    /// Index of the active task set.
    set: usize,
    /// Work of the active task set not yet handed to a worker.
    unassigned: f64,
    /// Workers running a task of the active task set.
    running: usize,
    done: bool,
}

/// A task in flight on a worker.
#[derive(Clone, Copy)]
struct Task {
    job: usize,
    ran: f64,
    end: f64,
}

struct Engine<'a> {
    workload: &'a [SimJob],
    cfg: &'a SimConfig,
    t_max: Duration,
    /// Tolerance for "the same instant" and "no work left".
    eps: f64,
    rt: Vec<JobRt>,
    out: Vec<JobOutcome>,
    /// Admitted, incomplete jobs in admission order.
    active: Vec<usize>,
    /// Jobs in arrival order (stable).
    order: Vec<usize>,
    next_arrival: usize,
    admitted: u64,
    virtual_time: f64,
    workers: Vec<Option<Task>>,
    rng: Rng,
    now: f64,
}

impl<'a> Engine<'a> {
    fn new(workload: &'a [SimJob], cfg: &'a SimConfig) -> Self {
        assert!(cfg.quantum > 0.0, "quantum must be positive");
        let mut order: Vec<usize> = (0..workload.len()).collect();
        order.sort_by(|&a, &b| workload[a].arrival.total_cmp(&workload[b].arrival));
        Engine {
            workload,
            cfg,
            t_max: Duration::from_secs_f64(cfg.quantum),
            eps: cfg.quantum * 1e-9,
            rt: workload
                .iter()
                .map(|_| JobRt {
                    state: None,
                    set: 0,
                    unassigned: 0.0,
                    running: 0,
                    done: false,
                })
                .collect(),
            out: workload
                .iter()
                .map(|j| JobOutcome {
                    arrival: j.arrival,
                    first_run: None,
                    completion: None,
                    isolated: 0.0,
                    cpu: 0.0,
                    decisions: 0,
                })
                .collect(),
            active: Vec::new(),
            order,
            next_arrival: 0,
            admitted: 0,
            virtual_time: 0.0,
            workers: vec![None; cfg.workers.max(1)],
            rng: Rng::new(cfg.seed),
            now: 0.0,
        }
    }

    fn run(&mut self) -> Vec<JobOutcome> {
        loop {
            let next_task = self
                .workers
                .iter()
                .flatten()
                .map(|t| t.end)
                .reduce(f64::min);
            let next_arrival = self
                .order
                .get(self.next_arrival)
                .map(|&j| self.workload[j].arrival);
            let t = match (next_task, next_arrival) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            if self.cfg.horizon.is_some_and(|h| t > h) {
                break;
            }
            self.now = self.now.max(t);
            self.return_tasks();
            self.admit_arrivals();
            self.dispatch();
        }
        std::mem::take(&mut self.out)
    }

    /// Charges every task that ends now; finishes task sets and jobs.
    fn return_tasks(&mut self) {
        for w in 0..self.workers.len() {
            let Some(task) = self.workers[w] else {
                continue;
            };
            if task.end > self.now + self.eps {
                continue;
            }
            self.workers[w] = None;
            let rt = &mut self.rt[task.job];
            rt.running -= 1;
            if let Some(s) = rt.state.as_mut() {
                s.charge(
                    &self.cfg.policy,
                    Duration::from_secs_f64(task.ran),
                    self.t_max,
                );
            }
            self.out[task.job].cpu += task.ran;
            self.advance(task.job);
        }
    }

    /// Activates the next task set (repeatedly, past empty ones) or
    /// completes the job once the active set is drained and idle.
    fn advance(&mut self, job: usize) {
        loop {
            let rt = &self.rt[job];
            if rt.done || rt.running > 0 || rt.unassigned > self.eps {
                return;
            }
            let next = rt.set + 1;
            if next < self.workload[job].task_sets.len() {
                self.update_virtual_time();
                let rt = &mut self.rt[job];
                rt.set = next;
                rt.unassigned = self.workload[job].task_sets[next].work.max(0.0);
                if let Some(s) = rt.state.as_mut() {
                    s.task_set_activated(&self.cfg.policy, next, self.virtual_time);
                }
            } else {
                self.rt[job].done = true;
                self.out[job].completion = Some(self.now);
                self.active.retain(|&j| j != job);
                return;
            }
        }
    }

    /// The simulated scheduler's virtual time: never behind the smallest
    /// active pass.
    fn update_virtual_time(&mut self) {
        if let Some(min) = self
            .active
            .iter()
            .filter_map(|&j| self.rt[j].state.as_ref().map(|s| s.pass))
            .reduce(f64::min)
        {
            self.virtual_time = self.virtual_time.max(min);
        }
    }

    fn admit_arrivals(&mut self) {
        while let Some(&job) = self.order.get(self.next_arrival) {
            if self.workload[job].arrival > self.now + self.eps {
                break;
            }
            self.next_arrival += 1;
            self.update_virtual_time();
            let spec = &self.workload[job];
            let state = StrideState::enter(
                &self.cfg.policy,
                &spec.facts,
                self.admitted,
                self.virtual_time,
            );
            self.admitted += 1;
            let rt = &mut self.rt[job];
            rt.state = Some(state);
            rt.set = 0;
            rt.unassigned = spec.task_sets.first().map_or(0.0, |t| t.work.max(0.0));
            self.active.push(job);
            // Jobs without work (or with empty leading task sets) move on now.
            self.advance(job);
        }
    }

    /// Every free worker picks the runnable job of smallest rank.
    fn dispatch(&mut self) {
        for w in 0..self.workers.len() {
            if self.workers[w].is_some() {
                continue;
            }
            let Some(job) = self.pick() else { return };
            let rt = &mut self.rt[job];
            let chunk = if rt.unassigned - self.cfg.quantum <= self.eps {
                rt.unassigned
            } else {
                self.cfg.quantum
            };
            rt.unassigned = (rt.unassigned - chunk).max(0.0);
            if rt.unassigned <= self.eps {
                rt.unassigned = 0.0;
            }
            rt.running += 1;
            let out = &mut self.out[job];
            out.decisions += 1;
            out.first_run.get_or_insert(self.now);
            self.workers[w] = Some(Task {
                job,
                ran: chunk,
                end: self.now + chunk,
            });
        }
    }

    fn pick(&mut self) -> Option<usize> {
        let mut ctx = RankContext {
            active_groups: self.active.len(),
            workers: self.workers.len(),
            rng: &mut self.rng,
        };
        let mut best: Option<(usize, f64)> = None;
        for &job in &self.active {
            let rt = &self.rt[job];
            let spec = &self.workload[job].task_sets[rt.set];
            if rt.unassigned <= self.eps || rt.running >= spec.parallelism.max(1) {
                continue;
            }
            let Some(state) = rt.state.as_ref() else {
                continue;
            };
            let rank = state.rank(&self.cfg.policy, &mut ctx);
            match best {
                Some((_, r)) if rank >= r => {}
                _ => best = Some((job, rank)),
            }
        }
        best.map(|(job, _)| job)
    }
}

/// Fluid processor sharing of `workload` on `workers` workers (see the module
/// docs); isolated latencies are fluid as well. `horizon` as in
/// [`SimConfig::horizon`].
pub fn simulate_ps(workload: &[SimJob], workers: usize, horizon: Option<f64>) -> SimResult {
    let w = workers.max(1) as f64;
    let cap = |t: &SimTaskSet| (t.parallelism.max(1) as f64).min(w);
    let mut out: Vec<JobOutcome> = workload
        .iter()
        .map(|j| JobOutcome {
            arrival: j.arrival,
            first_run: None,
            completion: None,
            isolated: j.task_sets.iter().map(|t| t.work.max(0.0) / cap(t)).sum(),
            cpu: 0.0,
            decisions: 0,
        })
        .collect();
    let mut order: Vec<usize> = (0..workload.len()).collect();
    order.sort_by(|&a, &b| workload[a].arrival.total_cmp(&workload[b].arrival));
    let scale = workload.iter().map(SimJob::work).fold(1e-9, f64::max);
    let eps = scale * 1e-12;
    // (job, active set, remaining work of the set)
    let mut active: Vec<(usize, usize, f64)> = Vec::new();
    let mut next = 0;
    let mut now = 0.0f64;
    loop {
        // Admit arrivals and retire drained task sets.
        while let Some(&j) = order.get(next) {
            if workload[j].arrival > now + eps {
                break;
            }
            next += 1;
            active.push((j, 0, workload[j].task_sets.first().map_or(0.0, |t| t.work)));
        }
        active.retain_mut(|(j, set, rem)| {
            while *rem <= eps {
                *set += 1;
                match workload[*j].task_sets.get(*set) {
                    Some(t) => *rem = t.work,
                    None => {
                        out[*j].completion = Some(now);
                        return false;
                    }
                }
            }
            true
        });
        let next_arrival = order.get(next).map(|&j| workload[j].arrival);
        if active.is_empty() {
            match next_arrival {
                Some(a) if horizon.is_none_or(|h| a <= h) => {
                    now = now.max(a);
                    continue;
                }
                _ => break,
            }
        }
        // Water-filling: equal shares, capped by parallelism.
        let mut idx: Vec<usize> = (0..active.len()).collect();
        idx.sort_by(|&a, &b| {
            let ca = cap(&workload[active[a].0].task_sets[active[a].1]);
            let cb = cap(&workload[active[b].0].task_sets[active[b].1]);
            ca.total_cmp(&cb)
        });
        let mut rates = vec![0.0; active.len()];
        let mut left = w;
        for (k, &i) in idx.iter().enumerate() {
            let share = left / (idx.len() - k) as f64;
            let c = cap(&workload[active[i].0].task_sets[active[i].1]);
            rates[i] = share.min(c);
            left -= rates[i];
        }
        let mut dt = active
            .iter()
            .zip(&rates)
            .map(|(a, &r)| a.2 / r)
            .fold(f64::INFINITY, f64::min);
        if let Some(a) = next_arrival {
            dt = dt.min(a - now);
        }
        if let Some(h) = horizon {
            if now + dt > h {
                dt = h - now;
                if dt <= 0.0 {
                    break;
                }
            }
        }
        for (a, &r) in active.iter_mut().zip(&rates) {
            let done = (r * dt).min(a.2);
            a.2 -= r * dt;
            out[a.0].cpu += done;
            out[a.0].first_run.get_or_insert(now);
        }
        now += dt;
        if horizon.is_some_and(|h| now >= h) {
            break;
        }
    }
    SimResult {
        jobs: out,
        end: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_alone_runs_its_task_sets_in_order_at_their_parallelism() {
        // 4 units elastic on 2 workers (2 time units), then 3 units at
        // parallelism 1 (3 time units).
        let job = SimJob::new(
            0.5,
            vec![SimTaskSet::elastic(4.0), SimTaskSet::inelastic(3.0, 1)],
        );
        let r = simulate(
            std::slice::from_ref(&job),
            &SimConfig::new(Policy::Fair, 2, 1.0),
        );
        let o = &r.jobs[0];
        assert_eq!(o.first_run, Some(0.5));
        assert_eq!(o.completion, Some(5.5));
        assert_eq!(o.isolated, 5.0);
        assert_eq!(o.slowdown(), Some(1.0));
        assert!((o.cpu - 7.0).abs() < 1e-9);
        assert_eq!(o.decisions, 7);
    }

    #[test]
    fn partial_quanta_free_the_worker_early() {
        // 2.5 units on one worker: tasks of 1, 1, 0.5; then the next job.
        let jobs = [SimJob::serial(0.0, 2.5), SimJob::serial(0.0, 1.0)];
        let r = simulate(&jobs, &SimConfig::new(Policy::Fifo, 1, 1.0));
        assert_eq!(r.jobs[0].completion, Some(2.5));
        assert_eq!(r.jobs[1].completion, Some(3.5));
        assert_eq!(r.jobs[1].isolated, 1.0);
    }

    #[test]
    fn empty_jobs_complete_on_arrival() {
        let jobs = [SimJob::new(1.0, vec![]), SimJob::serial(0.0, 2.0)];
        let r = simulate(&jobs, &SimConfig::new(Policy::Fair, 1, 1.0));
        assert_eq!(r.jobs[0].completion, Some(1.0));
        assert_eq!(r.jobs[1].completion, Some(2.0));
    }

    #[test]
    fn horizon_stops_the_simulation() {
        let jobs = [SimJob::serial(0.0, 100.0), SimJob::serial(0.0, 100.0)];
        let mut cfg = SimConfig::new(Policy::Fair, 1, 1.0);
        cfg.horizon = Some(10.0);
        let r = simulate(&jobs, &cfg);
        assert_eq!(r.completed(), 0);
        assert!((r.jobs[0].cpu - 5.0).abs() < 1e-9, "{:?}", r.jobs);
        assert!((r.jobs[1].cpu - 5.0).abs() < 1e-9);
        let ps = simulate_ps(&jobs, 1, Some(10.0));
        assert_eq!(ps.completed(), 0);
        assert!((ps.jobs[0].cpu - 5.0).abs() < 1e-9);
    }

    #[test]
    fn fluid_ps_caps_shares_at_the_parallelism_and_shares_the_rest() {
        // 3 workers: an inelastic job (parallelism 1, 2 units) and an
        // elastic one (8 units). The equal share is 1.5 workers; the
        // inelastic job can use 1, so the elastic one gets 2 until t = 2
        // (4 units done), then all 3 for the remaining 4 units.
        let jobs = [
            SimJob::new(0.0, vec![SimTaskSet::inelastic(2.0, 1)]),
            SimJob::new(0.0, vec![SimTaskSet::elastic(8.0)]),
        ];
        let r = simulate_ps(&jobs, 3, None);
        assert!((r.jobs[0].completion.unwrap() - 2.0).abs() < 1e-9);
        assert!((r.jobs[1].completion.unwrap() - (2.0 + 4.0 / 3.0)).abs() < 1e-9);
        assert!((r.jobs[1].isolated - 8.0 / 3.0).abs() < 1e-9);
    }
}
