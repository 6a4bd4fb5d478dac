//! The worker loop.
//!
//! ```text
//!        ┌──────────── pick (FIFO, under the queue lock) ◄─────────────┐
//!        │ none: wait on `work_available`                              │
//!        ▼                                                             │
//!   run one task (no lock held; panics caught) ──► task_returned ──────┤
//!                                                  │ last task of an   │
//!                                                  ▼ exhausted set     │
//!                                  finalize (no lock) ──► finalized ───┘
//!                                  (activates next set or completes)
//! ```
//!
//! Workers never block inside a task; they only wait on the condition variable
//! when no task set anywhere can hand out a task.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::queue::AfterTask;
use crate::scheduler::Shared;
use crate::task::{QueryError, TaskContext, TaskOutcome};

pub(crate) fn run(shared: Arc<Shared>, index: usize) {
    if shared.config.pin_workers {
        pin_to_core(index);
    }
    loop {
        let pick = {
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if shared.shutdown.load(Ordering::Relaxed) {
                    return;
                }
                if let Some(pick) = queue.pick() {
                    break pick;
                }
                queue = shared
                    .work_available
                    .wait(queue)
                    .unwrap_or_else(|e| e.into_inner());
            }
        };
        let group = pick.group;
        let after = if pick.run {
            let task_set = &group.task_sets[pick.task_set];
            let mut ctx = TaskContext::new(
                index,
                shared.config.workers,
                shared.config.t_max,
                (&shared.config.morsels, &group.morsel_states[pick.task_set]),
                group.cancelled.load(Ordering::Relaxed),
            );
            let start = Instant::now();
            let result = catch_unwind(AssertUnwindSafe(|| task_set.run_task(&mut ctx)));
            let ran = start.elapsed();
            let c = &group.counters;
            c.cpu_ns.fetch_add(ran.as_nanos() as u64, Ordering::Relaxed);
            c.tasks.fetch_add(1, Ordering::Relaxed);
            c.morsels.fetch_add(ctx.morsels, Ordering::Relaxed);
            c.tuples.fetch_add(ctx.tuples, Ordering::Relaxed);
            let (exhausted, error) = match result {
                Ok(Ok(outcome)) => (outcome == TaskOutcome::Exhausted, None),
                Ok(Err(err)) => (true, Some(QueryError::Failed(err))),
                Err(panic) => (true, Some(QueryError::Panicked(panic_message(&panic)))),
            };
            let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            let after = queue.task_returned(&group, ran, exhausted, error);
            if matches!(after, AfterTask::Continue) && !exhausted {
                // More work may remain for idle workers too.
                shared.work_available.notify_one();
            }
            after
        } else {
            AfterTask::Finalize { failed: true }
        };
        if let AfterTask::Finalize { failed } = after {
            let mut error = None;
            if !failed {
                let start = Instant::now();
                let task_set = &group.task_sets[pick.task_set];
                match catch_unwind(AssertUnwindSafe(|| task_set.finalize())) {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => error = Some(QueryError::Failed(err)),
                    Err(panic) => error = Some(QueryError::Panicked(panic_message(&panic))),
                }
                group
                    .counters
                    .finalize_ns
                    .fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            let done = {
                let mut queue = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
                let done = queue.finalized(&group, error);
                shared.work_available.notify_all();
                done
            };
            if let Some((group, mut sched)) = done {
                let stats = group.stats(sched.started);
                let result = match sched.error.take() {
                    Some(err) => Err(err),
                    None => Ok(stats),
                };
                group.completion.complete(result);
            }
        }
    }
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
