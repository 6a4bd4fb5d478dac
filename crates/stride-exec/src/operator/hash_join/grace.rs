//! Grace hash join: a build side larger than the query's memory share goes
//! to disk in hash partitions, the probe rows follow it there, and each
//! partition is then joined on its own, one at a time.
//!
//! ```text
//!  build pipeline   rows ─► HashBuildSink ── charge refused ──► build partitions 0..P (files)
//!                   (the rows it kept so far go to their partitions too; the
//!                    table it installs is empty and marked partitioned)
//!  probe pipeline   rows ─► probe ── table partitioned ──► probe partitions 0..P (files)
//!                   (rows that cannot produce output are dropped: a NULL key,
//!                    or an empty build partition, where the join needs matches)
//!  pass p           [load build partition p: one table]      a split step
//!                   probe partition p ─► probe_p ─► rest of the pipeline ─► sink
//!                   [build-side pass over table p ─► rest ─► sink]   (outer/semi/anti
//!                                                                     kept build rows)
//! ```
//!
//! A key's partition is taken from the top bits of its hash, which both
//! sides compute alike (one [`KeyEncoder`]); bucket chains use the low
//! bits, so a partition's table is spread as well as a whole one would be.
//! Every match of a probe row lies in its own partition, so each pass
//! decides per row (outer, semi, anti) and per build row (the build-side
//! pass) exactly as the in-memory join does.
//!
//! The passes run through the pipeline's [`Deferred`] protocol: the probe
//! operator hands the partitions back once every probe row reached it, and
//! the sink finishes after the last pass. One partition's table is in
//! memory at a time, charged to the query; a partition that alone does not
//! fit the share fails with 53200 (there is no recursive partitioning).
//! Joins without keys and `NOT IN` joins (whose answer depends on whether
//! *any* build row is NULL) are never partitioned.
//!
//! Rows bound for a partition gather in a buffer of up to
//! [`FLUSH_ROWS`] rows (charged while held; flushed at once where the
//! charge is refused) and are written as one batch.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{concat_batches, take_record_batch};
use arrow::datatypes::SchemaRef;

use super::keys::{eval_keys, KeyEncoder, Keys};
use super::probe::HashProbeOperator;
use super::table::{HashTableSlot, JoinHashTable};
use super::SideMode;
use crate::error::{ExecError, Result};
use crate::memory::{batch_bytes, Charge, QueryMemory};
use crate::operator::{Deferred, Operator, Pass, PassRun};
use crate::plan::ExprRef;
use crate::seq::MorselSeq;
use crate::source::{Morsel, Source};
use crate::spill::{QuerySpill, SpillFile, SpillWriter};
use crate::step::{SplitStep, Steps};

/// log2 of the number of partitions.
const PARTITION_BITS: u32 = 5;

/// Partitions of a grace hash join.
pub const GRACE_PARTITIONS: usize = 1 << PARTITION_BITS;

/// Rows a partition's buffer gathers before they are written as one batch.
pub const FLUSH_ROWS: usize = 8192;

