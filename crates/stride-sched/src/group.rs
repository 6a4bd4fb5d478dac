//! Resource groups: one per query.
//!
//! A resource group owns its planned task sets in execution order, the
//! follow-ups their finalizations emitted and not yet run
//! ([`crate::task::FollowUps`]), and the query's accounting. Which task set
//! is active is not stored here: the group's slot holds a [`TaskSetEntry`]
//! for it (see [`crate::slots`]), and the entry's finalizer installs the
//! next one — the first pending follow-up, else the next planned task set. Completion is published through
//! [`Completion`], on which the submitting (non-worker) thread waits.
//!
//! The atomics here are query state and statistics, not part of the
//! scheduling protocol, and use `std` directly: `cancelled` and `failed` are
//! hints read Relaxed (the protocol re-checks them at finalization, under
//! the `error` mutex or after the finalization counter's Acquire), the
//! counters are summed once at completion, after the finalizer's Acquire on
//! the finalization counter made every task's additions visible.
//!
//! **Per-query accounting** ([`QueryStats`]) costs a handful of Relaxed
//! atomics per *task* (never per morsel: a task counts its morsel sizes in
//! its own [`crate::TaskContext`] and adds them once when it returns): CPU
//! time and morsels per task set, the morsel-size histogram (power-of-two
//! buckets), smallest and largest morsel, and the priority the charging
//! worker's [`crate::policy::StrideState`] gave the group. The priority
//! trace takes its mutex at most once per `t_max` per group: a worker first
//! claims the sampling instant with a CAS on `last_sample_ns`, and only the
//! winner locks; the trace keeps at most [`PRIORITY_TRACE_LEN`] samples by
//! dropping every other one and halving its sampling rate when full.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::decision::EntryView;
use crate::morsel::MorselState;
use crate::pins::Finalizable;
use crate::policy::GroupFacts;
use crate::scheduler::Shared;
use crate::sync::AtomicI64;
use crate::task::{QueryError, TaskSetWork};

/// Identifier of a resource group, unique within one scheduler.
pub type ResourceGroupId = u64;

/// Accounting of one query, as observed by the scheduler.
#[derive(Debug, Clone, Default)]
pub struct QueryStats {
    /// The resource group that ran the query, as named in traces
    /// ([`crate::TaskRecord::group`]).
    pub group: ResourceGroupId,
    /// Time from submission until the first task started.
    pub queue_wait: Duration,
    /// Time from submission until completion.
    pub latency: Duration,
    /// Sum of task durations over all workers (CPU time spent in tasks).
    pub cpu_time: Duration,
    /// Time spent in finalization steps.
    pub finalize_time: Duration,
    /// Number of tasks run.
    pub tasks: u64,
    /// Number of morsels processed.
    pub morsels: u64,
    /// Number of source tuples processed.
    pub tuples: u64,
    /// Morsels by where their data lived ([`crate::MorselPlace`]), for the
    /// sources that know (table scans over placed blocks); the rest of
    /// `morsels` is not counted here.
    pub places: crate::PlaceCounts,
    /// Number of planned task sets (stages).
    pub task_sets: usize,
    /// Number of follow-up task sets that finalizations emitted and that
    /// ran (their time is counted in their stage's `task_set_cpu`).
    pub follow_ups: u64,
    /// Tasks that paused the query's task set because its consumer was
    /// behind ([`crate::TaskOutcome::Paused`]): backpressure from a client
    /// reading a streamed result slower than the query produces it.
    pub pauses: u64,
    /// Morsels that a task left unfinished at a preemption point inside
    /// the morsel (between two output chunks of a join whose probe rows
    /// match many rows) and a later task finished
    /// ([`crate::TaskContext::suspend_requested`]); a morsel suspended
    /// twice counts twice.
    pub suspended_morsels: u64,
    /// CPU time spent in tasks of each planned task set and its follow-ups,
    /// in order (sums to `cpu_time`).
    pub task_set_cpu: Vec<Duration>,
    /// Morsels processed by each task set, in order (sums to `morsels`).
    pub task_set_morsels: Vec<u64>,
    /// Smallest morsel (source tuples); 0 when no morsel ran.
    pub morsel_tuples_min: u64,
    /// Largest morsel (source tuples); 0 when no morsel ran.
    pub morsel_tuples_max: u64,
    /// Morsel sizes as `(upper bound, count)` per non-empty power-of-two
    /// bucket, ascending: the bucket of bound `2^b` holds the morsels of
    /// `2^(b-1) + 1 ..= 2^b` tuples (the bound-1 bucket: 0 or 1 tuple).
    pub morsel_size_histogram: Vec<(u64, u64)>,
    /// `(time since submission, priority)`: the group's priority as the
    /// charging worker saw it right after charging a task; at most one
    /// sample per `t_max`, at most [`PRIORITY_TRACE_LEN`] samples spread over
    /// the whole query (see the module docs). Each worker keeps its own
    /// priority per group (seed 001 §2.3), so consecutive samples may come
    /// from different workers' views.
    pub priority_trace: Vec<(Duration, f64)>,
    /// The priority after the last charged task (as that worker saw it); 0
    /// when no task ran.
    pub final_priority: f64,
    /// The CPU time of the query's tasks the submitter estimated (the sum
    /// of [`GroupFacts::estimates`], SRPT's remaining work at submission);
    /// `None` when it gave none. Set beside `cpu_time`, it measures how
    /// good the estimates are.
    pub estimated_cpu: Option<Duration>,
    /// The most bytes the query's memory account held (filled in by the
    /// executor, which charges it; the scheduler does not see memory).
    pub memory_peak: usize,
    /// Bytes the query wrote to spill files (filled in by the executor).
    pub spilled_bytes: usize,
}

