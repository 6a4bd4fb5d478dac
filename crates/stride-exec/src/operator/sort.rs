//! Sort and top-k.
//!
//! Each worker collects its input batches; with a `fetch` (top-k) a worker
//! compacts its collection to its own best `fetch` rows whenever it holds more
//! than `max(2·fetch, 8192)` rows, so memory stays bounded by the k. `finish`
//! concatenates all workers' rows, sorts them once (stable lexicographic sort
//! on the evaluated keys) and writes the result to the output buffer in blocks.
//!
//! Memory: every kept input batch is charged to the query as it arrives
//! (and a top-k compaction returns what it dropped); `finish` charges the
//! concatenated and the sorted copy while it builds them, and the output
//! buffer charges the result, after which the runs are returned.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::SchemaRef;

use super::{PerWorker, Sink};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::memory::{batch_bytes, QueryMemory};
use crate::plan::SortKey;

/// Rows per block of sorted output.
const OUTPUT_BLOCK_ROWS: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Run {
    batches: Vec<RecordBatch>,
    rows: usize,
    /// Bytes of `batches` charged to the query.
    bytes: usize,
}

#[derive(Debug)]
pub struct SortSink {
    keys: Vec<SortKey>,
    fetch: Option<usize>,
    schema: SchemaRef,
    runs: PerWorker<Run>,
    memory: Arc<QueryMemory>,
    output: Arc<Buffer>,
}

impl SortSink {
    pub fn new(
        keys: Vec<SortKey>,
        fetch: Option<usize>,
        schema: SchemaRef,
        workers: usize,
        memory: Arc<QueryMemory>,
        output: Arc<Buffer>,
    ) -> Self {
        SortSink {
            keys,
            fetch,
            schema: crate::nullable_schema(&schema),
            runs: PerWorker::new(workers),
            memory,
            output,
        }
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
}

impl Sink for SortSink {
    fn consume(&self, _seq: u64, batch: RecordBatch, worker: usize) -> Result<()> {
        if self.fetch == Some(0) {
            return Ok(());
        }
        // Re-label to the nullable schema so that concatenation sees one schema.
        let batch = RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())?;
        let bytes = batch_bytes(&batch);
        self.memory.grow(bytes, "sort input")?;
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
            }
            Ok(())
        })
    }

    fn finish(&self) -> Result<()> {
        let runs = self.runs.take_all();
        let bytes: usize = runs.iter().map(|r| r.bytes).sum();
        let batches: Vec<RecordBatch> = runs.into_iter().flat_map(|r| r.batches).collect();
        let sorted = self.sort(&batches, bytes)?;
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
