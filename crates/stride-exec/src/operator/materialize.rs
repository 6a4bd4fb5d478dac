//! Materialization: the sink that stores a pipeline's output in a buffer,
//! either for a later pipeline or as the query result.

use std::sync::Arc;

use arrow::array::RecordBatch;

use super::Sink;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::seq::MorselSeq;

#[derive(Debug)]
pub struct MaterializeSink {
    buffer: Arc<Buffer>,
    /// The input of the buffer this sink feeds ([`MorselSeq::in_input`]):
    /// the branches of a union, the passes of a join.
    input: u32,
    label: String,
}

impl MaterializeSink {
    pub fn new(buffer: Arc<Buffer>, input: u32, label: impl Into<String>) -> Self {
        MaterializeSink {
            buffer,
            input,
            label: label.into(),
        }
    }
}

impl Sink for MaterializeSink {
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, _worker: usize) -> Result<()> {
        self.buffer.push(seq.in_input(self.input), batch)
    }

    fn name(&self) -> String {
        self.label.clone()
    }
}
