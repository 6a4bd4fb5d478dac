//! A scheduling simulator that drives the real decision code with a virtual
//! clock (DESIGN.md invariant 2; seed 001 §4 "self-simulation").
//!
//! A workload is a list of [`SimJob`]s — an arrival time and an ordered list
//! of task sets, each with its CPU work and the number of workers it can use
//! at once (its parallelism: 1 for an inelastic pipeline, unlimited for an
//! elastic one). `W` simulated workers run tasks of at most one quantum
//! (`t_max`) of work.
//!
//! **The same decisions as the workers.** Each simulated worker owns a
//! `DecisionCore` (`decision.rs`) — the one the worker loop uses — and drives it exactly
//! as [`crate::worker`] does: before each decision it pulls its update masks
//! (the real [`UpdateMasks`]) and visits the flagged slots, chooses, reads
//! the chosen slot and confirms it (a slot found empty or exhausted is
//! dropped from its view, an entry not yet known is learned first), and
//! after a task it charges the task's length. Admission is the real
//! [`Admission`] queue (same slots, same arrival numbers). What is modelled
//! rather than shared is the slot array and its pin protocol:
//!
//! * a task takes `min(quantum, work left)` of its task set's work; a task
//!   set whose work is all taken is *tagged* by the task that took the last
//!   of it, when that task returns (a worker that picks it before then runs
//!   a task of no length that tags it); the last task back finalizes it:
//!   the job's next task set is installed in the slot (a return-mask bit for
//!   every worker) or the job completes and its slot goes to the oldest
//!   waiting job (a change-mask bit);
//! * finalization takes no time; a job without task sets completes on
//!   arrival, like a submission of no task sets;
//! * a task set at its parallelism is, for a worker that picks it, as if
//!   exhausted until one of its tasks returns (the worker then gets a mask
//!   bit of its own) — a real task set has no such cap: this is how the
//!   model expresses an inelastic pipeline;
//! * with [`SimConfig::preemption`], a task ends at its first morsel
//!   boundary after an update reached its worker (the real
//!   [`crate::TaskContext::next_morsel`] checks the masks between morsels),
//!   with [`SimConfig::handover_morsel`] shortening the morsels of a task run
//!   while a better group is between two task sets.
//!
//! Simulated time is whole nanoseconds, as the workers measure it. At one
//! instant arrivals are admitted first, then returning tasks are handled,
//! then free workers decide in worker order. `tests/differential.rs` runs
//! recorded workloads on the real worker loop (one worker, a virtual clock)
//! and here, and requires the same tasks and completions under every
//! policy, with and without preemption points.
//!
//! Per worker, a group's pass and priority advance only with that worker's
//! own tasks, as in the lock-free core (seed 001 §2.3): with several workers
//! a group they share decays more slowly in each view than one global run
//! queue would make it.
//!
//! Outputs ([`SimResult`]): per job its completion, latency (completion −
//! arrival), isolated latency (the job alone on the same `W` workers, same
//! quantum) and slowdown (latency / isolated latency), CPU received and the
//! number of decisions that picked it; the mean latency and mean slowdown
//! over the completed jobs; and, with [`SimConfig::record`], every task. A
//! `horizon` stops the simulation early (shares of long-running jobs).
//!
//! **NUMA machine model.** With [`SimConfig::machine`] the workers get
//! nodes and task sets may carry a [`Placement`] (work per memory node, an
//! affinity, a memory intensity): tasks then read their parts through the
//! same `DecisionCore::node_dry` / `DecisionCore::stealing` calls the
//! worker loop makes, and progress fluidly at the rates the machine model
//! gives them, recomputed at every event ([`numa`] for the tasks,
//! [`machine`] for the model, its parameters and what was fitted). Results
//! carry per-node busy time, served bytes and work by place
//! ([`SimResult::numa`]).
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

