//! Streaming a query's result to its consumer while the query runs.
//!
//! The last pipeline of a streamed query ends in a [`StreamSink`] instead of
//! the result [`crate::buffer::Buffer`]: every batch it receives goes into
//! the query's [`ResultStream`], from which the consumer — the thread that
//! submitted the query (a session's thread, never a worker) — takes batches
//! as they become releasable, and hands them on (to a client's socket).
//!
//! **Workers never wait for the consumer; the query pauses instead.** The
//! stream keeps at most [`StreamConfig::queue_bytes`] of result in memory,
//! charged to the query's [`QueryMemory`] like every other buffer. Before
//! each morsel a task asks the sink whether to go on ([`Sink::pause`]):
//! once the backlog — batches not yet taken, in memory or on disk —
//! reaches half the queue and the consumer can take its first batch now,
//! the task returns [`stride_sched::TaskOutcome::Paused`] after it left the
//! stream its [`stride_sched::Resumer`], and the scheduler runs other
//! queries' tasks (`stride_sched::pause`). The consumer resumes the set
//! once it drained the backlog to a quarter of the queue — or as soon as
//! it finds nothing it may take (in [`StreamOrder::Sequence`] the rows
//! still missing before the watermark may be exactly those the paused
//! tasks would produce): so a query waits for a slow client without
//! holding a worker, and never waits for rows only it can produce. The
//! tasks running when a pause begins finish their morsels, so the stream
//! bounds what one morsel adds: it caps morsels ([`Sink::morsel_rows_cap`])
//! at the source rows whose output fills an eighth of the queue, measured
//! as the query goes (bytes pushed per source row finished).
//!
//! **A pause never holds a slot another query waits for.** A paused query
//! keeps its scheduler slot, and its consumer may stay idle for long (a
//! cursor nobody fetches from, [`crate::live`]). So a task about to pause
//! asks its [`stride_sched::Resumer::slot_wanted`]: while a group waits
//! for admission, the query runs on instead — parking what the queue
//! cannot hold, as below — so that it finishes and frees its slot; a group
//! that queues resumes every paused query for that (`stride_sched::pause`).
//! Once no group waits, a query pauses for its consumer again.
//! A consumer that leaves early [`ResultStream::close`]s the stream: its
//! entries and their memory go at once, and what running tasks still push
//! is dropped.
//!
//! A batch that arrives while the queue is full — the tasks running when
//! the pause began finish their morsels, a morsel's output is larger than
//! the queue, or batches wait behind the watermark — or whose charge is
//! refused is *parked*: appended to a spill file of the query's spill
//! directory ([`crate::spill`]) and read back by the consumer when it
//! reaches it. So `consume` always returns at once (at worst after a disk
//! write, as a spilling buffer's `push` does), and the scheduler's contract
//! ([`stride_sched::TaskSetWork`]: tasks never block) holds. (The stream's
//! state is one mutex; a worker that parks writes the batch while holding
//! it, as a spilling [`crate::buffer::Buffer`] does.) A query without a
//! spill directory (embedded use) keeps everything in the queue, charged:
//! the pause bounds it, a refused charge fails it with 53200. The backlog
//! on disk is bounded too ([`StreamConfig::backlog_shares`]): a result that
//! runs away from its consumer without pausing (rows held behind the
//! watermark) fails with 53200 instead of filling the disk. A parked batch
//! read back is charged where the account has room (the consumer holds
//! only a few at a time).
//!
//! **Order.** [`StreamOrder::Arrival`] hands batches out as they come (a
//! query whose order is unspecified). [`StreamOrder::Sequence`] keeps the
//! order [`MorselSeq`] defines (ORDER BY, LIMIT/OFFSET: the last pipeline
//! reads a sorted or limited buffer, morsel by morsel, as row ranges): a
//! batch is released only once every row before its morsel was processed.
//! The pipeline reports each finished morsel ([`Sink::morsel_done`]); the
//! stream keeps the *watermark*, the end of the longest prefix of rows of
//! input 0, pass 0 that finished morsels cover; a batch whose position lies
//! below the watermark cannot be preceded by a batch still to come. Batches
//! from elsewhere (a pass over deferred rows) wait for the sink's finish,
//! after which everything is released in sequence order.
//!
//! ```text
//!              consume(seq, batch)                      consumer: next()
//!  workers ───────────┬──────────────────────┐          ▲ releasable entry with the
//!                     │ held + bytes ≤ queue │          │ smallest (seq, arrival):
//!                     │ and charge granted   │ else     │   Memory → its charge moves
//!                     ▼                      ▼          │            into the batch
//!          entries: (seq, n) → Memory   (seq, n) → Parked(segment, i)   Parked → the open
//!                     │                      │          │  segment is finished, the
//!                     └──────────┬───────────┘          │  batch read back, charged
//!                                └──────────────────────┘
//!  pause (a task, per morsel): backlog ≥ queue/2 and the first entry releasable
//!      ─► keep the task's Resumer, return Paused
//!  the consumer took an entry: backlog ≤ queue/4, or nothing releasable ─► resume
//!  morsel_done(seq, rows) ─► watermark advances ─► wakes the consumer
//!  finish (last finalization) ─► everything releasable
//!  finish, nothing left ─► Drained: the consumer waits for the query's handle
//!  the query ends (completion reported by a waiting thread) ─► Ok: drain; Err: the error
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use stride_sched::{FinalizeContext, QueryError, QueryStats, Resumer};

