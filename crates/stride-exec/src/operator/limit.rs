//! Limit: keeps rows `skip .. skip + fetch` of its input.
//!
//! Morsels handed out by a source always form a prefix of the source (see
//! [`crate::source`]) and every handed-out morsel is processed to the end, so
//! once enough rows arrived the sink reports itself full, the pipeline stops
//! taking morsels, and the rows collected so far, ordered by sequence number,
//! contain the first `skip + fetch` rows of the input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use stride_sched::FinalizeContext;

use arrow::array::RecordBatch;

use super::Sink;
use crate::buffer::Buffer;
use crate::error::Result;
use crate::memory::QueryMemory;
use crate::seq::MorselSeq;
use crate::step::Steps;

#[derive(Debug)]
pub struct LimitSink {
    skip: usize,
    fetch: Option<usize>,
    collected: Buffer,
    /// Rows absorbed so far; only compared with `skip + fetch` (Relaxed).
    rows: AtomicUsize,
    output: Arc<Buffer>,
}

impl LimitSink {
    pub fn new(
        skip: usize,
        fetch: Option<usize>,
        memory: Arc<QueryMemory>,
        output: Arc<Buffer>,
    ) -> Self {
        LimitSink {
            skip,
            fetch,
            collected: Buffer::new(memory, "limit input"),
            rows: AtomicUsize::new(0),
            output,
        }
    }

    fn wanted(&self) -> Option<usize> {
        self.fetch.map(|f| f.saturating_add(self.skip))
    }
}

impl Sink for LimitSink {
    fn consume(&self, seq: MorselSeq, batch: RecordBatch, _worker: usize) -> Result<()> {
        if self.fetch == Some(0) {
            return Ok(());
        }
        self.rows.fetch_add(batch.num_rows(), Ordering::Relaxed);
        self.collected.push(seq, batch)
    }

    fn is_full(&self) -> bool {
        self.wanted()
            .is_some_and(|w| self.rows.load(Ordering::Relaxed) >= w)
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        let mut skip = self.skip;
        let mut left = self.fetch.unwrap_or(usize::MAX);
        let mut seq = 0;
        for b in self.collected.take()? {
            if left == 0 {
                break;
            }
            let b = b?;
            let n = b.num_rows();
            if skip >= n {
                skip -= n;
                continue;
            }
            let take = (n - skip).min(left);
            self.output.push(MorselSeq::at(seq), b.slice(skip, take))?;
            seq += 1;
            left -= take;
            skip = 0;
        }
        self.collected.release();
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        format!("limit skip={} fetch={:?}", self.skip, self.fetch)
    }
}
