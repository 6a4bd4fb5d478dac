//! Sort and top-k, in memory or external.
//!
//! Each worker collects its input batches; with a `fetch` (top-k) a worker
//! compacts its collection to its own best `fetch` rows whenever it holds more
//! than `max(2·fetch, 8192)` rows, so memory stays bounded by the k and a
//! top-k never spills.
//!
//! **In memory, split** (no `fetch`, more than [`SPLIT_MIN_ROWS`] rows):
//! `finish` does no sorting itself; it returns two steps of parts
//! ([`crate::step`]), so that sorting millions of rows is hundreds of
//! morsel-sized tasks any worker takes and a newly arrived query can
//! preempt between:
//!
//! ```text
//!   finish ──► step 1, sort units: the input in units of an eighth of
//!              it, 4 Ki to 16 Ki rows (`unit_rows`); a part converts one
//!              unit's keys to Arrow's row format and sorts the unit's
//!              row indices (stable)
//!          ──► step 1 finish: samples every (R/16)-th row of each
//!              sorted unit and picks splitters: P-1 samples at the
//!              quantiles, P = rows / R, R = an eighth of the input,
//!              4 Ki to 32 Ki rows (`range_rows`)
//!          ──► step 2, merge key ranges: part p finds, by binary search in
//!              each unit, the rows between splitters p-1 and p, merges them
//!              and writes blocks with sequence (p, block) to the output
//! ```
//!
//! Rows are totally ordered by (key, unit, position in the unit's sorted
//! order), so ranges split even a run of equal keys evenly, and ties keep
//! unit order then input order: the result equals a stable sort of the
//! units' concatenation.
//!
//! **In memory, one step** (top-k, no keys, or few rows): `finish`
//! concatenates all workers' rows, sorts them once (several keys: a stable
//! sort of the rows' keys in Arrow's row format; one key or a top-k:
//! Arrow's lexicographic sort, which does not keep ties in input order) and
//! writes the result to the output buffer in blocks.
//!
//! Memory: every kept input batch is charged to the query as it arrives
//! (and a top-k compaction returns what it dropped); a one-step `finish`
//! charges the concatenated and the sorted copy while it builds them, a
//! split sort each unit's keys and order from its part until the merge
//! ends; the output buffer charges the result, after which the input is
//! returned. A split sort is chosen only when the query's share holds
//! another copy of the input at `finish`; otherwise the sort goes external.
//!
//! **External sort.** Where the query has a spill directory, a refused
//! charge does not fail the sort:
//!
//! ```text
//!             consume: charge ok ─► keep the batch in the worker's run
//!   in memory ───────────────────────────────────────────────────────────
//!      │ a charge refused (in consume, or finish's in-memory sort)
//!      ▼
//!   external  the worker sorts its run and writes it as a sorted run
//!      │      file (chunks of bounded bytes); the run's memory goes back.
//!      │      From now on every worker spills its run once it holds
//!      │      `run_cap` (a quarter of the query's budget over the workers),
//!      │      which leaves room for sorting a run and for the merge.
//!      ▼
//!   finish    remaining runs are spilled too; then a k-way merge of the
//!             run files (Arrow's row format compares the keys; ties keep
//!             run order, so the sort stays stable) emits blocks of
//!             bounded rows to the output buffer, which spills in turn.
//!             A merge holds one chunk of each run it reads; where the
//!             budget does not cover all runs' chunks, it first merges
//!             the runs it can hold into a longer run, and repeats.
//! ```
//!
//! Sorting a run for a spill needs its keys in row format and an index per
//! row; that is charged, and where it is refused the run is split in halves
//! sorted on their own (one batch — a morsel's work — is sorted uncharged).
//! A merge that cannot hold even two runs' chunks fails with 53200.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use stride_sched::FinalizeContext;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{
    concat_batches, interleave_record_batch, lexsort_to_indices, take_record_batch, SortColumn,
};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};

use super::{PerWorker, Sink};
use crate::buffer::Buffer;
use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, Charge, QueryMemory};
use crate::plan::SortKey;
use crate::seq::MorselSeq;
use crate::spill::{QuerySpill, SpillFile};
use crate::step::{SplitStep, Steps};

/// Rows per block of sorted output.
const OUTPUT_BLOCK_ROWS: usize = 64 * 1024;

/// Most rows per chunk of a sorted run file and per block a merge emits.
const MERGE_CHUNK_ROWS: usize = 8192;

/// Most rows per unit of a split sort's first step (one part each).
const SORT_UNIT_ROWS: usize = 16 * 1024;

/// Fewest rows per unit: inputs of fewer than `8 · SORT_UNIT_ROWS` rows
/// are cut into 8 units or units of this many rows ([`unit_rows`]).
const MIN_SORT_UNIT_ROWS: usize = 4 * 1024;

/// Most rows per key range of a split sort's merge (one part each).
const MERGE_RANGE_ROWS: usize = 32 * 1024;

/// Target rows per key range of a split sort of `rows` rows: an eighth of
/// the input, between [`MIN_SORT_UNIT_ROWS`] and [`MERGE_RANGE_ROWS`] (a
/// sort just past [`SPLIT_MIN_ROWS`] merged as one range would be one
/// long part again: q16's 18 K rows, ~3 ms).
fn range_rows(rows: usize) -> usize {
    (rows / 8).clamp(MIN_SORT_UNIT_ROWS, MERGE_RANGE_ROWS)
}

/// Inputs of at most this many rows are sorted in one step inside
/// `finish`: a split would cost more than it saves. (TPC-H q16 at SF 1
/// sorts 18 K rows on four keys, two of them strings: ~3 ms as one step.)
pub const SPLIT_MIN_ROWS: usize = 2 * MIN_SORT_UNIT_ROWS;

