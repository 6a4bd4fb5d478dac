//! The scheduler handle: configuration, worker startup, query submission and
//! shutdown. The shared state ([`Shared`]) is the lock-free core of seed 001
//! §2.3: the slot array, the workers' pins and update masks, admission, and
//! the idle protocol.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::admission::{Admission, Admit};
use crate::binding::Binding;
use crate::clock::Clock;
use crate::group::{QueryHandle, ResourceGroup, TaskSetEntry};
use crate::idle::Idle;
use crate::masks::{MaskKind, UpdateMasks};
use crate::morsel::{AdaptiveMorsels, MorselPolicy};
use crate::observe::WorkerCounters;
use crate::overhead::DecisionLog;
use crate::pins::Pins;
use crate::policy::{DecayParams, GroupFacts, Policy};
use crate::slots::SlotArray;
use crate::sync::{lock, AtomicU64, Mutex, Ordering};
use crate::task::{QueryError, TaskSetWork};
use crate::topology::Topology;
use crate::trace::Tracer;
use crate::tuning::{TuningConfig, TuningReport, TUNING_REPORTS};
use crate::worker::{self, WorkerStats};

/// Stack of a worker thread. Tasks evaluate expressions recursively, as deep
/// as the deepest expression the SQL layer accepts (`stride_sql::limits`
/// bounds it); only the pages a task touches are committed.
pub const WORKER_STACK: usize = 64 << 20;

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Number of worker threads (one per core is the intended setting).
    pub workers: usize,
    /// Pin each worker to its cpu in `topology` with `sched_setaffinity`.
    pub pin_workers: bool,
    /// The machine the workers run on (or pretend to): worker `i` belongs
    /// to node `topology.worker_node(i)` ([`crate::TaskContext::node`]) and,
    /// with `pin_workers`, is pinned to `topology.cpu_of_worker(i)`.
    /// Default: the machine's own ([`Topology::machine`]).
    pub topology: Arc<Topology>,
    /// Target task duration `t_max` (seed 001 §3.1: 2 ms).
    pub t_max: Duration,
    /// How tasks size their morsels.
    pub morsels: MorselPolicy,
    /// Which runnable resource group a worker serves next (default SRPT:
    /// on a saturated mix of short and long queries it kept short queries
    /// fastest of every policy measured; README, docs/experiments.md).
    pub policy: Policy,
    /// Number of slots: resource groups scheduled at once (seed 001 §2.3:
    /// 128). Further groups wait in admission's queue.
    pub slots: usize,
    /// Self-tuning of the decay parameters (seed 001 §4: track 20 s every
    /// 60 s on worker 0, then tune; see [`crate::tuning`]). `None` (the
    /// default) keeps the policy as configured, so runs are reproducible.
    pub tuning: Option<TuningConfig>,
    /// Record every task and finalization step ([`crate::trace`]).
    pub trace: Option<Arc<Tracer>>,
    /// Preemption points: a running task ends after its current morsel when
    /// the worker has unpulled updates (a new group, a next task set), so
    /// the policy decides again at once instead of after `t_max`
    /// ([`crate::TaskContext::next_morsel`]). On by default.
    pub preemption: bool,
    /// How the OS schedules the worker threads against the engine's other
    /// threads — sessions parsing and planning, the wire protocol, clients
    /// in the same process ([`WorkerOsPriority`]). Default `Nice(10)`.
    pub worker_os_priority: WorkerOsPriority,
    /// The OS time slice the worker threads ask for (Linux ≥ 6.12; ignored
    /// elsewhere and with `WorkerOsPriority::Idle`): how long a worker may
    /// keep its core before a thread that wakes preempts it
    /// ([`crate::os_thread`]). Default 100 µs, the kernel's minimum; `None`
    /// keeps the kernel's default (about 1.5 ms on 2 cores).
    pub worker_os_slice: Option<Duration>,
    /// Hand-over morsels: while a group that this worker ranks first is
    /// between two task sets (its last tasks run elsewhere, or it is being
    /// finalized), the worker's tasks of other groups run morsels of at most
    /// this long, so that the preemption point after the group's next task
    /// set arrives comes within one of them (e.g. 100 µs, seed 001's
    /// `t_min`). Default 100 µs; `None` sizes those morsels like any other.
    /// On 2 cores it lowered short queries' mean slowdown in each of 7
    /// paired runs (docs/experiments.md). Needs `preemption`.
    pub handover_morsel: Option<Duration>,
    /// Time slices of the proportional-share policies (fair, stride,
    /// lottery: [`Policy::shares_time`]): a worker keeps running the group
    /// it ran last for up to this long before the policy ranks again,
    /// unless work that became runnable meanwhile (an arrival, a next task
    /// set, a resume) is now the policy's choice, or the policy's choice is
    /// owed more than a slice of its own quanta (`decision.rs`,
    /// `slice_continues`). Passes are
    /// charged as always, so each group's share over time is unchanged; the
    /// groups take turns in slices instead of task by task, and a query's
    /// working set stays in the worker's caches for a slice (without
    /// slices, fair and stride scheduling spent up to 2.6× the CPU per
    /// query of FIFO on hash-heavy TPC-H queries with 8 clients:
    /// docs/experiments.md). Default [`DEFAULT_SLICE`]; `None`: every
    /// decision is the policy's.
    pub slice: Option<Duration>,
    /// Where the workers take the duration of a task they charge from
    /// ([`crate::clock`]): the wall clock, or a virtual clock that tasks
    /// advance (for tests that hold the worker loop to the simulator).
    pub clock: Clock,
}

