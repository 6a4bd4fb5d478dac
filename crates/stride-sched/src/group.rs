//! Resource groups: one per query.
//!
//! A resource group owns its task sets in execution order and the query's
//! accounting. Which task set is active is not stored here: the group's slot
//! holds a [`TaskSetEntry`] for it (see [`crate::slots`]), and the entry's
//! finalizer installs the next one. Completion is published through
//! [`Completion`], on which the submitting (non-worker) thread waits.
//!
//! The atomics here are query state and statistics, not part of the
//! scheduling protocol, and use `std` directly: `cancelled` and `failed` are
//! hints read Relaxed (the protocol re-checks them at finalization, under
//! the `error` mutex or after the finalization counter's Acquire), the
//! counters are summed once at completion, after the finalizer's Acquire on
//! the finalization counter made every task's additions visible.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::morsel::MorselState;
use crate::pins::Finalizable;
use crate::policy::GroupFacts;
use crate::sync::AtomicI64;
use crate::task::{QueryError, TaskSetWork};

/// Identifier of a resource group, unique within one scheduler.
pub type ResourceGroupId = u64;

/// Accounting of one query, as observed by the scheduler.
#[derive(Debug, Clone, Default)]
pub struct QueryStats {
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
    /// Number of task sets.
    pub task_sets: usize,
}

/// Counters updated by workers without the run-queue lock.
#[derive(Debug, Default)]
pub(crate) struct GroupCounters {
    pub(crate) cpu_ns: AtomicU64,
    pub(crate) finalize_ns: AtomicU64,
    pub(crate) tasks: AtomicU64,
    pub(crate) morsels: AtomicU64,
    pub(crate) tuples: AtomicU64,
}

pub(crate) struct ResourceGroup {
    pub(crate) id: ResourceGroupId,
    pub(crate) task_sets: Vec<Arc<dyn TaskSetWork>>,
    /// What the submitter knows about the query (user priority, estimates).
    pub(crate) facts: GroupFacts,
    /// Adaptive-morsel state of each task set.
    pub(crate) morsel_states: Vec<MorselState>,
    pub(crate) submitted: Instant,
    /// Set by [`QueryHandle::cancel`]; read (Relaxed) by workers when they pick a
    /// task and by the finalizer. Nothing else is published through it.
    /// Shared (`Arc`) so that a worker's local view can watch it without
    /// keeping the whole group alive.
    pub(crate) cancelled: Arc<AtomicBool>,
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
    pub(crate) fn new(
        id: ResourceGroupId,
        task_sets: Vec<Arc<dyn TaskSetWork>>,
        facts: GroupFacts,
    ) -> Self {
        ResourceGroup {
            id,
            facts,
            morsel_states: task_sets.iter().map(|_| MorselState::default()).collect(),
            task_sets,
            submitted: Instant::now(),
            cancelled: Arc::new(AtomicBool::new(false)),
            failed: AtomicBool::new(false),
            error: Mutex::new(None),
            started: OnceLock::new(),
            counters: GroupCounters::default(),
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
            task_sets: self.task_sets.len(),
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
    /// Index of this task set in `group.task_sets`.
    pub(crate) task_set: usize,
    /// The slot this entry is installed in.
    pub(crate) slot: usize,
    /// Admission order of the group (FIFO ranks by it).
    pub(crate) arrival: u64,
}

impl TaskSetEntry {
    pub(crate) fn new(
        group: Arc<ResourceGroup>,
        task_set: usize,
        slot: usize,
        arrival: u64,
    ) -> Self {
        TaskSetEntry {
            finalization: AtomicI64::new(0),
            group,
            task_set,
            slot,
            arrival,
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
    }

    /// Blocks the calling thread (never a worker) until the query completed,
    /// failed or was cancelled.
    pub fn wait(self) -> Result<QueryStats, QueryError> {
        self.group.completion.wait()
    }
}