/// Rows per unit of a split sort of `rows` rows: about an eighth of the
/// input, between [`MIN_SORT_UNIT_ROWS`] and [`SORT_UNIT_ROWS`], so that
/// a sort just past [`SPLIT_MIN_ROWS`] is not one long unit and a large
/// one does not merge more units than it needs.
fn unit_rows(rows: usize) -> usize {
    (rows / 8).clamp(MIN_SORT_UNIT_ROWS, SORT_UNIT_ROWS)
}

#[derive(Debug, Default)]
struct Run {
    batches: Vec<RecordBatch>,
    rows: usize,
    /// Bytes of `batches` charged to the query.
    bytes: usize,
}

/// A sorted run on disk.
#[derive(Debug)]
struct SortedRun {
    file: SpillFile,
    /// Bytes of its largest chunk (what a merge holds of it at a time).
    chunk_bytes: usize,
}

#[derive(Debug)]
pub struct SortSink {
    keys: Vec<SortKey>,
    fetch: Option<usize>,
    schema: SchemaRef,
    runs: PerWorker<Run>,
    memory: Arc<QueryMemory>,
    output: Arc<Buffer>,
    /// The sort keys in Arrow's row format (external sort).
    converter: RowConverter,
    /// Set at the first spill: every worker caps its run from then on.
    external: AtomicBool,
    /// Bytes a worker's run may hold once the sort is external.
    run_cap: usize,
    /// Target bytes of a run file's chunk.
    chunk_bytes: usize,
    spilled: Mutex<Vec<SortedRun>>,
    /// What a split sort's steps share (their own row converter).
    split: Arc<SplitSort>,
}