use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, Charge, QueryMemory};
use crate::operator::Sink;
use crate::seq::MorselSeq;
use crate::spill::{SpillFile, SpillWriter};
use crate::step::Steps;

/// Whether a streamed result keeps the order of its sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamOrder {
    /// As the batches arrive: the query's order is unspecified.
    Arrival,
    /// In [`MorselSeq`] order (ORDER BY, LIMIT/OFFSET).
    Sequence,
}

/// How a result is streamed.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    /// The most bytes of result kept in memory (and charged) between the
    /// workers and the consumer; more is parked on disk. Capped further at
    /// a quarter of the query's budget ([`crate::buffer::BUFFER_SHARE`]).
    pub queue_bytes: usize,
    /// The most bytes parked on disk and not yet taken, in shares of the
    /// query's budget (at least [`StreamConfig::MIN_BACKLOG_BYTES`]): a
    /// consumer that falls this far behind fails the query with 53200
    /// rather than letting a runaway result (a cross join) fill the disk.
    pub backlog_shares: usize,
    pub order: StreamOrder,
}

impl StreamConfig {
    /// The default queue: 16 MiB.
    pub const DEFAULT_QUEUE_BYTES: usize = 16 << 20;
    /// The default backlog: eight shares.
    pub const DEFAULT_BACKLOG_SHARES: usize = 8;
    /// The smallest backlog allowed, whatever the share: a client reading
    /// a result of some hundred MB at its own pace under a small share.
    pub const MIN_BACKLOG_BYTES: usize = 256 << 20;

    pub fn new(order: StreamOrder) -> Self {
        StreamConfig {
            queue_bytes: Self::DEFAULT_QUEUE_BYTES,
            backlog_shares: Self::DEFAULT_BACKLOG_SHARES,
            order,
        }
    }
}

/// A result batch handed to the consumer, with the memory charge it still
/// holds: returned to the query's account when the batch is dropped.
#[derive(Debug)]
pub struct StreamedBatch {
    pub batch: RecordBatch,
    _charge: Option<Charge>,
}

impl StreamedBatch {
    pub fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    /// Takes the first `n` rows as a batch of their own, leaving the rest
    /// here. The charge stays with the rest (the rows share its buffers),
    /// which a consumer that hands out a result in pieces keeps longest.
    pub fn take_front(&mut self, n: usize) -> StreamedBatch {
        let n = n.min(self.batch.num_rows());
        let front = self.batch.slice(0, n);
        self.batch = self.batch.slice(n, self.batch.num_rows() - n);
        StreamedBatch {
            batch: front,
            _charge: None,
        }
    }
}

