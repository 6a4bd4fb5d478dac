//! The data directory: a write-ahead log, checkpoints and crash recovery.
//!
//! ```text
//!  DIR/
//!    LOCK                       flock(2)ed while a process uses DIR; holds its pid
//!    manifest                   the last complete checkpoint: an Arrow IPC stream
//!                               listing schemas and tables (metadata: format
//!                               version, checkpoint LSN, time)
//!    checkpoints/<LSN>/<i>.arrow one Arrow IPC stream per table of that checkpoint
//!    checkpoints/<LSN>/security.bin  the security catalog (roles, owners,
//!                               grants) as the SQL layer encoded it
//!    wal/<start LSN>.log        log segments (format: [`crate::wal`])
//!    bulk/<id>.arrow            the rows of a bulk write (an Arrow IPC stream),
//!                               named by a log record after the checkpoint
//! ```
//!
//! **Invariant: nothing acknowledged is lost.** A commit appends its record
//! to the current segment and is acknowledged only after an fsync
//! (`sync_data`) that began after the append returned. Recovery loads the
//! manifest's checkpoint and replays every record after its LSN, so the
//! state after a crash is the checkpoint plus every record that reached the
//! disk whole — a prefix of the commit order that includes every
//! acknowledged commit.
//!
//! **Group commit.** Appends happen under the log mutex (in commit order:
//! the caller holds the catalog's write lock). A committer waiting for its
//! LSN to be durable becomes the *leader* when no fsync is in flight: it
//! notes the log's end, releases the mutex, fsyncs, and publishes that end
//! as flushed; committers arriving meanwhile are *followers* that wait on
//! the condition variable, and the next leader's one fsync covers all of
//! them. An fsync that fails leaves the log *failed*: the kernel may have
//! dropped the dirty pages, so no later commit is acknowledged (every one
//! fails with an I/O error) until the server restarts and recovers.
//!
//! **Checkpoints.** Under the catalog's writer lock (no commit in between) the
//! log is rotated — the current segment fsynced, a new segment started at
//! the end LSN `C` — and the persistent tables are taken as snapshots. The
//! tables are written to `checkpoints/C/` and fsynced, then the manifest is
//! written to `manifest.tmp`, fsynced, renamed over `manifest`, and the
//! directory fsynced; only then are older segments and checkpoints deleted.
//! A crash at any step leaves either the old manifest with all the segments
//! it needs, or the new one: recovery removes the leftovers.
//!
//! **Bulk writes.** A commit whose `PutTable` or `Append` carries at least
//! `bulk_write_bytes` of rows (CREATE TABLE AS, COPY FROM, INSERT …
//! SELECT, an external table's rows) does not copy them into the log: they
//! are written to `bulk/<id>.arrow`, which is fsynced with its directory
//! before the commit appends a small record naming the file with its length
//! and CRC-32 ([`DataDir::write_bulk`], [`wal::encode_op_in_file`]). The
//! record is the commit point: a crash before it leaves a file no record
//! names, which recovery removes; a crash after it finds the file, whole,
//! because it was durable before the record was written. Recovery reads a
//! named file and refuses the directory when it is missing or its length or
//! checksum differ from the record's (the commit may have been
//! acknowledged). A checkpoint holds the rows itself and then deletes the
//! files of records it covers. Bulk files count towards the log size that
//! triggers an automatic checkpoint.
//!
//! **Unchanged tables are linked, not written.** A checkpoint's file for a
//! table whose snapshot is the very one a bulk file or the last
//! checkpoint's file holds (the same `Arc`, tracked by a `Weak`) is a hard
//! link to that file — durable already, the same bytes `write_table` would
//! write — so a checkpoint after a bulk load, or of a catalog where one
//! table changed, writes only what changed.
//!
//! **Recovery** refuses what it cannot read with certainty — an unknown
//! format version, a corrupt manifest or table file, a gap between
//! segments, a corrupt record before the last segment's end — rather than
//! start with less data. Only the last segment's tail may be torn (a crash
//! during an append, a record never acknowledged): it is cut off.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::{Array, AsArray, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema, UInt64Type};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;

use crate::catalog::{Catalog, CatalogOp};
use crate::error::{Result, StorageError};
use crate::table::Table;
use crate::wal::{self, FileRef};

/// The manifest's format version.
const FORMAT_VERSION: &str = "1";
/// A checkpoint's copy of the security catalog ([`CatalogOp::PutSecurity`]).
const SECURITY_FILE: &str = "security.bin";
/// Log bytes after which a commit triggers a checkpoint, unless configured.
pub const DEFAULT_CHECKPOINT_LOG_BYTES: u64 = 256 << 20;
/// Bytes of rows (in memory) from which one operation of a commit is a
/// bulk write, unless configured.
pub const DEFAULT_BULK_WRITE_BYTES: u64 = 8 << 20;
/// The folder of bulk writes' files.
const BULK_DIR: &str = "bulk";

/// How to open a data directory.
#[derive(Debug, Clone)]
pub struct DataDirConfig {
    pub path: PathBuf,
    /// Log bytes since the last checkpoint after which a commit triggers
    /// one (`stride.checkpoint_log_size`).
    pub checkpoint_log_bytes: u64,
    /// Bytes of rows from which a `PutTable` or `Append` is written as a
    /// bulk file rather than into the log (`stride.bulk_write_size`).
    pub bulk_write_bytes: u64,
}

/// The last checkpoint.
#[derive(Debug, Clone)]
pub struct CheckpointInfo {
    pub lsn: u64,
    pub time: SystemTime,
    pub tables: usize,
    /// Bytes of its table files.
    pub bytes: u64,
}

/// What recovery did when the directory was opened.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// The checkpoint loaded, if there was one.
    pub checkpoint_lsn: Option<u64>,
    pub tables_loaded: usize,
    pub records_replayed: usize,
    /// Bulk files the replayed records named, and their bytes.
    pub bulk_files_loaded: usize,
    pub bulk_bytes_loaded: u64,
    /// Bulk files no record named (a crash before their commit), removed.
    pub bulk_files_removed: usize,
    /// Bytes of a torn tail cut off the last segment.
    pub torn_bytes_cut: u64,
    pub elapsed: Duration,
}

/// The data directory's state (the `stride.storage` view).
#[derive(Debug, Clone)]
pub struct DataDirStatus {
    pub path: PathBuf,
    /// Bytes of all log segments on disk.
    pub log_bytes: u64,
    pub log_segments: usize,
    pub end_lsn: u64,
    pub flushed_lsn: u64,
    pub checkpoint: Option<CheckpointInfo>,
    pub checkpoint_log_bytes: u64,
    /// Bulk files on disk (named by records after the last checkpoint), and
    /// their bytes.
    pub bulk_files: usize,
    pub bulk_bytes: u64,
    pub bulk_write_bytes: u64,
    pub commits: u64,
    pub fsyncs: u64,
}

/// An open data directory (one process at a time: the lock is held until
/// the value is dropped).
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    /// Holds the directory's lock for the value's lifetime.
    _lock: File,
    log: Mutex<LogState>,
    /// Signalled when `flushed` advances or the log fails.
    flushed: Condvar,
    /// Held while a checkpoint runs (one at a time); the last one's info.
    checkpoint: Mutex<Option<CheckpointInfo>>,
    /// The last checkpoint's table files, each with the table snapshot it
    /// holds while that lives: the next checkpoint links the file of a
    /// table that did not change instead of writing it again. Used only
    /// while `checkpoint` is held.
    checkpoint_files: Mutex<Vec<TableFile>>,
    /// Relaxed: a plain setting.
    checkpoint_log_bytes: AtomicU64,
    /// Relaxed: a plain setting.
    bulk_write_bytes: AtomicU64,
    /// The next bulk file's id (Relaxed: only its uniqueness matters, and
    /// `fetch_add` gives that under any ordering).
    bulk_next: AtomicU64,
    /// Bulk files named by records after the last checkpoint.
    bulk: Mutex<Vec<BulkFile>>,
    /// Records appended (Relaxed: statistics).
    commits: AtomicU64,
    /// fsyncs of the log (Relaxed: statistics).
    fsyncs: AtomicU64,
    recovery: RecoveryReport,
}