/// Most samples a query's priority trace keeps.
pub const PRIORITY_TRACE_LEN: usize = 256;

/// Number of morsel-size buckets (bounds `2^0 ..= 2^63`).
pub const MORSEL_BUCKETS: usize = 64;

/// The bucket of a morsel of `tuples` tuples: the smallest `b` with
/// `tuples <= 2^b` (capped at the last bucket).
pub fn morsel_bucket(tuples: u64) -> usize {
    if tuples <= 1 {
        0
    } else {
        ((64 - (tuples - 1).leading_zeros()) as usize).min(MORSEL_BUCKETS - 1)
    }
}

/// A bounded, evenly thinned priority trace.
#[derive(Debug, Default)]
pub(crate) struct PriorityTrace {
    samples: Vec<(Duration, f64)>,
    /// Keep every `stride`-th offered sample (doubles when full).
    stride: u64,
    offered: u64,
}

impl PriorityTrace {
    pub(crate) fn offer(&mut self, at: Duration, priority: f64) {
        let stride = self.stride.max(1);
        if self.offered.is_multiple_of(stride) {
            if self.samples.len() == PRIORITY_TRACE_LEN {
                let mut i = 0;
                self.samples.retain(|_| {
                    i += 1;
                    i % 2 == 1
                });
                self.stride = stride * 2;
                // Stay on the new grid: this sample is kept only if it
                // falls on it.
                if !self.offered.is_multiple_of(self.stride) {
                    self.offered += 1;
                    return;
                }
            }
            self.samples.push((at, priority));
        }
        self.offered += 1;
    }
}

