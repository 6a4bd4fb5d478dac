//! The scheduler handle: configuration, worker startup, query submission and
//! shutdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::group::{QueryHandle, ResourceGroup};
use crate::morsel::{AdaptiveMorsels, MorselPolicy};
use crate::policy::{GroupFacts, Policy};
use crate::queue::RunQueue;
use crate::task::{QueryError, TaskSetWork};
use crate::worker;

/// Scheduler settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Number of worker threads (one per core is the intended setting).
    pub workers: usize,
    /// Pin worker `i` to core `i mod cores` with `sched_setaffinity`.
    pub pin_workers: bool,
    /// Target task duration `t_max` (seed 001 §3.1: 2 ms).
    pub t_max: Duration,
    /// How tasks size their morsels.
    pub morsels: MorselPolicy,
    /// Which runnable resource group a worker serves next.
    pub policy: Policy,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            pin_workers: true,
            t_max: Duration::from_millis(2),
            morsels: MorselPolicy::Adaptive(AdaptiveMorsels::default()),
            policy: Policy::default(),
        }
    }
}

/// State shared by the scheduler handle and its workers.
pub(crate) struct Shared {
    pub(crate) config: SchedulerConfig,
    pub(crate) queue: Mutex<RunQueue>,
    /// Signalled (under `queue`) when a group arrives or a task set becomes
    /// runnable, and on shutdown.
    pub(crate) work_available: Condvar,
    /// Set once by [`Scheduler::drop`]; workers read it under `queue`, so the
    /// mutex orders it — Relaxed suffices.
    pub(crate) shutdown: AtomicBool,
}

/// A pool of workers running resource groups.
pub struct Scheduler {
    shared: Arc<Shared>,
    next_id: AtomicU64,
    workers: Vec<JoinHandle<()>>,
}

impl Scheduler {
    pub fn new(config: SchedulerConfig) -> Self {
        let mut config = config;
        config.workers = config.workers.max(1);
        if let MorselPolicy::Fixed(n) = &mut config.morsels {
            *n = (*n).max(1);
        }
        let queue = RunQueue::new(config.policy.clone(), config.t_max);
        let shared = Arc::new(Shared {
            config,
            queue: Mutex::new(queue),
            work_available: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let workers = (0..shared.config.workers)
            .map(|index| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("stride-worker-{index}"))
                    .spawn(move || worker::run(shared, index))
                    .expect("failed to spawn a worker thread")
            })
            .collect();
        Scheduler {
            shared,
            next_id: AtomicU64::new(1),
            workers,
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.shared.config
    }

    /// Number of resource groups admitted and not yet completed.
    pub fn active_groups(&self) -> usize {
        self.shared.queue.lock().map(|q| q.len()).unwrap_or(0)
    }

    /// The policy workers currently follow (it may differ from
    /// `config().policy` after [`Scheduler::set_policy`]).
    pub fn policy(&self) -> Policy {
        let queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.policy().clone()
    }

    /// Switches the policy at run time (settings, self-tuning): from the next
    /// scheduling decision on, every worker follows `policy`.
    pub fn set_policy(&self, policy: Policy) {
        let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.set_policy(policy);
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
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let group = Arc::new(ResourceGroup::new(id, task_sets, facts));
        if group.task_sets.is_empty() {
            group.completion.complete(Ok(group.stats(None)));
            return QueryHandle { group };
        }
        let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if self.shared.shutdown.load(Ordering::Relaxed) {
            group.completion.complete(Err(QueryError::Shutdown));
        } else {
            queue.push(group.clone());
            self.shared.work_available.notify_all();
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
        let pending = {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::Relaxed);
            self.shared.work_available.notify_all();
            queue.drain()
        };
        for group in pending {
            group.completion.complete(Err(QueryError::Shutdown));
        }
        for handle in self.workers.drain(..) {
            let _ = handle.join();
        }
    }
}
