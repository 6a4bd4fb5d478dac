//! The worker loop: thread-local decisions over the lock-free core.
//!
//! ```text
//!   ┌─► read idle epoch, re-read the policy if its epoch changed
//!   │   pull update masks ──► visit each flagged slot (pin, learn, unpin)
//!   │   choose the active slot of smallest rank (local state only)
//!   │     none: sleep until woken (crate::idle)
//!   │   pin the slot, read its pointer
//!   │     empty / tagged: deactivate locally, unpin
//!   │     an entry not yet known: learn it, unpin
//!   │     the known entry: run one task (panics caught), charge the local
//!   │       pass; dry or failed: coordinate (tag, mark pinned workers)
//!   │   unpin ──► last deregistration: finalize, then install the next task
//!   └──────────── set (return mask) or release the slot (admission, change mask)
//! ```
//!
//! Workers never block inside a task; they sleep only when no slot they know
//! is runnable. The protocol's proof sketch is in the crate's README and in
//! [`crate::pins`].
//!
//! Besides the protocol, a worker keeps (all off the decision path unless
//! enabled), reported through [`crate::observe`]: its statistics ([`WorkerCounters`], plain Relaxed counters only
//! it writes), its trace buffer ([`crate::trace`], when a tracer is
//! configured) and, on worker 0 with self-tuning on, the tracking schedule
//! ([`crate::tuning::TuningDriver`]): tracking records each task; tuning
//! runs between decisions, unpinned.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::decision::{DecisionCore, SlotState};
use crate::group::{ResourceGroup, TaskSetEntry};
use crate::masks::MaskKind;
use crate::observe::{Observers, Span, TaskEnd, WorkerCounters};
use crate::os_thread::{self, OsSetup};
use crate::overhead::DecisionClock;
use crate::pins::Coordination;
use crate::scheduler::Shared;
use crate::slots::{SlotArray, SlotRead};
use crate::sync::{lock, Ordering};
use crate::task::{FinalizeContext, FollowUps, QueryError, TaskContext, TaskOutcome, TaskSetWork};
use crate::thread_cpu;
use crate::trace::WorkerTrace;
use crate::tuning::{tune, TuningDriver};

/// What one worker has done since the scheduler started
/// ([`crate::Scheduler::worker_stats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    pub worker: usize,
    /// Tasks run (including tasks that failed or panicked).
    pub tasks: u64,
    /// Time spent running tasks and finalization steps.
    pub busy: Duration,
    /// Times the worker went to sleep for lack of runnable work.
    pub idle_sleeps: u64,
    /// Task sets this worker finalized (it was the last to deregister).
    pub finalizations: u64,
    /// Tasks that ended at a preemption point, before `t_max`
    /// ([`crate::TaskContext::next_morsel`]).
    pub preemptions: u64,
    /// Tasks run with short morsels while a better-ranked group was between
    /// two task sets ([`crate::SchedulerConfig::handover_morsel`]).
    pub handover_tasks: u64,
    /// Morsels this worker processed, by where their data lived
    /// ([`crate::MorselPlace`]; sources over placed blocks only).
    pub places: crate::PlaceCounts,
    /// Tasks run as a thief: chosen from the steal tier after the worker's
    /// node ran dry ([`crate::affinity`]).
    pub steal_tasks: u64,
    /// The OS thread's core, nice value and time slice, as the kernel holds
    /// them ([`crate::os_thread`]); default until the worker has started.
    pub os: OsSetup,
}

/// One worker thread's state.
struct Worker {
    shared: Arc<Shared>,
    index: usize,
    local: DecisionCore,
    clock: Option<DecisionClock>,
    observers: Observers,
}

