//! Sort and top-k, in memory or external.
//!
//! Each worker collects its input batches; with a `fetch` (top-k) a worker
//! compacts its collection to its own best `fetch` rows whenever it holds more
//! than `max(2·fetch, 8192)` rows, so memory stays bounded by the k and a
//! top-k never spills. `finish` concatenates all workers' rows, sorts them
//! once (stable lexicographic sort on the evaluated keys) and writes the
//! result to the output buffer in blocks.
//!
//! Memory: every kept input batch is charged to the query as it arrives
//! (and a top-k compaction returns what it dropped); `finish` charges the
//! concatenated and the sorted copy while it builds them, and the output
//! buffer charges the result, after which the runs are returned.
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
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{
    concat_batches, interleave_record_batch, lexsort_to_indices, take_record_batch, SortColumn,
};
use arrow::datatypes::SchemaRef;
use arrow::row::{RowConverter, Rows, SortField};

use super::{PerWorker, Sink};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::memory::{batch_bytes, Charge, QueryMemory};
use crate::plan::SortKey;
use crate::spill::{QuerySpill, SpillFile};

/// Rows per block of sorted output.
const OUTPUT_BLOCK_ROWS: usize = 64 * 1024;

/// Most rows per chunk of a sorted run file and per block a merge emits.
const MERGE_CHUNK_ROWS: usize = 8192;

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
        let converter = RowConverter::new(
            keys.iter()
                .map(|k| {
                    Ok(SortField::new_with_options(
                        k.expr.data_type(&schema)?,
                        k.options,
                    ))
                })
                .collect::<Result<Vec<_>>>()?,
        )?;
        let budget = memory.budget();
        Ok(SortSink {
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

    /// The external finish: spills what is left in memory and merges all runs.
    fn finish_external(&self, spill: &Arc<QuerySpill>, runs: Vec<Run>) -> Result<()> {
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
                merge(self, cursors, MERGE_CHUNK_ROWS, &mut |block| {
                    self.output.push(seq, block)?;
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
                merge(self, cursors, rows, &mut |block| {
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
/// `emit` in order. Equal keys come in cursor order.
fn merge(
    sink: &SortSink,
    cursors: Vec<Option<Cursor<'_>>>,
    block_rows: usize,
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
        if !live {
            let last = heap.len() - 1;
            heap.swap(0, last);
            heap.pop();
        }
        if !heap.is_empty() {
            sift_down(&mut heap, 0, &|a, b| less(&cursors, a, b));
        }
        if block.len() >= block_rows {
            flush(&mut pending, &mut block, &mut cursors, emit)?;
        }
    }
    flush(&mut pending, &mut block, &mut cursors, emit)
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
    fn consume(&self, _seq: u64, batch: RecordBatch, worker: usize) -> Result<()> {
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

    fn finish(&self) -> Result<()> {
        let runs = self.runs.take_all();
        if self.external.load(Ordering::Relaxed) {
            if let Some(spill) = self.memory.spill() {
                return self.finish_external(spill, runs);
            }
        }
        let bytes: usize = runs.iter().map(|r| r.bytes).sum();
        let batches: Vec<RecordBatch> = runs.into_iter().flat_map(|r| r.batches).collect();
        let sorted = match self.sort(&batches, bytes) {
            Ok(sorted) => sorted,
            Err(refused) if self.can_spill() => {
                // Too big to sort in memory: sort externally after all.
                let spill = self.memory.spill_for(refused)?;
                let mut run = Run {
                    batches,
                    rows: 0,
                    bytes,
                };
                self.spill_run(spill, &mut run, None)?;
                return self.finish_external(spill, Vec::new());
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
        let pushed = self.output.push_all(0, blocks);
        self.memory.shrink(bytes);
        pushed
    }

    fn name(&self) -> String {
        match self.fetch {
            Some(k) => format!("top-{k}"),
            None => "sort".to_string(),
        }
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

    /// Sorts 20 000 rows fed by two workers in morsels of 500 under
    /// `limit` bytes; returns the output (ids in order) and bytes spilled.
    fn run(keys: Vec<SortKey>, limit: usize, parent: &std::path::Path) -> (Vec<i64>, u64) {
        let area = SpillArea::new(Some(parent));
        let memory = QueryMemory::with_spill(MemoryPool::new(1 << 30), limit, Some(area.query()));
        let output = Arc::new(Buffer::new(memory.clone(), "sorted rows"));
        let sink = SortSink::new(keys, None, schema(), 2, memory.clone(), output.clone()).unwrap();
        for (i, from) in (0..20_000).step_by(500).enumerate() {
            sink.consume(i as u64, batch(from, 500), i % 2).unwrap();
        }
        sink.finish().unwrap();
        let ids = output
            .take()
            .unwrap()
            .flat_map(|b| {
                let b = b.unwrap();
                let ids = b.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
                ids.values().to_vec()
            })
            .collect();
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
}
