//! Split finalizations: a breaker's merge as a task set of parts.
//!
//! A sink's [`crate::operator::Sink::finish`] runs once, on one worker,
//! after the last task of its pipeline. Work proportional to the input done
//! there (sorting every row, concatenating a build side) is a step no newly
//! arrived query can preempt. So a sink may instead return [`Steps`]: each
//! a [`SplitStep`] of independent *parts*, run as one task set of its own
//! before the query's next pipeline (the scheduler's follow-ups,
//! `stride_sched::FollowUps`). A part is one morsel: any worker takes the
//! next part from an atomic cursor, and between parts the task checks its
//! time slice and the preemption point like any pipeline's task. When every
//! part ran, the step's own [`SplitStep::finish`] runs (short: it only
//! plans the next step) and may return further steps.
//!
//! ```text
//!   pipeline ─► Sink::finish ─► [step A: part 0 | part 1 | … ] ─► A.finish
//!                                                                   │
//!        next pipeline ◄─ … ◄─ [step B: part 0 | part 1 | … ] ◄─────┘
//! ```
//!
//! Operators only describe parts; [`StepTaskSet`] is the one place that
//! turns them into scheduler work.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use stride_sched::{FinalizeContext, FollowUps, TaskContext, TaskError, TaskOutcome, TaskSetWork};

use crate::error::Result;

/// Steps a finalization leaves to run, in order.
pub type Steps = Vec<Arc<dyn SplitStep>>;

/// One step of a split finalization: `parts()` independent pieces of work.
pub trait SplitStep: Send + Sync + fmt::Debug {
    /// For traces and EXPLAIN (e.g. `sort: merge key ranges`).
    fn name(&self) -> String;
    /// Number of parts; fixed once the step exists.
    fn parts(&self) -> usize;
    /// Runs part `part` (each exactly once, on any worker, concurrently
    /// with other parts); returns the rows it handled (morsel statistics).
    fn run_part(&self, part: usize, worker: usize) -> Result<usize>;
    /// Runs once after every part returned; may plan further steps.
    fn finish(&self) -> Result<Steps> {
        Ok(Steps::new())
    }
}

/// `step` as the steps a finalization returns, or — when `small`, too
/// little work for a task set of its own — run at once on the finalizing
/// worker (its parts, then its finish, whose steps are returned).
pub fn split_unless_small(step: Arc<dyn SplitStep>, small: bool) -> Result<Steps> {
    if !small {
        return Ok(vec![step]);
    }
    for part in 0..step.parts() {
        step.run_part(part, 0)?;
    }
    step.finish()
}

/// A [`SplitStep`] as a task set: one part per morsel.
pub struct StepTaskSet {
    step: Arc<dyn SplitStep>,
    parts: usize,
    /// Parts handed out so far. A part is taken by `fetch_add` and run by
    /// the taker alone; nothing is published through the counter (Relaxed):
    /// the parts' effects reach the step's `finish` through the scheduler's
    /// finalization protocol.
    cursor: AtomicUsize,
}

impl StepTaskSet {
    pub fn new(step: Arc<dyn SplitStep>) -> Self {
        StepTaskSet {
            parts: step.parts(),
            step,
            cursor: AtomicUsize::new(0),
        }
    }

    /// The steps as follow-up task sets.
    pub fn follow_ups(steps: Steps) -> FollowUps {
        steps
            .into_iter()
            .map(|s| Arc::new(StepTaskSet::new(s)) as Arc<dyn TaskSetWork>)
            .collect()
    }
}

impl fmt::Debug for StepTaskSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StepTaskSet")
            .field("step", &self.step.name())
            .field("parts", &self.parts)
            .finish()
    }
}

impl TaskSetWork for StepTaskSet {
    fn name(&self) -> String {
        format!("{} ({} parts)", self.step.name(), self.parts)
    }

