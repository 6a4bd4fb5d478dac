//! The build side: collecting it, laying it out, allocating the table.

use std::sync::{Arc, Mutex, OnceLock};
use stride_sched::FinalizeContext;

use arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;

use super::grace::GraceJoin;
use super::keys::{eval_keys, KeyEncoder, Keys};
use super::table::{null_rows, HashTableSlot, JoinHashTable, TableStructures};
use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, QueryMemory};
use crate::operator::{PerWorker, Sink};
use crate::plan::ExprRef;
use crate::seq::MorselSeq;
use crate::step::{SplitStep, Steps};

/// What a hash build keeps beyond its rows, and where they may go.
#[derive(Debug, Clone, Copy)]
pub struct BuildConfig {
    /// Keep a match bit per build row (build-side outer, semi, anti joins).
    pub track_matches: bool,
    /// Where the query's memory share cannot hold the build side and the
    /// query may spill, write it to disk in partitions (a grace join, see
    /// `grace`). Not for joins whose probe needs every build row at once
    /// (`NOT IN`); joins without keys are never partitioned.
    pub partition_on_spill: bool,
}

/// Collects the build side; when finalized, concatenates it, encodes its keys
/// and allocates the table (which the insert pipeline then links) — or,
/// where the rows do not fit the query's share, writes them to partitions
/// on disk and installs an empty table that says so.
#[derive(Debug)]
pub struct HashBuildSink {
    keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    schema: SchemaRef,
    parts: PerWorker<Vec<RecordBatch>>,
    config: BuildConfig,
    table: HashTableSlot,
    memory: Arc<QueryMemory>,
    /// The partitions, once a charge was refused (set once, under
    /// `partitioning`).
    grace: OnceLock<Arc<GraceJoin>>,
    partitioning: Mutex<()>,
}

impl HashBuildSink {
    pub fn new(
        keys: Vec<ExprRef>,
        encoder: Arc<KeyEncoder>,
        schema: SchemaRef,
        workers: usize,
        config: BuildConfig,
        table: HashTableSlot,
        memory: Arc<QueryMemory>,
    ) -> Self {
        HashBuildSink {
            keys,
            encoder,
            schema: crate::nullable_schema(&schema),
            parts: PerWorker::new(workers),
            config,
            table,
            memory,
            grace: OnceLock::new(),
            partitioning: Mutex::new(()),
        }
    }

    /// Whether a refused charge of this build partitions it.
    fn partitionable(&self) -> bool {
        self.config.partition_on_spill && !self.keys.is_empty()
    }

    /// Answers the refused charge `refused`: switches the build to
    /// partitions on disk (where it may) and moves every batch collected so
    /// far there, returning its charge; otherwise the refusal stands.
    fn partition(&self, refused: ExecError) -> Result<&Arc<GraceJoin>> {
        if !self.partitionable() {
            return Err(refused);
        }
        let spill = self.memory.spill_for(refused)?;
        let grace = {
            let _only_one = self.partitioning.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(grace) = self.grace.get() {
                return Ok(grace);
            }
            let grace = Arc::new(GraceJoin::new(
                self.schema.clone(),
                self.keys.clone(),
                self.encoder.clone(),
                self.config.track_matches,
                spill.clone(),
                self.memory.clone(),
            ));
            self.grace.get_or_init(|| grace)
        };
        self.move_collected(grace)?;
        Ok(grace)
    }

    /// Writes the batches the workers collected to `grace`'s partitions
    /// and returns their charge.
    fn move_collected(&self, grace: &GraceJoin) -> Result<()> {
        for batch in self.parts.take_all().into_iter().flatten() {
            grace.write_build(&batch)?;
            self.memory.shrink(batch_bytes(&batch));
        }
        Ok(())
    }

