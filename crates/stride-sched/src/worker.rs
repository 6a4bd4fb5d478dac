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

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StdOrdering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::group::{ResourceGroup, TaskSetEntry};
use crate::local::LocalState;
use crate::masks::MaskKind;
use crate::overhead::DecisionClock;
use crate::pins::Coordination;
use crate::scheduler::Shared;
use crate::slots::{SlotArray, SlotRead};
use crate::sync::{lock, Ordering};
use crate::task::{QueryError, TaskContext, TaskOutcome};

pub(crate) fn run(shared: Arc<Shared>, index: usize) {
    if shared.config.pin_workers {
        pin_to_core(index);
    }
    let mut local = LocalState::new(
        shared.slots.len(),
        shared.config.workers,
        lock(&shared.policy).clone(),
        index,
    );
    let mut clock = shared
        .measure
        .as_ref()
        .map(|log| DecisionClock::new(log.clone(), index));
    let mut flagged: Vec<usize> = Vec::new();
    loop {
        let epoch = shared.idle.epoch();
        if shared.idle.is_shutdown() {
            return;
        }
        sync_policy(&shared, &mut local);
        shared
            .masks
            .pull(index, |_kind: MaskKind, slot| flagged.push(slot));
        for slot in flagged.drain(..) {
            visit(&shared, &mut local, index, slot, &mut clock);
        }
        let Some(k) = local.choose() else {
            if let Some(c) = &mut clock {
                c.interrupted();
            }
            shared.idle.sleep(epoch);
            continue;
        };
        match shared.pins.pin(index, &shared.slots, k) {
            SlotRead::Empty => local.forget(k),
            SlotRead::Exhausted => local.deactivate(k),
            SlotRead::Active(entry) => {
                // SAFETY: we are pinned to slot `k` and read `entry` untagged,
                // so it stays alive until our unpin below (crate::pins).
                let e = unsafe { entry.as_ref() };
                if local.knows(k, e) {
                    run_task(&shared, &mut local, index, k, entry, &mut clock);
                } else {
                    local.learn(k, e);
                }
            }
        }
        leave(&shared, index, &mut clock);
    }
}

/// Re-reads the policy after [`crate::Scheduler::set_policy`]. The Acquire
/// load pairs with the Release increment in `set_policy`; the mutex orders
/// the policy itself.
fn sync_policy(shared: &Shared, local: &mut LocalState) {
    let epoch = shared.policy_epoch.load(Ordering::Acquire);
    if epoch != local.policy_epoch {
        local.policy = lock(&shared.policy).clone();
        local.policy_epoch = epoch;
    }
}

/// A mask bit for slot `k` was pulled: brings the local view up to date.
fn visit(
    shared: &Shared,
    local: &mut LocalState,
    index: usize,
    k: usize,
    clock: &mut Option<DecisionClock>,
) {
    match shared.pins.pin(index, &shared.slots, k) {
        SlotRead::Empty => local.forget(k),
        SlotRead::Exhausted => local.deactivate(k),
        SlotRead::Active(entry) => {
            // SAFETY: pinned to `k`, read untagged: alive until the unpin.
            local.learn(k, unsafe { entry.as_ref() });
        }
    }
    leave(shared, index, clock);
}

/// Unpins; finalizes the entry if this was its last deregistration.
fn leave(shared: &Shared, index: usize, clock: &mut Option<DecisionClock>) {
    if let Some(done) = shared.pins.unpin(index) {
        if let Some(c) = clock {
            c.interrupted();
        }
        finalize(shared, done);
    }
}

