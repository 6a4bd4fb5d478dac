//! Sort and top-k.
//!
//! Each worker collects its input batches; with a `fetch` (top-k) a worker
//! compacts its collection to its own best `fetch` rows whenever it holds more
//! than `max(2·fetch, 8192)` rows, so memory stays bounded by the k. `finish`
//! concatenates all workers' rows, sorts them once (stable lexicographic sort
//! on the evaluated keys) and writes the result to the output buffer in blocks.

use std::sync::Arc;

use arrow::array::{RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, lexsort_to_indices, take_record_batch, SortColumn};
use arrow::datatypes::SchemaRef;

use super::{PerWorker, Sink};
use crate::buffer::Buffer;
use crate::error::Result;
use crate::plan::SortKey;

/// Rows per block of sorted output.
const OUTPUT_BLOCK_ROWS: usize = 64 * 1024;

#[derive(Debug, Default)]
struct Run {
    batches: Vec<RecordBatch>,
    rows: usize,
}

#[derive(Debug)]
pub struct SortSink {
    keys: Vec<SortKey>,
    fetch: Option<usize>,
    schema: SchemaRef,
    runs: PerWorker<Run>,
    output: Arc<Buffer>,
}

impl SortSink {
    pub fn new(
        keys: Vec<SortKey>,
        fetch: Option<usize>,
        schema: SchemaRef,
        workers: usize,
        output: Arc<Buffer>,
    ) -> Self {
        SortSink {
            keys,
            fetch,
            schema: crate::nullable_schema(&schema),
            runs: PerWorker::new(workers),
            output,
        }
    }

    /// Sorts `batches` and keeps the first `fetch` rows.
    fn sort(&self, batches: &[RecordBatch]) -> Result<RecordBatch> {
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
        self.runs.with(worker, |run| {
            run.rows += batch.num_rows();
            run.batches.push(batch);
            if let Some(k) = self.fetch {
                if run.rows > (2 * k).max(8192) {
                    let best = self.sort(&run.batches)?;
                    run.rows = best.num_rows();
                    run.batches = vec![best];
                }
            }
            Ok(())
        })
    }

    fn finish(&self) -> Result<()> {
        let batches: Vec<RecordBatch> = self
            .runs
            .take_all()
            .into_iter()
            .flat_map(|r| r.batches)
            .collect();
        let sorted = self.sort(&batches)?;
        let mut blocks = Vec::new();
        let mut offset = 0;
        while offset < sorted.num_rows() {
            let n = OUTPUT_BLOCK_ROWS.min(sorted.num_rows() - offset);
            blocks.push(sorted.slice(offset, n));
            offset += n;
        }
        self.output.push_all(0, blocks);
        Ok(())
    }

    fn name(&self) -> String {
        match self.fetch {
            Some(k) => format!("top-{k}"),
            None => "sort".to_string(),
        }
    }
}