use crate::admission::{Admission, Admit};
use crate::decision::{DecisionCore, EntryView, SlotState};
use crate::masks::{MaskKind, UpdateMasks};
use crate::policy::{GroupFacts, Policy, TaskSetEstimate};

pub mod machine;
pub mod numa;

pub use machine::{Machine, GIB_PER_S};
pub use numa::{NumaStats, Placement};
use numa::{Parts, Reader, Take};

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
    /// Where the work's data lives ([`numa`]); used with
    /// [`SimConfig::machine`] only.
    pub placement: Option<Placement>,
}

impl SimTaskSet {
    /// A task set every worker can help with.
    pub fn elastic(work: f64) -> Self {
        SimTaskSet {
            work,
            parallelism: usize::MAX,
            elastic: true,
            placement: None,
        }
    }

    /// A task set at most `parallelism` workers can run at once.
    pub fn inelastic(work: f64, parallelism: usize) -> Self {
        SimTaskSet {
            work,
            parallelism: parallelism.max(1),
            elastic: false,
            placement: None,
        }
    }

    /// Places the task set's work ([`numa`]); its work becomes the sum of
    /// the placement's parts.
    pub fn with_placement(mut self, placement: Placement) -> Self {
        self.work = placement.per_node.iter().map(|w| w.max(0.0)).sum();
        self.placement = Some(placement);
        self
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

/// How to simulate. [`SimConfig::new`] gives the plain quantum model of
/// seed 001 §4; the other fields model the scheduler's refinements
/// ([`crate::SchedulerConfig`]'s fields of the same names).
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Simulated workers (at least 1).
    pub workers: usize,
    /// Scheduling quantum `t_max`, seconds.
    pub quantum: f64,
    pub policy: Policy,
    /// Seed of the simulated workers' random streams (lottery): worker `w`
    /// draws from `seed ^ w`.
    pub seed: u64,
    /// Stop at this time (seconds); jobs still running stay incomplete.
    pub horizon: Option<f64>,
    /// Preemption points: a task ends at its first morsel boundary after an
    /// update (a new group, a next task set) reached its worker.
    pub preemption: bool,
    /// Morsel length in seconds: a task ends only at a morsel boundary
    /// (preemption points). `None`: fluid work, a task may end anywhere.
    pub morsel: Option<f64>,
    /// Hand-over morsels: a worker running a task while a better group is
    /// between two task sets uses morsels of at most this length. As in the
    /// scheduler, only with `preemption` (short morsels serve nothing
    /// without preemption points).
    pub handover_morsel: Option<f64>,
    /// Time slices of proportional-share policies, in seconds (as the
    /// scheduler's [`crate::SchedulerConfig::slice`]). `None`: off.
    pub slice: Option<f64>,
    /// Slots: groups beyond this many wait for admission. `None`: one slot
    /// per job.
    pub slots: Option<usize>,
    /// Record every task in [`SimResult::tasks`].
    pub record: bool,
    /// The NUMA machine model ([`machine`], [`numa`]): workers get nodes,
    /// placed task sets read memory at the rates the machine gives them.
    /// Preemption points and morsels are ignored with a machine.
    pub machine: Option<Machine>,
}

impl SimConfig {
    pub fn new(policy: Policy, workers: usize, quantum: f64) -> Self {
        SimConfig {
            workers,
            quantum,
            policy,
            seed: 0x51_u64,
            horizon: None,
            preemption: false,
            morsel: None,
            handover_morsel: None,
            slice: None,
            slots: None,
            record: false,
            machine: None,
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
    /// Scheduling decisions that started a task of this job with work to do.
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

/// One task the simulation ran ([`SimConfig::record`]), in start order.
#[derive(Debug, Clone, PartialEq)]
pub struct SimTaskRecord {
    pub worker: usize,
    /// Index of the job in the workload.
    pub job: usize,
    /// Index of the task set in the job.
    pub task_set: usize,
    /// Start, seconds.
    pub start: f64,
    /// Length, seconds (0: the task found its task set dry).
    pub ran: f64,
}

/// The outcome of a simulation.
#[derive(Debug, Clone, PartialEq)]
pub struct SimResult {
    /// One per job, in workload order.
    pub jobs: Vec<JobOutcome>,
    /// Time of the last event handled.
    pub end: f64,
    /// Every task, when [`SimConfig::record`] is set.
    pub tasks: Vec<SimTaskRecord>,
    /// Nodes, places and served bytes, with [`SimConfig::machine`].
    pub numa: Option<NumaStats>,
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
    isolated_on(job, &SimConfig::new(Policy::Fifo, workers, quantum))
}

/// Latency of `job` alone on `cfg`'s workers, quantum and machine.
fn isolated_on(job: &SimJob, cfg: &SimConfig) -> f64 {
    let alone = SimJob {
        arrival: 0.0,
        ..job.clone()
    };
    let cfg = SimConfig {
        machine: cfg.machine.clone(),
        ..SimConfig::new(Policy::Fifo, cfg.workers, cfg.quantum)
    };
    let mut engine = Engine::new(std::slice::from_ref(&alone), &cfg);
    let run = engine.run();
    run[0].completion.unwrap_or(0.0)
}

/// Simulates `workload` under `cfg.policy`; isolated latencies are computed
/// by simulating every job alone (on the machine, if any).
pub fn simulate(workload: &[SimJob], cfg: &SimConfig) -> SimResult {
    let isolated: Vec<f64> = workload.iter().map(|j| isolated_on(j, cfg)).collect();
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
        end: secs(engine.now),
        tasks: std::mem::take(&mut engine.tasks),
        numa: engine.numa.take(),
    }
}

/// Simulated time is kept in whole nanoseconds, as the scheduler measures
/// it, so that the decision core is charged the same durations the worker
/// loop would charge it (and ties between ranks are ties in both).
fn nanos(seconds: f64) -> u64 {
    (seconds.max(0.0) * 1e9).round() as u64
}

fn secs(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// A simulated slot: the entry of one admitted job's active task set.
#[derive(Debug)]
struct SimSlot {
    job: usize,
    /// Index of the active task set.
    set: usize,
    /// The entry's position among the job's installed entries.
    seq: u64,
    /// Admission order.
    arrival: u64,
    /// Work of the task set not yet taken by a task, ns.
    unassigned: u64,
    /// Tasks of the entry in flight.
    running: usize,
    /// A task found the task set dry (event 1): readers see it exhausted.
    tagged: bool,
    /// Workers that found the task set at its parallelism; told (a mask bit
    /// of their own) when a place frees.
    capped: Vec<usize>,
    /// With a machine: the work left per node, fluid (`unassigned` unused).
    parts: Option<Parts>,
}

/// A task in flight on a simulated worker.
#[derive(Debug, Clone, Copy)]
struct Task {
    slot: usize,
    job: usize,
    start: u64,
    /// Work taken from the task set, ns (given back in part if the task is
    /// preempted).
    taken: u64,
    end: u64,
    /// Morsel length of the task, ns (0: fluid).
    morsel: u64,
    /// Its record in `Engine::tasks`, when recording.
    record: Option<usize>,
    /// With a machine: what the task reads and how fast it goes.
    fluid: Option<FluidTask>,
}

/// A task on the machine model ([`numa`]).
#[derive(Debug, Clone, Copy)]
struct FluidTask {
    /// Its worker's node.
    node: usize,
    /// The part it reads.
    from: usize,
    /// Chosen from the worker's steal tier.
    stealing: bool,
    /// When its quantum is spent, ns.
    budget: u64,
    /// CPU-ns of work per ns, since the last event.
    rate: f64,
}

struct SimWorker {
    core: DecisionCore,
    task: Option<Task>,
}

/// The simulator: the workers' decision cores ([`crate::decision`]), the
/// real update masks and admission queue, and a model of the slots, driven
/// by events in virtual time. At one instant, arrivals are admitted first
/// (a query submitted while a task ends is bound before that task's
/// finalization frees its slot, as on a real worker), then returning tasks
/// are handled (in worker order), then the free workers decide (in worker
/// order), then running tasks whose worker got an update meanwhile are cut
/// at their next preemption point.
struct Engine<'a> {
    workload: &'a [SimJob],
    cfg: &'a SimConfig,
    t_max: Duration,
    quantum: u64,
    morsel: u64,
    handover_morsel: u64,
    slots: Vec<Option<SimSlot>>,
    masks: UpdateMasks,
    admission: Admission<usize>,
    workers: Vec<SimWorker>,
    /// Per job: entries installed so far (the next entry's `seq`).
    installed: Vec<u64>,
    out: Vec<JobOutcome>,
    /// Jobs in arrival order (stable).
    order: Vec<usize>,
    next_arrival: usize,
    now: u64,
    tasks: Vec<SimTaskRecord>,
    /// With a machine: per node, whether any worker runs there.
    staffed: Vec<bool>,
    /// With a machine: when running tasks last drew from their parts.
    drawn: u64,
    numa: Option<NumaStats>,
}

impl<'a> Engine<'a> {
    fn new(workload: &'a [SimJob], cfg: &'a SimConfig) -> Self {
        assert!(cfg.quantum > 0.0, "quantum must be positive");
        let mut order: Vec<usize> = (0..workload.len()).collect();
        order.sort_by(|&a, &b| workload[a].arrival.total_cmp(&workload[b].arrival));
        let slots = cfg.slots.unwrap_or(workload.len()).max(1);
        let workers = cfg.workers.max(1);
        Engine {
            workload,
            cfg,
            t_max: Duration::from_nanos(nanos(cfg.quantum).max(1)),
            quantum: nanos(cfg.quantum).max(1),
            morsel: cfg.morsel.map_or(0, |m| nanos(m).max(1)),
            handover_morsel: cfg.handover_morsel.map_or(0, |m| nanos(m).max(1)),
            slots: (0..slots).map(|_| None).collect(),
            masks: UpdateMasks::new(workers, slots),
            admission: Admission::new(slots),
            workers: (0..workers)
                .map(|w| {
                    let mut core = DecisionCore::new(slots, workers, cfg.policy.clone(), w);
                    core.reseed(cfg.seed ^ w as u64);
                    core.set_slice(
                        cfg.slice.map(|s| Duration::from_nanos(nanos(s))),
                        Duration::from_nanos(nanos(cfg.quantum).max(1)),
                    );
                    SimWorker { core, task: None }
                })
                .collect(),
            installed: vec![0; workload.len()],
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
            order,
            next_arrival: 0,
            now: 0,
            tasks: Vec::new(),
            staffed: cfg
                .machine
                .as_ref()
                .map_or_else(Vec::new, |m| (0..m.nodes).map(|n| n < workers).collect()),
            drawn: 0,
            numa: cfg.machine.as_ref().map(|m| NumaStats::new(m.nodes)),
        }
    }

    /// The parts of a fresh entry of `set`, with a machine.
    fn parts(cfg: &SimConfig, set: &SimTaskSet) -> Option<Parts> {
        let m = cfg.machine.as_ref()?;
        Some(Parts::new(set.work, set.placement.as_ref(), m.nodes))
    }

    fn run(&mut self) -> Vec<JobOutcome> {
        let horizon = self.cfg.horizon.map(nanos);
        loop {
            let next_task = self
                .workers
                .iter()
                .filter_map(|w| w.task.map(|t| t.end))
                .min();
            let next_arrival = self
                .order
                .get(self.next_arrival)
                .map(|&j| nanos(self.workload[j].arrival));
            let t = match (next_task, next_arrival) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => break,
            };
            if horizon.is_some_and(|h| t > h) {
                break;
            }
            self.draw(t);
            self.now = self.now.max(t);
            self.admit_arrivals();
            self.return_tasks();
            for w in 0..self.workers.len() {
                if self.workers[w].task.is_none() {
                    self.decide(w);
                }
            }
            self.preempt();
            self.reflow();
        }
        std::mem::take(&mut self.out)
    }

    /// With a machine: running tasks draw from their parts at their rates
    /// until `t`.
    fn draw(&mut self, t: u64) {
        let Some(stats) = self.numa.as_mut() else {
            return;
        };
        let ns = t.saturating_sub(self.drawn);
        self.drawn = self.drawn.max(t);
        if ns == 0 {
            return;
        }
        for w in &self.workers {
            let Some(Task {
                slot,
                fluid: Some(f),
                ..
            }) = w.task
            else {
                continue;
            };
            let parts = self.slots[slot]
                .as_mut()
                .and_then(|s| s.parts.as_mut())
                .expect("a fluid task's parts");
            let work = f.rate * ns as f64;
            stats.add(parts, f.node, f.from, f.stealing, ns, work);
            parts.draw(f.from, work);
        }
    }

    /// With a machine: the running tasks' rates from the machine model, and
    /// their ends — the quantum spent or the part they read dry, whichever
    /// comes first at the current rates.
    fn reflow(&mut self) {
        let Some(machine) = self.cfg.machine.as_ref() else {
            return;
        };
        let running: Vec<usize> = (0..self.workers.len())
            .filter(|&w| self.workers[w].task.is_some_and(|t| t.fluid.is_some()))
            .collect();
        let readers: Vec<Reader> = running
            .iter()
            .map(|&w| {
                let t = self.workers[w].task.expect("running");
                let f = t.fluid.expect("fluid");
                let parts = self.slots[t.slot].as_ref().and_then(|s| s.parts.as_ref());
                Reader {
                    node: f.node,
                    from: f.from,
                    demand: parts.map_or(0.0, Parts::demand),
                }
            })
            .collect();
        let rates = numa::rates(machine, &readers);
        // Per (slot, part): what all its readers draw per ns.
        let mut drain: Vec<((usize, usize), f64)> = Vec::new();
        for (&w, &r) in running.iter().zip(&rates) {
            let t = self.workers[w].task.expect("running");
            let key = (t.slot, t.fluid.expect("fluid").from);
            match drain.iter_mut().find(|(k, _)| *k == key) {
                Some((_, d)) => *d += r,
                None => drain.push((key, r)),
            }
        }
        for (&w, &r) in running.iter().zip(&rates) {
            let task = self.workers[w].task.as_mut().expect("running");
            let f = task.fluid.as_mut().expect("fluid");
            f.rate = r;
            let left = self.slots[task.slot]
                .as_ref()
                .and_then(|s| s.parts.as_ref())
                .map_or(0.0, |p| p.left(f.from));
            let d = drain
                .iter()
                .find(|(k, _)| *k == (task.slot, f.from))
                .map_or(0.0, |(_, d)| *d);
            let dry = if d > 0.0 {
                self.now + (left / d).ceil().max(1.0) as u64
            } else {
                u64::MAX
            };
            task.end = f.budget.min(dry);
        }
    }

    /// Handles every task that ends now: charges it to its worker's core,
    /// gives back work a preempted task did not do, tags a dry task set and
    /// finalizes it once its last task is back.
    fn return_tasks(&mut self) {
        for w in 0..self.workers.len() {
            let Some(task) = self.workers[w].task else {
                continue;
            };
            if task.end > self.now {
                continue;
            }
            // With a machine: a task whose part ran dry before its quantum
            // was spent reads on, returns `NodeDry`, or is exhausted.
            let mut node_dry = None;
            let mut exhausted = false;
            if let Some(f) = task.fluid {
                let parts = self.slots[task.slot]
                    .as_ref()
                    .and_then(|s| s.parts.as_ref())
                    .expect("a fluid task's parts");
                if self.now < f.budget {
                    match parts.take(f.node, f.stealing, &self.staffed) {
                        Take::From(d) => {
                            let t = self.workers[w].task.as_mut().expect("running");
                            t.fluid = Some(FluidTask { from: d, ..f });
                            continue;
                        }
                        Take::NodeDry(a) => node_dry = Some(a),
                        Take::Dry => exhausted = true,
                    }
                } else {
                    exhausted = parts.dry();
                }
            }
            self.workers[w].task = None;
            let ran = task.end - task.start;
            if let Some(i) = task.record.filter(|_| task.fluid.is_some()) {
                self.tasks[i].ran = secs(ran);
            }
            self.workers[w]
                .core
                .charge(task.slot, Duration::from_nanos(ran), self.t_max);
            if let Some(a) = node_dry {
                self.workers[w].core.node_dry(task.slot, a);
                if let Some(stats) = self.numa.as_mut() {
                    stats.node_dry += 1;
                }
            }
            self.out[task.job].cpu += secs(ran);
            let slot = self.slots[task.slot]
                .as_mut()
                .expect("a running task's slot");
            slot.running -= 1;
            if task.fluid.is_some() {
                slot.tagged |= exhausted;
            } else {
                slot.unassigned += task.taken - ran;
                if slot.unassigned == 0 {
                    slot.tagged = true;
                }
            }
            if !slot.tagged {
                for c in slot.capped.drain(..) {
                    self.masks.push_to(c, MaskKind::Return, task.slot);
                }
            }
            if slot.tagged && slot.running == 0 {
                self.finalize(task.slot);
            }
        }
    }

    /// The last task of slot `k`'s tagged entry returned: installs the job's
    /// next task set (telling every worker), or completes the job and hands
    /// the slot to the oldest waiting job.
    fn finalize(&mut self, k: usize) {
        let (workload, cfg) = (self.workload, self.cfg);
        let slot = self.slots[k].as_mut().expect("finalizing a live slot");
        let job = slot.job;
        let next = slot.set + 1;
        if let Some(set) = workload[job].task_sets.get(next) {
            slot.set = next;
            slot.seq = self.installed[job];
            self.installed[job] += 1;
            slot.unassigned = nanos(set.work);
            slot.parts = Engine::parts(cfg, set);
            slot.tagged = false;
            slot.capped.clear();
            self.masks.push(MaskKind::Return, k);
            return;
        }
        self.slots[k] = None;
        self.out[job].completion = Some(secs(self.now));
        if let Some((waiting, arrival)) = self.admission.release(k) {
            self.bind(k, waiting, arrival);
        }
    }

    /// Installs `job`'s first task set in slot `k` and tells every worker.
    fn bind(&mut self, k: usize, job: usize, arrival: u64) {
        let first = &self.workload[job].task_sets[0];
        self.slots[k] = Some(SimSlot {
            job,
            set: 0,
            seq: self.installed[job],
            arrival,
            unassigned: nanos(first.work),
            running: 0,
            tagged: false,
            capped: Vec::new(),
            parts: Engine::parts(self.cfg, first),
        });
        self.installed[job] += 1;
        self.masks.push(MaskKind::Change, k);
    }

    fn admit_arrivals(&mut self) {
        while let Some(&job) = self.order.get(self.next_arrival) {
            if nanos(self.workload[job].arrival) > self.now {
                break;
            }
            self.next_arrival += 1;
            // As `Scheduler::submit`: a job without task sets is done at once.
            if self.workload[job].task_sets.is_empty() {
                self.out[job].completion = Some(secs(self.now));
                continue;
            }
            if let Admit::Slot {
                group,
                slot,
                arrival,
            } = self.admission.admit(job)
            {
                self.bind(slot, group, arrival);
            }
        }
    }

    /// What a worker reading slot `k` finds.
    fn read(&self, k: usize) -> SlotState<'a> {
        match &self.slots[k] {
            None => SlotState::Empty,
            Some(s) if s.tagged => SlotState::Exhausted,
            Some(s) => SlotState::Active(EntryView {
                group: s.job as u64 + 1,
                stage: s.set,
                seq: s.seq,
                arrival: s.arrival,
                facts: &self.workload[s.job].facts,
                cancelled: None,
            }),
        }
    }

