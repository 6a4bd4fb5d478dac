//! Materialized intermediate results.
//!
//! A [`Buffer`] collects the batches a pipeline's sink produced, each tagged
//! with the sequence number of the morsel it came from. The pipeline that reads
//! the buffer runs only after every writer's task set was finalized (task sets
//! of a resource group run in order), so the first read seals the buffer:
//! batches are ordered by sequence number once and then shared read-only. This
//! keeps the order a sort produced through later pipelines.
//!
//! Every batch a buffer keeps in memory is charged to the query's memory
//! account first ([`crate::memory`]); the charge lasts as long as the query.
//! A batch whose charge is refused goes to the buffer's spill file instead
//! (where the query has a spill directory, [`crate::spill`]); the buffer
//! remembers where each batch is, so that order by sequence number holds
//! for spilled and kept batches alike (the query's result, made with
//! [`Buffer::in_memory`], never spills: it is handed over in memory).
//! A buffer that may spill keeps at most a [`BUFFER_SHARE`] of the query's
//! budget in memory: it is filled while operators after it (a grace join's
//! partition tables, a merge) still need room, and would otherwise take
//! all of it before they run.
//!
//! ```text
//!   push(seq, batch) ──charge ok──►  parts: (seq, Memory(batch))
//!          │ refused
//!          └──────────────────────►  spill file ◄─ (seq, Spilled(index, rows))
//!   seal (first read) ─► blocks sorted by seq; the spill file's footer is
//!                        written; a reader loads a spilled block when it
//!                        reaches it, one block at a time
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::memory::{batch_bytes, QueryMemory};
use crate::seq::MorselSeq;
use crate::spill::{SpillFile, SpillWriter};

/// The most of its query's budget a spillable buffer keeps in memory: one
/// part in this many.
pub const BUFFER_SHARE: usize = 4;

/// Where one of a buffer's batches is.
#[derive(Debug, Clone)]
pub enum Block {
    Memory(RecordBatch),
    /// Batch `index` of the buffer's spill file.
    Spilled {
        index: usize,
        rows: usize,
    },
}

impl Block {
    pub fn rows(&self) -> usize {
        match self {
            Block::Memory(b) => b.num_rows(),
            Block::Spilled { rows, .. } => *rows,
        }
    }
}

/// A sealed buffer: its blocks in sequence order.
#[derive(Debug, Default)]
pub struct Sealed {
    pub blocks: Vec<Block>,
    file: Option<SpillFile>,
}

impl Sealed {
    /// Block `i`, read back from the spill file where it was spilled.
    pub fn read(&self, i: usize) -> Result<RecordBatch> {
        match (&self.blocks[i], &self.file) {
            (Block::Memory(b), _) => Ok(b.clone()),
            (Block::Spilled { index, .. }, Some(file)) => file.read(*index),
            (Block::Spilled { .. }, None) => Err(crate::ExecError::Internal(
                "spilled block without a spill file".into(),
            )),
        }
    }

    /// Whether any block is on disk.
    pub fn spilled(&self) -> bool {
        self.file.is_some()
    }
}

#[derive(Debug)]
pub struct Buffer {
    parts: Mutex<Vec<(MorselSeq, Block)>>,
    /// The spill file being written (made at the first refused charge).
    writer: Mutex<Option<SpillWriter>>,
    sealed: Mutex<Seal>,
    /// Bytes of the kept batches charged to the query (Relaxed: returned
    /// once, by `release`).
    charged: AtomicUsize,
    memory: Arc<QueryMemory>,
    /// Names the buffer in a refused charge.
    label: &'static str,
    /// Whether a refused charge spills (all but the query's result).
    spillable: bool,
}

#[derive(Debug, Default)]
enum Seal {
    #[default]
    Open,
    Sealed(Arc<Sealed>),
    /// Read to the end and returned ([`Buffer::release`]).
    Released,
}

impl Buffer {
    /// A buffer between pipelines: spills what its charge cannot keep.
    pub fn new(memory: Arc<QueryMemory>, label: &'static str) -> Self {
        Buffer {
            parts: Mutex::default(),
            writer: Mutex::default(),
            sealed: Mutex::default(),
            charged: AtomicUsize::new(0),
            memory,
            label,
            spillable: true,
        }
    }

    /// A buffer that never spills: the query's result, which is handed to
    /// the client whole and in memory, so that a result larger than the
    /// share fails with 53200 instead of being written out and read back
    /// outside the account.
    pub fn in_memory(memory: Arc<QueryMemory>, label: &'static str) -> Self {
        Buffer {
            spillable: false,
            ..Self::new(memory, label)
        }
    }

