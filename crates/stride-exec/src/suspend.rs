//! Suspended morsels: a task may stop in the middle of a morsel.
//!
//! A morsel is sized to take a fraction of the time slice `t_max`, but a
//! join whose probe rows each match many rows (a keyless join, a skewed
//! key) turns one morsel into any number of output chunks. Without a stop
//! inside it, such a morsel is one unsplittable step: no newly arrived
//! query can take the worker until its last chunk is through. So a
//! pipeline may *suspend* a morsel between two chunks and leave the rest —
//! a [`Continuation`] — for a later task of the same task set, on any
//! worker.
//!
//! ## Where a morsel stops
//!
//! Only after a chunk went all the way to the sink, and only where the
//! operator that emitted it is [`Output::Resumable`] and every operator
//! before it in the pipeline emits at most one batch per input or is
//! resumable too (`Pipeline::suspendable`): then nothing upstream still
//! holds output it would emit before the rest, so resuming later produces
//! every row in the order an uninterrupted run would. The operator answers
//! [`Demand::Suspend`] with a [`Resume`] of its own; an operator before it
//! that emits one batch has nothing left; a resumable one before it stops
//! after the chunk it emitted, with its own [`Resume`]. The continuation
//! keeps these [`Frame`]s innermost first, and the slices of the morsel not
//! yet pushed. A task asks to stop ([`stride_sched::TaskContext::suspend_requested`])
//! when its time slice is used up or its worker has news — a preemption
//! point inside the morsel.
//!
//! ## No morsel lost, none run twice
//!
//! The pipeline's [`Suspended`] pool holds parked continuations and counts
//! the *parked ones that exist* (`held`: parked, or taken from the pool by a
//! running task and not finished yet). Every change of the pool and of
//! `held` happens under its mutex, so the following are linearizable:
//!
//! * **park** (a task suspends a morsel): refused once the pool is `closed`;
//!   otherwise the continuation joins the pool, and `held` grows by one the
//!   first time it is parked.
//! * **take** (a task looks for work, before asking its source): moves one
//!   continuation out of the pool; `held` is unchanged.
//! * **finish** (a task completes a continuation it took): `held` shrinks by
//!   one.
//! * **dry** (the source handed out its last morsel): if `held` is zero, the
//!   pool closes and the task reports [`stride_sched::TaskOutcome::Exhausted`];
//!   if a continuation is parked the task takes it; otherwise another running
//!   task holds one, and the task reports [`stride_sched::TaskOutcome::Held`]:
//!   its worker steps back from the set until the set's next entry.
//!
//! *Nothing is lost.* The set is finalized only after some task reported
//! `Exhausted` and every running task returned. `Exhausted` is reported only
//! under the mutex with `held == 0`, so no continuation that was ever parked
//! is unfinished then; and the pool is closed in the same step, so a
//! continuation still inside a running task (a morsel that task took before
//! the source ran dry) can no longer be parked: its task keeps it and runs
//! it to its end before returning. A task that reports `Exhausted` because
//! its sink is full closes the pool and drops what is parked: nobody needs
//! those rows.
//!
//! *Nothing runs twice.* A continuation is owned by exactly one task or by
//! the pool (it moves, it is never copied), and each frame is popped before
//! it is resumed.
//!
//! *Progress.* A task stops inside a morsel only after it handed on a chunk,
//! and takes a parked continuation only as its first work or after asking
//! [`stride_sched::TaskContext::suspend_requested`]; every task that takes
//! work does some. A worker that stepped back (`Held`) does not strand a
//! continuation: the task that parks one returns `Yielded`, so its own
//! worker — which chose the set, and so had not stepped back — may choose
//! the set again and take it. Once the source is dry the continuations
//! are finished by the workers that hold them (less parallel, only in
//! that tail).
//!
//! Cancellation drops a continuation with its query, as an unfinished
//! morsel was always dropped.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use arrow::array::RecordBatch;

use crate::operator::{Demand, Output, Resume};
use crate::seq::MorselSeq;
use crate::source::Morsel;