    /// Worker `w` is free: the worker loop's decision ([`crate::worker`]) —
    /// pull the update masks and visit the flagged slots, choose, read the
    /// chosen slot and confirm it — until it starts a task or has nothing to
    /// run.
    fn decide(&mut self, w: usize) {
        let mut flagged = Vec::new();
        loop {
            self.masks.pull(w, |_, slot| flagged.push(slot));
            for k in flagged.drain(..) {
                let read = self.read(k);
                self.workers[w].core.visit(k, read);
            }
            let Some(k) = self.workers[w].core.choose() else {
                return;
            };
            let read = self.read(k);
            if !self.workers[w].core.confirm(k, read) {
                continue;
            }
            let slot = self.slots[k].as_mut().expect("a confirmed slot is live");
            let (job, set) = (slot.job, slot.set);
            let parallelism = self.workload[job].task_sets[set].parallelism.max(1);
            let dry = slot.parts.as_ref().map_or(slot.unassigned == 0, Parts::dry);
            if !dry && slot.running >= parallelism {
                // Every place of the task set is taken: for this worker it
                // is exhausted until a place frees.
                slot.capped.push(w);
                self.workers[w].core.visit(k, SlotState::Exhausted);
                continue;
            }
            if dry {
                // The task finds its task set dry: it returns at once and
                // tags the entry; the last one back finalizes it.
                slot.tagged = true;
                self.workers[w].core.charge(k, Duration::ZERO, self.t_max);
                let last = slot.running == 0;
                self.record(w, job, set, 0);
                if last {
                    self.finalize(k);
                }
                continue;
            }
            if let Some(parts) = &slot.parts {
                let node = self.cfg.machine.as_ref().map_or(0, |m| m.worker_node(w));
                let stealing = self.workers[w].core.stealing(k);
                match parts.take(node, stealing, &self.staffed) {
                    Take::From(from) => {
                        self.start_fluid(w, k, node, from, stealing);
                        return;
                    }
                    Take::NodeDry(affinity) => {
                        // Its node is dry, others are not: the task returns
                        // at once and the worker steps back, as the worker
                        // loop does on `TaskOutcome::NodeDry`.
                        self.workers[w].core.charge(k, Duration::ZERO, self.t_max);
                        self.workers[w].core.node_dry(k, affinity);
                        self.record(w, job, set, 0);
                        if let Some(stats) = self.numa.as_mut() {
                            stats.node_dry += 1;
                        }
                        continue;
                    }
                    Take::Dry => unreachable!("a dry entry was handled above"),
                }
            }
            let taken = if slot.unassigned <= self.quantum {
                slot.unassigned
            } else {
                self.quantum
            };
            let handover = self.cfg.preemption
                && self.handover_morsel > 0
                && self.workers[w].core.handover_pending(k);
            let morsel = match (self.morsel, handover) {
                (0, true) => self.handover_morsel,
                (m, true) => m.min(self.handover_morsel),
                (m, false) => m,
            };
            // A task ends at the morsel boundary at or after its quantum.
            let end = match morsel {
                0 => taken,
                m => taken.min(self.quantum.div_ceil(m) * m),
            };
            slot.unassigned -= end;
            slot.running += 1;
            let out = &mut self.out[job];
            out.decisions += 1;
            out.first_run.get_or_insert(secs(self.now));
            let record = self.record(w, job, set, end);
            self.workers[w].task = Some(Task {
                slot: k,
                job,
                start: self.now,
                taken: end,
                end: self.now + end,
                morsel,
                record,
                fluid: None,
            });
            return;
        }
    }