/// A bulk file a log record names.
#[derive(Debug, Clone)]
struct BulkFile {
    /// The naming record's LSN.
    lsn: u64,
    name: String,
    len: u64,
    /// The table whose rows it holds exactly, while that snapshot lives (a
    /// `PutTable`'s): a checkpoint links the file for it.
    table: Option<std::sync::Weak<Table>>,
}

/// A file that holds exactly a table's snapshot (the table's schema and
/// blocks as one Arrow IPC stream).
#[derive(Debug, Clone)]
struct TableFile {
    table: std::sync::Weak<Table>,
    path: PathBuf,
}

/// A bulk file written for a commit not yet appended.
#[derive(Debug, Clone)]
pub struct BulkWrite {
    pub file: FileRef,
    table: Option<std::sync::Weak<Table>>,
}

#[derive(Debug)]
struct LogState {
    file: Arc<File>,
    segment_path: PathBuf,
    /// Bytes of the current segment file (header included).
    segment_len: u64,
    /// LSN after the last appended record.
    end: u64,
    /// Every record with an LSN ≤ this is on disk.
    flushed: u64,
    /// A leader's fsync is in flight.
    flushing: bool,
    /// Why the log failed (no commit is acknowledged any more).
    failed: Option<(std::io::ErrorKind, String)>,
    /// Bytes of older segments still on disk.
    older_bytes: u64,
    older_segments: usize,
}