/// The default time slice of the proportional-share policies
/// ([`SchedulerConfig::slice`]): long enough that fair and stride
/// scheduling do as much work per second as FIFO, measured against shorter
/// slices and none under closed and open loops (docs/experiments.md, "Time
/// slices").
pub const DEFAULT_SLICE: Duration = Duration::from_millis(50);

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pin_workers: true,
            topology: Topology::machine(),
            t_max: Duration::from_millis(2),
            morsels: MorselPolicy::Adaptive(AdaptiveMorsels::default()),
            policy: Policy::Srpt,
            slots: 128,
            tuning: None,
            trace: None,
            preemption: true,
            worker_os_priority: WorkerOsPriority::Nice(10),
            worker_os_slice: Some(Duration::from_micros(100)),
            handover_morsel: Some(Duration::from_micros(100)),
            slice: Some(DEFAULT_SLICE),
            clock: Clock::Wall,
        }
    }
}

/// The OS scheduling class of the worker threads (Linux; elsewhere
/// ignored). Workers never sleep while there is work, so on a core shared
/// with a worker every other thread of the engine — a session planning the
/// next query, the wire protocol, a client — competes with the worker for
/// the core; a lower weight gives those threads the core when they need it
/// ([`SchedulerConfig::worker_os_slice`] decides how soon they get it).
/// Failure to set it (no privilege) is ignored, like pinning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerOsPriority {
    /// Leave the threads as created.
    Normal,
    /// `setpriority` to this nice value (1..=19 lowers the workers' weight
    /// against the engine's other threads; negative values need privilege).
    Nice(i32),
    /// `SCHED_IDLE`: any other thread that wakes preempts a worker at once.
    /// Workers then get only what the rest of the machine leaves: for a
    /// machine that runs nothing else.
    Idle,
}

impl WorkerOsPriority {
    /// Parses `normal`, `idle` or `nice:N` (N in -20..=19).
    pub fn parse(s: &str) -> Option<WorkerOsPriority> {
        match s.trim().to_ascii_lowercase().as_str() {
            "normal" => Some(WorkerOsPriority::Normal),
            "idle" => Some(WorkerOsPriority::Idle),
            other => {
                let n: i32 = other.strip_prefix("nice:")?.parse().ok()?;
                (-20..=19).contains(&n).then_some(WorkerOsPriority::Nice(n))
            }
        }
    }
}

/// State shared by the scheduler handle and its workers.
pub(crate) struct Shared {
    pub(crate) config: SchedulerConfig,
    /// The global slot array: active task set per bound group.
    pub(crate) slots: SlotArray<TaskSetEntry>,
    /// The global state array (one pin per worker).
    pub(crate) pins: Pins<TaskSetEntry>,
    /// Change and return masks of every worker.
    pub(crate) masks: UpdateMasks,
    /// Wait queue and free slots.
    pub(crate) admission: Admission<Arc<ResourceGroup>>,
    /// Sleeping and waking idle workers; the shutdown flag.
    pub(crate) idle: Idle,
    /// The current policy; read by a worker when `policy_epoch` changed.
    pub(crate) policy: Mutex<Policy>,
    /// Incremented (Release, under `policy`) by every `set_policy`; workers
    /// load it (Acquire) before each decision and re-read `policy` when it
    /// differs from the epoch they last read.
    pub(crate) policy_epoch: AtomicU64,
    /// Decision measurement ([`crate::overhead`]); `None` normally.
    pub(crate) measure: Option<Arc<DecisionLog>>,
    /// Bumped (Release) by every [`QueryHandle::cancel`] after it set the
    /// group's flag; workers load it (Acquire) before each decision and
    /// rescan their active groups' flags when it moved. A hint, like the
    /// flags themselves: the finalizer re-checks cancellation.
    pub(crate) cancel_epoch: Arc<StdAtomicU64>,
    /// When the scheduler started (tuning periods, tracked arrivals).
    pub(crate) started: Instant,
    /// Per-worker statistics ([`WorkerCounters`]).
    pub(crate) worker_counters: Vec<WorkerCounters>,
    /// Per node id of the topology (`0..=` the largest): whether any worker
    /// runs there ([`crate::TaskContext::node_has_workers`]).
    pub(crate) staffed: Box<[bool]>,
    /// The last [`TUNING_REPORTS`] tuning runs; pushed under `policy`'s
    /// lock together with the policy they set.
    pub(crate) tuning_reports: Mutex<VecDeque<TuningReport>>,
}

