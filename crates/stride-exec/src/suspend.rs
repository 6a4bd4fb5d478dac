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
//! A pipeline where a task may stop inside a morsel keeps count, in its
//! [`Suspended`] pool, of its morsels *in flight*: counted from just before
//! a task asks the source for one until the morsel is finished (or the task
//! found the source dry), whether a task is running it or it is parked.
//! Every change of the count, the parked list and the two flags `dry` and
//! `closed` happens under the pool's mutex, so these are linearizable:
//!
//! * **take or begin** (a task looks for work): moves one parked
//!   continuation out (in flight unchanged); if none is parked, the task
//!   will ask the source, and in flight + 1.
//! * **abandon** (the task did not ask after all, or the source gave no
//!   morsel without being dry): in flight − 1.
//! * **dry** (the source had nothing): in flight − 1 and `dry` is set; then
//!   a parked continuation, if any, is the task's to run; else, with nothing
//!   in flight, `closed` is set and the task reports
//!   [`stride_sched::TaskOutcome::Exhausted`]; else the task reports
//!   [`stride_sched::TaskOutcome::Held`] and its worker steps back from the
//!   set until its next entry.
//! * **park** (a task stopped inside a morsel): the continuation joins the
//!   parked list; in flight is unchanged. Refused only once `closed`.
//! * **finish** (a morsel is done, or its query stopped): in flight − 1; if
//!   that was the last one and `dry` is set, `closed` is set and the task
//!   reports `Exhausted` itself.
//! * **close** (the sink is full): `closed` is set and what is parked is
//!   dropped (in flight − its count): nobody needs those rows.
//!
//! *Nothing is lost.* The set is finalized only after some task reported
//! `Exhausted` and every running task returned. `Exhausted` is reported only
//! with nothing in flight and the source dry (after `dry`, or by the finish
//! of the last morsel after `dry`): every morsel ever taken was finished, and
//! the source will hand out nothing more. `closed` is set in the same step,
//! and with nothing in flight no task can have anything to park; so `park`
//! is refused only after `close`, when the rows are not needed.
//!
//! *Nothing runs twice.* A continuation is owned by exactly one task or by
//! the pool (it moves, it is never copied), and each frame is popped before
//! it is resumed.
//!
//! *Progress.* A task stops inside a morsel only after it handed on a chunk,
//! and takes a parked continuation only as its first work or after asking
//! [`stride_sched::TaskContext::suspend_requested`]; every task that takes
//! work does some. A worker that stepped back (`Held`) strands nothing:
//! `Held` means some morsel was in flight, and the task holding it either
//! finishes it (and, if it was the last, reports `Exhausted`) or parks it
//! and returns `Yielded` — and its worker chose the set, so it had not
//! stepped back and may choose the set again to take it.
//!
//! Pipelines without such an operator keep no count: their tasks report
//! `Exhausted` as soon as the source is dry, as before. For the others, the
//! end of the source now makes the workers without a morsel step back
//! (`Held`, which keeps the group as their pending hand-over when they
//! ranked it first) and the worker that finishes the last morsel reports
//! `Exhausted` — the same finalization, reported by another worker.
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
    /// Whether a task parked it before: the task that finishes it reports
    /// a resumed morsel.
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
    /// A task stopped inside it: frames or slices are left.
    Suspended,
    /// The query was cancelled: the rest goes with it.
    Stopped,
}

/// What a task that found its source dry does ([`Suspended::dry`]).
#[derive(Debug)]
pub(crate) enum AtDry {
    /// Nothing is in flight: the set is exhausted (the pool is closed).
    Exhausted,
    /// This parked continuation is the task's to run.
    Take(Continuation),
    /// Another running task holds a morsel: the worker steps back.
    Held,
}

/// A pipeline's morsels in flight and parked continuations (see the module
/// docs for the protocol and why nothing is lost).
#[derive(Debug, Default)]
pub(crate) struct Suspended {
    state: Mutex<Pool>,
}

#[derive(Debug, Default)]
struct Pool {
    parked: Vec<Continuation>,
    /// Morsels counted by `take_or_begin` and not finished: run by a task,
    /// about to be taken from the source, or parked.
    in_flight: usize,
    /// A task found the source dry.
    dry: bool,
    /// `Exhausted` was reported (or the sink is full): no more parking.
    closed: bool,
}

impl Suspended {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A parked continuation, if any (oldest first); otherwise the task is
    /// about to ask the source for a morsel, which is in flight from now
    /// on. One lock per morsel for both.
    pub(crate) fn take_or_begin(&self) -> Option<Continuation> {
        let mut pool = self.pool();
        if pool.parked.is_empty() {
            pool.in_flight += 1;
            return None;
        }
        Some(pool.parked.remove(0))
    }