    fn run_task(&self, ctx: &mut TaskContext<'_>) -> Result<TaskOutcome, TaskError> {
        loop {
            let left = self
                .parts
                .saturating_sub(self.cursor.load(Ordering::Relaxed));
            if left == 0 {
                return Ok(TaskOutcome::Exhausted);
            }
            // The size the sizer proposes does not apply (a part is the
            // unit); asking keeps the time slice and the preemption point.
            if ctx.next_morsel(None).is_none() {
                return Ok(TaskOutcome::Yielded);
            }
            let part = self.cursor.fetch_add(1, Ordering::Relaxed);
            if part >= self.parts {
                return Ok(TaskOutcome::Exhausted);
            }
            let rows = self.step.run_part(part, ctx.worker())?;
            ctx.morsel_done(rows);
        }
    }

    fn finalize(&self, _cx: &FinalizeContext<'_>) -> Result<FollowUps, TaskError> {
        Ok(Self::follow_ups(self.step.finish()?))
    }

    /// A step of `k` parts keeps at most `k` workers busy.
    fn parallelism_hint(&self) -> Option<usize> {
        Some(self.parts.max(1))
    }
}

/// Runs `steps` on the calling thread, each step's parts last to first
/// (the scheduler takes them in any order), then its finish and the steps
/// that plans. For tests of operators without a scheduler.
#[cfg(test)]
pub(crate) fn run_inline(steps: Steps) -> Result<()> {
    let mut queue: std::collections::VecDeque<_> = steps.into();
    while let Some(step) = queue.pop_front() {
        for part in (0..step.parts()).rev() {
            step.run_part(part, part % 2)?;
        }
        for (i, next) in step.finish()?.into_iter().enumerate() {
            queue.insert(i, next);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::Mutex;
    use stride_sched::{MorselPolicy, Scheduler, SchedulerConfig};

    /// Step `depth` of a chain: `parts` parts each counted; its finish
    /// plans the next depth until `depth == 0`.
    #[derive(Debug)]
    struct Counted {
        depth: usize,
        runs: Vec<AtomicU32>,
        log: Arc<Mutex<Vec<(usize, usize)>>>,
    }

    impl Counted {
        fn new(depth: usize, parts: usize, log: Arc<Mutex<Vec<(usize, usize)>>>) -> Arc<Self> {
            Arc::new(Counted {
                depth,
                runs: (0..parts).map(|_| AtomicU32::new(0)).collect(),
                log,
            })
        }
    }

    impl SplitStep for Counted {
        fn name(&self) -> String {
            format!("counted {}", self.depth)
        }
        fn parts(&self) -> usize {
            self.runs.len()
        }
        fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
            self.runs[part].fetch_add(1, Ordering::Relaxed);
            Ok(1)
        }
        fn finish(&self) -> Result<Steps> {
            let all_once = self.runs.iter().all(|r| r.load(Ordering::Relaxed) == 1);
            self.log
                .lock()
                .unwrap()
                .push((self.depth, usize::from(all_once)));
            Ok(if self.depth == 0 {
                Vec::new()
            } else {
                vec![Counted::new(self.depth - 1, 3 * self.depth, self.log.clone()) as _]
            })
        }
    }

    #[test]
    fn every_part_runs_once_and_steps_chain_in_order() {
        for workers in [1, 2, 4] {
            let scheduler = Scheduler::new(SchedulerConfig {
                workers,
                pin_workers: false,
                morsels: MorselPolicy::Fixed(1),
                ..SchedulerConfig::default()
            });
            let log = Arc::default();
            let first = StepTaskSet::new(Counted::new(4, 1000, Arc::clone(&log)));
            let stats = scheduler.run(vec![Arc::new(first)]).unwrap();
            assert_eq!(
                *log.lock().unwrap(),
                vec![(4, 1), (3, 1), (2, 1), (1, 1), (0, 1)],
                "each step after the one that planned it, every part once"
            );
            assert_eq!(stats.follow_ups, 4);
            assert_eq!(stats.morsels, 1000 + 12 + 9 + 6 + 3);
        }
    }
}
