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
pub mod filter;
pub mod hash_join;
pub mod limit;
pub mod materialize;
pub mod projection;
pub mod sort;

use std::fmt;

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::seq::MorselSeq;
use crate::step::Steps;

/// Whether the rest of a pipeline takes more rows from an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    More,
    /// The sink is full (a satisfied LIMIT): the rest of this input's
    /// output is not needed.
    Enough,
}

/// Where an operator hands its output: the rest of the pipeline.
pub type Emit<'a> = dyn FnMut(RecordBatch) -> Result<Demand> + 'a;

/// A streaming operator inside a pipeline.
pub trait Operator: Send + Sync + fmt::Debug {
    /// Transforms one batch into output handed to `emit`, in order: one
    /// batch for most operators, bounded chunks for one whose output can
    /// be far larger than its input (a join). Stops early on
    /// [`Demand::Enough`]. `worker` addresses per-worker state, if any.
    fn process(&self, batch: RecordBatch, worker: usize, emit: &mut Emit<'_>) -> Result<()>;
    fn name(&self) -> String;
}

/// The end of a pipeline.
pub trait Sink: Send + Sync + fmt::Debug {
    /// Absorbs a batch produced at `seq` (its morsel's place, and its
    /// chunk when an operator emitted several for one morsel).
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()>;
    /// Merges per-worker state, or returns the steps that merge it in
    /// parallel (run in order before the query's next pipeline); called
    /// once after the last task of the pipeline.
    fn finish(&self) -> Result<Steps> {
        Ok(Steps::new())
    }
    /// Whether the sink needs no more input (a satisfied LIMIT).
    fn is_full(&self) -> bool {
        false
    }
    fn name(&self) -> String;
}

/// Per-worker slots, each behind its own (uncontended) mutex: worker `i` only
/// locks slot `i` while the pipeline runs; `finish` locks them all once.
#[derive(Debug)]
pub struct PerWorker<T> {
    slots: Vec<std::sync::Mutex<T>>,
}

impl<T: Default> PerWorker<T> {
    pub fn new(workers: usize) -> Self {
        PerWorker {
            slots: (0..workers.max(1)).map(|_| Default::default()).collect(),
        }
    }
}

impl<T> PerWorker<T> {
    pub fn with<R>(&self, worker: usize, f: impl FnOnce(&mut T) -> R) -> R {
        let slot = &self.slots[worker % self.slots.len()];
        f(&mut slot.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Takes every slot's contents.
    pub fn take_all(&self) -> Vec<T>
    where
        T: Default,
    {
        self.slots
            .iter()
            .map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(|e| e.into_inner())))
            .collect()
    }
}
