//! The source that evaluates a window node's functions, one range of
//! sorted rows per morsel.
//!
//! The cursor is one atomic count of rows handed out: a morsel takes the
//! next `rows` the scheduler asks for and evaluates every function over
//! them (see `functions.rs`); its output is one batch per block the range
//! touches, each with its first row's position as sequence.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions};

use super::functions::evaluate;
use super::partition::{Prepared, WindowShared};
use crate::error::{ExecError, Result};
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};

/// Evaluates the window functions over the prepared rows.
#[derive(Debug)]
pub struct WindowSource {
    shared: Arc<WindowShared>,
    /// Set by the sink's prepare step, dropped (and its charge returned)
    /// by `finish`.
    prepared: Arc<Mutex<Option<Arc<Prepared>>>>,
    /// Rows handed out (Relaxed: only the returned range is used).
    cursor: AtomicUsize,
}

impl WindowSource {
    pub(super) fn new(
        shared: Arc<WindowShared>,
        prepared: Arc<Mutex<Option<Arc<Prepared>>>>,
    ) -> Self {
        WindowSource {
            shared,
            prepared,
            cursor: AtomicUsize::new(0),
        }
    }

    fn prepared(&self) -> Option<Arc<Prepared>> {
        self.prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Source for WindowSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let p = self
            .prepared()
            .ok_or_else(|| ExecError::Internal("window source before its input".into()))?;
        let total = p.rows();
        let take = rows.max(1);
        let start = self.cursor.fetch_add(take, Ordering::Relaxed);
        if start >= total {
            return Ok(None);
        }
        let range = start..total.min(start.saturating_add(take));
        let s = &self.shared;
        let columns = s
            .functions
            .iter()
            .enumerate()
            .map(|(i, f)| evaluate(&p, f, i, s.order_by.first(), range.clone()))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let mut morsel = Morsel::default();
        for (k, lo, hi) in p.segments(range.clone()) {
            let block = &p.blocks[k].batch;
            let first = p.block_start(k) + lo;
            let mut out: Vec<ArrayRef> = block.slice(lo, hi - lo).columns().to_vec();
            out.extend(
                columns
                    .iter()
                    .map(|c| c.slice(first - range.start, hi - lo)),
            );
            let batch = RecordBatch::try_new_with_options(
                s.schema.clone(),
                out,
                &RecordBatchOptions::new().with_row_count(Some(hi - lo)),
            )?;
            morsel.slices.push((MorselSeq::at(first as u64), batch));
        }
        Ok(Some(morsel))
    }

    fn remaining_rows(&self) -> Option<usize> {
        let total = self.prepared()?.rows();
        Some(total.saturating_sub(self.cursor.load(Ordering::Relaxed)))
    }

    fn finish(&self) {
        self.prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    fn name(&self) -> String {
        "window functions".into()
    }
}