/// Where an entry of the stream is.
#[derive(Debug)]
enum Entry {
    /// In memory, `bytes` charged to the query.
    Memory { batch: RecordBatch, bytes: usize },
    /// Batch `index` of parking segment `segment`, `bytes` in memory.
    Parked {
        segment: u64,
        index: usize,
        bytes: usize,
    },
}

/// A parking segment's file and how many of its batches are still to be read.
#[derive(Debug)]
struct Segment {
    file: Arc<SpillFile>,
    unread: usize,
}

/// The end of the longest prefix of rows (input 0, pass 0) covered by
/// finished morsels.
#[derive(Debug, Default)]
struct Watermark {
    next: u64,
    /// Finished ranges beyond the prefix: start → end.
    beyond: BTreeMap<u64, u64>,
}

impl Watermark {
    /// Records rows `start..end` finished; whether the prefix grew.
    fn done(&mut self, start: u64, end: u64) -> bool {
        if end <= start {
            return false;
        }
        self.beyond.insert(start, end);
        let before = self.next;
        while let Some(end) = self.beyond.remove(&self.next) {
            self.next = end;
        }
        self.next > before
    }
}

#[derive(Debug, Default)]
struct State {
    /// Batches not yet taken, by (sequence number, arrival).
    entries: BTreeMap<(MorselSeq, u64), Entry>,
    arrivals: u64,
    /// Bytes of the `Memory` entries (charged to the query).
    held: usize,
    /// Bytes of the `Parked` entries (on disk, not charged).
    parked: usize,
    /// The segment parked batches are appended to now, and its id.
    parking: Option<(u64, SpillWriter)>,
    /// Finished segments with batches still unread.
    segments: HashMap<u64, Segment>,
    next_segment: u64,
    watermark: Watermark,
    /// The sink finished: every batch arrived.
    finished: bool,
    /// [`Pull::Drained`] was handed out: it is said once, and later pulls
    /// wait for the completion (a consumer that asks again while a waiter
    /// thread reports the completion must block, not spin beside the
    /// workers that still finish the query).
    drained_told: bool,
    /// The query ended: its outcome, taken by the consumer at the end.
    ended: Option<std::result::Result<QueryStats, QueryError>>,
    /// The last pipeline is paused until the consumer drained the backlog:
    /// the resumer of the task that paused it (see the module docs).
    paused: Option<Resumer>,
    /// The consumer went away ([`ResultStream::close`]): batches still
    /// arriving from running tasks are dropped.
    closed: bool,
}

impl State {
    /// Batches not yet taken, in bytes: in memory and on disk.
    fn backlog(&self) -> usize {
        self.held + self.parked
    }
}

/// The queue between a streamed query's workers and its consumer (see the
/// module docs).
#[derive(Debug)]
pub struct ResultStream {
    state: Mutex<State>,
    /// Signalled when a batch may have become releasable, the sink
    /// finished, or the query ended.
    changed: Condvar,
    memory: Arc<QueryMemory>,
    order: StreamOrder,
    queue_bytes: usize,
    backlog_bytes: usize,
    /// Bytes of result pushed so far, and source rows of the morsels that
    /// produced them ([`Sink::morsel_done`]): their ratio sizes morsels
    /// ([`ResultStream::morsel_rows_cap`]). Relaxed counters (a size hint).
    pushed_bytes: AtomicU64,
    done_rows: AtomicU64,
}

/// What the consumer takes next.
enum Next {
    Batch(StreamedBatch),
    Read(Arc<SpillFile>, usize),
    Drained,
    End(Box<QueryStats>),
}