impl Shared {
    /// Installs the first task set of `group` into `slot`, which the caller
    /// owns (from admission), and tells every worker (change mask, wake).
    /// `by_worker`: the caller is a worker, which decides again afterwards.
    fn bind(&self, slot: usize, group: Arc<ResourceGroup>, arrival: u64, by_worker: bool) {
        let first = group.task_sets[0].clone();
        let entry = Box::new(TaskSetEntry::planned(group, 0, slot, arrival));
        self.binding().bind(slot, entry);
        self.wake_for(&*first, by_worker);
    }

    /// The slots, masks and admission queue, for [`crate::binding`].
    pub(crate) fn binding(&self) -> Binding<'_, TaskSetEntry, Arc<ResourceGroup>> {
        Binding {
            slots: &self.slots,
            masks: &self.masks,
            admission: &self.admission,
        }
    }

    /// After `work` was installed (its mask bits pushed): wakes as many
    /// sleeping workers as it can use ([`TaskSetWork::parallelism_hint`],
    /// at most every worker). A worker that installed it takes its own share
    /// — it looks for work again right after — so it wakes one fewer
    /// ([`crate::idle`]: that is what keeps the targeted wake-up free of
    /// lost wakeups).
    pub(crate) fn wake_for(&self, work: &dyn TaskSetWork, by_worker: bool) {
        let usable = work
            .parallelism_hint()
            .unwrap_or(usize::MAX)
            .clamp(1, self.config.workers);
        self.idle.wake(usable - usize::from(by_worker));
    }

    /// Replaces the policy and tells the workers (they compare the epoch
    /// before each decision).
    pub(crate) fn set_policy(&self, policy: Policy) {
        let mut current = lock(&self.policy);
        *current = policy;
        self.policy_epoch.fetch_add(1, Ordering::Release);
    }

    /// A tuning run finished: pushes `params` if the policy is still
    /// decaying-priority stride scheduling, and keeps the report. Both under
    /// the policy lock, so a reader that saw the new policy finds its report.
    pub(crate) fn push_tuning(&self, params: DecayParams, report: TuningReport) {
        let mut current = lock(&self.policy);
        if let Policy::Stride(_) = *current {
            *current = Policy::Stride(params);
            self.policy_epoch.fetch_add(1, Ordering::Release);
        }
        let mut reports = lock(&self.tuning_reports);
        if reports.len() == TUNING_REPORTS {
            reports.pop_front();
        }
        reports.push_back(report);
    }

    /// A group had to wait for a slot: every paused task set is made
    /// runnable again ([`crate::pause`]), so that one whose consumer is
    /// idle sees the waiting group ([`crate::Resumer::slot_wanted`]) and
    /// runs to its end instead of holding its slot. A slot that is not
    /// paused takes the bit as an ordinary return: one visit, no change.
    /// Nothing is pushed while no task set ever asked to pause: the bits
    /// would only end running tasks early at their preemption points.
    pub(crate) fn resume_paused(&self) {
        if !self.admission.pause_asked() {
            return;
        }
        for slot in 0..self.config.slots {
            self.masks.push(MaskKind::Return, slot);
        }
        self.idle.wake(self.config.workers);
    }

    /// The finalizer of a group's last task set gives up the group's slot:
    /// clears it, then hands it to the oldest waiting group or frees it.
    /// Only workers call it (the bind's wake counts on that).
    pub(crate) fn release_slot(&self, slot: usize) {
        // The cleared entry is the caller's to reclaim (it is finalizing it).
        let (_, next) = self.binding().release(slot);
        if let Some((group, arrival)) = next {
            self.bind(slot, group, arrival, true);
        }
    }
}