impl DataDir {
    /// Opens (creating if needed) and recovers the data directory into
    /// `catalog`, which should hold no persistent tables yet.
    pub fn open(config: &DataDirConfig, catalog: &Catalog) -> Result<DataDir> {
        let started = std::time::Instant::now();
        let path = config.path.clone();
        fs::create_dir_all(&path).map_err(|e| StorageError::io(&path, e))?;
        let lock = lock_dir(&path)?;
        let mut report = RecoveryReport::default();
        let _ = fs::remove_file(path.join("manifest.tmp"));
        let manifest = read_manifest(&path)?;
        let mut checkpoint = None;
        let mut checkpoint_files = Vec::new();
        let c = match &manifest {
            Some(m) => {
                let (tables, bytes) = load_checkpoint(&path, m, catalog, &mut checkpoint_files)?;
                report.checkpoint_lsn = Some(m.lsn);
                report.tables_loaded = tables;
                checkpoint = Some(CheckpointInfo {
                    lsn: m.lsn,
                    time: m.time,
                    tables,
                    bytes,
                });
                m.lsn
            }
            None => 0,
        };
        remove_other_checkpoints(&path, manifest.as_ref().map(|m| m.lsn))?;
        let (log, bulk) = replay(&path, c, catalog, &mut report)?;
        let bulk_next = clean_bulk_dir(&path, &bulk, &mut report)?;
        report.elapsed = started.elapsed();
        Ok(DataDir {
            path,
            _lock: lock,
            log: Mutex::new(log),
            flushed: Condvar::new(),
            checkpoint: Mutex::new(checkpoint),
            checkpoint_files: Mutex::new(checkpoint_files),
            checkpoint_log_bytes: AtomicU64::new(config.checkpoint_log_bytes),
            bulk_write_bytes: AtomicU64::new(config.bulk_write_bytes),
            bulk_next: AtomicU64::new(bulk_next),
            bulk: Mutex::new(bulk),
            commits: AtomicU64::new(0),
            fsyncs: AtomicU64::new(0),
            recovery: report,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What recovery did at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    fn lock_log(&self) -> MutexGuard<'_, LogState> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends one record of encoded operations ([`wal::encode_op`]);
    /// returns its LSN, durable once [`DataDir::wait_durable`] returns.
    /// Callers append in commit order (under the catalog's write lock).
    pub fn append(&self, ops: &[Vec<u8>]) -> Result<u64> {
        self.append_with_bulk(ops, &[])
    }

    /// [`DataDir::append`] of a record that names the bulk files `bulk`
    /// ([`wal::encode_op_in_file`]), written by [`DataDir::write_bulk`]:
    /// from here on they belong to the log (a checkpoint that covers the
    /// record deletes them); on `Err` they are still the caller's.
    pub fn append_with_bulk(&self, ops: &[Vec<u8>], bulk: &[BulkWrite]) -> Result<u64> {
        let record = wal::frame(&wal::payload(ops));
        let mut log = self.lock_log();
        check_failed(&log)?;
        let at = log.segment_len;
        if let Err(e) = log.file.write_all_at(&record, at) {
            // A part of the record may be on disk: cut it off, so that the
            // next record follows the last whole one.
            if let Err(cut) = log.file.set_len(at) {
                log.failed = Some((cut.kind(), format!("cutting a failed append: {cut}")));
            }
            return Err(StorageError::io(&log.segment_path, e));
        }
        log.segment_len += record.len() as u64;
        log.end += record.len() as u64;
        let lsn = log.end;
        drop(log);
        self.commits.fetch_add(1, Ordering::Relaxed);
        if !bulk.is_empty() {
            // Still under the caller's catalog write lock: no checkpoint
            // rotates the log before these are listed with their LSN.
            self.lock_bulk().extend(bulk.iter().map(|w| BulkFile {
                lsn,
                name: w.file.name.clone(),
                len: w.file.len,
                table: w.table.clone(),
            }));
        }
        Ok(lsn)
    }

    fn lock_bulk(&self) -> MutexGuard<'_, Vec<BulkFile>> {
        self.bulk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of rows from which an operation is a bulk write.
    pub fn bulk_write_bytes(&self) -> u64 {
        self.bulk_write_bytes.load(Ordering::Relaxed)
    }

    pub fn set_bulk_write_bytes(&self, bytes: u64) {
        self.bulk_write_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Writes `blocks` (rows of `schema`; all of `table`'s when it is a
    /// `PutTable`'s) to a new file in `bulk/` as an Arrow IPC stream,
    /// computing its CRC-32 as it goes, and fsyncs the file and the folder:
    /// durable before any record names it. The caller appends the record
    /// ([`DataDir::append_with_bulk`]) or, when its commit fails,
    /// [`DataDir::discard_bulk`]s the file.
    pub fn write_bulk(
        &self,
        schema: &arrow::datatypes::SchemaRef,
        blocks: &[RecordBatch],
        table: Option<&Arc<Table>>,
    ) -> Result<BulkWrite> {
        let id = self.bulk_next.fetch_add(1, Ordering::Relaxed);
        let name = bulk_file_name(id);
        let folder = self.path.join(BULK_DIR);
        let path = folder.join(&name);
        let written = write_stream_with_crc(&path, schema, blocks).and_then(|(len, crc)| {
            sync_dir(&folder)?;
            Ok((len, crc))
        });
        match written {
            Ok((len, crc)) => Ok(BulkWrite {
                file: FileRef { name, len, crc },
                table: table.map(Arc::downgrade),
            }),
            Err(e) => {
                let _ = fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Removes bulk files whose commit failed (no record names them;
    /// recovery would remove them too).
    pub fn discard_bulk(&self, bulk: &[BulkWrite]) {
        for w in bulk {
            let _ = fs::remove_file(self.path.join(BULK_DIR).join(&w.file.name));
        }
    }

    /// Returns when every record up to `lsn` is on disk (group commit: see
    /// the module's documentation).
    pub fn wait_durable(&self, lsn: u64) -> Result<()> {
        let mut log = self.lock_log();
        loop {
            if log.flushed >= lsn {
                return Ok(());
            }
            check_failed(&log)?;
            if log.flushing {
                log = self.flushed.wait(log).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // The leader: one fsync for every record appended so far.
            log.flushing = true;
            let target = log.end;
            let file = log.file.clone();
            drop(log);
            let synced = file.sync_data();
            self.fsyncs.fetch_add(1, Ordering::Relaxed);
            log = self.lock_log();
            log.flushing = false;
            match synced {
                Ok(()) => log.flushed = log.flushed.max(target),
                Err(e) => log.failed = Some((e.kind(), format!("fsync of the log: {e}"))),
            }
            self.flushed.notify_all();
        }
    }

    /// Whether the log grew past the checkpoint threshold since the last
    /// checkpoint.
    /// Bulk files count as log: they are replayed too, and a table replaced
    /// again and again would otherwise pile up files until a checkpoint.
    pub fn wants_checkpoint(&self) -> bool {
        let bulk: u64 = self.lock_bulk().iter().map(|b| b.len).sum();
        let log = self.lock_log();
        log.segment_len - wal::SEGMENT_HEADER + bulk
            >= self.checkpoint_log_bytes.load(Ordering::Relaxed)
    }

    pub fn checkpoint_log_bytes(&self) -> u64 {
        self.checkpoint_log_bytes.load(Ordering::Relaxed)
    }

    pub fn set_checkpoint_log_bytes(&self, bytes: u64) {
        self.checkpoint_log_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Writes a checkpoint of `catalog`'s persistent schemas (its head:
    /// every commit appended to the log, durable or pending) and truncates
    /// the log; waits for a running checkpoint first.
    pub fn checkpoint(&self, catalog: &Catalog) -> Result<CheckpointInfo> {
        let guard = self.checkpoint.lock().unwrap_or_else(|e| e.into_inner());
        self.checkpoint_locked(guard, catalog)
    }

    /// Like [`DataDir::checkpoint`], but returns `None` at once when a
    /// checkpoint is running (the automatic checkpoint).
    pub fn try_checkpoint(&self, catalog: &Catalog) -> Result<Option<CheckpointInfo>> {
        match self.checkpoint.try_lock() {
            Ok(guard) => self.checkpoint_locked(guard, catalog).map(Some),
            Err(std::sync::TryLockError::WouldBlock) => Ok(None),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                self.checkpoint_locked(p.into_inner(), catalog).map(Some)
            }
        }
    }

    fn checkpoint_locked(
        &self,
        mut last: MutexGuard<'_, Option<CheckpointInfo>>,
        catalog: &Catalog,
    ) -> Result<CheckpointInfo> {
        // A consistent cut: no commit between the rotation and the snapshot.
        let (lsn, schemas, security) = catalog.read_head(|state| -> Result<_> {
            let lsn = self.rotate()?;
            let schemas: Vec<(String, Vec<Arc<Table>>)> = state
                .schemas()
                .filter(|(name, _)| !state.is_transient(name))
                .map(|(name, tables)| (name.clone(), tables.values().cloned().collect()))
                .collect();
            Ok((lsn, schemas, state.security().cloned()))
        })?;
        // Every change of a persistent table is logged: the same LSN is the
        // same state. Writing it again would overwrite the files the
        // manifest names, which a crash could leave half written.
        if let Some(prev) = last.as_ref().filter(|c| c.lsn == lsn) {
            return Ok(prev.clone());
        }
        let dir = self.path.join("checkpoints").join(format!("{lsn:020}"));
        fs::create_dir_all(&dir).map_err(|e| StorageError::io(&dir, e))?;
        let mut entries = ManifestBuilder::default();
        let mut bytes = 0;
        let mut tables = 0;
        // Tables unchanged since their bulk write or the last checkpoint:
        // that file holds them already.
        let mut linkable: Vec<(Arc<Table>, PathBuf)> = self
            .lock_bulk()
            .iter()
            .filter(|b| b.lsn <= lsn)
            .filter_map(|b| {
                let table = b.table.as_ref()?.upgrade()?;
                Some((table, self.path.join(BULK_DIR).join(&b.name)))
            })
            .collect();
        let mut previous = self
            .checkpoint_files
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        linkable.extend(
            previous
                .iter()
                .filter_map(|f| Some((f.table.upgrade()?, f.path.clone()))),
        );
        let mut files = Vec::new();
        for (schema, list) in &schemas {
            entries.push("schema", schema, None, None, 0);
            for table in list {
                let file = format!("{tables}.arrow");
                let path = dir.join(&file);
                let same = linkable.iter().find(|(t, _)| Arc::ptr_eq(t, table));
                bytes += match same {
                    Some((_, from)) => link_file(from, &path)?,
                    None => write_table(&path, table)?,
                };
                files.push(TableFile {
                    table: Arc::downgrade(table),
                    path: path.clone(),
                });
                entries.push(
                    "table",
                    schema,
                    Some(table.name()),
                    Some(&file),
                    table.num_rows() as u64,
                );
                tables += 1;
            }
        }
        if let Some(blob) = &security {
            let path = dir.join(SECURITY_FILE);
            let mut f = create_file(&path)?;
            f.write_all(blob).map_err(|e| StorageError::io(&path, e))?;
            f.sync_all().map_err(|e| StorageError::io(&path, e))?;
            bytes += blob.len() as u64;
            // "rows" holds the file's length: a short file is refused.
            entries.push("security", "", None, Some(SECURITY_FILE), blob.len() as u64);
        }
        sync_dir(&dir)?;
        sync_dir(&self.path.join("checkpoints"))?;
        let time = SystemTime::now();
        let batch = entries.finish()?;
        let tmp = self.path.join("manifest.tmp");
        {
            let mut f = create_file(&tmp)?;
            let meta: std::collections::HashMap<String, String> = [
                ("stride.format".to_string(), FORMAT_VERSION.to_string()),
                ("stride.lsn".to_string(), lsn.to_string()),
                (
                    "stride.time".to_string(),
                    time.duration_since(UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_millis()
                        .to_string(),
                ),
            ]
            .into();
            let schema = Arc::new(batch.schema().as_ref().clone().with_metadata(meta));
            let batch = batch.with_schema(schema.clone())?;
            let mut w = StreamWriter::try_new(&mut f, &schema)?;
            w.write(&batch)?;
            w.finish()?;
            drop(w);
            f.sync_all().map_err(|e| StorageError::io(&tmp, e))?;
        }
        let manifest = self.path.join("manifest");
        fs::rename(&tmp, &manifest).map_err(|e| StorageError::io(&manifest, e))?;
        sync_dir(&self.path)?;
        // The new checkpoint is durable: what came before it may go.
        *previous = files;
        drop(previous);
        remove_other_checkpoints(&self.path, Some(lsn))?;
        let removed = remove_segments_before(&self.path.join("wal"), lsn)?;
        {
            let mut log = self.lock_log();
            log.older_bytes = log.older_bytes.saturating_sub(removed.1);
            log.older_segments = log.older_segments.saturating_sub(removed.0);
        }
        self.remove_bulk_through(lsn)?;
        let info = CheckpointInfo {
            lsn,
            time,
            tables,
            bytes,
        };
        *last = Some(info.clone());
        Ok(info)
    }

    /// Deletes the bulk files of records at or before `lsn` (a durable
    /// checkpoint holds their rows).
    fn remove_bulk_through(&self, lsn: u64) -> Result<()> {
        let covered: Vec<BulkFile> = {
            let mut bulk = self.lock_bulk();
            let (covered, kept) = bulk.drain(..).partition(|b| b.lsn <= lsn);
            *bulk = kept;
            covered
        };
        if covered.is_empty() {
            return Ok(());
        }
        let folder = self.path.join(BULK_DIR);
        for b in &covered {
            let p = folder.join(&b.name);
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StorageError::io(&p, e)),
            }
        }
        sync_dir(&folder)
    }

    /// Makes everything appended durable and starts a new segment at the
    /// log's end, whose LSN it returns.
    fn rotate(&self) -> Result<u64> {
        let mut log = self.lock_log();
        check_failed(&log)?;
        if let Err(e) = log.file.sync_data() {
            log.failed = Some((e.kind(), format!("fsync of the log: {e}")));
            return Err(StorageError::io(&log.segment_path, e));
        }
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        log.flushed = log.end;
        self.flushed.notify_all();
        if log.segment_len == wal::SEGMENT_HEADER {
            return Ok(log.end);
        }
        let end = log.end;
        let (file, path) = new_segment(&self.path.join("wal"), end)?;
        log.older_bytes += log.segment_len;
        log.older_segments += 1;
        log.file = Arc::new(file);
        log.segment_path = path;
        log.segment_len = wal::SEGMENT_HEADER;
        Ok(end)
    }

    /// The directory's state now.
    pub fn status(&self) -> DataDirStatus {
        let checkpoint = match self.checkpoint.try_lock() {
            Ok(c) => c.clone(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
            // A checkpoint is running: the last one is not known without
            // waiting for it; report none rather than block a query.
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let (bulk_files, bulk_bytes) = {
            let bulk = self.lock_bulk();
            (bulk.len(), bulk.iter().map(|b| b.len).sum())
        };
        let log = self.lock_log();
        DataDirStatus {
            path: self.path.clone(),
            bulk_files,
            bulk_bytes,
            bulk_write_bytes: self.bulk_write_bytes(),
            log_bytes: log.older_bytes + log.segment_len,
            log_segments: log.older_segments + 1,
            end_lsn: log.end,
            flushed_lsn: log.flushed,
            checkpoint,
            checkpoint_log_bytes: self.checkpoint_log_bytes(),
            commits: self.commits.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
        }
    }
}

fn check_failed(log: &LogState) -> Result<()> {
    match &log.failed {
        Some((kind, why)) => Err(StorageError::io(
            &log.segment_path,
            std::io::Error::new(
                *kind,
                format!(
                    "the write-ahead log failed earlier ({why}); restart the server to recover"
                ),
            ),
        )),
        None => Ok(()),
    }
}

/// Takes the directory's lock (and writes our pid into it).
fn lock_dir(path: &Path) -> Result<File> {
    let lock_path = path.join("LOCK");
    let mut lock = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .map_err(|e| StorageError::io(&lock_path, e))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let holder = fs::read_to_string(&lock_path).unwrap_or_default();
            return Err(StorageError::DataDirInUse {
                path: path.display().to_string(),
                holder: format!("pid {}", holder.trim()),
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(StorageError::io(&lock_path, e)),
    }
    lock.set_len(0)
        .and_then(|()| lock.write_all_at(std::process::id().to_string().as_bytes(), 0))
        .and_then(|()| lock.flush())
        .map_err(|e| StorageError::io(&lock_path, e))?;
    Ok(lock)
}

fn unrecoverable(path: &Path, reason: impl Into<String>) -> StorageError {
    StorageError::Unrecoverable {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn create_file(path: &Path) -> Result<File> {
    File::create(path).map_err(|e| StorageError::io(path, e))
}

fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(path, e))
}

/// A new, empty segment starting at `lsn`, fsynced with its directory.
fn new_segment(wal_dir: &Path, lsn: u64) -> Result<(File, PathBuf)> {
    fs::create_dir_all(wal_dir).map_err(|e| StorageError::io(wal_dir, e))?;
    let path = wal_dir.join(format!("{lsn:020}.log"));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| StorageError::io(&path, e))?;
    file.write_all_at(&wal::segment_header(lsn), 0)
        .and_then(|()| file.sync_all())
        .map_err(|e| StorageError::io(&path, e))?;
    sync_dir(wal_dir)?;
    Ok((file, path))
}

/// The log's segments, by start LSN (from their names).
fn segments(wal_dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(wal_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(StorageError::io(wal_dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io(wal_dir, e))?;
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".log")) else {
            continue;
        };
        let start = stem
            .parse::<u64>()
            .map_err(|_| unrecoverable(&entry.path(), "a log segment of an unknown name"))?;
        out.push((start, entry.path()));
    }
    out.sort();
    Ok(out)
}

/// Deletes the segments that end at or before `lsn` (all that start
/// before it: a checkpoint's rotation starts a segment exactly at `lsn`);
/// returns (segments, bytes) deleted.
fn remove_segments_before(wal_dir: &Path, lsn: u64) -> Result<(usize, u64)> {
    let mut removed = (0, 0);
    for (start, path) in segments(wal_dir)? {
        if start < lsn {
            let len = fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
            removed.0 += 1;
            removed.1 += len;
        }
    }
    if removed.0 > 0 {
        sync_dir(wal_dir)?;
    }
    Ok(removed)
}

/// Replays the log after checkpoint LSN `c` into `catalog`; returns the
/// state to append from and the bulk files the replayed records name.
fn replay(
    path: &Path,
    c: u64,
    catalog: &Catalog,
    report: &mut RecoveryReport,
) -> Result<(LogState, Vec<BulkFile>)> {
    let wal_dir = path.join("wal");
    let bulk_dir = path.join(BULK_DIR);
    let mut bulk = Vec::new();
    let mut segs = segments(&wal_dir)?;
    // Segments wholly before the checkpoint (a crash after its manifest
    // was renamed, before they were deleted).
    let first_needed = segs.iter().rposition(|(start, _)| *start <= c).unwrap_or(0);
    for (_, old) in segs.drain(..first_needed) {
        fs::remove_file(&old).map_err(|e| StorageError::io(&old, e))?;
    }
    if let Some((start, p)) = segs.first() {
        if *start > c {
            return Err(unrecoverable(
                p,
                format!("the log starts at LSN {start}, after the checkpoint's LSN {c}: records are missing"),
            ));
        }
    }
    // A crash while a rotation created the last segment, before its header
    // was durable, leaves a segment that never held a record.
    if let Some((_, p)) = segs.last() {
        let bytes = fs::read(p).map_err(|e| StorageError::io(p, e))?;
        if bytes.len() as u64 <= wal::SEGMENT_HEADER && wal::scan_segment(&bytes).is_err() {
            fs::remove_file(p).map_err(|e| StorageError::io(p, e))?;
            segs.pop();
        }
    }
    let mut end = c;
    let mut current: Option<(File, PathBuf, u64)> = None;
    let mut older = (0usize, 0u64);
    let count = segs.len();
    for (i, (start, seg_path)) in segs.into_iter().enumerate() {
        let bytes = fs::read(&seg_path).map_err(|e| StorageError::io(&seg_path, e))?;
        let scan =
            wal::scan_segment(&bytes).map_err(|e| unrecoverable(&seg_path, e.to_string()))?;
        if scan.start_lsn != start {
            return Err(unrecoverable(
                &seg_path,
                "the segment's header names another LSN",
            ));
        }
        if i > 0 && start != end {
            return Err(unrecoverable(
                &seg_path,
                format!("a gap in the log: the previous segment ends at LSN {end}"),
            ));
        }
        for (lsn, payload) in &scan.records {
            if *lsn <= c {
                continue;
            }
            let decoded =
                wal::decode_payload_files(payload, &mut |f: &FileRef| read_bulk(&bulk_dir, f))
                    .map_err(|e| match e {
                        e @ StorageError::Unrecoverable { .. } => e,
                        e => unrecoverable(&seg_path, format!("the record at LSN {lsn}: {e}")),
                    })?;
            let mut ops = Vec::with_capacity(decoded.len());
            for (op, file) in decoded {
                if let Some(f) = file {
                    report.bulk_files_loaded += 1;
                    report.bulk_bytes_loaded += f.len;
                    // A table put whole from the file: a checkpoint links
                    // the file while the table is unchanged.
                    let table = match &op {
                        CatalogOp::PutTable { table, .. } => Some(Arc::downgrade(table)),
                        _ => None,
                    };
                    bulk.push(BulkFile {
                        lsn: *lsn,
                        name: f.name,
                        len: f.len,
                        table,
                    });
                }
                ops.push(op);
            }
            catalog
                .commit(|state| {
                    for op in &ops {
                        state.apply(op)?;
                    }
                    Ok(())
                })
                .map_err(|e| {
                    unrecoverable(
                        &seg_path,
                        format!("the record at LSN {lsn} does not apply: {e}"),
                    )
                })?;
            report.records_replayed += 1;
        }
        end = start + scan.valid_len - wal::SEGMENT_HEADER;
        let last = i + 1 == count;
        if scan.torn {
            if !last {
                return Err(unrecoverable(
                    &seg_path,
                    "a corrupt record in a segment that is not the last",
                ));
            }
            report.torn_bytes_cut = bytes.len() as u64 - scan.valid_len;
        }
        if last {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&seg_path)
                .map_err(|e| StorageError::io(&seg_path, e))?;
            if scan.torn {
                file.set_len(scan.valid_len)
                    .and_then(|()| file.sync_all())
                    .map_err(|e| StorageError::io(&seg_path, e))?;
            }
            current = Some((file, seg_path, scan.valid_len));
        } else {
            older.0 += 1;
            older.1 += bytes.len() as u64;
        }
    }
    let (file, segment_path, segment_len) = match current {
        Some(c_) if end >= c => c_,
        // No log (a new directory) or one that ends before the checkpoint.
        other => {
            if let Some((_, p, len)) = other {
                older.0 += 1;
                older.1 += len;
                drop(p);
            }
            end = end.max(c);
            let (file, path) = new_segment(&wal_dir, end)?;
            (file, path, wal::SEGMENT_HEADER)
        }
    };
    let log = LogState {
        file: Arc::new(file),
        segment_path,
        segment_len,
        end,
        flushed: end,
        flushing: false,
        failed: None,
        older_bytes: older.1,
        older_segments: older.0,
    };
    Ok((log, bulk))
}

/// A bulk file's name for id `id`.
fn bulk_file_name(id: u64) -> String {
    format!("{id:020}.arrow")
}

/// The id in a bulk file's name, if it is one.
fn bulk_file_id(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".arrow")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The rows of the bulk file `f` names, once its length and checksum are
/// the record's; a file that is missing or differs refuses the directory
/// (its commit may have been acknowledged).
fn read_bulk(
    folder: &Path,
    f: &FileRef,
) -> Result<(arrow::datatypes::SchemaRef, Vec<RecordBatch>)> {
    if bulk_file_id(&f.name).is_none() {
        return Err(unrecoverable(
            folder,
            format!(
                "a log record names bulk file \"{}\", not a bulk file's name",
                f.name
            ),
        ));
    }
    let path = folder.join(&f.name);
    let data = fs::read(&path)
        .map_err(|e| unrecoverable(&path, format!("a bulk file a log record names: {e}")))?;
    if data.len() as u64 != f.len {
        return Err(unrecoverable(
            &path,
            format!(
                "the bulk file holds {} bytes, its log record says {} (torn or truncated)",
                data.len(),
                f.len
            ),
        ));
    }
    let crc = wal::crc32(&data);
    if crc != f.crc {
        return Err(unrecoverable(
            &path,
            format!(
                "the bulk file's CRC-32 is {crc:08x}, its log record says {:08x}",
                f.crc
            ),
        ));
    }
    wal::read_ipc_stream(&data).map_err(|e| unrecoverable(&path, format!("corrupt bulk file: {e}")))
}

/// Creates `bulk/` if needed and removes every bulk file no replayed record
/// names — written for a commit a crash (or a failure) stopped before its
/// record, or covered by the checkpoint; returns the next file id.
fn clean_bulk_dir(path: &Path, named: &[BulkFile], report: &mut RecoveryReport) -> Result<u64> {
    let folder = path.join(BULK_DIR);
    if !folder.is_dir() {
        fs::create_dir_all(&folder).map_err(|e| StorageError::io(&folder, e))?;
        sync_dir(path)?;
    }
    let keep: std::collections::HashSet<&str> = named.iter().map(|b| b.name.as_str()).collect();
    let mut next = 0;
    let entries = fs::read_dir(&folder).map_err(|e| StorageError::io(&folder, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io(&folder, e))?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(bulk_file_id) else {
            continue;
        };
        next = next.max(id + 1);
        if !keep.contains(name.to_str().unwrap_or_default()) {
            let p = entry.path();
            fs::remove_file(&p).map_err(|e| StorageError::io(&p, e))?;
            report.bulk_files_removed += 1;
        }
    }
    if report.bulk_files_removed > 0 {
        sync_dir(&folder)?;
    }
    for b in named {
        if let Some(id) = bulk_file_id(&b.name) {
            next = next.max(id + 1);
        }
    }
    Ok(next)
}

/// An `io::Write` that counts and checksums what passes through it.
struct CrcWriter<W> {
    inner: W,
    crc: wal::Crc32,
    len: u64,
}

impl<W: Write> Write for CrcWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `blocks` as an Arrow IPC stream to a new file at `path` and
/// fsyncs it; returns its length and CRC-32.
fn write_stream_with_crc(
    path: &Path,
    schema: &arrow::datatypes::SchemaRef,
    blocks: &[RecordBatch],
) -> Result<(u64, u32)> {
    let mut w = CrcWriter {
        inner: std::io::BufWriter::with_capacity(1 << 20, create_file(path)?),
        crc: wal::Crc32::default(),
        len: 0,
    };
    {
        let mut stream = StreamWriter::try_new(&mut w, schema)?;
        for b in blocks {
            stream.write(b)?;
        }
        stream.finish()?;
    }
    let (len, crc) = (w.len, w.crc.finish());
    let f = w
        .inner
        .into_inner()
        .map_err(|e| StorageError::io(path, e.into_error()))?;
    f.sync_all().map_err(|e| StorageError::io(path, e))?;
    Ok((len, crc))
}

/// A checkpoint's table file as a hard link to a bulk file that holds the
/// same rows (durable already); returns its bytes.
fn link_file(from: &Path, to: &Path) -> Result<u64> {
    // A failed checkpoint at the same LSN may have left the name behind.
    let _ = fs::remove_file(to);
    fs::hard_link(from, to).map_err(|e| StorageError::io(to, e))?;
    fs::metadata(to)
        .map(|m| m.len())
        .map_err(|e| StorageError::io(to, e))
}

/// Deletes checkpoint directories other than `keep`'s.
fn remove_other_checkpoints(path: &Path, keep: Option<u64>) -> Result<()> {
    let dir = path.join("checkpoints");
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StorageError::io(&dir, e)),
    };
    let keep = keep.map(|lsn| format!("{lsn:020}"));
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io(&dir, e))?;
        if keep.as_deref() != entry.file_name().to_str() {
            let p = entry.path();
            fs::remove_dir_all(&p).map_err(|e| StorageError::io(&p, e))?;
        }
    }
    Ok(())
}

/// Writes a table as an Arrow IPC stream, fsynced; returns its bytes.
fn write_table(path: &Path, table: &Table) -> Result<u64> {
    let mut f = std::io::BufWriter::new(create_file(path)?);
    {
        let mut w = StreamWriter::try_new(&mut f, table.schema())?;
        for b in table.blocks().iter() {
            w.write(b)?;
        }
        w.finish()?;
    }
    let f = f
        .into_inner()
        .map_err(|e| StorageError::io(path, e.into_error()))?;
    f.sync_all().map_err(|e| StorageError::io(path, e))?;
    f.metadata()
        .map(|m| m.len())
        .map_err(|e| StorageError::io(path, e))
}

#[derive(Default)]
struct ManifestBuilder {
    kind: Vec<&'static str>,
    schema: Vec<String>,
    table: Vec<Option<String>>,
    file: Vec<Option<String>>,
    rows: Vec<u64>,
}

impl ManifestBuilder {
    fn push(
        &mut self,
        kind: &'static str,
        schema: &str,
        table: Option<&str>,
        file: Option<&str>,
        rows: u64,
    ) {
        self.kind.push(kind);
        self.schema.push(schema.to_string());
        self.table.push(table.map(str::to_string));
        self.file.push(file.map(str::to_string));
        self.rows.push(rows);
    }

    fn finish(self) -> Result<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("kind", DataType::Utf8, false),
            Field::new("schema", DataType::Utf8, false),
            Field::new("table", DataType::Utf8, true),
            Field::new("file", DataType::Utf8, true),
            Field::new("rows", DataType::UInt64, false),
        ]));
        Ok(RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(self.kind)),
                Arc::new(StringArray::from(self.schema)),
                Arc::new(StringArray::from(self.table)),
                Arc::new(StringArray::from(self.file)),
                Arc::new(UInt64Array::from(self.rows)),
            ],
        )?)
    }
}