    /// Worker `w` of `node` starts a task of slot `k` reading part `from`
    /// (with a machine); its rate and end come from the next reflow.
    fn start_fluid(&mut self, w: usize, k: usize, node: usize, from: usize, stealing: bool) {
        let slot = self.slots[k].as_mut().expect("a confirmed slot is live");
        slot.running += 1;
        let (job, set) = (slot.job, slot.set);
        let out = &mut self.out[job];
        out.decisions += 1;
        out.first_run.get_or_insert(secs(self.now));
        if stealing {
            if let Some(stats) = self.numa.as_mut() {
                stats.steal_tasks += 1;
            }
        }
        let record = self.record(w, job, set, 0);
        let budget = self.now + self.quantum;
        self.workers[w].task = Some(Task {
            slot: k,
            job,
            start: self.now,
            taken: 0,
            end: budget,
            morsel: 0,
            record,
            fluid: Some(FluidTask {
                node,
                from,
                stealing,
                budget,
                rate: 0.0,
            }),
        });
    }

    /// Records a task starting now (its index in `tasks`, if recording).
    fn record(&mut self, worker: usize, job: usize, task_set: usize, ran: u64) -> Option<usize> {
        self.cfg.record.then(|| {
            self.tasks.push(SimTaskRecord {
                worker,
                job,
                task_set,
                start: secs(self.now),
                ran: secs(ran),
            });
            self.tasks.len() - 1
        })
    }