/// The partition of a key hash: its top bits.
fn partition_of(hash: u64) -> usize {
    (hash >> (64 - PARTITION_BITS)) as usize
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One partition's rows on their way to its file.
#[derive(Debug, Default)]
struct PartitionBuffer {
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    /// Bytes of `pending` charged to the query.
    charged: usize,
    writer: Option<SpillWriter>,
}

/// The rows of one side of the join, split by partition into files.
#[derive(Debug)]
struct PartitionedFiles {
    schema: SchemaRef,
    spill: Arc<QuerySpill>,
    memory: Arc<QueryMemory>,
    /// One buffer per partition, each behind its own mutex: writers of
    /// different partitions never wait for each other.
    partitions: Vec<Mutex<PartitionBuffer>>,
}

impl PartitionedFiles {
    fn new(schema: SchemaRef, spill: Arc<QuerySpill>, memory: Arc<QueryMemory>) -> Self {
        PartitionedFiles {
            schema,
            spill,
            memory,
            partitions: (0..GRACE_PARTITIONS).map(|_| Mutex::default()).collect(),
        }
    }

    /// Appends the rows of `batch` to the partitions of their keys,
    /// dropping those for which `keep(partition, key is NULL)` is false.
    fn write(
        &self,
        batch: &RecordBatch,
        keys: &Keys,
        keep: impl Fn(usize, bool) -> bool,
    ) -> Result<()> {
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            batch.columns().to_vec(),
            &RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
        )?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); GRACE_PARTITIONS];
        for i in 0..batch.num_rows() {
            let p = partition_of(keys.hash(i));
            if keep(p, keys.is_null(i)) {
                rows[p].push(i as u32);
            }
        }
        for (p, rows) in rows.into_iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let part = if rows.len() == batch.num_rows() {
                batch.clone()
            } else {
                take_record_batch(&batch, &UInt32Array::from(rows))?
            };
            self.append(p, part)?;
        }
        Ok(())
    }

    fn append(&self, p: usize, batch: RecordBatch) -> Result<()> {
        let mut buffer = lock(&self.partitions[p]);
        let bytes = batch_bytes(&batch);
        buffer.pending_rows += batch.num_rows();
        buffer.pending.push(batch);
        match self.memory.grow(bytes, "grace hash join partition buffer") {
            Ok(()) => buffer.charged += bytes,
            // No room to gather: write what there is now.
            Err(_) => return self.flush(&mut buffer),
        }
        if buffer.pending_rows >= FLUSH_ROWS {
            self.flush(&mut buffer)?;
        }
        Ok(())
    }

    fn flush(&self, buffer: &mut PartitionBuffer) -> Result<()> {
        if buffer.pending.is_empty() {
            return Ok(());
        }
        let batch = concat_batches(&self.schema, &buffer.pending)?;
        buffer.pending.clear();
        buffer.pending_rows = 0;
        self.memory.shrink(std::mem::take(&mut buffer.charged));
        let writer = match &mut buffer.writer {
            Some(w) => w,
            None => buffer
                .writer
                .insert(self.spill.create(self.schema.clone())?),
        };
        writer.write(&batch)?;
        Ok(())
    }

    /// Writes what every buffer holds and closes the files: one per
    /// partition that received rows.
    fn finish(&self) -> Result<Vec<Option<SpillFile>>> {
        self.partitions
            .iter()
            .map(|m| {
                let mut buffer = lock(m);
                self.flush(&mut buffer)?;
                buffer.writer.take().map(SpillWriter::finish).transpose()
            })
            .collect()
    }
}

/// Rows in a spill file's batches.
fn file_rows(file: &SpillFile) -> usize {
    (0..file.batches()).map(|i| file.rows(i)).sum()
}

/// A join whose build side went to disk: its partitions, and the probe
/// rows that follow them.
#[derive(Debug)]
pub struct GraceJoin {
    build: PartitionedFiles,
    /// The build partitions' files, once the build side is complete; each
    /// taken (and deleted once read) by its partition's load.
    build_files: OnceLock<Vec<Mutex<Option<SpillFile>>>>,
    /// Build rows per partition (set with `build_files`).
    build_rows: OnceLock<Vec<usize>>,
    /// The probe rows, from the first probe batch on.
    probe: OnceLock<PartitionedFiles>,
    build_keys: Vec<ExprRef>,
    encoder: Arc<KeyEncoder>,
    track_matches: bool,
}

impl GraceJoin {
    /// A grace join whose build rows, of `schema`, go to `spill`.
    pub(super) fn new(
        schema: SchemaRef,
        build_keys: Vec<ExprRef>,
        encoder: Arc<KeyEncoder>,
        track_matches: bool,
        spill: Arc<QuerySpill>,
        memory: Arc<QueryMemory>,
    ) -> Self {
        GraceJoin {
            build: PartitionedFiles::new(schema, spill, memory),
            build_files: OnceLock::new(),
            build_rows: OnceLock::new(),
            probe: OnceLock::new(),
            build_keys,
            encoder,
            track_matches,
        }
    }

    /// Writes build rows to their partitions.
    pub(super) fn write_build(&self, batch: &RecordBatch) -> Result<()> {
        let keys = self.encoder.encode(eval_keys(&self.build_keys, batch)?)?;
        self.build.write(batch, &keys, |_, _| true)
    }

