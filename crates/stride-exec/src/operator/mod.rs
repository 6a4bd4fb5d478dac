//! Operators, one per module.
//!
//! Two kinds of runtime pieces make up a pipeline:
//! * an [`Operator`] transforms one batch into another and is stateless or
//!   read-only during the pipeline (filter, projection, hash-join probe);
//! * a [`Sink`] ends a pipeline: it absorbs batches into per-worker state and
//!   merges that state in [`Sink::finish`], which runs exactly once, when the
//!   pipeline's task set is finalized (hash-join build, aggregation, sort,
//!   limit, materialization) — or returns the merge as [`Steps`] of parts
//!   that any worker runs (see [`crate::step`]).

pub mod aggregate;
pub mod expand;
pub mod filter;
pub mod grouping_sets;
pub mod hash_join;
pub mod limit;
pub mod materialize;
pub mod projection;
pub mod sort;
pub mod window;

use std::fmt;
use std::sync::Arc;

use arrow::array::RecordBatch;

use stride_sched::FinalizeContext;

use crate::error::Result;
use crate::seq::MorselSeq;
use crate::source::Source;
use crate::step::Steps;

/// Whether the rest of a pipeline takes more rows from an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    More,
    /// The sink is full (a satisfied LIMIT): the rest of this input's
    /// output is not needed.
    Enough,
    /// The task's time is up (or the scheduler has other work for its
    /// worker): an operator whose output is [`Output::Resumable`] stops
    /// after the chunk it just emitted and returns where it stopped, so
    /// that a later task goes on from there ([`crate::suspend`]). Only
    /// such operators are ever answered this.
    Suspend,
}

/// Where an operator hands its output: the rest of the pipeline.
pub type Emit<'a> = dyn FnMut(RecordBatch) -> Result<Demand> + 'a;

/// How an operator's output for one input batch comes, which decides
/// whether a task may stop in the middle of a morsel there
/// ([`crate::suspend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// At most one batch per input batch (filter, projection).
    One,
    /// Several batches, all produced in one call (one per grouping set, a
    /// function's rows in slices): no task stops inside it, nor inside an
    /// operator after it.
    Several,
    /// Bounded chunks, and the operator can stop after any of them and
    /// go on later ([`Operator::process_resumable`]): a join whose probe
    /// rows may each match millions of rows.
    Resumable,
}

/// Where a resumable operator stopped inside one input batch (its own
/// state: for a probe, the encoded keys and the walk's cursor), kept with
/// the batch until a later task resumes it.
pub struct Resume(Box<dyn std::any::Any + Send>);

impl Resume {
    pub fn new<T: std::any::Any + Send>(state: T) -> Self {
        Resume(Box::new(state))
    }

    /// The state back, as the operator that made it stored it.
    pub fn into_state<T: std::any::Any>(self) -> Result<T> {
        self.0.downcast::<T>().map(|b| *b).map_err(|_| {
            crate::error::ExecError::Internal(
                "an operator was resumed with another operator's state".into(),
            )
        })
    }
}

impl fmt::Debug for Resume {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resume")
    }
}