/// What [`ResultStream::pull`] gives the consumer.
#[derive(Debug)]
pub enum Pull {
    Batch(StreamedBatch),
    /// The sink finished and every batch was taken, and no completion was
    /// reported to the stream: the caller waits for the query's handle.
    /// Said once; later pulls wait (up to their patience) for
    /// [`ResultStream::end`].
    Drained,
    /// The query completed (reported by [`ResultStream::end`]) and every
    /// batch was taken: its statistics (boxed: batches are the common
    /// case, and far smaller).
    Ended(Box<QueryStats>),
    /// Nothing happened within the patience given.
    Idle,
}

impl ResultStream {
    pub fn new(memory: Arc<QueryMemory>, config: StreamConfig) -> Self {
        let budget = memory.budget();
        let share = budget / crate::buffer::BUFFER_SHARE;
        ResultStream {
            state: Mutex::default(),
            changed: Condvar::new(),
            memory,
            order: config.order,
            queue_bytes: config.queue_bytes.min(share.max(1)),
            backlog_bytes: budget
                .saturating_mul(config.backlog_shares)
                .max(StreamConfig::MIN_BACKLOG_BYTES),
            pushed_bytes: AtomicU64::new(0),
            done_rows: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a batch (a worker, inside a task): queued where the queue has
    /// room and the charge is granted, parked on disk where not. Never
    /// waits for the consumer.
    pub fn push(&self, seq: MorselSeq, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let bytes = batch_bytes(&batch);
        self.pushed_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        let mut state = self.lock();
        if state.closed {
            return Ok(());
        }
        let n = state.arrivals;
        state.arrivals += 1;
        let spill = self.memory.spill();
        let fits = spill.is_none() || state.held.saturating_add(bytes) <= self.queue_bytes;
        let charged = if !fits {
            Err(ExecError::MemoryExhausted {
                scope: crate::memory::MemoryScope::Query,
                what: "streamed result queue".into(),
                requested: bytes,
                used: state.held,
                limit: self.queue_bytes,
            })
        } else if spill.is_some() {
            self.memory.grow_spillable(bytes, "streamed result")
        } else {
            self.memory.grow(bytes, "query result")
        };
        let entry = match charged {
            Ok(()) => {
                state.held += bytes;
                Entry::Memory { batch, bytes }
            }
            Err(refused) => {
                let spill = self.memory.spill_for(refused)?.clone();
                if state.parked.saturating_add(bytes) > self.backlog_bytes {
                    return Err(ExecError::MemoryExhausted {
                        scope: crate::memory::MemoryScope::Query,
                        what: "the streamed result's backlog on disk (the client reads \
                               slower than the query produces)"
                            .into(),
                        requested: bytes,
                        used: state.parked,
                        limit: self.memory.budget(),
                    });
                }
                state.parked += bytes;
                if state.parking.is_none() {
                    let id = state.next_segment;
                    state.next_segment += 1;
                    state.parking = Some((id, spill.create(batch.schema())?));
                }
                let Some((segment, writer)) = state.parking.as_mut() else {
                    return Err(ExecError::Internal("no parking segment".into()));
                };
                Entry::Parked {
                    segment: *segment,
                    index: writer.write(&batch)?,
                    bytes,
                }
            }
        };
        let releasable = self.releasable(&state, seq);
        state.entries.insert((seq, n), entry);
        drop(state);
        if releasable {
            self.changed.notify_one();
        }
        Ok(())
    }

    /// Whether the task about to take its next morsel should pause (see
    /// the module docs): `resumer` gives the handle the consumer resumes the
    /// set with; without one (no scheduler) the stream never pauses.
    ///
    /// A task that would pause while another group waits for a slot
    /// ([`Resumer::slot_wanted`]) runs on instead, parking what the queue
    /// cannot hold: so the query finishes and its slot goes to the waiting
    /// group — a consumer that stays idle (an open cursor) never keeps a
    /// slot from other queries. Once no group waits, it pauses again.
    pub fn pause(&self, resumer: &dyn Fn() -> Option<Resumer>) -> bool {
        let mut state = self.lock();
        if state.closed || state.ended.is_some() {
            return false;
        }
        let due = state.paused.is_some()
            || (state.backlog() >= self.pause_bytes() && self.head_releasable(&state));
        if !due {
            return false;
        }
        let Some(r) = state.paused.clone().or_else(resumer) else {
            return false;
        };
        if r.slot_wanted() {
            state.paused = None;
            return false;
        }
        state.paused = Some(r);
        true
    }

    /// The most source rows a morsel should hold, so that one morsel's
    /// output stays within an eighth of the queue (the tasks running when
    /// a pause begins finish their morsels: this bounds what they add).
    /// Estimated from the bytes pushed per source row so far; before any
    /// morsel finished, [`Self::FIRST_MORSEL_ROWS`].
    pub fn morsel_rows_cap(&self) -> usize {
        let rows = self.done_rows.load(Ordering::Relaxed);
        let bytes = self.pushed_bytes.load(Ordering::Relaxed);
        if rows == 0 {
            return Self::FIRST_MORSEL_ROWS;
        }
        let per_row = (bytes / rows).max(1);
        ((self.queue_bytes / 8) as u64 / per_row).clamp(1, usize::MAX as u64) as usize
    }

    /// Morsel rows before the stream knows its bytes per row: one, since a
    /// source row may produce any number of result rows (a cross join's
    /// probe row, every row of the other side), and the tasks running when
    /// a pause begins finish their morsels whatever they produce. A source
    /// row whose output alone passes an eighth of the queue gets morsels
    /// of one row; what the running tasks' last morsels add beyond the
    /// queue parks on disk.
    pub const FIRST_MORSEL_ROWS: usize = 1;

    /// The backlog at which tasks pause: half the queue.
    fn pause_bytes(&self) -> usize {
        (self.queue_bytes / 2).max(1)
    }

    /// Whether the consumer may take the first entry now.
    fn head_releasable(&self, state: &State) -> bool {
        state
            .entries
            .first_key_value()
            .is_some_and(|((seq, _), _)| self.releasable(state, *seq))
    }

    /// The resumer to call once the lock is released, if the consumer's
    /// progress ends a pause: the backlog fell to a quarter of the queue,
    /// or there is nothing the consumer may take now.
    fn resume_due(&self, state: &mut State) -> Option<Resumer> {
        state.paused.as_ref()?;
        if state.backlog() <= self.queue_bytes / 4 || !self.head_releasable(state) {
            state.paused.take()
        } else {
            None
        }
    }

    /// Whether a batch at `seq` may be handed out now.
    fn releasable(&self, state: &State, seq: MorselSeq) -> bool {
        match self.order {
            StreamOrder::Arrival => true,
            StreamOrder::Sequence => {
                state.finished
                    || (seq.input() == 0
                        && seq.pass() == 0
                        && seq.position() < state.watermark.next)
            }
        }
    }

    /// Every row of the morsel whose first batch is at `first` and that
    /// held `rows` source rows went through the pipeline.
    pub fn morsel_done(&self, first: MorselSeq, rows: usize) {
        self.done_rows.fetch_add(rows as u64, Ordering::Relaxed);
        if self.order != StreamOrder::Sequence || first.input() != 0 || first.pass() != 0 {
            return;
        }
        let start = first.position();
        let grew = self
            .lock()
            .watermark
            .done(start, start.saturating_add(rows as u64));
        if grew {
            self.changed.notify_all();
        }
    }

    /// The last pipeline finished: every batch has arrived.
    pub fn finish(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }

    /// The consumer goes away before the end (a portal or cursor closed
    /// early): every entry is dropped and its memory returned, and batches
    /// that running tasks still push are dropped. The caller cancels the
    /// query.
    pub fn close(&self) {
        let mut state = self.lock();
        state.closed = true;
        self.clear(&mut state);
    }

    /// The query ended (seen by the thread waiting for its completion).
    pub fn end(&self, outcome: std::result::Result<QueryStats, QueryError>) {
        self.lock().ended = Some(outcome);
        self.changed.notify_all();
    }

    /// What the consumer takes next, waiting (on the calling thread, never
    /// a worker) at most `patience` for something to happen; the query's
    /// error once it failed (what was left is dropped with it).
    pub fn pull(&self, patience: Duration) -> std::result::Result<Pull, StreamEnd> {
        let deadline = Instant::now() + patience;
        let next = {
            let mut state = self.lock();
            loop {
                if let Some(Err(_)) = &state.ended {
                    self.clear(&mut state);
                    let Some(Err(e)) = state.ended.take() else {
                        unreachable!("checked just above")
                    };
                    return Err(StreamEnd(e));
                }
                let next = self.take(&mut state)?;
                if let Some(resumer) = self.resume_due(&mut state) {
                    // Outside the lock: the resumed tasks take it first thing.
                    drop(state);
                    resumer.resume();
                    state = self.lock();
                }
                if let Some(next) = next {
                    break next;
                }
                let now = Instant::now();
                if now >= deadline {
                    return Ok(Pull::Idle);
                }
                state = self
                    .changed
                    .wait_timeout(state, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        match next {
            Next::Batch(b) => Ok(Pull::Batch(b)),
            Next::Drained => Ok(Pull::Drained),
            Next::End(stats) => Ok(Pull::Ended(stats)),
            Next::Read(file, index) => {
                let batch = file.read(index).map_err(StreamEnd::exec)?;
                // Charged where the account has room; where not, carried
                // outside it: the consumer holds a bounded number of
                // batches, and the rows are computed already.
                let charge = self
                    .memory
                    .charge(batch_bytes(&batch), "streamed result")
                    .ok();
                Ok(Pull::Batch(StreamedBatch {
                    batch,
                    _charge: charge,
                }))
            }
        }
    }

    /// Takes the first releasable entry, if any; `End` once the query
    /// succeeded and nothing is left.
    fn take(&self, state: &mut State) -> std::result::Result<Option<Next>, StreamEnd> {
        let first = state.entries.first_key_value().map(|(k, _)| *k);
        let Some(key) = first else {
            return Ok(match state.ended.take() {
                Some(Ok(stats)) => Some(Next::End(Box::new(stats))),
                other => {
                    state.ended = other;
                    let drained = state.finished && !state.drained_told;
                    state.drained_told |= drained;
                    drained.then_some(Next::Drained)
                }
            });
        };
        if !self.releasable(state, key.0) && !matches!(state.ended, Some(Ok(_))) {
            return Ok(None);
        }
        let Some(entry) = state.entries.remove(&key) else {
            return Ok(None);
        };
        Ok(Some(match entry {
            Entry::Memory { batch, bytes } => {
                state.held -= bytes;
                Next::Batch(StreamedBatch {
                    batch,
                    _charge: Some(self.memory.adopt(bytes)),
                })
            }
            Entry::Parked {
                segment,
                index,
                bytes,
            } => {
                state.parked -= bytes;
                if state.parking.as_ref().is_some_and(|(id, _)| *id == segment) {
                    // The consumer caught up with the parking: this segment
                    // is finished for reading; the next park opens another.
                    if let Some((id, writer)) = state.parking.take() {
                        let file = writer.finish().map_err(StreamEnd::exec)?;
                        let unread = file.batches();
                        state.segments.insert(
                            id,
                            Segment {
                                file: Arc::new(file),
                                unread,
                            },
                        );
                    }
                }
                let Some(seg) = state.segments.get_mut(&segment) else {
                    return Err(StreamEnd::exec(ExecError::Internal(
                        "parked batch without its segment".into(),
                    )));
                };
                seg.unread -= 1;
                let file = seg.file.clone();
                if seg.unread == 0 {
                    // Deleted once this last batch was read.
                    state.segments.remove(&segment);
                }
                Next::Read(file, index)
            }
        }))
    }

    /// Drops every entry and returns what they held.
    fn clear(&self, state: &mut State) {
        state.paused = None;
        state.entries.clear();
        state.parked = 0;
        state.segments.clear();
        state.parking = None;
        self.memory.shrink(std::mem::take(&mut state.held));
    }
}

impl Drop for ResultStream {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        let held = std::mem::take(&mut state.held);
        self.memory.shrink(held);
    }
}

/// Why a stream ended without its last batch: the query's error.
#[derive(Debug)]
pub struct StreamEnd(pub QueryError);

impl StreamEnd {
    fn exec(e: ExecError) -> Self {
        StreamEnd(QueryError::Failed(stride_sched::TaskError::new(e)))
    }
}

/// The sink of a streamed query's last pipeline.
#[derive(Debug)]
pub struct StreamSink {
    stream: Arc<ResultStream>,
}

impl StreamSink {
    pub fn new(stream: Arc<ResultStream>) -> Self {
        StreamSink { stream }
    }
}

impl Sink for StreamSink {
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, _worker: usize) -> Result<()> {
        self.stream.push(seq, batch)
    }

    fn morsel_done(&self, first: MorselSeq, rows: usize) {
        self.stream.morsel_done(first, rows);
    }

    fn pause(&self, resumer: &dyn Fn() -> Option<Resumer>) -> bool {
        self.stream.pause(resumer)
    }

    fn morsel_rows_cap(&self) -> Option<usize> {
        Some(self.stream.morsel_rows_cap())
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        self.stream.finish();
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        match self.stream.order {
            StreamOrder::Arrival => "stream result".into(),
            StreamOrder::Sequence => "stream result in order".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::tests::batch;
    use crate::memory::MemoryPool;
    use crate::spill::SpillArea;
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;

    fn first(b: &StreamedBatch) -> i64 {
        b.batch.column(0).as_primitive::<Int64Type>().value(0)
    }

    /// The next batch; `None` at the end.
    fn next(stream: &ResultStream) -> Option<StreamedBatch> {
        match stream.pull(Duration::from_millis(100)).unwrap() {
            Pull::Batch(b) => Some(b),
            Pull::Ended(_) | Pull::Drained => None,
            Pull::Idle => panic!("nothing releasable"),
        }
    }

    #[test]
    fn sequence_order_waits_for_the_watermark_and_parks_past_the_queue() {
        let parent = crate::spill::tests::temp_parent("stream");
        let area = SpillArea::new(Some(&parent));
        // A queue of two 8 kB batches (a quarter of 64 kB).
        let memory = QueryMemory::with_spill(MemoryPool::new(1 << 30), 64_000, Some(area.query()));
        let stream = ResultStream::new(memory.clone(), StreamConfig::new(StreamOrder::Sequence));
        // Morsels of 1000 rows finish out of order: 2, then 0.
        stream.push(MorselSeq::at(2000), batch(2000, 1000)).unwrap();
        stream.morsel_done(MorselSeq::at(2000), 1000);
        stream.push(MorselSeq::at(0), batch(0, 1000)).unwrap();
        stream.morsel_done(MorselSeq::at(0), 1000);
        // Morsel 1 is still running: only morsel 0 is releasable.
        let b = next(&stream).unwrap();
        assert_eq!(first(&b), 0);
        drop(b);
        {
            let mut state = stream.lock();
            assert!(stream.take(&mut state).unwrap().is_none());
        }
        // The queue has room for one more batch (1000); 3 and 4 park on disk.
        for m in [1i64, 3, 4] {
            stream
                .push(MorselSeq::at(m as u64 * 1000), batch(m * 1000, 1000))
                .unwrap();
        }
        assert!(memory.spilled_bytes() > 0);
        stream.morsel_done(MorselSeq::at(1000), 1000);
        stream.morsel_done(MorselSeq::at(3000), 2000);
        stream.finish();
        stream.end(Ok(QueryStats::default()));
        let got: Vec<i64> = std::iter::from_fn(|| next(&stream))
            .map(|b| first(&b))
            .collect();
        assert_eq!(got, vec![1000, 2000, 3000, 4000]);
        assert_eq!(memory.used(), 0, "every charge went back");
        drop(stream);
        drop((memory, area));
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_failed_query_ends_the_stream_with_its_error_and_returns_the_memory() {
        let memory = QueryMemory::new(MemoryPool::new(1 << 30), 1 << 20);
        let stream = ResultStream::new(memory.clone(), StreamConfig::new(StreamOrder::Arrival));
        stream.push(MorselSeq::at(5), batch(5, 10)).unwrap();
        stream.push(MorselSeq::at(0), batch(0, 10)).unwrap();
        assert_eq!(first(&next(&stream).unwrap()), 0);
        assert!(memory.used() > 0, "batch 5 is still held");
        stream.end(Err(QueryError::Cancelled));
        assert!(matches!(
            stream.pull(Duration::ZERO),
            Err(StreamEnd(QueryError::Cancelled))
        ));
        assert_eq!(memory.used(), 0);
        assert_eq!(stream.lock().entries.len(), 0);
    }

    #[test]
    fn a_closed_stream_returns_its_memory_and_drops_later_batches() {
        let memory = QueryMemory::new(MemoryPool::new(1 << 30), 1 << 20);
        let stream = ResultStream::new(memory.clone(), StreamConfig::new(StreamOrder::Arrival));
        stream.push(MorselSeq::at(0), batch(0, 10)).unwrap();
        assert!(memory.used() > 0);
        stream.close();
        assert_eq!(memory.used(), 0, "the queue's charge went back");
        // A task still running pushes its morsel's rows: dropped.
        stream.push(MorselSeq::at(10), batch(10, 10)).unwrap();
        assert_eq!(memory.used(), 0);
        assert!(!stream.pause(&|| None), "a closed stream never pauses");
        assert!(matches!(stream.pull(Duration::ZERO), Ok(Pull::Idle)));
    }

    #[test]
    fn a_batch_handed_out_in_pieces_keeps_its_charge_with_the_rest() {
        let memory = QueryMemory::new(MemoryPool::new(1 << 30), 1 << 20);
        let stream = ResultStream::new(memory.clone(), StreamConfig::new(StreamOrder::Arrival));
        stream.push(MorselSeq::at(0), batch(0, 10)).unwrap();
        let mut rest = next(&stream).unwrap();
        let front = rest.take_front(4);
        assert_eq!((front.num_rows(), rest.num_rows()), (4, 6));
        assert_eq!((first(&front), first(&rest)), (0, 4));
        drop(front);
        assert!(memory.used() > 0, "the rest still holds the batch's charge");
        drop(rest);
        assert_eq!(memory.used(), 0);
    }

    #[test]
    fn a_finished_stream_is_drained_until_its_completion_is_reported() {
        let memory = QueryMemory::new(MemoryPool::new(1 << 30), 1 << 20);
        let stream = ResultStream::new(memory, StreamConfig::new(StreamOrder::Arrival));
        assert!(matches!(stream.pull(Duration::ZERO), Ok(Pull::Idle)));
        stream.push(MorselSeq::at(0), batch(0, 10)).unwrap();
        stream.finish();
        assert_eq!(first(&next(&stream).unwrap()), 0);
        assert!(matches!(stream.pull(Duration::ZERO), Ok(Pull::Drained)));
        // Said once: asking again waits for the completion instead of
        // returning at once (a consumer loop would spin on it).
        assert!(matches!(stream.pull(Duration::ZERO), Ok(Pull::Idle)));
        let waited = Instant::now();
        assert!(matches!(
            stream.pull(Duration::from_millis(20)),
            Ok(Pull::Idle)
        ));
        assert!(waited.elapsed() >= Duration::from_millis(20));
        stream.end(Ok(QueryStats::default()));
        assert!(matches!(stream.pull(Duration::ZERO), Ok(Pull::Ended(_))));
    }
}