/// Counters updated by workers (Relaxed; read once at completion).
#[derive(Debug)]
pub(crate) struct GroupCounters {
    pub(crate) cpu_ns: AtomicU64,
    pub(crate) finalize_ns: AtomicU64,
    pub(crate) follow_ups: AtomicU64,
    /// Tasks that returned [`crate::TaskOutcome::Paused`].
    pub(crate) pauses: AtomicU64,
    /// Morsels suspended inside ([`QueryStats::suspended_morsels`]).
    pub(crate) suspended: AtomicU64,
    pub(crate) tasks: AtomicU64,
    pub(crate) morsels: AtomicU64,
    pub(crate) tuples: AtomicU64,
    /// Morsels by place: local, remote, stolen ([`crate::MorselPlace`]).
    pub(crate) places: [AtomicU64; 3],
    /// Per task set: CPU nanoseconds and morsels of its tasks.
    pub(crate) task_set_cpu_ns: Vec<AtomicU64>,
    pub(crate) task_set_morsels: Vec<AtomicU64>,
    /// Morsels per size bucket ([`morsel_bucket`]).
    pub(crate) morsel_buckets: Vec<AtomicU64>,
    /// Smallest morsel (`u64::MAX`: none yet) and largest (`fetch_min` /
    /// `fetch_max`).
    pub(crate) morsel_min: AtomicU64,
    pub(crate) morsel_max: AtomicU64,
    /// `f64` bits of the priority after the last charge (stored Relaxed).
    pub(crate) final_priority: AtomicU64,
    /// Nanoseconds since submission of the last priority sample
    /// (`u64::MAX`: none); claimed by CAS so that at most one worker per
    /// `t_max` takes `priority_trace`'s mutex.
    pub(crate) last_sample_ns: AtomicU64,
    pub(crate) priority_trace: Mutex<PriorityTrace>,
}

impl GroupCounters {
    fn new(task_sets: usize) -> Self {
        GroupCounters {
            cpu_ns: AtomicU64::new(0),
            finalize_ns: AtomicU64::new(0),
            follow_ups: AtomicU64::new(0),
            pauses: AtomicU64::new(0),
            suspended: AtomicU64::new(0),
            tasks: AtomicU64::new(0),
            morsels: AtomicU64::new(0),
            tuples: AtomicU64::new(0),
            places: Default::default(),
            task_set_cpu_ns: (0..task_sets).map(|_| AtomicU64::new(0)).collect(),
            task_set_morsels: (0..task_sets).map(|_| AtomicU64::new(0)).collect(),
            morsel_buckets: (0..MORSEL_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            morsel_min: AtomicU64::new(u64::MAX),
            morsel_max: AtomicU64::new(0),
            final_priority: AtomicU64::new(0f64.to_bits()),
            last_sample_ns: AtomicU64::new(u64::MAX),
            priority_trace: Mutex::new(PriorityTrace::default()),
        }
    }

    /// A worker charged a task of the group at `at` (since submission) and
    /// its view now gives the group `priority`: records the final priority
    /// and, at most once per `t_max`, a trace sample.
    pub(crate) fn sample_priority(&self, at: Duration, priority: f64, t_max: Duration) {
        self.final_priority
            .store(priority.to_bits(), Ordering::Relaxed);
        let now = at.as_nanos() as u64;
        let last = self.last_sample_ns.load(Ordering::Relaxed);
        let due = last == u64::MAX || now >= last.saturating_add(t_max.as_nanos() as u64);
        if due
            && self
                .last_sample_ns
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.priority_trace
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .offer(at, priority);
        }
    }
}

pub(crate) struct ResourceGroup {
    pub(crate) id: ResourceGroupId,
    /// The planned task sets (stages), in execution order.
    pub(crate) task_sets: Vec<Arc<dyn TaskSetWork>>,
    /// Follow-ups emitted by finalizations and not yet installed, each with
    /// its stage, in execution order. Only the group's finalizer touches it
    /// (one at a time: a group has one active entry), so the mutex is never
    /// contended; it is taken once per finalization, never per task.
    pub(crate) follow_ups: Mutex<VecDeque<(usize, Arc<dyn TaskSetWork>)>>,
    /// Entries installed so far; names the next entry ([`TaskSetEntry::seq`]).
    /// Written only by the group's binder and finalizers, which the slot
    /// protocol orders (Relaxed).
    pub(crate) installed: AtomicU64,
    /// What the submitter knows about the query (user priority, estimates).
    pub(crate) facts: GroupFacts,
    pub(crate) submitted: Instant,
    /// Set by [`QueryHandle::cancel`]; read (Relaxed) by workers when they pick a
    /// task and by the finalizer. Nothing else is published through it.
    /// Shared (`Arc`) so that a worker's local view can watch it without
    /// keeping the whole group alive.
    pub(crate) cancelled: Arc<AtomicBool>,
    /// The scheduler's cancel epoch: bumped (Release) by
    /// [`QueryHandle::cancel`] after setting `cancelled`; workers load it
    /// (Acquire) per decision and rescan their active groups' flags when it
    /// moved ([`crate::decision`]).
    pub(crate) cancel_epoch: Arc<AtomicU64>,
    /// The scheduler whose sleeping workers a cancel wakes: a group whose
    /// task set is paused ([`crate::pause`]) or parked by a hard affinity
    /// may be every awake worker's only work, and its cancellation must
    /// still be seen. Weak: a handle keeps no scheduler alive.
    pub(crate) scheduler: Weak<Shared>,
    /// Some task or finalization failed (`error` holds the first error). Set
    /// (Relaxed) after `error` was written; a hint for pickers.
    pub(crate) failed: AtomicBool,
    /// The first error; once set, the remaining task sets are skipped.
    pub(crate) error: Mutex<Option<QueryError>>,
    /// When the first task started (queue wait ends).
    pub(crate) started: OnceLock<Instant>,
    pub(crate) counters: GroupCounters,
    pub(crate) completion: Completion,
}