    /// Closes the build partitions (the build sink's finish).
    pub(super) fn seal_build(&self) -> Result<()> {
        let files = self.build.finish()?;
        let rows = files
            .iter()
            .map(|f| f.as_ref().map_or(0, file_rows))
            .collect();
        let sealed = self.build_rows.set(rows).is_ok()
            && self
                .build_files
                .set(files.into_iter().map(Mutex::new).collect())
                .is_ok();
        if !sealed {
            return Err(ExecError::Internal("grace join build sealed twice".into()));
        }
        Ok(())
    }

    fn build_rows(&self) -> Result<&[usize]> {
        self.build_rows
            .get()
            .map(Vec::as_slice)
            .ok_or_else(|| ExecError::Internal("grace join probed before its build".into()))
    }

    /// Sets aside probe rows (already encoded as `keys`) in their
    /// partitions; `needs_match`: a row without a build match produces
    /// nothing (no probe-side outer or anti join), so rows with a NULL key
    /// or bound for an empty build partition are dropped.
    pub(super) fn defer_probe(
        &self,
        batch: &RecordBatch,
        keys: &Keys,
        needs_match: bool,
    ) -> Result<()> {
        let build_rows = self.build_rows()?;
        let probe = self.probe.get_or_init(|| {
            PartitionedFiles::new(
                crate::nullable_schema(&batch.schema()),
                self.build.spill.clone(),
                self.build.memory.clone(),
            )
        });
        probe.write(batch, keys, |p, null| {
            !needs_match || (!null && build_rows[p] > 0)
        })
    }
}

/// The passes of a grace join, one per partition with work to do.
#[derive(Debug)]
pub(super) struct GracePasses {
    grace: Arc<GraceJoin>,
    /// The probe operator each pass clones with its partition's table.
    probe: HashProbeOperator,
    /// The probe partitions' files, each taken by its pass.
    probe_files: Vec<Mutex<Option<SpillFile>>>,
    /// The next partition to consider (Relaxed: passes are asked for one
    /// at a time, from finalizations the scheduler orders).
    next: AtomicUsize,
    /// The charge of the partition table in use, returned when the next
    /// pass is asked for (the previous pass has then finished).
    current: Arc<Mutex<Option<Charge>>>,
}

impl GracePasses {
    /// The passes over `grace`'s partitions, once every probe row was set
    /// aside by `probe`.
    pub(super) fn new(grace: Arc<GraceJoin>, probe: HashProbeOperator) -> Result<Self> {
        let probe_files = match grace.probe.get() {
            Some(files) => files.finish()?,
            None => (0..GRACE_PARTITIONS).map(|_| None).collect(),
        };
        Ok(GracePasses {
            grace,
            probe,
            probe_files: probe_files.into_iter().map(Mutex::new).collect(),
            next: AtomicUsize::new(0),
            current: Arc::default(),
        })
    }
}

impl Deferred for GracePasses {
    fn next_pass(&self) -> Result<Option<Pass>> {
        lock(&self.current).take();
        let modes = self.probe.modes();
        let build_rows = self.grace.build_rows()?;
        loop {
            let p = self.next.fetch_add(1, Ordering::Relaxed);
            if p >= GRACE_PARTITIONS {
                return Ok(None);
            }
            let probe_file = lock(&self.probe_files[p]).take();
            let has_build = build_rows[p] > 0;
            // Probe rows alone produce output in a probe-side outer, anti or
            // mark join; build rows alone in a build-side one.
            let probe_alone = matches!(
                modes.probe,
                SideMode::Outer | SideMode::Anti | SideMode::Mark
            );
            let build_alone = modes.build != SideMode::None;
            let work = match (&probe_file, has_build) {
                (Some(_), true) => true,
                (Some(_), false) => probe_alone,
                (None, true) => build_alone,
                (None, false) => false,
            };
            if !work {
                continue;
            }
            let slot: HashTableSlot = Arc::new(OnceLock::new());
            let pass = (p + 1) as u32;
            let mut runs = Vec::new();
            if let Some(file) = probe_file {
                runs.push(PassRun {
                    source: Arc::new(PartitionSource {
                        file,
                        pass,
                        next: AtomicUsize::new(0),
                    }),
                    operator: Some(
                        Arc::new(self.probe.with_table(slot.clone())) as Arc<dyn Operator>
                    ),
                });
            }
            if build_alone {
                runs.push(PassRun {
                    source: Arc::new(
                        self.probe
                            .build_pass(slot.clone(), self.grace.build.schema.fields().len())?
                            .in_pass(pass),
                    ),
                    operator: None,
                });
            }
            let load = LoadPartition {
                grace: self.grace.clone(),
                partition: p,
                slot,
                charge: self.current.clone(),
            };
            return Ok(Some(Pass {
                steps: vec![Arc::new(load) as Arc<dyn SplitStep>],
                runs,
            }));
        }
    }
}