    /// The finish of a partitioned build: every batch on disk, the empty
    /// table that points probes to the partitions in the slot.
    fn finish_partitioned(&self, grace: &Arc<GraceJoin>) -> Result<Steps> {
        // Batches a worker kept while another switched to partitions.
        self.move_collected(grace)?;
        grace.seal_build()?;
        install(
            &self.table,
            JoinHashTable::partitioned(self.schema.clone(), grace.clone())?,
        )?;
        Ok(Steps::new())
    }
}

/// Puts the built table into its slot (once).
fn install(slot: &HashTableSlot, table: JoinHashTable) -> Result<()> {
    slot.set(table)
        .map_err(|_| ExecError::Internal("hash table built twice".into()))
}

/// Build sides of more rows than this are laid out by a split step
/// ([`LayOutBuild`]) instead of inside the build's `finish`. (TPC-H q10 at
/// SF 1 builds on 57 K rows of ten columns, some of them long strings:
/// ~2.5 ms inside one `finish`.)
pub const SPLIT_BUILD_ROWS: usize = super::table::INLINE_INSERT_ROWS;

/// The split finish of a large build side: part 0 evaluates and encodes
/// the keys of every collected batch and lists the rows whose key is NULL,
/// part 1 allocates the table's buckets and chains, part `2 + c`
/// concatenates column `c`; the step's finish puts the columns together
/// (no copy) and assembles the table, which the insert pipeline then links.
#[derive(Debug)]
struct LayOutBuild {
    keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    schema: SchemaRef,
    track_matches: bool,
    table: HashTableSlot,
    memory: Arc<QueryMemory>,
    /// The collected batches, until the step's finish drops them.
    input: std::sync::Mutex<Vec<RecordBatch>>,
    columns: Vec<OnceLock<ArrayRef>>,
    /// The encoded keys and the rows whose key is NULL, from part 0 until
    /// the step's finish takes them.
    encoded: std::sync::Mutex<Option<(Keys, Vec<u32>)>>,
    /// The table's buckets and chains, from part 1 until the step's finish
    /// takes them.
    structures: std::sync::Mutex<Option<TableStructures>>,
    rows: usize,
    /// Bytes of `input` charged to the query.
    collected: usize,
}

impl LayOutBuild {
    fn input(&self) -> std::sync::MutexGuard<'_, Vec<RecordBatch>> {
        self.input.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SplitStep for LayOutBuild {
    fn name(&self) -> String {
        "hash join build: encode keys, allocate the table, concatenate columns".into()
    }

    fn parts(&self) -> usize {
        2 + self.columns.len()
    }

    fn run_part(&self, part: usize, _worker: usize) -> Result<usize> {
        // The batches are shared (Arc'd arrays): cloning the list is cheap
        // and lets the parts run without holding the lock.
        let input = self.input().clone();
        let built = match part.checked_sub(2) {
            None if part == 1 => {
                let structures = TableStructures::new(self.rows, self.track_matches)?;
                let mut slot = self.structures.lock().unwrap_or_else(|e| e.into_inner());
                slot.replace(structures).is_none()
            }
            None => {
                let mut per_key: Vec<Vec<ArrayRef>> = vec![Vec::new(); self.keys.len()];
                for batch in &input {
                    for (k, array) in eval_keys(&self.keys, batch)?.into_iter().enumerate() {
                        per_key[k].push(array);
                    }
                }
                let columns = per_key
                    .iter()
                    .map(|arrays| {
                        let refs: Vec<&dyn Array> = arrays.iter().map(|a| a.as_ref()).collect();
                        Ok(arrow::compute::concat(&refs)?)
                    })
                    .collect::<Result<Vec<ArrayRef>>>()?;
                let keys = self.encoder.encode(columns)?;
                self.memory.grow(keys.bytes(), "hash join keys")?;
                let nulls = null_rows(&keys, self.rows);
                let mut slot = self.encoded.lock().unwrap_or_else(|e| e.into_inner());
                slot.replace((keys, nulls)).is_none()
            }
            Some(c) => {
                let refs: Vec<&dyn Array> = input.iter().map(|b| b.column(c).as_ref()).collect();
                let column = arrow::compute::concat(&refs)?;
                self.columns[c].set(column).is_ok()
            }
        };
        if !built {
            return Err(ExecError::Internal("hash build part ran twice".into()));
        }
        Ok(input.iter().map(|b| b.num_rows()).sum::<usize>() / self.parts())
    }

    fn finish(&self) -> Result<Steps> {
        let missing = || ExecError::Internal("hash build laid out before its parts ran".into());
        let columns = self
            .columns
            .iter()
            .map(|c| c.get().cloned().ok_or_else(missing))
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(self.rows)),
        )?;
        std::mem::take(&mut *self.input());
        self.memory.shrink(self.collected);
        let (keys, nulls) = self
            .encoded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(missing)?;
        let structures = self
            .structures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(missing)?;
        install(
            &self.table,
            JoinHashTable::assemble(batch, keys, structures, nulls),
        )?;
        Ok(Steps::new())
    }
}

