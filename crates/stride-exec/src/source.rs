//! Morsel sources.
//!
//! A source hands out morsels — row ranges of its blocks — of whatever size the
//! scheduler asks for. The cursor is one atomic counter of rows handed out, so
//! the morsels handed out so far always form a prefix of the source in row
//! order; every morsel carries its first row number as sequence number.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arrow::array::RecordBatch;
use stride_sched::{NodeAffinity, TaskContext};

use crate::buffer::{Block, Buffer};
use crate::error::Result;
use crate::seq::MorselSeq;

/// A morsel: one or more slices of consecutive rows, each with its place.
#[derive(Debug, Default)]
pub struct Morsel {
    pub slices: Vec<(MorselSeq, RecordBatch)>,
}

impl Morsel {
    pub fn rows(&self) -> usize {
        self.slices.iter().map(|(_, b)| b.num_rows()).sum()
    }
}

/// What a task got from [`Source::take`].
#[derive(Debug)]
pub enum Taken {
    Morsel(Morsel),
    /// Nothing is left for anyone.
    Dry,
    /// Nothing is left on the task's node that it may take; other nodes
    /// still hold rows ([`stride_sched::TaskOutcome::NodeDry`]).
    NodeDry(NodeAffinity),
}

/// Where a pipeline takes its morsels from.
pub trait Source: Send + Sync + fmt::Debug {
    /// Takes the next morsel of about `rows` rows; `None` once the source is dry.
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>>;
    /// Takes the next morsel for the task `ctx` runs: sources over placed
    /// blocks ([`crate::placed_source`]) look at the worker's node, and
    /// report where the morsel's rows live. The default is
    /// [`Self::next_morsel`].
    fn take(&self, rows: usize, ctx: &mut TaskContext<'_>) -> Result<Taken> {
        let _ = ctx;
        Ok(match self.next_morsel(rows)? {
            Some(m) => Taken::Morsel(m),
            None => Taken::Dry,
        })
    }
    /// A task of the pipeline ran for `ran` (what it cost, for sources that
    /// adapt to it); called once per task.
    fn task_ran(&self, ran: Duration) {
        let _ = ran;
    }
    /// Rows not yet handed out, when the source knows (adaptive morsels use
    /// it to finish all workers together).
    fn remaining_rows(&self) -> Option<usize> {
        None
    }
    /// Called once after the pipeline's last morsel was processed: a source
    /// that held an earlier pipeline's output returns its memory.
    fn finish(&self) {}
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
///
/// A buffer's spilled block is handed out whole, in a morsel of its own
/// (read from disk once): a morsel ends where a spilled block begins, and
/// one that begins at a spilled block ends where it ends.
#[derive(Debug)]
pub struct BlockSource {
    blocks: Blocks,
    /// Rows handed out so far. Advanced by compare-and-swap over the range
    /// a morsel takes; only that range is read, nothing is published
    /// through it (Relaxed).
    cursor: AtomicUsize,
    /// Blocks and their boundaries, computed on first use: `starts[i]` is
    /// the first row of block `i`.
    layout: OnceLock<Layout>,
}

#[derive(Debug)]
struct Layout {
    blocks: LayoutBlocks,
    starts: Vec<usize>,
}

#[derive(Debug)]
enum LayoutBlocks {
    Batches(Vec<RecordBatch>),
    /// A sealed buffer (its blocks in memory or spilled).
    Buffer(Arc<Buffer>),
}

impl Layout {
    fn spilled(&self, block: usize) -> bool {
        match &self.blocks {
            LayoutBlocks::Batches(_) => false,
            LayoutBlocks::Buffer(b) => b
                .seal()
                .is_ok_and(|s| matches!(s.blocks.get(block), Some(Block::Spilled { .. }))),
        }
    }

    fn read(&self, block: usize) -> Result<RecordBatch> {
        match &self.blocks {
            LayoutBlocks::Batches(b) => Ok(b[block].clone()),
            LayoutBlocks::Buffer(b) => b.seal()?.read(block),
        }
    }
}

impl BlockSource {
    pub fn new(blocks: Blocks) -> Self {
        BlockSource {
            blocks,
            cursor: AtomicUsize::new(0),
            layout: OnceLock::new(),
        }
    }

    fn layout(&self) -> Result<&Layout> {
        if let Some(l) = self.layout.get() {
            return Ok(l);
        }
        let (blocks, rows): (LayoutBlocks, Vec<usize>) = match &self.blocks {
            Blocks::Table {
                blocks, projection, ..
            } => {
                let batches = blocks
                    .iter()
                    .map(|b| b.project(projection))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                let rows = batches.iter().map(|b| b.num_rows()).collect();
                (LayoutBlocks::Batches(batches), rows)
            }
            Blocks::Buffer { buffer, .. } => {
                let rows = buffer.seal()?.blocks.iter().map(Block::rows).collect();
                (LayoutBlocks::Buffer(buffer.clone()), rows)
            }
            Blocks::Batches { batches, .. } => {
                let rows = batches.iter().map(|b| b.num_rows()).collect();
                (LayoutBlocks::Batches(batches.to_vec()), rows)
            }
        };
        let mut starts = Vec::with_capacity(rows.len() + 1);
        let mut total = 0;
        for r in rows {
            starts.push(total);
            total += r;
        }
        starts.push(total);
        Ok(self.layout.get_or_init(|| Layout { blocks, starts }))
    }
}

impl Source for BlockSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let layout = self.layout()?;
        let starts = &layout.starts;
        let total = *starts.last().unwrap_or(&0);
        let rows = rows.max(1);
        let mut start = self.cursor.load(Ordering::Relaxed);
        let (first, end) = loop {
            if start >= total {
                return Ok(None);
            }
            // Block containing `start`: the last block whose start <= start.
            let first = starts.partition_point(|&s| s <= start) - 1;
            let end = if layout.spilled(first) {
                starts[first + 1]
            } else {
                // Up to the next spilled block.
                let mut end = start.saturating_add(rows).min(total);
                let mut b = first + 1;
                while b + 1 < starts.len() && starts[b] < end {
                    if layout.spilled(b) {
                        end = starts[b];
                        break;
                    }
                    b += 1;
                }
                end
            };
            match self.cursor.compare_exchange_weak(
                start,
                end,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break (first, end),
                Err(now) => start = now,
            }
        };
        let mut block = first;
        let mut row = start;
        let mut morsel = Morsel::default();
        while row < end {
            let block_start = starts[block];
            let block_end = starts[block + 1];
            let take_end = end.min(block_end);
            if take_end > row {
                let batch = layout.read(block)?;
                let slice = batch.slice(row - block_start, take_end - row);
                morsel.slices.push((MorselSeq::at(row as u64), slice));
            }
            row = take_end;
            block += 1;
        }
        Ok(Some(morsel))
    }

    fn finish(&self) {
        if let Blocks::Buffer { buffer, .. } = &self.blocks {
            buffer.release();
        }
    }

    fn remaining_rows(&self) -> Option<usize> {
        let total = *self.layout.get()?.starts.last()?;
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
