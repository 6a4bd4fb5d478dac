//! A streamed result read at its consumer's pace, across calls: the result
//! of a portal executed with a row limit, of a cursor, of `COPY … TO`.
//!
//! [`LiveResult::open`] submits the query with a [`StreamSink`] at its end
//! and returns at once; [`LiveResult::next`] hands out the next batch the
//! [`ResultStream`] releases, waiting at most the patience given. Between
//! two calls nothing runs on the consumer's side: once the stream's queue
//! is half full the query *pauses* (`stride_sched::pause`) and holds no
//! worker until the consumer drains it — so a cursor nobody fetches from
//! costs its queue's memory and its scheduler slot, and while another
//! group waits for a slot not even that: the query runs to its end, its
//! rows parked on disk ([`ResultStream::pause`]).
//!
//! ```text
//!  open ─► submit (group with the stream's sink) ─► LiveResult
//!  next(patience) ─► Batch | Idle (nothing within patience) | Ended(stats)
//!        a query that runs past WAITER_AFTER gets a thread that waits for
//!        its completion and reports it to the stream (a failure never
//!        reaches the sink)
//!  drop before Ended ─► cancel, close the stream (its memory back at once),
//!        a thread waits for the group to stop, then the spill directory goes
//! ```
//!
//! [`crate::execute_streaming`] is this loop run to the end on one thread.

use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use stride_sched::{GroupFacts, QueryHandle, QueryStats, Scheduler};

use crate::cancel::Canceller;
use crate::error::{ExecError, Result};
use crate::executor::{
    close_spill, relabel, submit, unwrap_query_error, with_memory, StreamOutput, WAITER_AFTER,
};
use crate::memory::QueryMemory;
use crate::plan::PhysicalPlan;
use crate::shared::{Prelude, SharedScans};
use crate::stream::{Pull, ResultStream, StreamConfig, StreamEnd, StreamSink, StreamedBatch};

/// What [`LiveResult::next`] gives.
#[derive(Debug)]
pub enum LiveNext {
    /// The next batch, relabelled with the result's schema (holding its
    /// memory charge until dropped).
    Batch(StreamedBatch),
    /// Nothing came within the patience given; the query goes on.
    Idle,
    /// Every batch was handed out and the query completed (boxed: batches
    /// are the common case, and far smaller).
    Ended(Box<StreamOutput>),
}

/// Closes the query's spill directory when the last holder lets go: the
/// consumer (which may still read parked batches after the query ended)
/// and the thread that waits for a dropped query to stop.
struct SpillCloser(Arc<QueryMemory>);

impl Drop for SpillCloser {
    fn drop(&mut self) {
        close_spill(&self.0);
    }
}

/// A running query whose result its consumer takes batch by batch (see the
/// module docs).
pub struct LiveResult {
    stream: Arc<ResultStream>,
    schema: SchemaRef,
    canceller: stride_sched::Canceller,
    /// Until a waiter thread takes it (or the query was seen to end).
    handle: Option<QueryHandle>,
    prelude: Option<Prelude>,
    memory: Arc<QueryMemory>,
    closer: Arc<SpillCloser>,
    rows: usize,
    pipelines: usize,
    ended: bool,
}

impl std::fmt::Debug for LiveResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveResult")
            .field("rows", &self.rows)
            .field("ended", &self.ended)
            .finish()
    }
}

/// What a query to stream needs besides its plan (as
/// [`crate::execute_with`]'s arguments).
pub struct LiveConfig<'a> {
    /// Where the query runs.
    pub scheduler: &'a Scheduler,
    /// What is known about it (priorities, recorded costs).
    pub facts: GroupFacts,
    /// The account its memory, its queue included, is charged to.
    pub memory: &'a Arc<QueryMemory>,
    /// The engine's shared scans, when the query may share one.
    pub sharing: Option<&'a Arc<SharedScans>>,
    /// The stream's queue and order.
    pub stream: StreamConfig,
}

impl LiveResult {
    /// Submits `plan` (its result columns named by `schema`) and returns
    /// without waiting for a row. `on_running` is called as
    /// [`crate::execute_with`] calls it, but not with `None` at the end:
    /// the caller publishes and withdraws [`LiveResult::canceller`] as it
    /// reads.
    pub fn open(
        plan: &PhysicalPlan,
        schema: SchemaRef,
        config: LiveConfig<'_>,
        on_running: &mut dyn FnMut(Option<Canceller>),
    ) -> Result<LiveResult> {
        let LiveConfig {
            scheduler,
            facts,
            memory,
            sharing,
            stream,
        } = config;
        let stream = Arc::new(ResultStream::new(memory.clone(), stream));
        let sink = Arc::new(StreamSink::new(stream.clone()));
        let (handle, pipelines, prelude) =
            submit(plan, sink, scheduler, facts, memory, sharing, on_running)?;
        let canceller = handle.canceller();
        on_running(Some(Canceller::group(canceller.clone())));
        Ok(LiveResult {
            stream,
            schema,
            canceller,
            handle: Some(handle),
            prelude,
            memory: memory.clone(),
            closer: Arc::new(SpillCloser(memory.clone())),
            rows: 0,
            pipelines,
            ended: false,
        })
    }

