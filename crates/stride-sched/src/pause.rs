//! Pausing a task set until its consumer catches up (backpressure).
//!
//! A task set whose output goes to a consumer outside the scheduler — a
//! streamed result read by a client over a socket — must not run ahead of
//! it without bound, and its tasks must never block a worker waiting for
//! it (the contract of [`crate::TaskSetWork`]). So a task that finds the
//! consumer behind returns [`crate::TaskOutcome::Paused`] after it kept a
//! [`Resumer`] ([`crate::TaskContext::resumer`]) where the consumer will
//! find it. The worker then *pauses* the slot in its decision core
//! ([`crate::affinity::Reach`]'s `Paused`): the slot stays active (the task
//! set is not dry, its group keeps its slot and its accounting) but is
//! never chosen, and the worker runs other groups' tasks or sleeps.
//!
//! **Resuming.** Once the consumer drained enough, it calls
//! [`Resumer::resume`]: the slot's bit is pushed to every worker's *return
//! mask* ([`crate::masks`]) and every sleeper is woken ([`crate::idle`]). A
//! worker that pulls the bit visits the slot; finding the entry it already
//! knows (same group, same sequence number), it un-pauses it. A push for a
//! slot whose entry changed is an ordinary event 3 or 2 and resets the
//! slot's state anyway.
//!
//! **No lost resume.** The pause decision and the resume are ordered by the
//! consumer's lock (the stream's mutex): a task returns `Paused` only after
//! it saw, under the lock, that the set is paused, and the consumer clears
//! that state under the lock before it pushes. If the resume's critical
//! section came after the task's, its push comes after the task started,
//! hence after the worker's last pull of its masks (workers pull only
//! between tasks): the bit waits in the worker's mask and the worker's next
//! pull — after it paused the slot — un-pauses it. If it came before, the
//! task saw the set not paused (or paused again by another task, whose
//! pause will be resumed in turn). A worker that paused every slot it has
//! falls asleep; the wake after the push reaches it by the idle protocol's
//! argument (the push happens before the wake's epoch bump). Loom checks
//! this over the real masks and `Idle` (tests/loom.rs, (f)), and the same
//! model without the push deadlocks (an ignored, expected-to-fail test).
//!
//! **Cancellation.** A paused slot of a cancelled group is chosen first
//! like any cancelled slot ([`crate::decision`]): the task sees the cancel
//! and the group ends, paused or not.
//!
//! **A paused set never keeps a slot another group waits for.** A paused
//! task set keeps its slot, and a consumer may stay idle for as long as
//! it likes (a cursor nobody fetches from). So a group that has to queue
//! for admission resumes every paused set ([`crate::Scheduler::submit_with`]
//! pushes every slot's return bit), and a task about to pause asks
//! [`Resumer::slot_wanted`] first: while a group waits, the set runs on
//! (its consumer parks what it cannot hold) toward its end, which frees
//! the slot. Which sets the queued group displaces this way is the consumers'
//! rule; the scheduler only guarantees that a pause never blocks
//! admission.
//!
//! **Stale resumes.** A [`Resumer`] names a slot, not an entry: one kept
//! past its group's end may push a bit for the slot's next group, whose
//! workers then at most un-pause a paused task set early — its next task
//! pauses again. It never affects correctness, only costs a task.

use std::sync::{Arc, Weak};

use crate::masks::MaskKind;
use crate::scheduler::Shared;

/// Where a running task's [`Resumer`] would point: borrowed for the task,
/// turned into a `Resumer` only by a task that pauses (no shared write per
/// task).
pub(crate) struct ResumeSource<'a> {
    shared: &'a Arc<Shared>,
    slot: usize,
}

impl<'a> ResumeSource<'a> {
    pub(crate) fn new(shared: &'a Arc<Shared>, slot: usize) -> Self {
        ResumeSource { shared, slot }
    }

    pub(crate) fn resumer(&self) -> Resumer {
        Resumer {
            shared: Arc::downgrade(self.shared),
            slot: self.slot,
        }
    }
}

impl std::fmt::Debug for ResumeSource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeSource")
            .field("slot", &self.slot)
            .finish()
    }
}

/// Un-pauses one slot's task set on every worker (see the module docs).
/// Cheap to clone; holds the scheduler weakly, so a consumer that keeps one
/// keeps no scheduler alive.
#[derive(Clone)]
pub struct Resumer {
    shared: Weak<Shared>,
    slot: usize,
}

impl std::fmt::Debug for Resumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumer").field("slot", &self.slot).finish()
    }
}

impl Resumer {
    /// Makes the paused task set runnable again on every worker: pushes the
    /// slot's return-mask bit to each, then wakes every sleeper. Call it
    /// after the state the task paused on was changed, outside any lock a
    /// task takes.
    pub fn resume(&self) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        shared.masks.push(MaskKind::Return, self.slot);
        shared.idle.wake(shared.config.workers);
    }

    /// Whether a group waits for a slot now: a task set that would pause
    /// should run on instead, so that its slot frees (see the module docs).
    pub fn slot_wanted(&self) -> bool {
        self.shared
            .upgrade()
            .is_some_and(|shared| shared.admission.slot_wanted())
    }
}