struct Manifest {
    lsn: u64,
    time: SystemTime,
    batches: Vec<RecordBatch>,
}

fn read_manifest(path: &Path) -> Result<Option<Manifest>> {
    let mpath = path.join("manifest");
    let file = match File::open(&mpath) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(&mpath, e)),
    };
    let bad = |why: String| unrecoverable(&mpath, format!("corrupt manifest: {why}"));
    let reader = StreamReader::try_new(std::io::BufReader::new(file), None)
        .map_err(|e| bad(e.to_string()))?;
    let meta = reader.schema().metadata().clone();
    match meta.get("stride.format").map(String::as_str) {
        Some(FORMAT_VERSION) => {}
        Some(other) => {
            return Err(unrecoverable(
                &mpath,
                format!("unknown data directory format version {other} (this Stride reads version {FORMAT_VERSION})"),
            ))
        }
        None => return Err(bad("no format version".into())),
    }
    let lsn = meta
        .get("stride.lsn")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| bad("no LSN".into()))?;
    let millis = meta
        .get("stride.time")
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| bad("no time".into()))?;
    let batches = reader
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    Ok(Some(Manifest {
        lsn,
        time: UNIX_EPOCH + Duration::from_millis(millis),
        batches,
    }))
}

/// A file a checkpoint's manifest names.
fn checkpoint_file(path: &Path, what: &str) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| unrecoverable(path, format!("a checkpoint's {what} file: {e}")))
}

