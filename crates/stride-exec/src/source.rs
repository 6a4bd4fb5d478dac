//! Morsel sources.
//!
//! A source hands out morsels — row ranges of its blocks — of whatever size the
//! scheduler asks for. The cursor is one atomic counter of rows handed out, so
//! the morsels handed out so far always form a prefix of the source in row
//! order; every morsel carries its first row number as sequence number.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;

use crate::buffer::Buffer;
use crate::error::Result;

/// A morsel: one or more slices of consecutive rows, each with its sequence number.
#[derive(Debug, Default)]
pub struct Morsel {
    pub slices: Vec<(u64, RecordBatch)>,
}

impl Morsel {
    pub fn rows(&self) -> usize {
        self.slices.iter().map(|(_, b)| b.num_rows()).sum()
    }
}

/// Where a pipeline takes its morsels from.
pub trait Source: Send + Sync + fmt::Debug {
    /// Takes the next morsel of about `rows` rows; `None` once the source is dry.
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>>;
    /// Rows not yet handed out, when the source knows (adaptive morsels use
    /// it to finish all workers together).
    fn remaining_rows(&self) -> Option<usize> {
        None
    }
    fn name(&self) -> String;
}

/// Blocks a [`BlockSource`] reads: a table snapshot's blocks, or a buffer that
/// an earlier pipeline filled.
#[derive(Debug, Clone)]
pub enum Blocks {
    Table {
        name: String,
        blocks: Arc<[RecordBatch]>,
        /// Columns of the table to read, in output order.
        projection: Vec<usize>,
    },
    Buffer {
        name: String,
        buffer: Arc<Buffer>,
    },
    Batches {
        name: String,
        batches: Arc<[RecordBatch]>,
    },
}

/// Hands out row ranges of a list of blocks.
#[derive(Debug)]
pub struct BlockSource {
    blocks: Blocks,
    /// Base of the sequence numbers of this source's morsels.
    seq_base: u64,
    /// Rows handed out so far. `fetch_add` by the requested morsel size; only
    /// the returned range is read, nothing is published through it (Relaxed).
    cursor: AtomicUsize,
    /// Block boundaries, computed on first use: `starts[i]` is the first row of block `i`.
    layout: OnceLock<(Vec<RecordBatch>, Vec<usize>)>,
}

impl BlockSource {
    pub fn new(blocks: Blocks) -> Self {
        Self::with_seq_base(blocks, 0)
    }

    pub fn with_seq_base(blocks: Blocks, seq_base: u64) -> Self {
        BlockSource {
            blocks,
            seq_base,
            cursor: AtomicUsize::new(0),
            layout: OnceLock::new(),
        }
    }

    fn layout(&self) -> Result<&(Vec<RecordBatch>, Vec<usize>)> {
        if let Some(l) = self.layout.get() {
            return Ok(l);
        }
        let batches: Vec<RecordBatch> = match &self.blocks {
            Blocks::Table {
                blocks, projection, ..
            } => blocks
                .iter()
                .map(|b| b.project(projection))
                .collect::<std::result::Result<_, _>>()?,
            Blocks::Buffer { buffer, .. } => buffer.batches().to_vec(),
            Blocks::Batches { batches, .. } => batches.to_vec(),
        };
        let mut starts = Vec::with_capacity(batches.len() + 1);
        let mut total = 0;
        for b in &batches {
            starts.push(total);
            total += b.num_rows();
        }
        starts.push(total);
        Ok(self.layout.get_or_init(|| (batches, starts)))
    }
}

impl Source for BlockSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let (batches, starts) = self.layout()?;
        let total = *starts.last().unwrap_or(&0);
        let rows = rows.max(1);
        let start = self.cursor.fetch_add(rows, Ordering::Relaxed);
        if start >= total {
            return Ok(None);
        }
        let end = (start + rows).min(total);
        // Block containing `start`: the last block whose start <= start.
        let mut block = starts.partition_point(|&s| s <= start) - 1;
        let mut row = start;
        let mut morsel = Morsel::default();
        while row < end {
            let block_start = starts[block];
            let block_end = starts[block + 1];
            let take_end = end.min(block_end);
            if take_end > row {
                let slice = batches[block].slice(row - block_start, take_end - row);
                morsel.slices.push((self.seq_base + row as u64, slice));
            }
            row = take_end;
            block += 1;
        }
        Ok(Some(morsel))
    }

    fn remaining_rows(&self) -> Option<usize> {
        let total = *self.layout.get()?.1.last()?;
        Some(total.saturating_sub(self.cursor.load(Ordering::Relaxed)))
    }

    fn name(&self) -> String {
        match &self.blocks {
            Blocks::Table { name, .. } => format!("scan {name}"),
            Blocks::Buffer { name, .. } => format!("read {name}"),
            Blocks::Batches { name, .. } => name.clone(),
        }
    }
}