impl ResourceGroup {
    /// A group with a cancel epoch of its own (unit tests).
    #[cfg(test)]
    pub(crate) fn new(
        id: ResourceGroupId,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
        facts: GroupFacts,
    ) -> Self {
        ResourceGroup::build(id, task_sets, facts, Arc::default(), Weak::new())
    }

    /// A group of `scheduler`: its cancellation bumps the scheduler's
    /// cancel epoch and wakes its sleeping workers.
    pub(crate) fn of_scheduler(
        id: ResourceGroupId,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
        facts: GroupFacts,
        scheduler: &Arc<Shared>,
    ) -> Self {
        ResourceGroup::build(
            id,
            task_sets,
            facts,
            scheduler.cancel_epoch.clone(),
            Arc::downgrade(scheduler),
        )
    }

    fn build(
        id: ResourceGroupId,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
        facts: GroupFacts,
        cancel_epoch: Arc<AtomicU64>,
        scheduler: Weak<Shared>,
    ) -> Self {
        ResourceGroup {
            id,
            facts,
            counters: GroupCounters::new(task_sets.len()),
            cancel_epoch,
            scheduler,
            task_sets,
            follow_ups: Mutex::new(VecDeque::new()),
            installed: AtomicU64::new(0),
            submitted: Instant::now(),
            cancelled: Arc::new(AtomicBool::new(false)),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            started: OnceLock::new(),
            completion: Completion::default(),
        }
    }

    /// Records `err` unless an earlier error is recorded.
    pub(crate) fn fail(&self, err: QueryError) {
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        error.get_or_insert(err);
        self.failed.store(true, Ordering::Relaxed);
    }

    pub(crate) fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Completes the group: with its first error, or with its statistics.
    pub(crate) fn complete(&self) {
        let error = self.error.lock().unwrap_or_else(|e| e.into_inner()).take();
        let result = match error {
            Some(err) => Err(err),
            None => Ok(self.stats()),
        };
        self.completion.complete(result);
    }