/// Loads one build partition into a table (one part: the partition is
/// read, its keys encoded and its rows linked on one worker).
#[derive(Debug)]
struct LoadPartition {
    grace: Arc<GraceJoin>,
    partition: usize,
    slot: HashTableSlot,
    charge: Arc<Mutex<Option<Charge>>>,
}

impl SplitStep for LoadPartition {
    fn name(&self) -> String {
        format!("grace hash join: load partition {}", self.partition)
    }

    fn parts(&self) -> usize {
        1
    }

    fn run_part(&self, _part: usize, _worker: usize) -> Result<usize> {
        let files = self
            .grace
            .build_files
            .get()
            .ok_or_else(|| ExecError::Internal("grace join pass before its build".into()))?;
        let file = lock(&files[self.partition]).take();
        let schema = self.grace.build.schema.clone();
        let memory = &self.grace.build.memory;
        let batches = match &file {
            Some(f) => f.iter().collect::<Result<Vec<_>>>()?,
            None => Vec::new(),
        };
        drop(file);
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let bytes: usize = batches.iter().map(batch_bytes).sum();
        let mut charge = memory.charge(
            bytes + JoinHashTable::structure_bytes(rows, self.grace.track_matches),
            "grace hash join partition",
        )?;
        let batch = concat_batches(&schema, &batches)?;
        drop(batches);
        let keys = self
            .grace
            .encoder
            .encode(eval_keys(&self.grace.build_keys, &batch)?)?;
        charge.grow(keys.bytes(), "grace hash join partition keys")?;
        let table = JoinHashTable::linked(batch, keys, self.grace.track_matches)?;
        self.slot
            .set(table)
            .map_err(|_| ExecError::Internal("grace join partition loaded twice".into()))?;
        *lock(&self.charge) = Some(charge);
        Ok(rows)
    }

    fn finish(&self) -> Result<Steps> {
        Ok(Steps::new())
    }
}

/// A probe partition's rows: a morsel is a run of whole spilled batches
/// of about the rows asked for (at least one batch).
#[derive(Debug)]
struct PartitionSource {
    file: SpillFile,
    pass: u32,
    /// Batches handed out so far. A run `[next, end)` is claimed by a
    /// compare-and-swap from `next` to `end`; nothing is published through
    /// it (Relaxed): the file is read-only.
    next: AtomicUsize,
}

impl Source for PartitionSource {
    fn next_morsel(&self, rows: usize) -> Result<Option<Morsel>> {
        let batches = self.file.batches();
        let claimed = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |first| {
                let mut end = first;
                let mut taken = 0;
                while end < batches && (end == first || taken < rows) {
                    taken += self.file.rows(end);
                    end += 1;
                }
                (end > first).then_some(end)
            });
        let Ok(first) = claimed else {
            return Ok(None);
        };
        let mut slices = Vec::new();
        let mut taken = 0;
        let mut i = first;
        while i < batches && (i == first || taken < rows) {
            taken += self.file.rows(i);
            let seq = MorselSeq::at(i as u64).in_pass(self.pass);
            slices.push((seq, self.file.read(i)?));
            i += 1;
        }
        Ok(Some(Morsel { slices }))
    }

    fn remaining_rows(&self) -> Option<usize> {
        let next = self.next.load(Ordering::Relaxed);
        Some((next..self.file.batches()).map(|i| self.file.rows(i)).sum())
    }

    fn name(&self) -> String {
        format!("probe partition {}", self.pass - 1)
    }
}