impl Sink for HashBuildSink {
    fn consume(&self, _seq: MorselSeq, batch: RecordBatch, worker: usize) -> Result<()> {
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            batch.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?;
        if let Some(grace) = self.grace.get() {
            return grace.write_build(&batch);
        }
        let bytes = batch_bytes(&batch);
        let charged = if self.partitionable() {
            self.memory.grow_spillable(bytes, "hash join build side")
        } else {
            self.memory.grow(bytes, "hash join build side")
        };
        match charged {
            Ok(()) => {
                self.parts.with(worker, |p| p.push(batch));
                Ok(())
            }
            Err(refused) => self.partition(refused)?.write_build(&batch),
        }
    }

    fn finish(&self, _cx: &FinalizeContext<'_>) -> Result<Steps> {
        if let Some(grace) = self.grace.get() {
            return self.finish_partitioned(grace);
        }
        let parts: Vec<RecordBatch> = self.parts.take_all().into_iter().flatten().collect();
        let collected: usize = parts.iter().map(batch_bytes).sum();
        let rows: usize = parts.iter().map(|p| p.num_rows()).sum();
        // The concatenated copy, then the table's structures; the collected
        // batches are returned once the copy replaced them. Where there is
        // no room for them, the build goes to partitions after all.
        if let Err(refused) = self.memory.grow(
            collected + JoinHashTable::structure_bytes(rows, self.config.track_matches),
            "hash join table",
        ) {
            self.parts.with(0, |p| p.extend(parts));
            let grace = self.partition(refused)?.clone();
            return self.finish_partitioned(&grace);
        }
        if rows > SPLIT_BUILD_ROWS {
            return Ok(vec![Arc::new(LayOutBuild {
                keys: self.keys.clone(),
                encoder: self.encoder.clone(),
                schema: self.schema.clone(),
                track_matches: self.config.track_matches,
                table: self.table.clone(),
                memory: self.memory.clone(),
                columns: (0..self.schema.fields().len())
                    .map(|_| OnceLock::new())
                    .collect(),
                encoded: std::sync::Mutex::new(None),
                structures: std::sync::Mutex::new(None),
                rows,
                collected,
                input: std::sync::Mutex::new(parts),
            })]);
        }
        let batch = concat_batches(&self.schema, &parts)?;
        drop(parts);
        self.memory.shrink(collected);
        let keys = self.encoder.encode(eval_keys(&self.keys, &batch)?)?;
        self.memory.grow(keys.bytes(), "hash join keys")?;
        install(
            &self.table,
            JoinHashTable::new(batch, keys, self.config.track_matches)?,
        )?;
        Ok(Steps::new())
    }

    fn name(&self) -> String {
        let k: Vec<String> = self.keys.iter().map(|e| e.to_string()).collect();
        format!("build hash table [{}]", k.join(", "))
    }
}