    pub(crate) fn stats(&self) -> QueryStats {
        let c = &self.counters;
        QueryStats {
            group: self.id,
            queue_wait: self
                .started
                .get()
                .map(|s| s.duration_since(self.submitted))
                .unwrap_or_default(),
            latency: self.submitted.elapsed(),
            cpu_time: Duration::from_nanos(c.cpu_ns.load(Ordering::Relaxed)),
            finalize_time: Duration::from_nanos(c.finalize_ns.load(Ordering::Relaxed)),
            tasks: c.tasks.load(Ordering::Relaxed),
            morsels: c.morsels.load(Ordering::Relaxed),
            tuples: c.tuples.load(Ordering::Relaxed),
            places: crate::PlaceCounts {
                local: c.places[0].load(Ordering::Relaxed),
                remote: c.places[1].load(Ordering::Relaxed),
                stolen: c.places[2].load(Ordering::Relaxed),
            },
            task_sets: self.task_sets.len(),
            follow_ups: c.follow_ups.load(Ordering::Relaxed),
            pauses: c.pauses.load(Ordering::Relaxed),
            suspended_morsels: c.suspended.load(Ordering::Relaxed),
            task_set_cpu: c
                .task_set_cpu_ns
                .iter()
                .map(|n| Duration::from_nanos(n.load(Ordering::Relaxed)))
                .collect(),
            task_set_morsels: c
                .task_set_morsels
                .iter()
                .map(|n| n.load(Ordering::Relaxed))
                .collect(),
            morsel_tuples_min: match c.morsel_min.load(Ordering::Relaxed) {
                u64::MAX => 0,
                n => n,
            },
            morsel_tuples_max: c.morsel_max.load(Ordering::Relaxed),
            estimated_cpu: self
                .facts
                .estimates
                .as_ref()
                .map(|e| e.iter().map(|t| t.work).sum()),
            memory_peak: 0,
            spilled_bytes: 0,
            morsel_size_histogram: c
                .morsel_buckets
                .iter()
                .enumerate()
                .map(|(b, n)| (1u64 << b, n.load(Ordering::Relaxed)))
                .filter(|&(_, n)| n > 0)
                .collect(),
            priority_trace: c
                .priority_trace
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .samples
                .clone(),
            final_priority: f64::from_bits(c.final_priority.load(Ordering::Relaxed)),
        }
    }
}

/// The active task set of a group, as bound to a slot ([`crate::slots`]).
///
/// Boxed and leaked into the slot by whoever installs it; freed by its
/// finalizer (see [`crate::pins`] for why nobody dereferences it then).
pub(crate) struct TaskSetEntry {
    /// Finalization counter of the pin protocol ([`crate::pins`]): AcqRel
    /// read-modify-writes only; the one that brings it to zero makes every
    /// task of this entry happen before the caller's `finalize`.
    pub(crate) finalization: AtomicI64,
    pub(crate) group: Arc<ResourceGroup>,
    /// The task set this entry runs: a planned one or a follow-up.
    pub(crate) work: Arc<dyn TaskSetWork>,
    /// The planned task set this entry is or follows up (its index in
    /// `group.task_sets`): accounting, traces and estimates are per stage.
    pub(crate) stage: usize,
    /// Position of this entry among the group's installed entries (0, 1, …):
    /// tells a worker's local view that the slot moved on to another task
    /// set even when the stage did not change.
    pub(crate) seq: u64,
    /// Adaptive-morsel state of this task set.
    pub(crate) morsels: MorselState,
    /// The slot this entry is installed in.
    pub(crate) slot: usize,
    /// Admission order of the group (FIFO ranks by it).
    pub(crate) arrival: u64,
}

impl TaskSetEntry {
    /// The entry of `group`'s planned task set `stage`.
    pub(crate) fn planned(
        group: Arc<ResourceGroup>,
        stage: usize,
        slot: usize,
        arrival: u64,
    ) -> Self {
        let work = group.task_sets[stage].clone();
        TaskSetEntry::new(group, work, stage, slot, arrival)
    }

    /// The entry running `work` for `group`'s stage `stage`.
    pub(crate) fn new(
        group: Arc<ResourceGroup>,
        work: Arc<dyn TaskSetWork>,
        stage: usize,
        slot: usize,
        arrival: u64,
    ) -> Self {
        let seq = group.installed.fetch_add(1, Ordering::Relaxed);
        TaskSetEntry {
            finalization: AtomicI64::new(0),
            group,
            work,
            stage,
            seq,
            morsels: MorselState::default(),
            slot,
            arrival,
        }
    }
}

impl TaskSetEntry {
    /// What the decision core reads of this entry.
    pub(crate) fn view(&self) -> EntryView<'_> {
        EntryView {
            group: self.group.id,
            stage: self.stage,
            seq: self.seq,
            arrival: self.arrival,
            facts: &self.group.facts,
            cancelled: Some(&self.group.cancelled),
        }
    }
}