    /// The result's columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows handed out so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Whether the query ended (every batch handed out, or failed).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Cancels the query from another thread.
    pub fn canceller(&self) -> Canceller {
        Canceller::group(self.canceller.clone())
    }

    /// The next batch, waiting at most `patience` (on the calling thread,
    /// never a worker); the query's error once it failed. After `Ended` or
    /// an error there is nothing more.
    pub fn next(&mut self, patience: Duration) -> Result<LiveNext> {
        if self.ended {
            return Err(ExecError::Internal("read past a result's end".into()));
        }
        // A query still unwatched is given WAITER_AFTER to end by itself;
        // past that a thread waits for its completion (its failure never
        // reaches the stream otherwise).
        let patience = match self.handle {
            Some(_) => patience.min(WAITER_AFTER),
            None => patience,
        };
        match self.stream.pull(patience) {
            Ok(Pull::Batch(mut b)) => {
                self.rows += b.num_rows();
                b.batch = relabel(&self.schema, b.batch.clone())?;
                Ok(LiveNext::Batch(b))
            }
            Ok(Pull::Drained) => match self.handle.take() {
                // Every row is out; the group is finishing.
                Some(h) => self.end(h.wait().map_err(unwrap_query_error)),
                // The waiter reports the completion: `Drained` is said
                // once, so the next pull waits for it rather than spinning.
                None => Ok(LiveNext::Idle),
            },
            Ok(Pull::Ended(stats)) => self.end(Ok(*stats)),
            Ok(Pull::Idle) => {
                if let Some(h) = self.handle.take() {
                    self.watch(h)?;
                }
                Ok(LiveNext::Idle)
            }
            Err(StreamEnd(e)) => self.end(Err(unwrap_query_error(e))),
        }
    }

    /// Starts the thread that waits for the group's completion and reports
    /// it to the stream.
    fn watch(&mut self, handle: QueryHandle) -> Result<()> {
        let stream = self.stream.clone();
        let closer = self.closer.clone();
        std::thread::Builder::new()
            .name("stride-result".into())
            .spawn(move || {
                let outcome = handle.wait();
                stream.end(outcome);
                drop(closer);
            })
            .map(|_| ())
            .map_err(|e| {
                self.canceller.cancel();
                self.ended = true;
                ExecError::Internal(format!("cannot start a thread for a result: {e}"))
            })
    }

    fn end(&mut self, outcome: Result<QueryStats>) -> Result<LiveNext> {
        self.ended = true;
        let outcome = outcome.map(|stats| {
            let stats = match self.prelude.take() {
                Some(p) => p.join(stats),
                None => stats,
            };
            with_memory(stats, &self.memory)
        });
        // The group is done and every batch was taken (or the error
        // dropped the rest): nothing reads the spill files any more.
        close_spill(&self.memory);
        outcome.map(|stats| {
            LiveNext::Ended(Box::new(StreamOutput {
                schema: self.schema.clone(),
                rows: self.rows,
                stats,
                pipelines: self.pipelines,
            }))
        })
    }

    /// Cancels the query and waits until it stopped (on the calling
    /// thread): its memory is back and its spill directory gone on return.
    pub fn stop(&mut self) {
        if self.ended {
            return;
        }
        self.canceller.cancel();
        self.stream.close();
        if let Some(h) = self.handle.take() {
            let _ = h.wait();
            self.ended = true;
            close_spill(&self.memory);
            return;
        }
        // The waiter reports the end to the stream.
        while !self.ended {
            match self.next(Duration::from_millis(50)) {
                Ok(LiveNext::Batch(_)) | Ok(LiveNext::Idle) => {}
                Ok(LiveNext::Ended(_)) | Err(_) => break,
            }
        }
    }
}

impl Drop for LiveResult {
    /// Closed before its end: the query is cancelled and its queue's memory
    /// returned at once; a thread waits for the group to stop (the caller
    /// may be an async task, which must not block), after which the group's
    /// own memory goes and, once the waiter let go too, the spill directory.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        self.canceller.cancel();
        self.stream.close();
        if let Some(h) = self.handle.take() {
            let closer = self.closer.clone();
            let spawned = std::thread::Builder::new()
                .name("stride-result".into())
                .spawn(move || {
                    let _ = h.wait();
                    drop(closer);
                });
            if spawned.is_err() {
                // No thread to be had: the spill directory goes now; the
                // cancelled group returns its memory when it stops.
                close_spill(&self.memory);
            }
        }
    }
}