impl SortSink {
    pub fn new(
        keys: Vec<SortKey>,
        fetch: Option<usize>,
        schema: SchemaRef,
        workers: usize,
        memory: Arc<QueryMemory>,
        output: Arc<Buffer>,
    ) -> Result<Self> {
        let schema = crate::nullable_schema(&schema);
        let fields = keys
            .iter()
            .map(|k| {
                Ok(SortField::new_with_options(
                    k.expr.data_type(&schema)?,
                    k.options,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let converter = RowConverter::new(fields.clone())?;
        let split = Arc::new(SplitSort {
            keys: keys.clone(),
            converter: RowConverter::new(fields)?,
            memory: memory.clone(),
            output: output.clone(),
        });
        let budget = memory.budget();
        Ok(SortSink {
            split,
            keys,
            fetch,
            schema,
            runs: PerWorker::new(workers),
            run_cap: (budget / (4 * workers.max(1))).max(64 << 10),
            chunk_bytes: (budget / 64).clamp(16 << 10, 2 << 20),
            memory,
            output,
            converter,
            external: AtomicBool::new(false),
            spilled: Mutex::default(),
        })
    }

    /// Sorts `batches` (of `bytes` in all) and keeps the first `fetch` rows;
    /// the concatenated and the sorted copy are charged while they live.
    fn sort(&self, batches: &[RecordBatch], bytes: usize) -> Result<RecordBatch> {
        let _copies = self.memory.charge(2 * bytes, "sort")?;
        let all = concat_batches(&self.schema, batches)?;
        if all.num_rows() == 0 || self.keys.is_empty() {
            let n = self.fetch.unwrap_or(all.num_rows()).min(all.num_rows());
            return Ok(all.slice(0, n));
        }
        if self.fetch.is_none() && self.keys.len() > 1 {
            // Several keys: comparing rows in Arrow's row format (one
            // memcmp) beats a lexicographic sort's per-column comparisons
            // several times over, and the sort is stable.
            let rows = self.key_rows(&all)?;
            let mut order: Vec<u32> = (0..all.num_rows() as u32).collect();
            order.sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
            return Ok(take_record_batch(&all, &UInt32Array::from(order))?);
        }
        let columns = self
            .keys
            .iter()
            .map(|k| {
                Ok(SortColumn {
                    values: k.expr.evaluate(&all)?.into_array(all.num_rows())?,
                    options: Some(k.options),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let indices: UInt32Array = lexsort_to_indices(&columns, self.fetch)?;
        Ok(take_record_batch(&all, &indices)?)
    }

    /// Whether a refused charge can turn this sort external.
    fn can_spill(&self) -> bool {
        self.fetch.is_none() && !self.keys.is_empty() && self.memory.spill().is_some()
    }

    /// The sort keys of `batch` in row format.
    fn key_rows(&self, batch: &RecordBatch) -> Result<Rows> {
        let columns = self
            .keys
            .iter()
            .map(|k| Ok(k.expr.evaluate(batch)?.into_array(batch.num_rows())?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(self.converter.convert_columns(&columns)?)
    }

    /// Rows per chunk for batches of `bytes` over `rows` rows.
    fn chunk_rows(&self, bytes: usize, rows: usize) -> usize {
        let per_row = (bytes / rows.max(1)).max(1);
        (self.chunk_bytes / per_row).clamp(16, MERGE_CHUNK_ROWS)
    }

    /// Sorts `batches` and writes them as sorted runs (more than one where
    /// the memory to sort them all at once is refused).
    fn spill_sorted(&self, spill: &Arc<QuerySpill>, batches: &[RecordBatch]) -> Result<()> {
        if batches.is_empty() {
            return Ok(());
        }
        let rows = batches
            .iter()
            .map(|b| self.key_rows(b))
            .collect::<Result<Vec<_>>>()?;
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        let transient = rows.iter().map(Rows::size).sum::<usize>() + 8 * n;
        let _sorting = match self.memory.charge(transient, "sort run") {
            Ok(c) => Some(c),
            // One batch is a morsel's work: sorted without a charge.
            Err(_) if batches.len() == 1 => None,
            Err(refused) => {
                self.memory.spill_for(refused)?;
                drop(rows);
                let (a, b) = batches.split_at(batches.len() / 2);
                self.spill_sorted(spill, a)?;
                return self.spill_sorted(spill, b);
            }
        };
        let mut order: Vec<(usize, usize)> = rows
            .iter()
            .enumerate()
            .flat_map(|(b, r)| (0..r.num_rows()).map(move |i| (b, i)))
            .collect();
        order.sort_by(|&(a, i), &(b, j)| rows[a].row(i).cmp(&rows[b].row(j)));
        let bytes: usize = batches.iter().map(batch_bytes).sum();
        let refs: Vec<&RecordBatch> = batches.iter().collect();
        let mut writer = spill.create(self.schema.clone())?;
        let mut chunk_bytes = 0;
        for chunk in order.chunks(self.chunk_rows(bytes, n)) {
            let out = interleave_record_batch(&refs, chunk)?;
            chunk_bytes = chunk_bytes.max(batch_bytes(&out));
            writer.write(&out)?;
        }
        self.external.store(true, Ordering::Relaxed);
        self.spilled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(SortedRun {
                file: writer.finish()?,
                chunk_bytes,
            });
        Ok(())
    }

    /// Spills `run` (its charge goes back) and, with it, `extra` (a batch
    /// whose charge was refused).
    fn spill_run(
        &self,
        spill: &Arc<QuerySpill>,
        run: &mut Run,
        extra: Option<RecordBatch>,
    ) -> Result<()> {
        let mut batches = std::mem::take(&mut run.batches);
        batches.extend(extra);
        let written = self.spill_sorted(spill, &batches);
        drop(batches);
        self.memory.shrink(std::mem::take(&mut run.bytes));
        run.rows = 0;
        written
    }

    /// Too big to sort in memory (`refused`): sorts `batches` (`bytes`
    /// charged) externally after all.
    fn sort_after_all_external(
        &self,
        refused: crate::ExecError,
        batches: Vec<RecordBatch>,
        bytes: usize,
        cx: &FinalizeContext<'_>,
    ) -> Result<()> {
        let spill = self.memory.spill_for(refused)?;
        let mut run = Run {
            batches,
            rows: 0,
            bytes,
        };
        self.spill_run(spill, &mut run, None)?;
        self.finish_external(spill, Vec::new(), cx)
    }

    /// The external finish: spills what is left in memory and merges all
    /// runs, stopping between output blocks once the query is cancelled.
    fn finish_external(
        &self,
        spill: &Arc<QuerySpill>,
        runs: Vec<Run>,
        cx: &FinalizeContext<'_>,
    ) -> Result<()> {
        for mut run in runs {
            self.spill_run(spill, &mut run, None)?;
        }
        let mut runs: Vec<SortedRun> =
            std::mem::take(&mut *self.spilled.lock().unwrap_or_else(|e| e.into_inner()));
        let mut seq = 0;
        while !runs.is_empty() {
            // Open as many runs as the budget holds one chunk of.
            let mut cursors = Vec::new();
            for (i, run) in runs.iter().enumerate() {
                match self.memory.charge(2 * run.chunk_bytes, "sort merge") {
                    Ok(charge) => cursors.push((i, charge)),
                    Err(refused) if cursors.len() >= 2 => {
                        self.memory.spill_for(refused)?;
                        break;
                    }
                    Err(refused) => return Err(refused),
                }
            }
            let n = cursors.len();
            let merging: Vec<SortedRun> = runs.drain(..n).collect();
            let cursors = merging
                .iter()
                .zip(cursors)
                .map(|(run, (_, charge))| Cursor::new(self, &run.file, charge))
                .collect::<Result<Vec<_>>>()?;
            if runs.is_empty() {
                merge(self, cursors, MERGE_CHUNK_ROWS, cx, &mut |block| {
                    self.output.push(MorselSeq::at(seq), block)?;
                    seq += 1;
                    Ok(())
                })?;
            } else {
                // One pass more: the merged runs become one longer run.
                let mut writer = spill.create(self.schema.clone())?;
                let mut chunk_bytes = 0;
                let bytes = merging.iter().map(|r| r.file.bytes() as usize).sum();
                let total = merging
                    .iter()
                    .map(|r| (0..r.file.batches()).map(|i| r.file.rows(i)).sum::<usize>())
                    .sum();
                let rows = self.chunk_rows(bytes, total);
                merge(self, cursors, rows, cx, &mut |block| {
                    chunk_bytes = chunk_bytes.max(batch_bytes(&block));
                    writer.write(&block).map(|_| ())
                })?;
                runs.push(SortedRun {
                    file: writer.finish()?,
                    chunk_bytes,
                });
            }
        }
        Ok(())
    }
}

/// A merge's position in one sorted run: its current chunk and that
/// chunk's keys.
struct Cursor<'a> {
    file: &'a SpillFile,
    next_chunk: usize,
    batch: RecordBatch,
    rows: Rows,
    pos: usize,
    /// The batch's slot in the merge's pending batches.
    slot: usize,
    _charge: Charge,
}

impl<'a> Cursor<'a> {
    fn new(sink: &SortSink, file: &'a SpillFile, charge: Charge) -> Result<Option<Self>> {
        let mut c = Cursor {
            file,
            next_chunk: 0,
            batch: RecordBatch::new_empty(sink.schema.clone()),
            rows: sink.converter.empty_rows(0, 0),
            pos: 0,
            slot: 0,
            _charge: charge,
        };
        Ok(c.advance(sink)?.then_some(c))
    }

    /// Loads the next non-empty chunk; `false` when the run is done.
    fn advance(&mut self, sink: &SortSink) -> Result<bool> {
        while self.next_chunk < self.file.batches() {
            let batch = self.file.read(self.next_chunk)?;
            self.next_chunk += 1;
            if batch.num_rows() > 0 {
                self.rows = sink.key_rows(&batch)?;
                self.batch = batch;
                self.pos = 0;
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// Merges sorted runs into blocks of at most `block_rows` rows, handed to
/// `emit` in order. Equal keys come in cursor order. Between blocks it
/// stops with a cancelled error once `cx` says the query was
/// cancelled (a merge of many runs can take seconds).
fn merge(
    sink: &SortSink,
    cursors: Vec<Option<Cursor<'_>>>,
    block_rows: usize,
    cx: &FinalizeContext<'_>,
    emit: &mut dyn FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let mut cursors: Vec<Cursor<'_>> = cursors.into_iter().flatten().collect();
    // Batches the block being built takes rows from.
    let mut pending: Vec<RecordBatch> = Vec::new();
    for c in cursors.iter_mut() {
        c.slot = pending.len();
        pending.push(c.batch.clone());
    }
    let less = |cursors: &[Cursor<'_>], a: usize, b: usize| {
        let (x, y) = (&cursors[a], &cursors[b]);
        (x.rows.row(x.pos), a) < (y.rows.row(y.pos), b)
    };
    // A binary min-heap of cursor indices.
    let mut heap: Vec<usize> = (0..cursors.len()).collect();
    for i in (0..heap.len() / 2).rev() {
        sift_down(&mut heap, i, &|a, b| less(&cursors, a, b));
    }
    let mut block: Vec<(usize, usize)> = Vec::with_capacity(block_rows);
    let flush = |pending: &mut Vec<RecordBatch>,
                 block: &mut Vec<(usize, usize)>,
                 cursors: &mut [Cursor<'_>],
                 emit: &mut dyn FnMut(RecordBatch) -> Result<()>|
     -> Result<()> {
        if !block.is_empty() {
            let refs: Vec<&RecordBatch> = pending.iter().collect();
            let out = interleave_record_batch(&refs, block)?;
            block.clear();
            emit(out)?;
        }
        pending.clear();
        for c in cursors.iter_mut() {
            c.slot = pending.len();
            pending.push(c.batch.clone());
        }
        Ok(())
    };
    while let Some(&top) = heap.first() {
        let c = &mut cursors[top];
        block.push((c.slot, c.pos));
        c.pos += 1;
        let live = if c.pos < c.batch.num_rows() {
            true
        } else if c.advance(sink)? {
            c.slot = pending.len();
            pending.push(c.batch.clone());
            true
        } else {
            false
        };
        reheap_top(&mut heap, live, &|a, b| less(&cursors, a, b));
        if block.len() >= block_rows {
            flush(&mut pending, &mut block, &mut cursors, emit)?;
            if cx.stop_requested() {
                return Err(ExecError::Query(stride_sched::QueryError::Cancelled));
            }
        }
    }
    flush(&mut pending, &mut block, &mut cursors, emit)
}

/// The heap's top cursor moved on: restores the heap, dropping the top
/// first when its cursor is done (`live` false).
fn reheap_top(heap: &mut Vec<usize>, live: bool, less: &dyn Fn(usize, usize) -> bool) {
    if !live {
        let last = heap.len() - 1;
        heap.swap(0, last);
        heap.pop();
    }
    if !heap.is_empty() {
        sift_down(heap, 0, less);
    }
}

fn sift_down(heap: &mut [usize], mut i: usize, less: &dyn Fn(usize, usize) -> bool) {
    loop {
        let (l, r) = (2 * i + 1, 2 * i + 2);
        let mut min = i;
        if l < heap.len() && less(heap[l], heap[min]) {
            min = l;
        }
        if r < heap.len() && less(heap[r], heap[min]) {
            min = r;
        }
        if min == i {
            return;
        }
        heap.swap(i, min);
        i = min;
    }
}

impl Sink for SortSink {
    fn consume(&self, _seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()> {
        if self.fetch == Some(0) {
            return Ok(());
        }
        // Re-label to the nullable schema so that concatenation sees one schema.
        let batch = RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())?;
        let bytes = batch_bytes(&batch);
        let charged = if self.can_spill() {
            self.memory.grow_spillable(bytes, "sort input")
        } else {
            self.memory.grow(bytes, "sort input")
        };
        if let Err(refused) = charged {
            if !self.can_spill() {
                return Err(refused);
            }
            let spill = self.memory.spill_for(refused)?;
            return self
                .runs
                .with(worker, |run| self.spill_run(spill, run, Some(batch)));
        }
        self.runs.with(worker, |run| {
            run.rows += batch.num_rows();
            run.bytes += bytes;
            run.batches.push(batch);
            if let Some(k) = self.fetch {
                if run.rows > (2 * k).max(8192) {
                    let best = self.sort(&run.batches, run.bytes)?;
                    let kept = batch_bytes(&best);
                    self.memory.shrink(run.bytes.saturating_sub(kept));
                    run.rows = best.num_rows();
                    run.bytes = kept.min(run.bytes);
                    run.batches = vec![best];
                }
            } else if run.bytes >= self.run_cap && self.external.load(Ordering::Relaxed) {
                if let Some(spill) = self.memory.spill() {
                    self.spill_run(spill, run, None)?;
                }
            }
            Ok(())
        })
    }

    fn finish(&self, cx: &FinalizeContext<'_>) -> Result<Steps> {
        let runs = self.runs.take_all();
        if self.external.load(Ordering::Relaxed) {
            if let Some(spill) = self.memory.spill() {
                self.finish_external(spill, runs, cx)?;
                return Ok(Steps::new());
            }
        }
        let bytes: usize = runs.iter().map(|r| r.bytes).sum();
        let batches: Vec<RecordBatch> = runs.into_iter().flat_map(|r| r.batches).collect();
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        if self.fetch.is_none() && !self.keys.is_empty() && rows > SPLIT_MIN_ROWS {
            // The output copy must fit beside the input (checked, not
            // reserved: the output buffer charges what it holds).
            match self.memory.charge(bytes, "sort") {
                Ok(probe) => {
                    drop(probe);
                    let step = SortUnits::new(self.split.clone(), batches, bytes);
                    return Ok(vec![Arc::new(step) as Arc<dyn SplitStep>]);
                }
                Err(refused) if self.can_spill() => {
                    self.sort_after_all_external(refused, batches, bytes, cx)?;
                    return Ok(Steps::new());
                }
                Err(refused) => return Err(refused),
            }
        }
        let sorted = match self.sort(&batches, bytes) {
            Ok(sorted) => sorted,
            Err(refused) if self.can_spill() => {
                self.sort_after_all_external(refused, batches, bytes, cx)?;
                return Ok(Steps::new());
            }
            Err(e) => return Err(e),
        };
        drop(batches);
        let mut blocks = Vec::new();
        let mut offset = 0;
        while offset < sorted.num_rows() {
            let n = OUTPUT_BLOCK_ROWS.min(sorted.num_rows() - offset);
            blocks.push(sorted.slice(offset, n));
            offset += n;
        }
        drop(sorted);
        // The output buffer charges the sorted rows; the runs are gone.
        let pushed = self.output.push_all(blocks);
        self.memory.shrink(bytes);
        pushed.map(|()| Steps::new())
    }

    fn name(&self) -> String {
        match self.fetch {
            Some(k) => format!("top-{k}"),
            None => "sort".to_string(),
        }
    }
}

/// What the steps of a split sort share.
#[derive(Debug)]
struct SplitSort {
    keys: Vec<SortKey>,
    converter: RowConverter,
    memory: Arc<QueryMemory>,
    output: Arc<Buffer>,
}

/// One unit of a split sort: consecutive input batches of at most
/// [`unit_rows`] rows; once its part ran, their keys and order.
#[derive(Debug)]
struct Unit {
    /// `starts[i]`: the unit row of batch `i`'s first row; then the total.
    starts: Vec<usize>,
    /// Index of the unit's first batch in [`Units::batches`].
    batch_base: usize,
    sorted: OnceLock<SortedUnit>,
}

#[derive(Debug)]
struct SortedUnit {
    /// The unit's keys in row format, in input order.
    rows: Rows,
    /// The unit's rows in key order (a stable sort).
    order: Vec<u32>,
    _charge: Charge,
}

impl Unit {
    fn len(&self) -> usize {
        self.starts.last().copied().unwrap_or(0)
    }

    fn sorted(&self) -> Result<&SortedUnit> {
        self.sorted
            .get()
            .ok_or_else(|| ExecError::Internal("sort unit merged before it was sorted".into()))
    }

    /// `(batch, row in batch)` of unit row `row`.
    fn locate(&self, row: usize) -> (usize, usize) {
        let b = self.starts.partition_point(|&s| s <= row) - 1;
        (self.batch_base + b, row - self.starts[b])
    }
}

/// A split sort's input, cut into units.
#[derive(Debug)]
struct Units {
    batches: Vec<RecordBatch>,
    units: Vec<Unit>,
    /// Bytes of `batches` charged to the query (returned after the merge).
    bytes: usize,
}

/// A row of a split sort: `(unit, position in the unit's sorted order)`.
type At = (usize, usize);

impl Units {
    /// Every unit's keys and order, once each unit's part ran (checked
    /// once here, so that comparisons cannot fail).
    fn sorted(&self) -> Result<Sorted<'_>> {
        Ok(Sorted(
            self.units
                .iter()
                .map(Unit::sorted)
                .collect::<Result<Vec<_>>>()?,
        ))
    }
}

/// The sorted units of a split sort.
struct Sorted<'a>(Vec<&'a SortedUnit>);

impl Sorted<'_> {
    fn key(&self, (u, pos): At) -> arrow::row::Row<'_> {
        let s = self.0[u];
        s.rows.row(s.order[pos] as usize)
    }

    /// The merge's total order: key, then unit, then position.
    fn cmp(&self, a: At, b: At) -> std::cmp::Ordering {
        self.key(a).cmp(&self.key(b)).then(a.cmp(&b))
    }

    /// The first position of unit `u` at or after `bound` in the total order.
    fn lower_bound(&self, u: usize, bound: At) -> usize {
        let n = self.0[u].order.len();
        // Positions before the bound form a prefix (the order is monotone
        // in the position within a unit).
        let (mut lo, mut hi) = (0, n);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.cmp((u, mid), bound).is_lt() {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// Step 1 of a split sort: sort each unit.
#[derive(Debug)]
struct SortUnits {
    split: Arc<SplitSort>,
    units: Arc<Units>,
}

impl SortUnits {
    fn new(split: Arc<SplitSort>, input: Vec<RecordBatch>, bytes: usize) -> Self {
        let per_unit = unit_rows(input.iter().map(RecordBatch::num_rows).sum());
        let mut batches = Vec::new();
        let mut units = Vec::new();
        let mut open: Option<Unit> = None;
        for batch in input {
            let mut offset = 0;
            while offset < batch.num_rows() {
                let unit = open.get_or_insert_with(|| Unit {
                    starts: vec![0],
                    batch_base: batches.len(),
                    sorted: OnceLock::new(),
                });
                let n = (per_unit - unit.len()).min(batch.num_rows() - offset);
                batches.push(batch.slice(offset, n));
                offset += n;
                let end = unit.len() + n;
                unit.starts.push(end);
                if end == per_unit {
                    units.extend(open.take());
                }
            }
        }
        units.extend(open);
        SortUnits {
            split,
            units: Arc::new(Units {
                batches,
                units,
                bytes,
            }),
        }
    }
}

impl SplitStep for SortUnits {
    fn name(&self) -> String {
        "sort: sort units".into()
    }

    fn parts(&self) -> usize {
        self.units.units.len()
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        let s = &self.split;
        let unit = &self.units.units[part];
        let n = unit.len();
        let mut rows = s.converter.empty_rows(n, 0);
        for batch in &self.units.batches[unit.batch_base..unit.batch_base + unit.starts.len() - 1] {
            let columns = s
                .keys
                .iter()
                .map(|k| Ok(k.expr.evaluate(batch)?.into_array(batch.num_rows())?))
                .collect::<Result<Vec<ArrayRef>>>()?;
            s.converter.append(&mut rows, &columns)?;
        }
        let charge = s.memory.charge(rows.size() + 4 * n, "sort keys")?;
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
        unit.sorted
            .set(SortedUnit {
                rows,
                order,
                _charge: charge,
            })
            .map_err(|_| ExecError::Internal("sort unit sorted twice".into()))?;
        Ok(n)
    }

    /// Picks the merge's key ranges from a sample of every unit.
    fn finish(&self) -> Result<Steps> {
        let units = &self.units;
        let sorted = units.sorted()?;
        let total: usize = units.units.iter().map(Unit::len).sum();
        let range = range_rows(total);
        // About 16 samples per key range.
        let every = (range / 16).max(1);
        let mut samples: Vec<At> = Vec::new();
        for (u, unit) in units.units.iter().enumerate() {
            samples.extend((0..unit.len()).step_by(every).map(|pos| (u, pos)));
        }
        samples.sort_by(|&a, &b| sorted.cmp(a, b));
        let ranges = total.div_ceil(range).clamp(1, samples.len().max(1));
        let mut splitters: Vec<At> = (1..ranges)
            .map(|i| samples[i * samples.len() / ranges])
            .collect();
        splitters.dedup();
        Ok(vec![Arc::new(MergeRanges {
            split: self.split.clone(),
            units: self.units.clone(),
            splitters,
        })])
    }
}

/// Step 2 of a split sort: merge each key range of all units.
#[derive(Debug)]
struct MergeRanges {
    split: Arc<SplitSort>,
    units: Arc<Units>,
    /// Range `p` holds the rows from `splitters[p-1]` (inclusive) to
    /// `splitters[p]` (exclusive) in the total order.
    splitters: Vec<At>,
}

impl SplitStep for MergeRanges {
    fn name(&self) -> String {
        "sort: merge key ranges".into()
    }

    fn parts(&self) -> usize {
        self.splitters.len() + 1
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        let units = &self.units;
        let sorted = units.sorted()?;
        // Each unit's rows in this range: `(unit, next position, end)`.
        let mut cursors: Vec<(usize, usize, usize)> = Vec::new();
        for u in 0..units.units.len() {
            let lo = match part.checked_sub(1) {
                Some(p) => sorted.lower_bound(u, self.splitters[p]),
                None => 0,
            };
            let hi = match self.splitters.get(part) {
                Some(&s) => sorted.lower_bound(u, s),
                None => units.units[u].len(),
            };
            if lo < hi {
                cursors.push((u, lo, hi));
            }
        }
        let rows: usize = cursors.iter().map(|&(_, lo, hi)| hi - lo).sum();
        // A binary min-heap of cursor indices, by (key, unit).
        let less = |cursors: &[(usize, usize, usize)], a: usize, b: usize| {
            let (x, y) = (cursors[a], cursors[b]);
            sorted.cmp((x.0, x.1), (y.0, y.1)).is_lt()
        };
        let mut heap: Vec<usize> = (0..cursors.len()).collect();
        for i in (0..heap.len() / 2).rev() {
            sift_down(&mut heap, i, &|a, b| less(&cursors, a, b));
        }
        // Output blocks gather from the batches this range touches.
        let mut local: Vec<usize> = vec![usize::MAX; units.batches.len()];
        let mut refs: Vec<&RecordBatch> = Vec::new();
        let mut block: Vec<(usize, usize)> = Vec::with_capacity(MERGE_CHUNK_ROWS);
        let mut blocks = 0u32;
        let mut flush = |block: &mut Vec<(usize, usize)>, refs: &[&RecordBatch]| -> Result<()> {
            if !block.is_empty() {
                let out = interleave_record_batch(refs, block)?;
                block.clear();
                let seq = MorselSeq::at(part as u64).chunk(blocks);
                self.split.output.push(seq, out)?;
                blocks += 1;
            }
            Ok(())
        };
        while let Some(&top) = heap.first() {
            let (u, pos, end) = cursors[top];
            let unit = &units.units[u];
            let (b, row) = unit.locate(sorted.0[u].order[pos] as usize);
            if local[b] == usize::MAX {
                local[b] = refs.len();
                refs.push(&units.batches[b]);
            }
            block.push((local[b], row));
            cursors[top].1 += 1;
            reheap_top(&mut heap, pos + 1 < end, &|a, b| less(&cursors, a, b));
            if block.len() >= MERGE_CHUNK_ROWS {
                flush(&mut block, &refs)?;
            }
        }
        flush(&mut block, &refs)?;
        Ok(rows)
    }

    fn finish(&self) -> Result<Steps> {
        // The output buffer holds the sorted rows; the input goes back.
        self.split.memory.shrink(self.units.bytes);
        Ok(Steps::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryPool;
    use crate::spill::SpillArea;
    use arrow::array::{Float64Array, Int64Array, StringArray};
    use arrow::compute::SortOptions;
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion_physical_expr::expressions::Column;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("id", DataType::Int64, true),
            Field::new("pad", DataType::Utf8, true),
        ]))
    }

    /// Rows `from..from+n`: key `k` with ties and NULLs, `f` with NULLs,
    /// `id` unique (the input position).
    fn batch(from: i64, n: i64) -> RecordBatch {
        let ids = from..from + n;
        RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from_iter(
                    ids.clone()
                        .map(|i| (i % 11 != 0).then_some((i * 7919) % 97)),
                )),
                Arc::new(Float64Array::from_iter(
                    ids.clone()
                        .map(|i| (i % 5 != 0).then_some(((i * 31) % 13) as f64 - 6.5)),
                )),
                Arc::new(Int64Array::from_iter_values(ids.clone())),
                Arc::new(StringArray::from_iter_values(
                    ids.map(|i| format!("padding of row {i:08}")),
                )),
            ],
        )
        .unwrap()
    }

    fn key(column: usize, descending: bool, nulls_first: bool) -> SortKey {
        SortKey {
            expr: Arc::new(Column::new(schema().field(column).name(), column)),
            options: SortOptions {
                descending,
                nulls_first,
            },
        }
    }

    /// The `id` column of everything `output` holds, in order.
    fn output_ids(output: &Buffer) -> Vec<i64> {
        output
            .take()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let ids = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.values().to_vec()
            })
            .collect()
    }

    /// Sorts 20 000 rows fed by two workers in morsels of 500 under
    /// `limit` bytes; returns the output (ids in order) and bytes spilled.
    fn run(keys: Vec<SortKey>, limit: usize, parent: &std::path::Path) -> (Vec<i64>, u64) {
        let area = SpillArea::new(Some(parent));
        let memory = QueryMemory::with_spill(MemoryPool::new(1 << 30), limit, Some(area.query()));
        let output = Arc::new(Buffer::new(memory.clone(), "sorted rows"));
        let sink = SortSink::new(keys, None, schema(), 2, memory.clone(), output.clone()).unwrap();
        for (i, from) in (0..20_000).step_by(500).enumerate() {
            sink.consume(MorselSeq::at(i as u64), batch(from, 500), i % 2)
                .unwrap();
        }
        crate::step::run_inline(
            sink.finish(&stride_sched::FinalizeContext::detached())
                .unwrap(),
        )
        .unwrap();
        let ids = output_ids(&output);
        let spilled = memory.spilled_bytes();
        let dir = memory.spill().unwrap().dir().to_path_buf();
        drop((sink, output, memory));
        assert!(!dir.exists(), "the query's spill files are gone");
        (ids, spilled)
    }

    #[test]
    fn an_external_sort_gives_the_in_memory_order() {
        let parent = crate::spill::tests::temp_parent("sort");
        let key_sets = [
            vec![key(0, false, false), key(2, false, false)],
            vec![key(0, true, true), key(1, false, true), key(2, true, false)],
            vec![
                key(1, true, false),
                key(0, false, true),
                key(2, false, true),
            ],
        ];
        for keys in key_sets {
            let (expected, none) = run(keys.clone(), usize::MAX, &parent);
            assert_eq!(none, 0, "unlimited: in memory");
            assert_eq!(expected.len(), 20_000);
            // ~1.1 MB of input: a few runs at 1 MB, dozens (and a merge of
            // merged runs) at 128 kB.
            for limit in [1 << 20, 128 << 10] {
                let (got, spilled) = run(keys.clone(), limit, &parent);
                assert!(spilled > 0, "{limit}: spilled");
                assert_eq!(got, expected, "{limit}: {keys:?}");
            }
        }
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn a_cancelled_query_stops_its_external_merge() {
        let parent = crate::spill::tests::temp_parent("sort-cancel");
        let area = SpillArea::new(Some(&parent));
        let memory =
            QueryMemory::with_spill(MemoryPool::new(1 << 30), 128 << 10, Some(area.query()));
        let output = Arc::new(Buffer::new(memory.clone(), "sorted rows"));
        let keys = vec![key(0, false, false)];
        let sink = SortSink::new(keys, None, schema(), 2, memory.clone(), output.clone()).unwrap();
        for (i, from) in (0..20_000).step_by(500).enumerate() {
            sink.consume(MorselSeq::at(i as u64), batch(from, 500), i % 2)
                .unwrap();
        }
        let cancelled = std::sync::atomic::AtomicBool::new(true);
        let err = sink
            .finish(&stride_sched::FinalizeContext::new(&cancelled))
            .unwrap_err();
        assert_eq!(err.kind(), Some(crate::ErrorKind::Cancelled), "{err}");
        // Stopped at the first block: nearly nothing was merged.
        assert!(output_ids(&output).len() <= MERGE_CHUNK_ROWS);
        drop((sink, output, memory, area));
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn many_ties_and_nulls_merge_in_key_order() {
        let parent = crate::spill::tests::temp_parent("sort-ties");
        // Sorting on `k` alone: 97 values and NULLs over 20 000 rows.
        let (expected, _) = run(vec![key(0, false, true)], usize::MAX, &parent);
        let (got, spilled) = run(vec![key(0, false, true)], 256 << 10, &parent);
        assert!(spilled > 0);
        // Workers' runs interleave differently in memory and on disk, so
        // compare each key's rows as sets, and that the keys are in order.
        let k = |id: i64| (id % 11 != 0).then_some((id * 7919) % 97);
        let keys: Vec<_> = got.iter().map(|&i| k(i)).collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "nulls first, ascending"
        );
        let mut a = got.clone();
        let mut b = expected.clone();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
        std::fs::remove_dir_all(&parent).unwrap();
    }

    /// `rows` rows fed by two workers in morsels of 500, sorted in memory;
    /// returns the ids in output order and the steps' part counts.
    fn split_sort(keys: Vec<SortKey>, rows: i64) -> (Vec<i64>, Vec<usize>) {
        let memory = QueryMemory::unbounded();
        let output = Arc::new(Buffer::new(memory.clone(), "sorted rows"));
        let sink = SortSink::new(keys, None, schema(), 2, memory.clone(), output.clone()).unwrap();
        for (i, from) in (0..rows).step_by(500).enumerate() {
            sink.consume(MorselSeq::at(i as u64), batch(from, 500), i % 2)
                .unwrap();
        }
        let mut parts = Vec::new();
        let mut steps = sink
            .finish(&stride_sched::FinalizeContext::detached())
            .unwrap();
        while let Some(step) = steps.pop() {
            parts.push(step.parts());
            for part in (0..step.parts()).rev() {
                step.run_part(part, 0).unwrap();
            }
            steps = step.finish().unwrap();
        }
        let ids = output_ids(&output);
        output.release();
        assert_eq!(memory.used(), 0, "everything charged went back");
        (ids, parts)
    }

    /// The order a stable sort of worker 0's batches then worker 1's gives
    /// (Arrow's `lexsort_to_indices` is not stable).
    fn stable_reference(keys: &[SortKey], rows: i64) -> Vec<i64> {
        let froms: Vec<i64> = (0..rows).step_by(500).collect();
        let ordered: Vec<RecordBatch> = froms
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .chain(froms.iter().enumerate().filter(|(i, _)| i % 2 == 1))
            .map(|(_, &f)| batch(f, 500))
            .collect();
        let all = concat_batches(&schema(), &ordered).unwrap();
        let fields = keys
            .iter()
            .map(|k| SortField::new_with_options(k.expr.data_type(&schema()).unwrap(), k.options))
            .collect();
        let converter = RowConverter::new(fields).unwrap();
        let columns: Vec<ArrayRef> = keys
            .iter()
            .map(|k| {
                k.expr
                    .evaluate(&all)
                    .unwrap()
                    .into_array(all.num_rows())
                    .unwrap()
            })
            .collect();
        let rows = converter.convert_columns(&columns).unwrap();
        let mut order: Vec<usize> = (0..all.num_rows()).collect();
        order.sort_by(|&a, &b| rows.row(a).cmp(&rows.row(b))); // stable
        let ids = all.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        order.iter().map(|&i| ids.value(i)).collect()
    }

    /// Compares two id sequences, reporting the first difference only.
    fn same(got: &[i64], want: &[i64], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: row count");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let to = (i + 5).min(got.len());
            panic!(
                "{what}: row {i} differs: {:?} vs {:?}",
                &got[i..to],
                &want[i..to]
            );
        }
    }

    #[test]
    fn a_split_sort_equals_a_stable_sort_of_the_input() {
        for keys in [
            vec![key(0, false, false), key(2, false, false)],
            vec![key(0, true, true), key(1, false, true)],
            // Ties only broken by input order.
            vec![key(1, true, false)],
        ] {
            let (got, parts) = split_sort(keys.clone(), 200_000);
            // 200 000 rows: 13 units of 16 Ki rows, then ~8 key ranges.
            assert_eq!(parts[0], 13, "{parts:?}");
            assert!(parts[1] >= 5, "{parts:?}");
            same(
                &got,
                &stable_reference(&keys, 200_000),
                &format!("{keys:?}"),
            );
        }
    }

    #[test]
    fn key_ranges_split_a_run_of_equal_keys() {
        // `f` has 13 values and NULLs over 200 000 rows; one range per
        // distinct key would leave ranges of 15 000+ rows and at most 14
        // of them; ranges cut inside runs of equal keys stay near an
        // eighth of the input (25 000 rows).
        let keys = vec![key(1, false, true)];
        let (got, parts) = split_sort(keys.clone(), 200_000);
        assert_eq!(parts[1], 8, "{parts:?}");
        same(&got, &stable_reference(&keys, 200_000), "f");
        // A single key value everywhere: still split.
        let constant = vec![SortKey {
            expr: Arc::new(datafusion_physical_expr::expressions::Literal::new(
                datafusion_common::ScalarValue::Int64(Some(1)),
            )),
            options: SortOptions::default(),
        }];
        let (got, parts) = split_sort(constant.clone(), 200_000);
        assert!(parts[1] >= 5, "{parts:?}");
        let input_order: Vec<i64> = (0..200_000)
            .step_by(500)
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .chain(
                (0..200_000)
                    .step_by(500)
                    .enumerate()
                    .filter(|(i, _)| i % 2 == 1),
            )
            .flat_map(|(_, f)| f..f + 500)
            .collect();
        same(&got, &input_order, "constant key");
    }
}