pub(crate) fn run(shared: Arc<Shared>, index: usize) {
    let os = os_thread::setup_worker_thread(
        shared
            .config
            .pin_workers
            .then(|| shared.config.topology.cpu_of_worker(index)),
        shared.config.worker_os_priority,
        shared.config.worker_os_slice,
    );
    let _ = shared.worker_counters[index].os.set(os);
    let mut local = DecisionCore::new(
        shared.slots.len(),
        shared.config.workers,
        lock(&shared.policy).clone(),
        index,
    );
    local.set_slice(shared.config.slice, shared.config.t_max);
    let clock = shared
        .measure
        .as_ref()
        .map(|log| DecisionClock::new(log.clone(), index));
    let trace = shared
        .config
        .trace
        .as_ref()
        .map(|tracer| WorkerTrace::new(tracer, index));
    let tuning = match (&shared.config.tuning, index) {
        (Some(config), 0) => Some(TuningDriver::new(
            config,
            shared.config.t_max,
            shared.config.slice,
        )),
        _ => None,
    };
    Worker {
        shared,
        index,
        local,
        clock,
        observers: Observers::new(index, trace, tuning),
    }
    .run();
}

impl Worker {
    fn counters(&self) -> &WorkerCounters {
        &self.shared.worker_counters[self.index]
    }

    fn run(&mut self) {
        let mut flagged: Vec<usize> = Vec::new();
        loop {
            let epoch = self.shared.idle.epoch();
            if self.shared.idle.is_shutdown() {
                return;
            }
            self.sync_policy();
            if self.observers.tuning().is_some() {
                self.tuning_step();
            }
            let index = self.index;
            self.shared
                .masks
                .pull(index, |_kind: MaskKind, slot| flagged.push(slot));
            for slot in flagged.drain(..) {
                self.visit(slot);
            }
            // Acquire: pairs with the Release bump in `QueryHandle::cancel`,
            // after which the group's flag is visible to the rescan.
            self.local
                .note_cancellations(self.shared.cancel_epoch.load(StdOrdering::Acquire));
            let Some(k) = self.local.choose() else {
                if let Some(c) = &mut self.clock {
                    c.interrupted();
                }
                WorkerCounters::add(&self.counters().idle_sleeps, 1);
                self.shared.idle.sleep(epoch);
                continue;
            };
            match self.shared.pins.pin(index, &self.shared.slots, k) {
                SlotRead::Empty => {
                    self.local.confirm(k, SlotState::Empty);
                }
                SlotRead::Exhausted => {
                    self.local.confirm(k, SlotState::Exhausted);
                }
                SlotRead::Active(entry) => {
                    // SAFETY: we are pinned to slot `k` and read `entry`
                    // untagged, so it stays alive until our unpin below
                    // (crate::pins).
                    let e = unsafe { entry.as_ref() };
                    if self.local.confirm(k, SlotState::Active(e.view())) {
                        self.run_task(k, entry);
                    }
                }
            }
            self.leave();
        }
    }

    /// Re-reads the policy after [`crate::Scheduler::set_policy`]. The
    /// Acquire load pairs with the Release increment in `set_policy`; the
    /// mutex orders the policy itself.
    fn sync_policy(&mut self) {
        let epoch = self.shared.policy_epoch.load(Ordering::Acquire);
        if epoch != self.local.policy_epoch {
            let policy = lock(&self.shared.policy).clone();
            self.local.set_policy(policy);
            self.local.policy_epoch = epoch;
        }
    }

    /// Self-tuning on worker 0 (unpinned, between decisions): attaches the
    /// tracker at the start of a refresh period; when the tracking window is
    /// over, tunes the decay parameters on the tracked workload and pushes
    /// them.
    fn tuning_step(&mut self) {
        let Some(driver) = self.observers.tuning() else {
            return;
        };
        let now = self.shared.started.elapsed();
        let start = self.local.policy().decay().cloned();
        let Some(workload) = driver.poll(now, start.is_some()) else {
            return;
        };
        let Some(start) = start else {
            return;
        };
        let refresh = driver.refresh();
        if let Some(c) = &mut self.clock {
            c.interrupted();
        }
        let result = tune(&workload, &start);
        let processing = refresh.as_secs_f64() * self.shared.config.workers as f64;
        let report = crate::tuning::TuningReport {
            at: self.shared.started.elapsed(),
            params_before: start,
            params_after: result.params.clone(),
            cost_before: result.cost_before,
            cost_after: result.cost_after,
            evaluations: result.evaluations,
            elapsed: result.elapsed,
            share_of_processing: result.elapsed.as_secs_f64() / processing.max(1e-12),
            groups: workload.groups.len(),
        };
        self.shared.push_tuning(result.params, report);
    }