impl Finalizable for TaskSetEntry {
    fn finalization_counter(&self) -> &AtomicI64 {
        &self.finalization
    }
}

/// One-shot completion slot of a resource group.
#[derive(Default)]
pub(crate) struct Completion {
    result: Mutex<Option<Result<QueryStats, QueryError>>>,
    done: Condvar,
}

impl Completion {
    pub(crate) fn complete(&self, result: Result<QueryStats, QueryError>) {
        let mut slot = self.result.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Some(result);
            self.done.notify_all();
        }
    }

    fn wait(&self) -> Result<QueryStats, QueryError> {
        let mut slot = self.result.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(result) = slot.take() {
                return result;
            }
            slot = self.done.wait(slot).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The submitter's handle on a running query.
pub struct QueryHandle {
    pub(crate) group: Arc<ResourceGroup>,
}

impl QueryHandle {
    pub fn id(&self) -> ResourceGroupId {
        self.group.id
    }

    /// Asks the scheduler to stop the query. Running tasks finish their current
    /// morsel; no further task of the query starts. Idempotent.
    pub fn cancel(&self) {
        self.group.cancelled.store(true, Ordering::Relaxed);
        self.group.cancel_epoch.fetch_add(1, Ordering::Release);
        // Sleepers look again (the epoch bump happens before the wake's):
        // the group's slot may be paused or parked on every awake worker.
        if let Some(scheduler) = self.group.scheduler.upgrade() {
            scheduler.idle.wake(scheduler.config.workers);
        }
    }

    /// Blocks the calling thread (never a worker) until the query completed,
    /// failed or was cancelled.
    pub fn wait(self) -> Result<QueryStats, QueryError> {
        self.group.completion.wait()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn morsel_buckets_are_powers_of_two() {
        assert_eq!(morsel_bucket(0), 0);
        assert_eq!(morsel_bucket(1), 0);
        assert_eq!(morsel_bucket(2), 1);
        assert_eq!(morsel_bucket(3), 2);
        assert_eq!(morsel_bucket(4), 2);
        assert_eq!(morsel_bucket(5), 3);
        assert_eq!(morsel_bucket(1 << 20), 20);
        assert_eq!(morsel_bucket((1 << 20) + 1), 21);
        assert_eq!(morsel_bucket(u64::MAX), MORSEL_BUCKETS - 1);
    }

    #[test]
    fn the_priority_trace_stays_bounded_and_spans_the_whole_query() {
        let mut t = PriorityTrace::default();
        let n = 10_000u64;
        for i in 0..n {
            t.offer(Duration::from_millis(i), i as f64);
        }
        assert!(t.samples.len() <= PRIORITY_TRACE_LEN);
        assert!(
            t.samples.len() > PRIORITY_TRACE_LEN / 2,
            "{}",
            t.samples.len()
        );
        assert_eq!(t.samples[0].1, 0.0);
        // Evenly thinned: equal gaps, and the last sample near the end.
        let gap = t.samples[1].1 - t.samples[0].1;
        assert!(t.samples.windows(2).all(|w| w[1].1 - w[0].1 == gap));
        assert!(t.samples.last().unwrap().1 >= (n as f64) - 2.0 * gap);
        // Short traces keep every sample.
        let mut short = PriorityTrace::default();
        for i in 0..10 {
            short.offer(Duration::from_millis(i), 1.0);
        }
        assert_eq!(short.samples.len(), 10);
    }

    #[test]
    fn priority_samples_are_rate_limited_to_one_per_t_max() {
        let c = GroupCounters::new(1);
        let t_max = Duration::from_millis(2);
        for us in (0..10_000).step_by(100) {
            c.sample_priority(Duration::from_micros(us), 5.0, t_max);
        }
        // 10 ms at one sample per 2 ms.
        let n = c.priority_trace.lock().unwrap().samples.len();
        assert_eq!(n, 5);
        assert_eq!(
            f64::from_bits(c.final_priority.load(Ordering::Relaxed)),
            5.0
        );
    }
}