/// Runs one task of `entry` (pinned, known to the local view), charges it,
/// and coordinates the finalization if the task set is dry or failed.
fn run_task(
    shared: &Shared,
    local: &mut LocalState,
    index: usize,
    k: usize,
    entry: NonNull<TaskSetEntry>,
    clock: &mut Option<DecisionClock>,
) {
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
        let result;
        let mut ctx = TaskContext::new(
            index,
            shared.config.workers,
            shared.config.t_max,
            (&shared.config.morsels, &group.morsel_states[e.task_set]),
            group.is_cancelled(),
        );
        {
            let task_set = &group.task_sets[e.task_set];
            if let Some(c) = clock {
                c.task_starts();
            }
            let start = Instant::now();
            result = catch_unwind(AssertUnwindSafe(|| task_set.run_task(&mut ctx)));
            ran = start.elapsed();
        }
        account(group, ran, &ctx);
        local.charge(k, ran, shared.config.t_max);
        let outcome = match result {
            Ok(Ok(outcome)) => (outcome == TaskOutcome::Exhausted, None),
            Ok(Err(err)) => (true, Some(QueryError::Failed(err))),
            Err(panic) => (true, Some(QueryError::Panicked(panic_message(&panic)))),
        };
        if let Some(c) = clock {
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
            // Unreachable while we are pinned (we mark ourselves), handled
            // for completeness: nobody else will deregister.
            Coordination::Finalize(done) => {
                if let Some(c) = clock {
                    c.interrupted();
                }
                finalize(shared, done);
            }
        }
    }
}

fn account(group: &ResourceGroup, ran: Duration, ctx: &TaskContext<'_>) {
    let c = &group.counters;
    c.cpu_ns
        .fetch_add(ran.as_nanos() as u64, StdOrdering::Relaxed);
    c.tasks.fetch_add(1, StdOrdering::Relaxed);
    c.morsels.fetch_add(ctx.morsels, StdOrdering::Relaxed);
    c.tuples.fetch_add(ctx.tuples, StdOrdering::Relaxed);
}

/// The caller brought `done`'s finalization counter to zero: every task of
/// the entry has returned and nobody else can reach it. Runs `finalize`
/// (unless the group failed or was cancelled), then puts the group's next
/// task set into the same slot (return mask), or completes the group and
/// hands the slot to the next waiting group (change mask) or back to
/// admission. Finally frees the entry.
fn finalize(shared: &Shared, done: NonNull<TaskSetEntry>) {
    // SAFETY: we are the entry's finalizer; it is freed only at the end of
    // this function, by us.
    let entry = unsafe { done.as_ref() };
    let group = &entry.group;
    if group.is_cancelled() {
        group.fail(QueryError::Cancelled);
    }
    if !group.has_failed() {
        let start = Instant::now();
        let task_set = &group.task_sets[entry.task_set];
        match catch_unwind(AssertUnwindSafe(|| task_set.finalize())) {
            Ok(Ok(())) => {}
            Ok(Err(err)) => group.fail(QueryError::Failed(err)),
            Err(panic) => group.fail(QueryError::Panicked(panic_message(&panic))),
        }
        group
            .counters
            .finalize_ns
            .fetch_add(start.elapsed().as_nanos() as u64, StdOrdering::Relaxed);
    }
    let next = entry.task_set + 1;
    if !group.has_failed() && !group.is_cancelled() && next < group.task_sets.len() {
        let next = TaskSetEntry::new(group.clone(), next, entry.slot, entry.arrival);
        shared.slots.install(entry.slot, Box::new(next));
        shared.masks.push(MaskKind::Return, entry.slot);
        shared.idle.wake();
    } else {
        if group.is_cancelled() {
            group.fail(QueryError::Cancelled);
        }
        shared.release_slot(entry.slot);
        group.complete();
    }
    // SAFETY: `done` is no longer in its slot (replaced or cleared above), we
    // are its finalizer, and no other worker can dereference it any more
    // (crate::pins); it is reclaimed once, here.
    unsafe { SlotArray::reclaim(done) };
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

/// Pins the calling thread to core `index mod cores`. Failure (e.g. a
/// restricted cpuset) is ignored: pinning is an optimisation, not a contract.
fn pin_to_core(index: usize) {
    #[cfg(target_os = "linux")]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: `cpu_set_t` is plain data, zero is a valid (empty) set, and
        // CPU_SET writes within it for any core index below CPU_SETSIZE, which
        // `index % cores` is on every machine Linux supports.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(index % cores, &mut set);
            let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = index;
}