/// A suspended operator: it stopped inside `batch` (a slice at `seq`) and
/// goes on from `resume`.
#[derive(Debug)]
pub(crate) struct Frame {
    /// Its index in the pipeline's operators.
    pub(crate) op: usize,
    pub(crate) seq: MorselSeq,
    pub(crate) batch: RecordBatch,
    pub(crate) resume: Resume,
}

/// What is left of one morsel.
#[derive(Debug)]
pub(crate) struct Continuation {
    /// Source rows of the morsel.
    pub(crate) rows: usize,
    /// The runs of consecutive rows it covers, reported to the sink once
    /// every batch of the morsel is through.
    pub(crate) covered: Vec<(MorselSeq, usize)>,
    /// Suspended operators of the slice being pushed, innermost (the next
    /// to resume) first.
    pub(crate) frames: VecDeque<Frame>,
    /// Slices not pushed yet.
    pub(crate) slices: VecDeque<(MorselSeq, RecordBatch)>,
    /// Batches the slice being pushed has handed the sink so far (the next
    /// one's chunk number).
    pub(crate) chunks: u32,
    /// Task time spent on the morsel so far, over every task that ran it.
    pub(crate) spent: Duration,
    /// Whether it was parked before (and so counts in [`Suspended`]'s
    /// `held`).
    pub(crate) parked: bool,
}

impl Continuation {
    /// A morsel not started yet, with its slices placed in `input` (the
    /// branch of a UNION ALL the pipeline runs, if any).
    pub(crate) fn new(morsel: Morsel, input: Option<u32>) -> Self {
        let rows = morsel.rows();
        let mut slices: VecDeque<(MorselSeq, RecordBatch)> = morsel.slices.into();
        if let Some(input) = input {
            for (seq, _) in &mut slices {
                *seq = seq.in_input(input);
            }
        }
        // One run for a block source's morsel, more where a placed source
        // joined distant extents (each slice starts at its sequence number).
        let mut covered: Vec<(MorselSeq, usize)> = Vec::with_capacity(1);
        for (seq, batch) in &slices {
            match covered.last_mut() {
                Some((first, n)) if first.position() + *n as u64 == seq.position() => {
                    *n += batch.num_rows();
                }
                _ => covered.push((*seq, batch.num_rows())),
            }
        }
        Continuation {
            rows,
            covered,
            frames: VecDeque::new(),
            slices,
            chunks: 0,
            spent: Duration::ZERO,
            parked: false,
        }
    }
}

/// How far a task drove a continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Every batch of the morsel went through and the sink was told.
    Done,
    /// A task stop inside it: frames or slices are left.
    Suspended,
    /// The query was cancelled: the rest goes with it.
    Stopped,
}

/// What a task that found its source dry does ([`Suspended::dry`]).
#[derive(Debug)]
pub(crate) enum AtDry {
    /// No continuation exists: the set is exhausted (the pool is closed).
    Exhausted,
    /// This parked continuation is the task's to run.
    Take(Continuation),
    /// Another running task holds one: return, the set stays runnable.
    Held,
}

/// A pipeline's parked continuations (see the module docs for the
/// protocol and why nothing is lost).
#[derive(Debug, Default)]
pub(crate) struct Suspended {
    state: Mutex<Pool>,
}

#[derive(Debug, Default)]
struct Pool {
    parked: Vec<Continuation>,
    /// Continuations ever parked and not finished (parked, or taken by a
    /// running task).
    held: usize,
    /// Set with the `Exhausted` report: no more parking.
    closed: bool,
}