/// A checkpoint file that does not hold what the manifest says it holds.
fn disagrees(path: &Path, what: &str, holds: usize, unit: &str, manifest: u64) -> StorageError {
    unrecoverable(
        path,
        format!("the {what} holds {holds} {unit}, the manifest says {manifest}"),
    )
}

/// Loads a checkpoint's schemas and tables; returns (tables, bytes).
fn load_checkpoint(
    path: &Path,
    m: &Manifest,
    catalog: &Catalog,
    files: &mut Vec<TableFile>,
) -> Result<(usize, u64)> {
    let dir = path.join("checkpoints").join(format!("{:020}", m.lsn));
    let mpath = path.join("manifest");
    let bad = |why: String| unrecoverable(&mpath, why);
    let mut tables = 0;
    let mut bytes = 0;
    let mut ops = Vec::new();
    let mut schemas = BTreeMap::new();
    for batch in &m.batches {
        let col = |i: usize| batch.column(i).as_string_opt::<i32>().cloned();
        let (Some(kind), Some(schema), Some(table), Some(file)) = (col(0), col(1), col(2), col(3))
        else {
            return Err(bad("corrupt manifest: unexpected columns".into()));
        };
        let rows = batch
            .column(4)
            .as_primitive_opt::<UInt64Type>()
            .ok_or_else(|| bad("corrupt manifest: unexpected columns".into()))?;
        for i in 0..batch.num_rows() {
            let s = schema.value(i).to_string();
            match kind.value(i) {
                "schema" => {
                    schemas.insert(s.clone(), ());
                    if !catalog.schema_exists(&s) {
                        ops.push(CatalogOp::CreateSchema(s));
                    }
                }
                "table" if !table.is_null(i) && !file.is_null(i) => {
                    let fpath = dir.join(file.value(i));
                    let data = checkpoint_file(&fpath, "table")?;
                    bytes += data.len() as u64;
                    let (arrow_schema, blocks) = wal::read_ipc_stream(&data)
                        .map_err(|e| unrecoverable(&fpath, format!("corrupt table file: {e}")))?;
                    let t = Table::new(table.value(i), arrow_schema, blocks)?;
                    if t.num_rows() as u64 != rows.value(i) {
                        return Err(disagrees(
                            &fpath,
                            "table file",
                            t.num_rows(),
                            "rows",
                            rows.value(i),
                        ));
                    }
                    let t = Arc::new(t);
                    files.push(TableFile {
                        table: Arc::downgrade(&t),
                        path: fpath.clone(),
                    });
                    ops.push(CatalogOp::PutTable {
                        schema: s,
                        table: t,
                    });
                    tables += 1;
                }
                "security" if !file.is_null(i) => {
                    let fpath = dir.join(file.value(i));
                    let data = checkpoint_file(&fpath, "security")?;
                    if data.len() as u64 != rows.value(i) {
                        return Err(disagrees(
                            &fpath,
                            "security file",
                            data.len(),
                            "bytes",
                            rows.value(i),
                        ));
                    }
                    bytes += data.len() as u64;
                    ops.push(CatalogOp::PutSecurity(Arc::new(data)));
                }
                other => return Err(bad(format!("corrupt manifest: an entry of kind {other}"))),
            }
        }
    }
    // Schemas the checkpoint does not list were dropped before it.
    for name in catalog.schema_names() {
        if !schemas.contains_key(&name) && catalog.table_names(&name)?.is_empty() {
            catalog.drop_schema(&name, true, false)?;
        }
    }
    catalog
        .commit(|state| {
            for op in &ops {
                state.apply(op)?;
            }
            Ok(())
        })
        .map_err(|e| bad(format!("the checkpoint does not load: {e}")))?;
    Ok((tables, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;

    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stride-durable-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn config(path: &Path) -> DataDirConfig {
        DataDirConfig {
            path: path.to_path_buf(),
            checkpoint_log_bytes: DEFAULT_CHECKPOINT_LOG_BYTES,
            bulk_write_bytes: DEFAULT_BULK_WRITE_BYTES,
        }
    }

    fn ids(n: std::ops::Range<i64>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(n))]).unwrap()
    }

    /// Commits `ops` as one record, as the SQL layer does.
    fn commit(dir: &DataDir, catalog: &Catalog, ops: Vec<CatalogOp>) {
        let encoded: Vec<Vec<u8>> = ops.iter().map(|o| wal::encode_op(o).unwrap()).collect();
        let lsn = catalog
            .commit(|state| {
                for op in &ops {
                    state.apply(op)?;
                }
                dir.append(&encoded)
            })
            .unwrap();
        dir.wait_durable(lsn).unwrap();
    }

    fn create_t(dir: &DataDir, catalog: &Catalog) {
        let b = ids(0..3);
        let t = Table::new("t", b.schema(), vec![b]).unwrap();
        commit(
            dir,
            catalog,
            vec![
                CatalogOp::CreateSchema("s".into()),
                CatalogOp::PutTable {
                    schema: "s".into(),
                    table: Arc::new(t),
                },
            ],
        );
    }

    fn append(dir: &DataDir, catalog: &Catalog, rows: std::ops::Range<i64>) {
        commit(
            dir,
            catalog,
            vec![CatalogOp::Append {
                schema: "s".into(),
                table: "t".into(),
                blocks: vec![ids(rows)],
            }],
        );
    }

    fn rows(catalog: &Catalog) -> usize {
        catalog.table("s", "t").unwrap().num_rows()
    }

    #[test]
    fn the_log_and_checkpoints_survive_a_reopen() {
        let path = temp_dir("reopen");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            append(&dir, &catalog, 3..10);
        }
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            assert_eq!(rows(&catalog), 10);
            assert_eq!(dir.recovery().records_replayed, 2);
            let info = dir.checkpoint(&catalog).unwrap();
            assert_eq!(info.tables, 1);
            // Nothing changed: the checkpoint is the one there is, its
            // files untouched.
            let again = dir.checkpoint(&catalog).unwrap();
            assert_eq!((again.lsn, again.time), (info.lsn, info.time));
            append(&dir, &catalog, 10..12);
            let status = dir.status();
            assert_eq!(status.checkpoint.unwrap().lsn, info.lsn);
            assert_eq!(status.log_segments, 1);
        }
        let catalog = Catalog::new();
        let dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 12);
        assert_eq!(dir.recovery().records_replayed, 1);
        assert_eq!(dir.recovery().tables_loaded, 1);
        drop(dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn the_security_catalog_survives_the_log_and_a_checkpoint() {
        let path = temp_dir("security");
        let put = |bytes: &[u8]| vec![CatalogOp::PutSecurity(Arc::new(bytes.to_vec()))];
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            assert_eq!(catalog.security(), None);
            commit(&dir, &catalog, put(b"first"));
            commit(&dir, &catalog, put(b"second"));
        }
        {
            // From the log: the last one committed.
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            assert_eq!(
                catalog.security().as_deref().map(Vec::as_slice),
                Some(&b"second"[..])
            );
            dir.checkpoint(&catalog).unwrap();
        }
        {
            // From the checkpoint alone (its log segments are gone).
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            assert_eq!(dir.recovery().records_replayed, 0);
            assert_eq!(
                catalog.security().as_deref().map(Vec::as_slice),
                Some(&b"second"[..])
            );
            let ckpt = dir.status().checkpoint.unwrap().lsn;
            drop(dir);
            // A truncated copy is refused, not read as less.
            let file = path
                .join("checkpoints")
                .join(format!("{ckpt:020}"))
                .join(SECURITY_FILE);
            fs::write(&file, b"sec").unwrap();
        }
        let catalog = Catalog::new();
        let err = DataDir::open(&config(&path), &catalog).unwrap_err();
        assert!(err.to_string().contains("security file"), "{err}");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_segment_torn_in_its_header_is_dropped() {
        let path = temp_dir("torn-header");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
        }
        let first = segments(&path.join("wal")).unwrap()[0].0;
        let seg = path.join("wal").join(format!("{:020}.log", first + 10_000));
        fs::write(&seg, b"STRW").unwrap();
        let catalog = Catalog::new();
        let dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 3);
        assert!(!seg.exists());
        append(&dir, &catalog, 3..4);
        drop(dir);
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 4);
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }

    /// Commits `op` as a bulk write, as the engine does for large ones.
    fn commit_bulk(dir: &DataDir, catalog: &Catalog, op: CatalogOp) -> FileRef {
        let written = write_bulk_for(dir, &op);
        let encoded = vec![wal::encode_op_in_file(&op, &written.file).unwrap()];
        let lsn = catalog
            .commit(|state| {
                state.apply(&op)?;
                dir.append_with_bulk(&encoded, std::slice::from_ref(&written))
            })
            .unwrap();
        dir.wait_durable(lsn).unwrap();
        written.file
    }

    fn write_bulk_for(dir: &DataDir, op: &CatalogOp) -> BulkWrite {
        let (schema, blocks) = wal::op_rows(op).unwrap();
        let table = match op {
            CatalogOp::PutTable { table, .. } => Some(table),
            _ => None,
        };
        dir.write_bulk(&schema, blocks, table).unwrap()
    }

    fn put_big(rows: i64) -> CatalogOp {
        let b = ids(0..rows);
        CatalogOp::PutTable {
            schema: "s".into(),
            table: Arc::new(Table::new("big", b.schema(), vec![b]).unwrap()),
        }
    }

    fn bulk_names(path: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(path.join(BULK_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_bulk_write_is_found_after_a_crash_and_a_checkpoint_links_it() {
        use std::os::unix::fs::MetadataExt;
        let path = temp_dir("bulk");
        let file = {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            let log_before = dir.status().log_bytes;
            let file = commit_bulk(&dir, &catalog, put_big(100_000));
            // An append as a bulk write too.
            commit_bulk(
                &dir,
                &catalog,
                CatalogOp::Append {
                    schema: "s".into(),
                    table: "t".into(),
                    blocks: vec![ids(3..50_000)],
                },
            );
            let status = dir.status();
            // The log holds two small records, not 1.2 MB of rows.
            assert!(status.log_bytes - log_before < 300, "{status:?}");
            assert_eq!((status.bulk_files, status.commits), (2, 3));
            assert!(status.bulk_bytes > 1_000_000);
            // Bulk files count towards the automatic checkpoint.
            assert!(!dir.wants_checkpoint());
            dir.set_checkpoint_log_bytes(1 << 20);
            assert!(dir.wants_checkpoint());
            file
            // Dropped without a checkpoint: what SIGKILL after the commits
            // leaves on disk.
        };
        let catalog = Catalog::new();
        let dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(catalog.table("s", "big").unwrap().num_rows(), 100_000);
        assert_eq!(rows(&catalog), 50_000);
        let r = dir.recovery();
        assert_eq!((r.bulk_files_loaded, r.bulk_files_removed), (2, 0));
        assert_eq!(bulk_names(&path).len(), 2);
        // A checkpoint after the replay: the table put whole from its bulk
        // file and unchanged since becomes the checkpoint's by a hard link
        // (the appended table is written), and the covered files go.
        let inode = |p: &Path| fs::metadata(p).unwrap().ino();
        let linked = |info: &CheckpointInfo, ino: u64| {
            let ckpt = path.join("checkpoints").join(format!("{:020}", info.lsn));
            fs::read_dir(&ckpt)
                .unwrap()
                .filter(|e| e.as_ref().unwrap().metadata().unwrap().ino() == ino)
                .count()
        };
        let replayed = inode(&path.join(BULK_DIR).join(&file.name));
        let info = dir.checkpoint(&catalog).unwrap();
        assert_eq!(
            linked(&info, replayed),
            1,
            "the checkpoint links the bulk file"
        );
        assert!(bulk_names(&path).is_empty());
        // A bulk write of this process, then a checkpoint: linked too.
        commit_bulk(&dir, &catalog, put_big(70_000));
        let newest = bulk_names(&path).pop().unwrap();
        let ino = inode(&path.join(BULK_DIR).join(&newest));
        let info = dir.checkpoint(&catalog).unwrap();
        assert!(bulk_names(&path).is_empty());
        assert_eq!(dir.status().bulk_files, 0);
        assert_eq!(linked(&info, ino), 1);
        // A table changed since its bulk write is written, not linked.
        commit_bulk(&dir, &catalog, put_big(60_000));
        let newest = bulk_names(&path).pop().unwrap();
        let ino = inode(&path.join(BULK_DIR).join(&newest));
        commit(
            &dir,
            &catalog,
            vec![CatalogOp::Append {
                schema: "s".into(),
                table: "big".into(),
                blocks: vec![ids(60_000..60_005)],
            }],
        );
        let info = dir.checkpoint(&catalog).unwrap();
        assert_eq!(linked(&info, ino), 0);
        drop(dir);
        let catalog = Catalog::new();
        let dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(catalog.table("s", "big").unwrap().num_rows(), 60_005);
        assert_eq!(rows(&catalog), 50_000);
        assert_eq!(dir.recovery().bulk_files_loaded, 0);
        drop(dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_crash_before_the_commit_record_leaves_no_table_and_no_file() {
        let path = temp_dir("bulk-before");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            // Written and fsynced, but the process dies before the record.
            write_bulk_for(&dir, &put_big(20_000));
            // And one torn mid-write, under a later id.
            let torn = path.join(BULK_DIR).join(bulk_file_name(7));
            fs::write(&torn, b"ARROW half a stream").unwrap();
            assert_eq!(bulk_names(&path).len(), 2);
        }
        let catalog = Catalog::new();
        let dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert!(catalog.table("s", "big").is_err());
        assert_eq!(rows(&catalog), 3);
        assert_eq!(dir.recovery().bulk_files_removed, 2);
        assert!(bulk_names(&path).is_empty());
        // A failed commit discards its file at once.
        let w = write_bulk_for(&dir, &put_big(10));
        assert_eq!(bulk_names(&path), vec![w.file.name.clone()]);
        dir.discard_bulk(std::slice::from_ref(&w));
        assert!(bulk_names(&path).is_empty());
        // Ids go on after the largest seen, the removed ones included.
        assert!(bulk_file_id(&w.file.name).unwrap() > 7);
        drop(dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_torn_changed_or_missing_bulk_file_a_record_names_is_refused() {
        let path = temp_dir("bulk-torn");
        let file = {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            commit_bulk(&dir, &catalog, put_big(20_000))
        };
        let bulk_path = path.join(BULK_DIR).join(&file.name);
        let good = fs::read(&bulk_path).unwrap();
        assert_eq!(good.len() as u64, file.len);
        let refused = |why: &str| {
            let err = DataDir::open(&config(&path), &Catalog::new()).unwrap_err();
            assert!(matches!(err, StorageError::Unrecoverable { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(&file.name) && text.contains(why), "{text}");
        };
        // Torn: shorter than the record says.
        fs::write(&bulk_path, &good[..good.len() / 2]).unwrap();
        refused("torn or truncated");
        // The same length, a changed byte.
        let mut changed = good.clone();
        changed[good.len() / 2] ^= 1;
        fs::write(&bulk_path, &changed).unwrap();
        refused("CRC-32");
        // Missing.
        fs::remove_file(&bulk_path).unwrap();
        refused("a bulk file a log record names");
        // Put back, the directory opens with every row.
        fs::write(&bulk_path, &good).unwrap();
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(catalog.table("s", "big").unwrap().num_rows(), 20_000);
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_second_process_is_refused() {
        let path = temp_dir("lock");
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        // flock locks belong to the open file description: a second open
        // conflicts even within one process.
        let err = DataDir::open(&config(&path), &Catalog::new()).unwrap_err();
        assert!(matches!(err, StorageError::DataDirInUse { .. }), "{err}");
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_torn_tail_is_cut_and_the_log_goes_on() {
        let path = temp_dir("torn");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            append(&dir, &catalog, 3..10);
        }
        let seg = segments(&path.join("wal")).unwrap()[0].1.clone();
        let len = fs::metadata(&seg).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&seg)
            .unwrap()
            .set_len(len - 5)
            .unwrap();
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            assert_eq!(rows(&catalog), 3, "the torn append is gone");
            assert!(dir.recovery().torn_bytes_cut > 0);
            append(&dir, &catalog, 3..5);
        }
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 5);
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_crash_during_a_checkpoint_recovers() {
        let path = temp_dir("ckpt-crash");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            dir.checkpoint(&catalog).unwrap();
            append(&dir, &catalog, 3..10);
        }
        // What a crash in the middle of the next checkpoint leaves: a
        // half-written manifest and checkpoint directory.
        fs::write(path.join("manifest.tmp"), b"half a manifest").unwrap();
        let partial = path.join("checkpoints").join(format!("{:020}", 999_999));
        fs::create_dir_all(&partial).unwrap();
        fs::write(partial.join("0.arrow"), b"half a table").unwrap();
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 10);
        assert!(!partial.exists());
        assert!(!path.join("manifest.tmp").exists());
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn an_unreadable_directory_is_refused() {
        let path = temp_dir("refuse");
        {
            let catalog = Catalog::new();
            let dir = DataDir::open(&config(&path), &catalog).unwrap();
            create_t(&dir, &catalog);
            dir.checkpoint(&catalog).unwrap();
        }
        let manifest = path.join("manifest");
        let good = fs::read(&manifest).unwrap();
        fs::write(&manifest, &good[..good.len() / 2]).unwrap();
        let err = DataDir::open(&config(&path), &Catalog::new()).unwrap_err();
        assert!(matches!(err, StorageError::Unrecoverable { .. }), "{err}");
        // A corrupt record before the last segment's end is refused too.
        fs::write(&manifest, &good).unwrap();
        let wal_dir = path.join("wal");
        let first = segments(&wal_dir).unwrap()[0].0;
        let (f, _) = new_segment(&wal_dir, first + 1000).unwrap();
        drop(f);
        let err = DataDir::open(&config(&path), &Catalog::new()).unwrap_err();
        assert!(matches!(err, StorageError::Unrecoverable { .. }), "{err}");
        fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn concurrent_commits_share_fsyncs_and_all_survive() {
        let path = temp_dir("group");
        {
            let catalog = Arc::new(Catalog::new());
            let dir = Arc::new(DataDir::open(&config(&path), &catalog).unwrap());
            create_t(&dir, &catalog);
            let threads: Vec<_> = (0..8)
                .map(|k| {
                    let (dir, catalog) = (dir.clone(), catalog.clone());
                    std::thread::spawn(move || {
                        for i in 0..20 {
                            let n = 1000 + k * 100 + i;
                            append(&dir, &catalog, n..n + 1);
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let s = dir.status();
            assert_eq!(s.commits, 161);
            assert_eq!(s.flushed_lsn, s.end_lsn);
        }
        let catalog = Catalog::new();
        let _dir = DataDir::open(&config(&path), &catalog).unwrap();
        assert_eq!(rows(&catalog), 3 + 160);
        drop(_dir);
        fs::remove_dir_all(&path).unwrap();
    }
}