    /// With preemption points: a running task whose worker has an update it
    /// has not pulled ends at its first morsel boundary from now on (at
    /// least one morsel into the task; fluid work ends now).
    fn preempt(&mut self) {
        if !self.cfg.preemption || self.cfg.machine.is_some() {
            return;
        }
        for w in 0..self.workers.len() {
            let Some(task) = self.workers[w].task.as_mut() else {
                continue;
            };
            if !self.masks.pending(w) {
                continue;
            }
            let into = self.now - task.start;
            let cut = match task.morsel {
                0 if into == 0 => continue,
                0 => into,
                m => into.div_ceil(m).max(1) * m,
            };
            if cut < task.end - task.start {
                task.end = task.start + cut;
                if let Some(i) = task.record {
                    self.tasks[i].ran = secs(cut);
                }
            }
        }
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
        tasks: Vec::new(),
        numa: None,
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

    #[test]
    fn preemption_points_and_handover_morsels_end_tasks_early() {
        // FIFO on 2 workers. Job A (first) has a task set of 0.6 then one of
        // 1.0; job B has 2.0. Worker 0 takes all of A's first set; worker 1
        // finds it dry (A becomes its pending hand-over) and runs B. A's next
        // task set arrives at 0.6: with preemption points B's task ends at
        // its next morsel boundary — 0.6 with hand-over morsels of 0.05, 0.75
        // with morsels of 0.25 — and at its quantum (1.0) without them.
        let jobs = [
            SimJob::new(
                0.0,
                vec![SimTaskSet::elastic(0.6), SimTaskSet::elastic(1.0)],
            ),
            SimJob::new(0.0, vec![SimTaskSet::elastic(2.0)]),
        ];
        let first_b_task = |preemption: bool, handover: Option<f64>| {
            let mut cfg = SimConfig::new(Policy::Fifo, 2, 1.0);
            cfg.preemption = preemption;
            cfg.morsel = Some(0.25);
            cfg.handover_morsel = handover;
            cfg.record = true;
            let r = simulate(&jobs, &cfg);
            assert_eq!(r.completed(), 2);
            let b = r.tasks.iter().find(|t| t.job == 1).expect("B ran");
            assert_eq!((b.worker, b.start), (1, 0.0));
            b.ran
        };
        assert_eq!(first_b_task(true, Some(0.05)), 0.6);
        assert_eq!(first_b_task(true, None), 0.75);
        assert_eq!(first_b_task(false, Some(0.05)), 1.0);
    }
}