/// A streaming operator inside a pipeline.
pub trait Operator: Send + Sync + fmt::Debug {
    /// Transforms one batch into output handed to `emit`, in order: one
    /// batch for most operators, bounded chunks for one whose output can
    /// be far larger than its input (a join). Stops early on
    /// [`Demand::Enough`]. `worker` addresses per-worker state, if any.
    fn process(&self, batch: RecordBatch, worker: usize, emit: &mut Emit<'_>) -> Result<()>;
    /// How its output for one input comes ([`Output`]). The default,
    /// [`Output::Several`], never lets a task stop inside the operator or
    /// after it, whatever it emits.
    fn output(&self) -> Output {
        Output::Several
    }
    /// For an operator whose output is [`Output::Resumable`]: as
    /// [`Self::process`], starting at `from` (`None`: at the start of
    /// `batch`; otherwise what an earlier call on the same batch
    /// returned). Returns where it stopped when `emit` answered
    /// [`Demand::Suspend`] with output left, `None` once the batch is done
    /// (or [`Demand::Enough`] ended it).
    fn process_resumable(
        &self,
        batch: &RecordBatch,
        from: Option<Resume>,
        worker: usize,
        emit: &mut Emit<'_>,
    ) -> Result<Option<Resume>> {
        if from.is_some() {
            return Err(crate::error::ExecError::Internal(format!(
                "{} cannot resume inside a batch",
                self.name()
            )));
        }
        self.process(batch.clone(), worker, emit).map(|()| None)
    }
    /// Rows this operator set aside instead of processing them (a grace
    /// hash join whose build side went to disk), taken once after every
    /// row of its input reached it; the pipeline runs them in passes
    /// before its sink finishes (see [`Deferred`]).
    fn deferred(&self) -> Result<Option<Arc<dyn Deferred>>> {
        Ok(None)
    }
    fn name(&self) -> String;
}

/// Rows an operator deferred until its input was exhausted, handed back
/// in passes. A pass first runs its `steps` (loading what the pass needs,
/// e.g. one partition's build side), then each of its `runs` in order:
/// the run's source feeds its operator, which takes the deferring
/// operator's place for the pass (none: the rows enter after it), and
/// everything after the deferring operator, into the pipeline's sink.
///
/// ```text
///   pipeline:  source ─► a ─► join ─► b ─► sink        join defers rows
///   pass n:    [steps] ; run source ─► join_n ─► b ─► sink ; …
///   after the last pass: b's deferred rows, if any; then sink.finish
/// ```
pub trait Deferred: Send + Sync + fmt::Debug {
    /// The next pass, or `None` once every pass ran. Called from
    /// finalizations, each after the previous pass's last run.
    fn next_pass(&self) -> Result<Option<Pass>>;
}

/// One pass over deferred rows (see [`Deferred`]).
#[derive(Debug)]
pub struct Pass {
    pub steps: Steps,
    pub runs: Vec<PassRun>,
}

/// One run of a pass: a source, and the operator its rows enter.
#[derive(Debug)]
pub struct PassRun {
    pub source: Arc<dyn Source>,
    /// In place of the deferring operator; `None`: the rows enter after it.
    pub operator: Option<Arc<dyn Operator>>,
}

/// The end of a pipeline.
pub trait Sink: Send + Sync + fmt::Debug {
    /// Absorbs a batch produced at `seq` (its morsel's place, and its
    /// chunk when an operator emitted several for one morsel).
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()>;
    /// Merges per-worker state, or returns the steps that merge it in
    /// parallel (run in order before the query's next pipeline); called
    /// once after the last task of the pipeline. A long merge checks `cx`
    /// and stops once the query is cancelled.
    fn finish(&self, cx: &FinalizeContext<'_>) -> Result<Steps> {
        let _ = cx;
        Ok(Steps::new())
    }
    /// Every batch of the morsel whose first slice is at `first` and that
    /// held `rows` source rows has been consumed (a sink that releases
    /// output in order while the pipeline runs tracks finished morsels,
    /// `crate::stream`).
    fn morsel_done(&self, first: MorselSeq, rows: usize) {
        let _ = (first, rows);
    }
    /// Whether the sink needs no more input (a satisfied LIMIT).
    fn is_full(&self) -> bool {
        false
    }
    /// Whether the task should stop before its next morsel because the
    /// sink's consumer is behind (a streamed result its client has not
    /// read): then the sink keeps the [`stride_sched::Resumer`] that
    /// `resumer` gives and resumes the task set once the consumer caught up
    /// (`stride_sched::pause`). With no resumer (outside a scheduler) a sink
    /// must answer `false`.
    fn pause(&self, resumer: &dyn Fn() -> Option<stride_sched::Resumer>) -> bool {
        let _ = resumer;
        false
    }
    /// The most source rows the task's next morsel should hold (a sink
    /// that pauses bounds what one morsel adds to its consumer's backlog);
    /// `None`: as the scheduler sizes it.
    fn morsel_rows_cap(&self) -> Option<usize> {
        None
    }
    fn name(&self) -> String;
}

/// Per-worker slots, each behind its own (uncontended) mutex: worker `i` only
/// locks slot `i` while the pipeline runs; `finish` locks them all once.
/// Each slot sits on cache lines of its own, so that one worker's locking
/// never invalidates the line another worker's slot is on.
#[derive(Debug)]
pub struct PerWorker<T> {
    slots: Vec<CacheAligned<std::sync::Mutex<T>>>,
}

/// A value aligned to (and so alone on) a 128-byte line pair: adjacent
/// lines are prefetched together on x86-64, and 128 bytes is Apple
/// silicon's line size.
#[derive(Debug, Default)]
#[repr(align(128))]
struct CacheAligned<T>(T);

impl<T: Default> PerWorker<T> {
    /// Slots for workers `0..workers` (the scheduler's worker count).
    pub fn new(workers: usize) -> Self {
        PerWorker {
            slots: (0..workers.max(1)).map(|_| Default::default()).collect(),
        }
    }
}

impl<T> PerWorker<T> {
    /// Runs `f` on worker `worker`'s slot. A worker index past the slots
    /// is a broken invariant (the pipeline was compiled for fewer workers
    /// than run it) and panics, failing the query, rather than sharing a
    /// slot.
    pub fn with<R>(&self, worker: usize, f: impl FnOnce(&mut T) -> R) -> R {
        let Some(slot) = self.slots.get(worker) else {
            panic!(
                "worker {worker} has no slot: state was made for {} workers",
                self.slots.len()
            );
        };
        f(&mut slot.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Takes every slot's contents.
    pub fn take_all(&self) -> Vec<T>
    where
        T: Default,
    {
        self.slots
            .iter()
            .map(|s| std::mem::take(&mut *s.0.lock().unwrap_or_else(|e| e.into_inner())))
            .collect()
    }
}
