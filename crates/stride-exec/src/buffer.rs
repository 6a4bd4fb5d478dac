//! Materialized intermediate results.
//!
//! A [`Buffer`] collects the batches a pipeline's sink produced, each tagged
//! with the sequence number of the morsel it came from. The pipeline that reads
//! the buffer runs only after every writer's task set was finalized (task sets
//! of a resource group run in order), so the first read seals the buffer:
//! batches are ordered by sequence number once and then shared read-only. This
//! keeps the order a sort produced through later pipelines.
//!
//! Every batch a buffer keeps is charged to the query's memory account
//! first ([`crate::memory`]); the charge lasts as long as the query.

use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::RecordBatch;

use crate::error::Result;
use crate::memory::{batch_bytes, QueryMemory};

#[derive(Debug)]
pub struct Buffer {
    parts: Mutex<Vec<(u64, RecordBatch)>>,
    sealed: OnceLock<Vec<RecordBatch>>,
    memory: Arc<QueryMemory>,
    /// Names the buffer in a refused charge.
    label: &'static str,
}

impl Buffer {
    pub fn new(memory: Arc<QueryMemory>, label: &'static str) -> Self {
        Buffer {
            parts: Mutex::default(),
            sealed: OnceLock::new(),
            memory,
            label,
        }
    }

    /// Adds a batch produced from the morsel with sequence number `seq`.
    pub fn push(&self, seq: u64, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() > 0 {
            self.memory.grow(batch_bytes(&batch), self.label)?;
            self.parts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((seq, batch));
        }
        Ok(())
    }

    /// Adds batches that are already in final order (finalization output).
    pub fn push_all(&self, first_seq: u64, batches: Vec<RecordBatch>) -> Result<()> {
        let bytes = batches.iter().map(batch_bytes).sum();
        self.memory.grow(bytes, self.label)?;
        let mut parts = self.parts.lock().unwrap_or_else(|e| e.into_inner());
        for (i, b) in batches.into_iter().enumerate() {
            if b.num_rows() > 0 {
                parts.push((first_seq + i as u64, b));
            }
        }
        Ok(())
    }

    /// The batches in sequence order. Seals the buffer on first call.
    pub fn batches(&self) -> &[RecordBatch] {
        self.sealed.get_or_init(|| {
            let mut parts =
                std::mem::take(&mut *self.parts.lock().unwrap_or_else(|e| e.into_inner()));
            parts.sort_by_key(|(seq, _)| *seq);
            parts.into_iter().map(|(_, b)| b).collect()
        })
    }

    /// Takes the collected batches in sequence order without sealing (for the
    /// final result, read once).
    pub fn take(&self) -> Vec<RecordBatch> {
        let mut parts = std::mem::take(&mut *self.parts.lock().unwrap_or_else(|e| e.into_inner()));
        parts.sort_by_key(|(seq, _)| *seq);
        parts.into_iter().map(|(_, b)| b).collect()
    }
}