    /// A mask bit for slot `k` was pulled: brings the local view up to date.
    fn visit(&mut self, k: usize) {
        match self.shared.pins.pin(self.index, &self.shared.slots, k) {
            SlotRead::Empty => self.local.visit(k, SlotState::Empty),
            SlotRead::Exhausted => self.local.visit(k, SlotState::Exhausted),
            SlotRead::Active(entry) => {
                // SAFETY: pinned to `k`, read untagged: alive until the unpin.
                let e = unsafe { entry.as_ref() };
                self.local.visit(k, SlotState::Active(e.view()));
            }
        }
        self.leave();
    }

    /// Unpins; finalizes the entry if this was its last deregistration.
    fn leave(&mut self) {
        if let Some(done) = self.shared.pins.unpin(self.index) {
            if let Some(c) = &mut self.clock {
                c.interrupted();
            }
            self.finalize(done);
        }
    }

    /// Runs one task of `entry` (pinned, known to the local view), charges
    /// it, and coordinates the finalization if the task set is dry or failed.
    fn run_task(&mut self, k: usize, entry: NonNull<TaskSetEntry>) {
        let shared = &*self.shared;
        // SAFETY: the caller is pinned to `k` and read `entry` untagged.
        let e = unsafe { entry.as_ref() };
        let group = &e.group;
        let (exhausted, error) = if group.is_cancelled() {
            (true, Some(QueryError::Cancelled))
        } else if group.has_failed() {
            (true, None)
        } else {
            group.started.get_or_init(Instant::now);
            let ran;
            let start;
            let usage_start;
            let result;
            // A better group between two task sets will want this worker
            // back soon: short morsels, so that the preemption point after
            // its next task set's arrival comes within one of them.
            let handover = shared
                .config
                .handover_morsel
                .filter(|_| shared.config.preemption && self.local.handover_pending(k));
            let mut ctx = TaskContext::new(
                self.index,
                shared.config.workers,
                shared.config.t_max,
                (&shared.config.morsels, &e.morsels),
                &group.cancelled,
                shared.config.preemption.then_some(&shared.masks),
            )
            .with_morsel_cap(handover)
            .with_node(
                shared.config.topology.worker_node(self.index),
                &shared.staffed,
            )
            .with_stealing(self.local.stealing(k))
            .with_resume(&self.shared, k);
            {
                let task_set = &e.work;
                if let Some(c) = &mut self.clock {
                    c.task_starts();
                }
                usage_start = self.observers.tracing().then(thread_cpu::now).flatten();
                start = Instant::now();
                let measured = shared.config.clock.start_at(start);
                result = catch_unwind(AssertUnwindSafe(|| task_set.run_task(&mut ctx)));
                ran = shared.config.clock.since(measured);
            }
            self.local.charge(k, ran, shared.config.t_max);
            self.observers.task_ended(
                shared,
                &TaskEnd {
                    group,
                    stage: e.stage,
                    entry: e.seq,
                    start,
                    ran,
                    usage: thread_cpu::since(usage_start),
                    ctx: &ctx,
                    priority: self.local.priority(k),
                    handover: handover.is_some(),
                },
            );
            let outcome = match result {
                Ok(Ok(TaskOutcome::NodeDry(affinity))) => {
                    // Other nodes still hold morsels: this worker steps
                    // back (crate::affinity), and every sleeper looks, so
                    // that the nodes holding them are staffed.
                    self.local.node_dry(k, affinity);
                    shared.idle.wake(shared.config.workers);
                    (false, None)
                }
                Ok(Ok(TaskOutcome::Held)) => {
                    // Work handed out may come back, to the workers that
                    // hold it: this one steps back until the next entry.
                    self.local.held(k);
                    (false, None)
                }
                Ok(Ok(TaskOutcome::Paused)) => {
                    // The consumer is behind: not chosen again until it
                    // resumes the set (crate::pause).
                    self.local.paused(k);
                    group.counters.pauses.fetch_add(1, StdOrdering::Relaxed);
                    (false, None)
                }
                Ok(Ok(outcome)) => (outcome == TaskOutcome::Exhausted, None),
                Ok(Err(err)) => (true, Some(QueryError::Failed(err))),
                Err(panic) => (true, Some(QueryError::Panicked(panic_message(&panic)))),
            };
            if let Some(c) = &mut self.clock {
                c.task_ended(!outcome.0);
            }
            outcome
        };
        if let Some(err) = error {
            group.fail(err);
        }
        if exhausted {
            match shared.pins.coordinate(&shared.slots, k, entry) {
                Coordination::NotFirst | Coordination::Coordinated => {}
                // Unreachable while we are pinned (we mark ourselves),
                // handled for completeness: nobody else will deregister.
                Coordination::Finalize(done) => {
                    if let Some(c) = &mut self.clock {
                        c.interrupted();
                    }
                    self.finalize(done);
                }
            }
        }
    }