    /// The task did not ask the source after all (its slice was over), or
    /// the source gave no morsel and is not dry (another node's part is
    /// left, or it failed): the count of [`Self::take_or_begin`] goes.
    pub(crate) fn abandon(&self) {
        let mut pool = self.pool();
        pool.in_flight = pool.in_flight.saturating_sub(1);
    }

    /// The source is dry for the task that counted itself in: see [`AtDry`].
    pub(crate) fn dry(&self) -> AtDry {
        let mut pool = self.pool();
        pool.in_flight = pool.in_flight.saturating_sub(1);
        pool.dry = true;
        if !pool.parked.is_empty() {
            return AtDry::Take(pool.parked.remove(0));
        }
        if pool.in_flight == 0 {
            pool.closed = true;
            return AtDry::Exhausted;
        }
        AtDry::Held
    }

    /// Parks `c` (still in flight), or hands it back once the pool is
    /// closed: the sink is full and its rows are not needed.
    pub(crate) fn park(&self, mut c: Continuation) -> Result<(), Continuation> {
        let mut pool = self.pool();
        if pool.closed {
            return Err(c);
        }
        c.parked = true;
        pool.parked.push(c);
        Ok(())
    }

    /// A morsel in flight is done (or its query stopped): it leaves the
    /// count. `true` when it was the last morsel in flight of a dry source
    /// — the pool closes and the task reports the set exhausted.
    pub(crate) fn finish(&self) -> bool {
        let mut pool = self.pool();
        pool.in_flight = pool.in_flight.saturating_sub(1);
        if pool.dry && pool.in_flight == 0 && pool.parked.is_empty() && !pool.closed {
            pool.closed = true;
            return true;
        }
        false
    }

    /// The sink needs no more rows: the pool closes and what is parked goes.
    pub(crate) fn close(&self) {
        let mut pool = self.pool();
        pool.closed = true;
        let dropped = pool.parked.len();
        pool.in_flight = pool.in_flight.saturating_sub(dropped);
        pool.parked.clear();
    }

    /// Continuations parked (a finalization that finds one lost rows).
    pub(crate) fn parked(&self) -> usize {
        self.pool().parked.len()
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
    fn the_set_is_exhausted_only_once_no_morsel_is_in_flight() {
        let pool = Suspended::default();
        // Two tasks take a morsel each; a third asks the source while the
        // first suspends and parks its morsel.
        assert!(pool.take_or_begin().is_none());
        assert!(pool.take_or_begin().is_none());
        assert!(pool.take_or_begin().is_none());
        assert!(pool.park(continuation(10)).is_ok());
        // The third finds the source dry: it takes the parked morsel
        // rather than exhaust the set.
        let taken = match pool.dry() {
            AtDry::Take(c) => c,
            other => panic!("expected the parked continuation, got {other:?}"),
        };
        assert!(taken.parked);
        // A fourth finds the source dry while two morsels are in flight.
        assert!(pool.take_or_begin().is_none());
        assert!(matches!(pool.dry(), AtDry::Held));
        // Parked again, taken again, finished: one morsel still in flight.
        assert!(pool.park(taken).is_ok());
        let _taken = pool.take_or_begin().expect("parked");
        assert!(!pool.finish());
        // The second task's morsel was taken before the source ran dry: it
        // may still be parked, and its finish is the last — that task
        // reports the set exhausted.
        assert!(pool.park(continuation(3)).is_ok());
        let _last = pool.take_or_begin().expect("parked");
        assert!(pool.finish());
        assert_eq!(pool.parked(), 0);
        // Closed: nothing more is parked.
        assert!(pool.park(continuation(1)).is_err());
    }

    #[test]
    fn a_dry_source_with_nothing_in_flight_is_exhausted_at_once() {
        let pool = Suspended::default();
        assert!(pool.take_or_begin().is_none());
        assert!(!pool.finish());
        assert!(pool.take_or_begin().is_none());
        assert!(matches!(pool.dry(), AtDry::Exhausted));
        // A task that gave up a morsel another node holds counts out.
        let pool = Suspended::default();
        assert!(pool.take_or_begin().is_none());
        pool.abandon();
        assert!(pool.take_or_begin().is_none());
        assert!(matches!(pool.dry(), AtDry::Exhausted));
    }

    #[test]
    fn a_full_sink_drops_what_is_parked() {
        let pool = Suspended::default();
        // Three morsels in flight, two of them parked.
        for _ in 0..3 {
            assert!(pool.take_or_begin().is_none());
        }
        assert!(pool.park(continuation(1)).is_ok());
        assert!(pool.park(continuation(2)).is_ok());
        pool.close();
        assert_eq!(pool.parked(), 0);
        assert!(
            pool.take_or_begin().is_none(),
            "nothing is parked after a close"
        );
        // The morsel still running cannot be parked; its task drops it.
        assert!(pool.park(continuation(4)).is_err());
        assert!(!pool.finish(), "a closed pool reports no last morsel");
    }
}
