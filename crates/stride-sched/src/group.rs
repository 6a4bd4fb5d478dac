//! Resource groups: one per query.
//!
//! A resource group owns its task sets in execution order, the index of the
//! task set that is currently active, and the query's accounting. Its mutable
//! scheduling state ([`GroupSched`]) is only touched under the run-queue lock
//! (see [`crate::queue`]); completion is published through [`Completion`], on
//! which the submitting (non-worker) thread waits.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::morsel::MorselState;
use crate::policy::GroupFacts;
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

/// Scheduling state of a group, protected by the run-queue mutex.
#[derive(Debug, Default)]
pub(crate) struct GroupSched {
    /// Index of the active task set.
    pub(crate) active: usize,
    /// Tasks of the active task set currently running on some worker.
    pub(crate) running: usize,
    /// A task of the active set reported `Exhausted` (or the group failed):
    /// no new task of this set may start.
    pub(crate) exhausted: bool,
    /// Some worker is finalizing the active set.
    pub(crate) finalizing: bool,
    /// First error seen; once set, remaining task sets are skipped.
    pub(crate) error: Option<QueryError>,
    pub(crate) started: Option<Instant>,
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
    /// task. Nothing else is published through it.
    pub(crate) cancelled: AtomicBool,
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
            cancelled: AtomicBool::new(false),
            counters: GroupCounters::default(),
            completion: Completion::default(),
        }
    }

    pub(crate) fn stats(&self, started: Option<Instant>) -> QueryStats {
        let c = &self.counters;
        QueryStats {
            queue_wait: started
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