    /// Adds a batch produced from the morsel with sequence number `seq`:
    /// kept in memory where its charge is granted, spilled where not.
    pub fn push(&self, seq: MorselSeq, batch: RecordBatch) -> Result<()> {
        let rows = batch.num_rows();
        if rows == 0 {
            return Ok(());
        }
        let bytes = batch_bytes(&batch);
        let charged = if self.spillable {
            let held = self.charged.load(Ordering::Relaxed);
            let cap = self.memory.budget() / BUFFER_SHARE;
            if self.memory.spill().is_some() && held.saturating_add(bytes) > cap {
                Err(crate::ExecError::MemoryExhausted {
                    scope: crate::memory::MemoryScope::Query,
                    what: self.label.to_string(),
                    requested: bytes,
                    used: held,
                    limit: cap,
                })
            } else {
                self.memory.grow_spillable(bytes, self.label)
            }
        } else {
            self.memory.grow(bytes, self.label)
        };
        let block = match charged {
            Ok(()) => {
                self.charged.fetch_add(bytes, Ordering::Relaxed);
                Block::Memory(batch)
            }
            Err(refused) if !self.spillable => return Err(refused),
            Err(refused) => {
                let spill = self.memory.spill_for(refused)?;
                let mut writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => writer.insert(spill.create(batch.schema())?),
                };
                Block::Spilled {
                    index: w.write(&batch)?,
                    rows,
                }
            }
        };
        self.parts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((seq, block));
        Ok(())
    }

    /// Adds batches that are already in final order and the buffer's only
    /// content (a one-step finalization's output).
    pub fn push_all(&self, batches: Vec<RecordBatch>) -> Result<()> {
        for (i, b) in batches.into_iter().enumerate() {
            self.push(MorselSeq::at(i as u64), b)?;
        }
        Ok(())
    }

    /// Takes the parts in sequence order and finishes the spill file.
    fn take_parts(&self) -> Result<Sealed> {
        let mut parts = std::mem::take(&mut *self.parts.lock().unwrap_or_else(|e| e.into_inner()));
        parts.sort_by_key(|(seq, _)| *seq);
        let file = self
            .writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .map(SpillWriter::finish)
            .transpose()?;
        Ok(Sealed {
            blocks: parts.into_iter().map(|(_, b)| b).collect(),
            file,
        })
    }

    /// The blocks in sequence order. Seals the buffer on first call.
    pub fn seal(&self) -> Result<Arc<Sealed>> {
        let mut seal = self.sealed.lock().unwrap_or_else(|e| e.into_inner());
        match &*seal {
            Seal::Sealed(s) => Ok(s.clone()),
            Seal::Released => Err(crate::ExecError::Internal(format!(
                "{} read after it was released",
                self.label
            ))),
            Seal::Open => {
                let sealed = Arc::new(self.take_parts()?);
                *seal = Seal::Sealed(sealed.clone());
                Ok(sealed)
            }
        }
    }

    /// Takes the collected batches in sequence order without sealing (the
    /// final result, a limit's input: read once), reading spilled batches
    /// back one at a time as the iterator reaches them.
    pub fn take(&self) -> Result<impl Iterator<Item = Result<RecordBatch>>> {
        let sealed = self.take_parts()?;
        Ok((0..sealed.blocks.len()).map(move |i| sealed.read(i)))
    }

    /// Drops what the buffer holds and returns its charge (once its reader
    /// read it all): a later pipeline of the query has the room.
    pub fn release(&self) {
        *self.sealed.lock().unwrap_or_else(|e| e.into_inner()) = Seal::Released;
        self.parts.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        self.memory.shrink(self.charged.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::memory::MemoryPool;
    use crate::spill::SpillArea;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    /// One Int64 column `x` holding `from..from + n`.
    pub(crate) fn batch(from: i64, n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(from..from + n))],
        )
        .unwrap()
    }

    #[test]
    fn batches_past_the_share_spill_and_read_back_in_sequence_order() {
        let parent = crate::spill::tests::temp_parent("buffer");
        let area = SpillArea::new(Some(&parent));
        // Room for two of the 8 kB batches in the buffer's quarter.
        let memory = QueryMemory::with_spill(MemoryPool::new(1 << 30), 80_000, Some(area.query()));
        let buffer = Buffer::new(memory.clone(), "test");
        // Pushed out of order, as workers do.
        let order = [5u64, 1, 7, 0, 3, 2, 6, 4];
        for &seq in &order {
            buffer
                .push(MorselSeq::at(seq), batch(seq as i64 * 1000, 1000))
                .unwrap();
        }
        assert_eq!(memory.used(), 16_000);
        assert!(memory.spilled_bytes() > 0);
        let sealed = buffer.seal().unwrap();
        assert!(sealed.spilled());
        let memory_blocks = sealed
            .blocks
            .iter()
            .filter(|b| matches!(b, Block::Memory(_)))
            .count();
        assert_eq!(memory_blocks, 2);
        for i in 0..8 {
            assert_eq!(sealed.read(i).unwrap(), batch(i as i64 * 1000, 1000));
        }
        // Sealing is done once: a second reader sees the same blocks.
        assert_eq!(buffer.seal().unwrap().blocks.len(), 8);
        drop(sealed);
        // Read to the end, it returns its memory.
        buffer.release();
        assert_eq!(memory.used(), 0);
        assert!(buffer.seal().is_err());

        let result = Buffer::new(memory.clone(), "result");
        for seq in (0..6u64).rev() {
            result
                .push(MorselSeq::at(seq), batch(seq as i64, 1))
                .unwrap();
        }
        let got: Vec<i64> = result
            .take()
            .unwrap()
            .map(|b| {
                b.unwrap()
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .value(0)
            })
            .collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5]);
        let dir = memory.spill().unwrap().dir().to_path_buf();
        assert!(dir.exists());
        drop((buffer, result, memory));
        assert!(!dir.exists(), "the query's spill directory goes with it");
        drop(area);
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[test]
    fn without_a_spill_directory_a_refused_charge_fails() {
        let memory = QueryMemory::new(MemoryPool::new(1 << 30), 10_000);
        let buffer = Buffer::new(memory, "result");
        buffer.push(MorselSeq::at(0), batch(0, 1000)).unwrap();
        let err = buffer.push(MorselSeq::at(1), batch(0, 1000)).unwrap_err();
        assert_eq!(err.kind(), Some(crate::ErrorKind::OutOfMemory));
    }
}