impl Suspended {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parks `c`, or hands it back when the pool is closed (the task then
    /// runs it to its end itself).
    pub(crate) fn park(&self, mut c: Continuation) -> Result<(), Continuation> {
        let mut pool = self.pool();
        if pool.closed {
            return Err(c);
        }
        if !c.parked {
            c.parked = true;
            pool.held += 1;
        }
        pool.parked.push(c);
        Ok(())
    }

    /// A parked continuation, if any (oldest first).
    pub(crate) fn take(&self) -> Option<Continuation> {
        let mut pool = self.pool();
        if pool.parked.is_empty() {
            return None;
        }
        Some(pool.parked.remove(0))
    }

    /// `c`, taken from the pool or parked before, will not come back: it
    /// finished (or its query stopped).
    pub(crate) fn finish(&self, c: &Continuation) {
        if c.parked {
            let mut pool = self.pool();
            pool.held = pool.held.saturating_sub(1);
        }
    }

    /// The task's source is dry: see [`AtDry`].
    pub(crate) fn dry(&self) -> AtDry {
        let mut pool = self.pool();
        if !pool.parked.is_empty() {
            return AtDry::Take(pool.parked.remove(0));
        }
        if pool.held == 0 {
            pool.closed = true;
            return AtDry::Exhausted;
        }
        AtDry::Held
    }

    /// The sink needs no more rows: the pool closes and what is parked goes.
    pub(crate) fn close(&self) {
        let mut pool = self.pool();
        pool.closed = true;
        pool.held -= pool.parked.len().min(pool.held);
        pool.parked.clear();
    }

    /// Whether a continuation is parked or held (a finalization that finds
    /// one lost rows).
    pub(crate) fn outstanding(&self) -> usize {
        let pool = self.pool();
        pool.parked.len().max(pool.held)
    }
}

/// Per operator of a pipeline: whether a task may stop inside a morsel
/// after that operator emitted a chunk (see the module docs).
pub(crate) fn suspendable(outputs: impl IntoIterator<Item = Output>) -> Vec<bool> {
    let mut clear = true;
    outputs
        .into_iter()
        .map(|o| {
            let here = clear && o == Output::Resumable;
            clear &= o != Output::Several;
            here
        })
        .collect()
}

/// The demand an emit answers after a chunk went through: [`Demand::Suspend`]
/// when the operator may stop here and the task asks to.
pub(crate) fn after_chunk(
    demand: Demand,
    suspendable: bool,
    suspend: Option<&dyn Fn() -> bool>,
) -> Demand {
    match demand {
        Demand::More if suspendable && suspend.is_some_and(|s| s()) => Demand::Suspend,
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn continuation(rows: usize) -> Continuation {
        Continuation {
            rows,
            covered: vec![],
            frames: VecDeque::new(),
            slices: VecDeque::new(),
            chunks: 0,
            spent: Duration::ZERO,
            parked: false,
        }
    }

    #[test]
    fn suspension_needs_every_earlier_operator_to_emit_one_batch_or_resume() {
        use Output::*;
        assert_eq!(
            suspendable([One, Resumable, One, Resumable]),
            vec![false, true, false, true]
        );
        assert_eq!(
            suspendable([Resumable, Several, Resumable]),
            vec![true, false, false]
        );
        assert_eq!(suspendable([Several, Resumable]), vec![false, false]);
        assert!(suspendable([]).is_empty());
    }

    #[test]
    fn the_set_is_exhausted_only_once_no_parked_continuation_is_unfinished() {
        let pool = Suspended::default();
        // A fresh morsel is suspended and parked: it now counts.
        assert!(pool.park(continuation(10)).is_ok());
        // A task whose source is dry takes it rather than exhaust the set.
        let taken = match pool.dry() {
            AtDry::Take(c) => c,
            other => panic!("expected the parked continuation, got {other:?}"),
        };
        assert!(taken.parked);
        // While that task runs it, another task finds the source dry.
        assert!(matches!(pool.dry(), AtDry::Held));
        assert_eq!(pool.outstanding(), 1);
        // Suspended again and parked: counted once, not twice.
        assert!(pool.park(taken).is_ok());
        let taken = pool.take().expect("parked");
        pool.finish(&taken);
        assert_eq!(pool.outstanding(), 0);
        assert!(matches!(pool.dry(), AtDry::Exhausted));
        // Closed: a morsel a task took before the source ran dry can no
        // longer be parked; its task keeps it.
        let back = pool.park(continuation(3)).expect_err("closed");
        assert_eq!(back.rows, 3);
        assert!(pool.take().is_none());
    }

    #[test]
    fn a_full_sink_drops_what_is_parked() {
        let pool = Suspended::default();
        assert!(pool.park(continuation(1)).is_ok());
        assert!(pool.park(continuation(2)).is_ok());
        pool.close();
        assert_eq!(pool.outstanding(), 0);
        assert!(pool.take().is_none());
        assert!(pool.park(continuation(4)).is_err());
    }
}