    /// The caller brought `done`'s finalization counter to zero: every task
    /// of the entry has returned and nobody else can reach it. Runs
    /// `finalize` (unless the group failed or was cancelled), then puts the
    /// group's next task set — the first follow-up pending, else the next
    /// planned one — into the same slot (return mask), or completes the
    /// group and hands the slot to the next waiting group (change mask) or
    /// back to admission. Finally frees the entry.
    fn finalize(&mut self, done: NonNull<TaskSetEntry>) {
        let shared = &*self.shared;
        // SAFETY: we are the entry's finalizer; it is freed only at the end
        // of this function, by us.
        let entry = unsafe { done.as_ref() };
        let group = &entry.group;
        if group.is_cancelled() {
            group.fail(QueryError::Cancelled);
        }
        let mut follow_ups = FollowUps::new();
        let mut ran = None;
        if !group.has_failed() {
            let usage_start = self.observers.tracing().then(thread_cpu::now).flatten();
            let start = Instant::now();
            let cx = FinalizeContext::new(&group.cancelled);
            match catch_unwind(AssertUnwindSafe(|| entry.work.finalize(&cx))) {
                Ok(Ok(emitted)) => follow_ups = emitted,
                Ok(Err(err)) => group.fail(QueryError::Failed(err)),
                Err(panic) => group.fail(QueryError::Panicked(panic_message(&panic))),
            }
            ran = Some(Span {
                start,
                end: Instant::now(),
                usage: thread_cpu::since(usage_start),
            });
        }
        self.observers.finalized(shared, entry, ran);
        let next = if group.has_failed() || group.is_cancelled() {
            None
        } else {
            next_task_set(group, entry.stage, follow_ups)
        };
        match next {
            Some((stage, work)) => {
                let next = TaskSetEntry::new(
                    group.clone(),
                    work.clone(),
                    stage,
                    entry.slot,
                    entry.arrival,
                );
                shared.binding().install_next(entry.slot, Box::new(next));
                shared.wake_for(&*work, true);
            }
            None => {
                if group.is_cancelled() {
                    group.fail(QueryError::Cancelled);
                }
                shared.release_slot(entry.slot);
                group.complete();
            }
        }
        // SAFETY: `done` is no longer in its slot (replaced or cleared
        // above), we are its finalizer, and no other worker can dereference
        // it any more (crate::pins); it is reclaimed once, here.
        unsafe { SlotArray::reclaim(done) };
    }
}

/// The task set that follows a finalization of stage `stage` which emitted
/// `emitted`: the emitted ones run first, in order (ahead of follow-ups
/// emitted earlier and not yet run), then the next planned stage. `None`:
/// the group is done.
fn next_task_set(
    group: &ResourceGroup,
    stage: usize,
    emitted: FollowUps,
) -> Option<(usize, Arc<dyn TaskSetWork>)> {
    let mut pending = group.follow_ups.lock().unwrap_or_else(|e| e.into_inner());
    for work in emitted.into_iter().rev() {
        pending.push_front((stage, work));
    }
    if let Some(next) = pending.pop_front() {
        group.counters.follow_ups.fetch_add(1, StdOrdering::Relaxed);
        return Some(next);
    }
    let planned = stage + 1;
    group
        .task_sets
        .get(planned)
        .map(|work| (planned, work.clone()))
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}
