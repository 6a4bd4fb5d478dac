//! Materialization: the sink that stores a pipeline's output in a buffer,
//! either for a later pipeline or as the query result.

use std::sync::Arc;

use arrow::array::RecordBatch;

use super::Sink;
use crate::buffer::Buffer;
use crate::error::Result;

#[derive(Debug)]
pub struct MaterializeSink {
    buffer: Arc<Buffer>,
    /// Added to every sequence number (distinguishes the inputs of a union).
    seq_base: u64,
    label: String,
}

impl MaterializeSink {
    pub fn new(buffer: Arc<Buffer>, seq_base: u64, label: impl Into<String>) -> Self {
        MaterializeSink {
            buffer,
            seq_base,
            label: label.into(),
        }
    }
}

impl Sink for MaterializeSink {
    fn consume(&self, seq: u64, batch: RecordBatch, _worker: usize) -> Result<()> {
        self.buffer.push(self.seq_base + seq, batch)
    }

    fn name(&self) -> String {
        self.label.clone()
    }
}