/// A pool of workers running resource groups.
pub struct Scheduler {
    shared: Arc<Shared>,
    next_id: StdAtomicU64,
    workers: Vec<JoinHandle<()>>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        Scheduler::start(config, None)
    }

    /// Starts the workers; `measure` turns decision timing on.
    pub(crate) fn start(config: SchedulerConfig, measure: Option<Arc<DecisionLog>>) -> Self {
        let mut config = config;
        config.workers = config.workers.max(1);
        config.slots = config.slots.max(1);
        if let MorselPolicy::Fixed(n) = &mut config.morsels {
            *n = (*n).max(1);
        }
        let shared = Arc::new(Shared {
            slots: SlotArray::new(config.slots),
            pins: Pins::new(config.workers),
            masks: UpdateMasks::new(config.workers, config.slots),
            admission: Admission::new(config.slots),
            idle: Idle::default(),
            policy: Mutex::new(config.policy.clone()),
            policy_epoch: AtomicU64::new(0),
            measure,
            cancel_epoch: Arc::default(),
            started: Instant::now(),
            worker_counters: (0..config.workers)
                .map(|_| WorkerCounters::default())
                .collect(),
            staffed: (0..config
                .topology
                .nodes()
                .iter()
                .map(|n| n.id + 1)
                .max()
                .unwrap_or(1))
                .map(|id| !config.topology.node_workers(id, config.workers).is_empty())
                .collect(),
            tuning_reports: Mutex::new(VecDeque::new()),
            config,
        });
        let workers = (0..shared.config.workers)
            .map(|index| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("stride-worker-{index}"))
                    .stack_size(WORKER_STACK)
                    .spawn(move || worker::run(shared, index))
                    .expect("failed to spawn a worker thread")
            })
            .collect();
        Scheduler {
            shared,
            next_id: StdAtomicU64::new(1),
            workers,
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.shared.config
    }

    /// Number of resource groups admitted and not yet completed: those bound
    /// to slots plus those in the wait queue.
    pub fn active_groups(&self) -> usize {
        self.shared.admission.active()
    }

    /// The policy workers currently follow (it may differ from
    /// `config().policy` after [`Scheduler::set_policy`]).
    pub fn policy(&self) -> Policy {
        lock(&self.shared.policy).clone()
    }

    /// Switches the policy at run time (settings, self-tuning): every worker
    /// follows `policy` from its next scheduling decision on; groups keep
    /// their passes and priorities.
    pub fn set_policy(&self, policy: Policy) {
        self.shared.set_policy(policy);
    }

    /// The last tuning runs (oldest first; at most
    /// [`crate::tuning::TUNING_REPORTS`]); empty unless
    /// [`SchedulerConfig::tuning`] is set.
    pub fn tuning_reports(&self) -> Vec<TuningReport> {
        lock(&self.shared.tuning_reports).iter().cloned().collect()
    }

    /// What each worker has done so far (see [`WorkerStats`]; each counter
    /// is read on its own, Relaxed).
    pub fn worker_stats(&self) -> Vec<WorkerStats> {
        self.shared
            .worker_counters
            .iter()
            .enumerate()
            .map(|(i, c)| c.snapshot(i))
            .collect()
    }

    /// Submits a query as a resource group running `task_sets` in order.
    pub fn submit(&self, task_sets: Vec<Arc<dyn TaskSetWork>>) -> QueryHandle {
        self.submit_with(task_sets, GroupFacts::default())
    }

    /// Submits a query with what is known about it (user priority, recorded
    /// per-task-set costs).
    pub fn submit_with(
        &self,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
        facts: GroupFacts,
    ) -> QueryHandle {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let group = Arc::new(ResourceGroup::of_scheduler(
            id,
            task_sets,
            facts,
            &self.shared,
        ));
        if group.task_sets.is_empty() {
            group.completion.complete(Ok(group.stats()));
            return QueryHandle { group };
        }
        match self.shared.admission.admit(group.clone()) {
            Admit::Slot {
                group,
                slot,
                arrival,
            } => self.shared.bind(slot, group, arrival, false),
            Admit::Queued => self.shared.resume_paused(),
            Admit::Closed(group) => group.completion.complete(Err(QueryError::Shutdown)),
        }
        QueryHandle { group }
    }

    /// Submits and waits.
    pub fn run(
        &self,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
    ) -> Result<crate::QueryStats, QueryError> {
        self.submit(task_sets).wait()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        let waiting = self.shared.admission.close();
        self.shared.idle.shut_down();
        for group in waiting {
            group.completion.complete(Err(QueryError::Shutdown));
        }
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
        // Every worker has stopped, and each stopped between decisions, with
        // nothing pinned: the slots' entries are ours alone.
        for k in 0..self.shared.slots.len() {
            if let Some(entry) = self.shared.slots.clear(k) {
                // SAFETY: the entry came from `install`, was just removed
                // from its slot, and no worker is left to dereference it.
                unsafe {
                    entry
                        .as_ref()
                        .group
                        .completion
                        .complete(Err(QueryError::Shutdown));
                    SlotArray::reclaim(entry);
                }
            }
        }
    }
}
