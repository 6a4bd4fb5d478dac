//! The run queue; the policy ([`crate::policy`]) picks among its groups.
//!
//! Protocol: all active resource groups sit in one queue in arrival order,
//! behind one mutex. A worker picking work locks the queue, walks it from the
//! front and takes the first group whose active task set still hands out tasks
//! (not exhausted, not finalizing); it increments that group's `running` count
//! before releasing the lock. When a task returns, the worker locks again,
//! decrements `running`, and if the set is exhausted and no task of it is
//! running any more, it becomes the *finalizer*: it sets `finalizing`, runs
//! `finalize` outside the lock, and then activates the next task set (or
//! completes the group and removes it from the queue).
//!
//! Why each task set is finalized exactly once: `finalizing` is set under the
//! lock by the worker that observes `exhausted && running == 0 && !finalizing`;
//! `running` cannot rise again while `exhausted` is set, so no other worker can
//! observe the condition until `finalizing` is cleared by the next activation.
//!
//! Which runnable group a worker takes is the policy's choice: FIFO (seed
//! 001's baseline, work-conserving: a later query gets workers only when
//! earlier ones cannot use them), fair or decaying-priority stride scheduling.
//! The lock-free stride core of seed 001 §2.3 replaces this module in the
//! scheduler issue; the contract in [`crate::task`] does not change.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crate::group::{GroupSched, ResourceGroup};
use crate::policy::{Policy, RankContext, Rng, StrideState};
use crate::task::QueryError;

pub(crate) struct Entry {
    pub(crate) group: Arc<ResourceGroup>,
    pub(crate) sched: GroupSched,
    pub(crate) stride: StrideState,
}

/// Active resource groups in arrival order.
pub(crate) struct RunQueue {
    entries: VecDeque<Entry>,
    policy: Policy,
    t_max: Duration,
    /// Smallest pass among the active groups when the queue last changed:
    /// the pass a newly arriving group starts with.
    virtual_time: f64,
    /// Admission counter: the `arrival` of the next group.
    arrivals: u64,
    /// Random stream of randomized policies (lottery).
    rng: Rng,
}

/// A task the FIFO policy picked for a worker.
pub(crate) struct Pick {
    pub(crate) group: Arc<ResourceGroup>,
    pub(crate) task_set: usize,
    /// `false`: the group was cancelled and has no running task; the worker
    /// completes it without running anything.
    pub(crate) run: bool,
}

/// What the worker must do after returning a task.
pub(crate) enum AfterTask {
    /// Nothing: other tasks of the set are still running or it has more work.
    Continue,
    /// This worker is the finalizer of the group's active task set; it calls
    /// `finalize` unless the group already failed.
    Finalize { failed: bool },
}

impl RunQueue {
    pub(crate) fn new(policy: Policy, t_max: Duration) -> Self {
        RunQueue {
            entries: VecDeque::new(),
            policy,
            t_max,
            virtual_time: 0.0,
            arrivals: 0,
            rng: Rng::new(0x5EED),
        }
    }

    /// Replaces the policy; groups keep their state and are ranked by the
    /// new policy from the next decision on.
    pub(crate) fn set_policy(&mut self, policy: Policy) {
        self.policy = policy;
    }

    pub(crate) fn policy(&self) -> &Policy {
        &self.policy
    }

    pub(crate) fn push(&mut self, group: Arc<ResourceGroup>) {
        if let Some(min) = self.entries.iter().map(|e| e.stride.pass).reduce(f64::min) {
            self.virtual_time = self.virtual_time.max(min);
        }
        let stride =
            StrideState::enter(&self.policy, &group.facts, self.arrivals, self.virtual_time);
        self.arrivals += 1;
        self.entries.push_back(Entry {
            group,
            sched: GroupSched::default(),
            stride,
        });
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The policy's choice among the groups whose active task set can start a
    /// task: the smallest [`StrideState::rank`] (the earlier arrival on ties).
    /// A cancelled group found on the way is failed; if none of its tasks
    /// runs, the caller completes it.
    pub(crate) fn pick(&mut self) -> Option<Pick> {
        let policy = &self.policy;
        let mut ctx = RankContext {
            active_groups: self.entries.len(),
            workers: 0,
            rng: &mut self.rng,
        };
        // (index, rank) of the best runnable group so far.
        let mut best: Option<(usize, f64)> = None;
        for (i, entry) in self.entries.iter_mut().enumerate() {
            let s = &mut entry.sched;
            if s.exhausted || s.finalizing {
                continue;
            }
            if entry
                .group
                .cancelled
                .load(std::sync::atomic::Ordering::Relaxed)
            {
                s.error.get_or_insert(QueryError::Cancelled);
                s.exhausted = true;
                if s.running == 0 {
                    // No task of the set is running, so nobody else will
                    // finalize: this worker completes the cancelled group.
                    s.finalizing = true;
                    return Some(Pick {
                        group: entry.group.clone(),
                        task_set: s.active,
                        run: false,
                    });
                }
                continue;
            }
            let rank = entry.stride.rank(policy, &mut ctx);
            match best {
                Some((_, best_rank)) if rank >= best_rank => {}
                _ => best = Some((i, rank)),
            }
        }
        let entry = &mut self.entries[best?.0];
        let s = &mut entry.sched;
        s.running += 1;
        s.started.get_or_insert_with(std::time::Instant::now);
        Some(Pick {
            group: entry.group.clone(),
            task_set: s.active,
            run: true,
        })
    }

    /// Returns a task of `group`'s active set that ran for `ran`. `exhausted`
    /// is whether the task found the set dry; `error` an error it raised.
    pub(crate) fn task_returned(
        &mut self,
        group: &ResourceGroup,
        ran: Duration,
        exhausted: bool,
        error: Option<QueryError>,
    ) -> AfterTask {
        let Some(pos) = self.entries.iter().position(|e| e.group.id == group.id) else {
            return AfterTask::Continue;
        };
        let entry = &mut self.entries[pos];
        entry.stride.charge(&self.policy, ran, self.t_max);
        let s = &mut entry.sched;
        s.running -= 1;
        if let Some(err) = error {
            s.error.get_or_insert(err);
        }
        if exhausted || s.error.is_some() {
            s.exhausted = true;
        }
        if s.exhausted && s.running == 0 && !s.finalizing {
            s.finalizing = true;
            AfterTask::Finalize {
                failed: s.error.is_some(),
            }
        } else {
            AfterTask::Continue
        }
    }

    /// Called by the finalizer after `finalize` returned. Activates the next
    /// task set, or removes the group and returns it with its final state.
    pub(crate) fn finalized(
        &mut self,
        group: &ResourceGroup,
        error: Option<QueryError>,
    ) -> Option<(Arc<ResourceGroup>, GroupSched)> {
        let pos = self.entries.iter().position(|e| e.group.id == group.id)?;
        let entry = &mut self.entries[pos];
        let task_sets = entry.group.task_sets.len();
        let s = &mut entry.sched;
        if let Some(err) = error {
            s.error.get_or_insert(err);
        }
        if s.error.is_none() && s.active + 1 < task_sets {
            s.active += 1;
            entry
                .stride
                .task_set_activated(&self.policy, s.active, self.virtual_time);
            s.exhausted = false;
            s.finalizing = false;
            None
        } else {
            let entry = self.entries.remove(pos)?;
            Some((entry.group, entry.sched))
        }
    }

    /// Removes every group (scheduler shutdown).
    pub(crate) fn drain(&mut self) -> Vec<Arc<ResourceGroup>> {
        self.entries.drain(..).map(|e| e.group).collect()
    }
}
